// Package checkpointtest injects faults into a checkpoint.Memory, for tests
// of code that keeps its state in a checkpoint: failing and slow saves, a
// corrupt, torn or newer-schema file, a file another program wrote, a file
// a reboot removed; and it reads what a test needs to check (saves made,
// the .prev copy, quarantined files). It is to package checkpoint what
// testing/fstest is to io/fs and zaptest to zap: checkpoint.Memory keeps
// to what a checkpoint is, and everything only a test does lives here.
//
// Every function acts on the in-memory file under m, which the handles
// Reopen made from m (and m from another) share: a fault injected through
// one handle is seen by all of them. A change to the file's bytes
// (SetBytes, Remove, Corrupt, Tear, SetSchema, SetJournal) makes m, the handle it went
// through, read the file again before its next save, as a File would after
// a failed Load, so that m refuses to overwrite a file it cannot read.
//
// Counts follow one convention, here and in migratetest's fakes
// (Implicit.FailList, Explicit.FailWrites): n > 0 fails the next n calls,
// n < 0 fails every call from now on, n == 0 stops failing.
//
// # Caveats
//
//   - The faults model what a reader can meet, not how a real disk fails:
//     checkpoint.File never leaves a torn file (Tear is for testing readers),
//     and an injected save failure leaves the file exactly as it was, which
//     a real failed fsync does not promise. Crash and power-cut behaviour
//     of File is tested on a real file system, in internal/robustness.
//   - Another handle on the same file is not told of a change: like two
//     processes that share a file without a lock, it saves over what it has
//     not read. Change the file through the handle that will read it.
package checkpointtest

import (
	"encoding/json"
	"time"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/engine"
)

// FailSaves makes saves (Save or Commit) of the file under m fail with err,
// leaving the file as it was: the next n saves for n > 0, every save from
// now on for n < 0, none for n == 0 (which ends an earlier FailSaves). A
// nil err fails them with a generic injected error. The error returned by a
// failed save wraps err.
func FailSaves[K comparable, V any](m *checkpoint.Memory[K, V], n int, err error) {
	engine.MemFileOf((*engine.Memory[K, V])(m)).FailSaves(n, err)
}

// SetSaveLatency makes every save take at least d, as fsync makes a real
// one; with it, concurrent writers queue behind a save as they do on a
// disk. Zero turns it off.
func SetSaveLatency[K comparable, V any](m *checkpoint.Memory[K, V], d time.Duration) {
	engine.MemFileOf((*engine.Memory[K, V])(m)).SetSaveLatency(d)
}

// Saves returns how many saves of the file under m have succeeded, through
// any handle.
func Saves[K comparable, V any](m *checkpoint.Memory[K, V]) int {
	return engine.MemFileOf((*engine.Memory[K, V])(m)).Saves()
}

// SetBytes replaces the file with a copy of data (nil removes it), as if
// another program had written it. m's next Load reads it.
func SetBytes[K comparable, V any](m *checkpoint.Memory[K, V], data []byte) {
	engine.MemFileOf((*engine.Memory[K, V])(m)).Edit(func([]byte) []byte {
		if data == nil {
			return nil
		}
		return append([]byte{}, data...)
	})
}

// Remove deletes the file, as a reboot does to a file on tmpfs.
func Remove[K comparable, V any](m *checkpoint.Memory[K, V]) {
	SetBytes(m, nil)
}

// Corrupt flips one bit of the byte in the middle of the file, as bit rot
// would; Load then fails with checkpoint.ErrCorrupt. Without a file (or
// with an empty one), it writes one that is not a checkpoint.
func Corrupt[K comparable, V any](m *checkpoint.Memory[K, V]) {
	engine.MemFileOf((*engine.Memory[K, V])(m)).Edit(func(data []byte) []byte {
		if len(data) == 0 {
			return []byte("not a checkpoint\n")
		}
		data[len(data)/2] ^= 0x20
		return data
	})
}

// Tear cuts the file in half, as a non-atomic write interrupted by a crash
// would leave it (checkpoint.File never does; this is for testing readers).
// Load then fails with checkpoint.ErrCorrupt. Without a file, it leaves an
// empty one.
func Tear[K comparable, V any](m *checkpoint.Memory[K, V]) {
	engine.MemFileOf((*engine.Memory[K, V])(m)).Edit(func(data []byte) []byte {
		return append([]byte{}, data[:len(data)/2]...) // never nil: a file stays

	})
}

// SetSchema rewrites the file's schema number (with a valid checksum), as
// if a binary with that schema had written it; a schema above the one m
// was opened with makes Load fail with checkpoint.ErrNewerSchema. It
// returns an error, and changes nothing, if there is no intact file to
// rewrite.
func SetSchema[K comparable, V any](m *checkpoint.Memory[K, V], schema int) error {
	return engine.MemFileOf((*engine.Memory[K, V])(m)).SetSchema(schema)
}

// Quarantined returns copies of the files Quarantine moved aside, through
// any handle, oldest first.
func Quarantined[K comparable, V any](m *checkpoint.Memory[K, V]) [][]byte {
	return engine.MemFileOf((*engine.Memory[K, V])(m)).Quarantined()
}

// Prev returns a copy of the previous file the last save kept (File keeps
// it as path+".prev"), or nil.
func Prev[K comparable, V any](m *checkpoint.Memory[K, V]) []byte {
	return engine.MemFileOf((*engine.Memory[K, V])(m)).Prev()
}

// TestingT is the part of *testing.T that NewMemory and Reopen use.
type TestingT interface {
	Helper()
	Fatalf(format string, args ...any)
}

// NewMemory returns an empty checkpoint.Memory opened with opts, as
// checkpoint.NewMemory[K, V]().Reopen(opts...) does, and ends the test
// with t.Fatalf if an option is invalid. Call it from the test's goroutine.
func NewMemory[K comparable, V any](t TestingT, opts ...checkpoint.Option) *checkpoint.Memory[K, V] {
	t.Helper()
	return Reopen(t, checkpoint.NewMemory[K, V](), opts...)
}

// Reopen returns m.Reopen(opts...), a new handle on m's file as a
// restarted process would open it, and ends the test with t.Fatalf if an
// option is invalid. Call it from the test's goroutine.
func Reopen[K comparable, V any](t TestingT, m *checkpoint.Memory[K, V], opts ...checkpoint.Option) *checkpoint.Memory[K, V] {
	t.Helper()
	r, err := m.Reopen(opts...)
	if err != nil {
		t.Fatalf("checkpointtest: reopening the in-memory checkpoint: %v", err)
	}
	return r
}

// Journal returns a copy of the journal beside the file under m (the
// default; see checkpoint.WithJournal), or nil if there is none.
func Journal[K comparable, V any](m *checkpoint.Memory[K, V]) []byte {
	return engine.MemFileOf((*engine.Memory[K, V])(m)).Journal()
}

// SetJournal replaces the journal beside the file with a copy of data (nil
// removes it), as a crash or another program might have left it. m's next
// Load replays it.
func SetJournal[K comparable, V any](m *checkpoint.Memory[K, V], data []byte) {
	engine.MemFileOf((*engine.Memory[K, V])(m)).EditJournal(func([]byte) []byte {
		if data == nil {
			return nil
		}
		return append([]byte{}, data...)
	})
}

// Schema returns the options of a build that writes schema n and whose
// entries did not change shape across schemas: checkpoint.WithSchema(n)
// with an upgrade from every older schema that keeps each entry as it is.
// Open and Memory.Reopen refuse a schema above 1 without a complete
// upgrade chain; a test that needs a file of schema n uses this.
func Schema(n int) []checkpoint.Option {
	opts := []checkpoint.Option{checkpoint.WithSchema(n)}
	for from := 1; from < n; from++ {
		opts = append(opts, checkpoint.WithUpgrade(from, keep))
	}
	return opts
}

func keep(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }
