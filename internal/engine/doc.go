// Package engine is the checkpoint file's engine: the in-memory state and
// its commit path (core.go), the file format (format.go, decode.go,
// encode.go), the index of entries (index.go), the rule that keys read
// back as themselves (keys.go), the write protocol on disk (disk.go) and
// the lock (disk_lock.go), the journal (journal_format.go: its wire format
// and the protocol's rules, stated once; journal.go: its state on the
// core; journal_replay.go: replay and its ReplayError; disk_journal.go:
// its disk I/O) and its background compaction (compact.go), the kept
// copies (kept.go), the in-memory backend (memory.go), and the raw reading
// and repairing the phaseshift command needs (tool.go).
//
// Package checkpoint is its public face: it re-exports the types, options
// and errors documented there, and wraps File and Memory. Everything a
// user calls is documented in package checkpoint; the exported names here
// that checkpoint does not re-export are for this module alone: ReadRaw,
// LockRaw, NamesOf and Kept for cmd/phaseshift, MemFileOf for
// checkpoint/checkpointtest, WithFS and WithCompactions for tests (through
// internal/fsys/fsystest).
//
// Imports run one way: this package imports internal/fsys, internal/rawfile,
// internal/memfile and internal/jsonvalue; internal/conventions checks that
// nothing under internal imports checkpoint, source or a layer above them.
//
// # Caveats
//
//   - The functions for the command and the tests read and write any
//     checkpoint, of any types, without the checks a daemon's types give
//     (unknown fields, its schema): they are not an API for programs,
//     which use checkpoint.File.
//   - WithFS puts any file system under a File; nothing outside this
//     module can reach it, and nothing in production code calls it.
package engine
