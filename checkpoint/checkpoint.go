package checkpoint

import (
	"context"
	"io/fs"
	"log/slog"
	"time"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/internal/engine"
)

// Committer is a checkpoint that can save its last loaded or saved content
// with a few changes applied, encoding only those: what File.Commit does.
type Committer[K comparable, V any] = engine.Committer[K, V]

// BootIDer is a checkpoint that knows the boot it runs in (WithBootID) and
// stamps it into what it saves. BootID returns "" when it records none.
type BootIDer = engine.BootIDer

// Sizer is a checkpoint that can tell the size in bytes of the file and
// its journal as it last read or wrote them (see File.Size).
type Sizer = engine.Sizer

// JournalReporter is a checkpoint that can say what its journal held at
// the last Load (see the package documentation's Journal section):
// package migrate reports a torn record Load discarded in Report.Errors.
type JournalReporter = engine.JournalReporter

// EncodeError is returned, wrapped, by Save and Commit when an entry cannot
// be written. errors.Is(err, ErrEncode) reports true, and errors.As finds it
// with the entry's key.
//
// Its text names the key's or value's Go type and says what is wrong; it
// shows the key (as JSON) only when the key is not at fault, and never the
// value or the text of the underlying error, which encoding/json and
// MarshalJSON methods write with the value quoted.
//
// It is an alias: its fields are documented on the engine's type (go doc
// github.com/phaseshift/phaseshift/internal/engine.EncodeError).
type EncodeError = engine.EncodeError

// BadEntriesError is returned by Load when the file is intact (its checksum
// holds) but some entries could not be decoded or upgraded. The Snapshot
// returned with it holds the rest. errors.Is(err, ErrBadEntry) reports true.
//
// It is an alias: its fields are documented on the engine's type (go doc
// github.com/phaseshift/phaseshift/internal/engine.BadEntriesError).
type BadEntriesError = engine.BadEntriesError

// EntryError is one entry that could not be read.
//
// It is an alias: its fields are documented on the engine's type (go doc
// github.com/phaseshift/phaseshift/internal/engine.EntryError).
type EntryError = engine.EntryError

// File is a checkpoint file on disk, owned by this File from Open to Close.
//
// Keys must read back from JSON as themselves (==): Save and Commit refuse
// a key that would not (invalid UTF-8, a time.Time with a monotonic reading
// or a *time.Location, a non-nil pointer, a difference only in unexported
// fields; see the package documentation) with an *EncodeError matching
// ErrEncode, and write nothing.
//
// All methods are safe for concurrent use; they run one at a time.
type File[K comparable, V any] engine.File[K, V]

// Meta describes a checkpoint file. Save fills Format, Seq and SavedAt, and
// Schema and BootID from the options; the caller sets Phase and Writer.
//
// It is an alias: its fields are documented on the engine's type (go doc
// github.com/phaseshift/phaseshift/internal/engine.Meta).
type Meta = engine.Meta

// Snapshot is a whole checkpoint: its Meta and every entry.
//
// It is an alias: its fields are documented on the engine's type (go doc
// github.com/phaseshift/phaseshift/internal/engine.Snapshot).
type Snapshot[K comparable, V any] = engine.Snapshot[K, V]

// Change is one change to a checkpoint's entries, for Commit: store Value
// under Key, or remove Key when Delete is set.
//
// It is an alias: its fields are documented on the engine's type (go doc
// github.com/phaseshift/phaseshift/internal/engine.Change).
type Change[K comparable, V any] = engine.Change[K, V]

// TornJournalError describes the last record of a journal that Load found
// incomplete or damaged and discarded: what a crash or power cut during an
// append leaves, a commit that was never acknowledged. Load does not fail
// for it; it logs it and reports it in JournalStatus.Torn (and package
// migrate in Report.Errors). The next Save or Commit rewrites the file and
// removes the journal, tail included.
//
// It is an alias: its fields are documented on the engine's type (go doc
// github.com/phaseshift/phaseshift/internal/engine.TornJournalError).
type TornJournalError = engine.TornJournalError

// JournalStatus is what the journal of a File or Memory held when it was
// last read (by Load) and written since.
//
// It is an alias: its fields are documented on the engine's type (go doc
// github.com/phaseshift/phaseshift/internal/engine.JournalStatus).
type JournalStatus = engine.JournalStatus

// EncodedChange is a Change encoded as Commit writes it, by EncodeChange,
// for File.CommitEncoded and Memory.CommitEncoded. Its zero value is not
// a change: CommitEncoded refuses it.
//
// It is an alias: its fields are documented on the engine's type (go doc
// github.com/phaseshift/phaseshift/internal/engine.EncodedChange).
type EncodedChange[K comparable, V any] = engine.EncodedChange[K, V]

// Memory is a checkpoint held in memory, for tests. It keeps the contract of
// File, because it shares File's code and stores the same bytes File would
// write; only the bytes stay in memory and there is no lock. Reopen and
// Bytes let a test play a restart and look at what was saved; package
// checkpointtest injects faults (failing or slow saves, a corrupt, torn or
// newer-schema file, a file lost to a reboot) and counts saves. It keeps a
// journal as File does, by default (WithoutJournal through Reopen: none),
// which checkpointtest.Journal and SetJournal read and replace.
//
// All methods are safe for concurrent use.
type Memory[K comparable, V any] engine.Memory[K, V]

// Option configures Open and Memory.Reopen. Pass options to them; a nil
// Option, or one whose value is invalid, makes them fail with an error
// matching ErrInvalidOption that names the option.
type Option = engine.Option

// UpgradeFunc turns one entry written with value schema n into schema n+1.
// It works on raw JSON because the Go types of schema n may no longer exist
// in the binary. It may change the key as well as the value. An error
// makes that one entry unreadable (see BadEntriesError); the rest load.
type UpgradeFunc = engine.UpgradeFunc

// Open opens the checkpoint at path, which need not exist yet.
//
// Open creates path's directory if it is missing (mode 0700, made durable
// by an fsync of its parent, so that the first save survives a power cut),
// checks it (ErrUnsafe for a directory another user owns or others may
// write; see the package documentation's Security section), takes an
// exclusive lock on path+".lock" (mode 0600) for the life of the File, and
// then removes the temporary files that a save of this checkpoint
// interrupted by a crash left next to path (only those: another
// checkpoint's, in the same directory, are left alone). If the lock file
// is removed later (with its directory, say), the next save or quarantine
// takes the lock at the path again, or fails with ErrLocked if another
// File has taken it.
// When another File holds the lock, in this process or another, Open waits
// until ctx is done (or the WithLockWait bound elapses) and returns an error
// matching ErrLocked that names the path and, when it can, the holder's PID
// (the kernel's, from /proc/locks, before the one the lock file records).
//
// Open reads nothing: call Load.
func Open[K comparable, V any](ctx context.Context, path string, opts ...Option) (*File[K, V], error) {
	f, err := engine.Open[K, V](ctx, path, opts...)
	return (*File[K, V])(f), err
}

// WithJournal makes Commit append its changes to a journal beside the
// checkpoint (path+".journal", one checksummed JSON line per commit) and
// fsync it, instead of rewriting the whole file: a commit then costs about
// one small fsync'd append whatever the number of entries. Load replays
// the journal over the file; the file is rewritten, and the journal
// emptied, by Save, and by a compaction once a commit finds the journal
// past a fifth of the file's size (at least 32 KiB), in the background for
// a file of 64 KiB or more, so that no commit waits for the whole file to
// be written. See the package documentation's Journal section for the
// protocol and its rules.
//
// The journal is the default: WithJournal says so explicitly, and
// WithoutJournal turns it off. Giving both is an error.
//
// A file written with the journal has format 2, which a phaseshift built
// before the journal existed (no released version: the journal shipped
// with the first release) refuses with ErrNewerSchema rather than read it
// without its journal; to hand the checkpoint to such a build, run this
// one WithoutJournal until it has saved once.
func WithJournal() Option {
	return engine.WithJournal()
}

// WithoutJournal makes every Commit replace the whole file, as Save does:
// the file alone holds every commit, at the cost of a whole save (temporary
// file, fsync, rename, fsync of the directory) per commit, which grows
// with the number of entries. Use it when other programs read the file
// directly rather than through Load (or the phaseshift command), or to
// hand the checkpoint to a build that does not know the journal.
//
// A File opened WithoutJournal still replays a journal it finds, and its
// next Save or Commit folds it into the file, which has format 1 again:
// turning the journal off needs nothing but a restart with this option.
func WithoutJournal() Option {
	return engine.WithoutJournal()
}

// CheckKeyType returns an error matching ErrInvalidKeyType when no useful
// key of type K reads back from JSON as itself: K holds a pointer (JSON
// stores what it points to, and reading it back makes a new pointer), an
// interface (a number in one reads back as a float64, a struct as a map),
// an unexported field or one tagged json:"-" (JSON does not store it, so
// keys that differ only there would be one entry). A type with its own
// JSON or text methods (time.Time, say) is the type's business: its keys
// are checked one by one as they are written. Open and Memory.Reopen call
// it, so that such a type is refused when the daemon starts rather than at
// its first write; package migrate's New calls it too.
func CheckKeyType[K comparable]() error {
	return engine.CheckKeyType[K]()
}

// CheckEntry returns the error Save and Commit would fail with for an entry
// of key and value, an *EncodeError matching ErrEncode, or nil if they can
// write it: it encodes both and checks that the key reads back as itself
// (see the package documentation), as they do, so it costs about what
// encoding the entry costs. It is for a caller that must know before it
// acts elsewhere: package migrate checks each write with it before writing
// legacy, so that a write the checkpoint would refuse changes nothing
// (with EncodeChange, which also keeps the encoding for the commit).
func CheckEntry[K comparable, V any](key K, value V) error {
	return engine.CheckEntry[K, V](key, value)
}

// EncodeChange encodes ch as Commit would, and checks its key as Commit
// does: it returns the error Commit would fail with, an *EncodeError
// matching ErrEncode (as CheckEntry does), or the change encoded, which
// File.CommitEncoded and Memory.CommitEncoded write without encoding it
// again. A delete is not encoded and never fails. It is for a caller that
// checks each entry before it acts elsewhere and then commits it: package
// migrate encodes every write once this way. The encoding is taken now: a
// later change to what ch.Value refers to (a slice, a map) is not in it.
func EncodeChange[K comparable, V any](ch Change[K, V]) (EncodedChange[K, V], error) {
	return engine.EncodeChange[K, V](ch)
}

// NewMemory returns an empty in-memory checkpoint with the default options,
// as Open has them: schema 1, no boot ID, no validation, nothing logged,
// and the journal. It cannot fail. To
// configure it as a binary with options would open a File, open it with
// them: NewMemory[K, V]().Reopen(opts...), which reports an invalid option
// as Open does.
func NewMemory[K comparable, V any]() *Memory[K, V] {
	return (*Memory[K, V])(engine.NewMemory[K, V]())
}

// WithSchema sets the version of the value schema this binary writes and
// reads, 1 by default. Bump it whenever the JSON form of the key or value
// type changes meaning, and register a WithUpgrade from the previous
// version. A file with a newer schema fails to load with ErrNewerSchema.
// The version must be at least 1.
func WithSchema(version int) Option {
	return engine.WithSchema(version)
}

// WithUpgrade registers fn to turn entries of schema from into schema
// from+1. Load applies the chain from a file's schema up to the current
// one. The registered versions must form an unbroken chain ending at the
// current schema; Open reports a gap. A later WithUpgrade from the same
// version replaces an earlier one.
func WithUpgrade(from int, fn UpgradeFunc) Option {
	return engine.WithUpgrade(from, fn)
}

// WithBootID stamps every saved file with the ID of the current boot, read
// once at Open from source, so that a reader can tell a checkpoint written
// before the last reboot (package migrate treats it as stale, see its
// Checkpoint). A nil source reads the kernel's boot ID (see KernelBootID).
func WithBootID(source func() (string, error)) Option {
	return engine.WithBootID(source)
}

// WithFileMode sets the permissions of the checkpoint, its .prev copy and
// its journal; 0600 by default, because values may hold secrets. The lock
// file is 0600 whatever the mode: flock needs only read access, so a lock
// file others can read is a lock others can hold, keeping the daemon from
// starting. The directory, when Open creates it, is 0700. The mode must be
// permission bits that let the owner read and write.
func WithFileMode(mode fs.FileMode) Option {
	return engine.WithFileMode(mode)
}

// WithLockWait bounds how long Open waits for another holder to release the
// lock, in addition to the context's deadline. Zero means try once; a
// negative d is an error. By default Open waits until its context is done.
func WithLockWait(d time.Duration) Option {
	return engine.WithLockWait(d)
}

// WithDropUnknownFields makes Load accept entries whose JSON has fields
// that the key or value type does not have (at any depth), and drop those
// fields, instead of failing with ErrTypeMismatch. It is lossy.
//
// Without it, such fields are kept safe: they may be fields a later build
// added without bumping the schema, which this binary would lose for good
// at its next save (and a later roll forward would find gone), or fields
// this binary's type removed while old files still carry them, which
// declaring the field again, or an upgrade for the old schema
// (WithSchema, WithUpgrade), reads without a loss. Use it only when those
// fields are known to be unneeded, and never for a file written for
// another type, whose every field it would drop. With it, Load logs
// how many entries lost fields, and the next Save or Commit writes every
// such entry without them, unchanged ones included.
//
// Fields are checked by encoding/json: a type with its own UnmarshalJSON
// decides for itself what it accepts.
func WithDropUnknownFields() Option {
	return engine.WithDropUnknownFields()
}

// WithLogger logs opening, quarantining, leftover cleanup, a checkpoint
// or lock file that disappeared, and dropped unknown fields (paths and
// counts, never values). The default discards everything; a nil l changes
// nothing. WithSlog is the same for a *slog.Logger; giving both (non-nil)
// is an error.
func WithLogger(l *zap.Logger) Option {
	return engine.WithLogger(l)
}

// WithSlog is WithLogger for a program that logs through log/slog: the
// same lines, with the same keys, go to l's handler as records of the
// matching level (zap's Debug, Info, Warn and Error are slog's), through
// the one logging path the package has. A nil l changes nothing; giving
// WithLogger too (non-nil) makes Open and Memory.Reopen fail with
// ErrInvalidOption.
func WithSlog(l *slog.Logger) Option {
	return engine.WithSlog(l)
}

// WithValidate makes Load run fn on every entry it decodes, after any
// upgrade, and treat an entry fn rejects exactly as one that does not
// decode: Load returns the other entries with a *BadEntriesError (matching
// ErrBadEntry) whose EntryError names the entry's key and carries fn's
// error, and Save and Commit refuse to replace the file until a Load
// succeeds or Quarantine moves it aside. Use it for what the types cannot
// say (an address inside its pool, a token of the right length), so that a
// restart never serves a record the program would not have accepted.
//
// fn's error is included in the entry's error text as it is returned
// (see Security): write it without values. Load may call fn from several
// goroutines at once, in no particular order. Save and Commit do not call
// fn: what a program writes it has checked already.
//
// K and V must be the File's or Memory's key and value types; other types,
// or a nil fn, make Open and Memory.Reopen fail with ErrInvalidOption.
func WithValidate[K comparable, V any](fn func(key K, value V) error) Option {
	return engine.WithValidate[K, V](fn)
}

// KernelBootID returns Linux's ID for the current boot, from
// /proc/sys/kernel/random/boot_id. It changes at every reboot.
func KernelBootID() (string, error) {
	return engine.KernelBootID()
}

var (
	// ErrNotExist is returned by Load when there is no checkpoint file yet.
	// It matches fs.ErrNotExist too.
	ErrNotExist = engine.ErrNotExist

	// ErrCorrupt is returned by Load when the file is not an intact
	// checkpoint: a checksum mismatch, truncation, bad JSON or a wrong
	// shape. The file is not used, and Save refuses to replace it until it
	// has been moved aside with Quarantine.
	ErrCorrupt = engine.ErrCorrupt

	// ErrNewerSchema is returned by Load when the file's header says it was
	// written with a newer value schema (Meta.Schema above WithSchema's),
	// or a newer file format, than this binary knows: typically after a
	// downgrade. The message gives both numbers. Fields the types lack in
	// a file of a schema this binary reads are ErrTypeMismatch instead.
	ErrNewerSchema = engine.ErrNewerSchema

	// ErrOlderSchema is returned by Load when the file's value schema is
	// older than the oldest upgrade registered with WithUpgrade, so there
	// is no way to bring it to the current schema.
	ErrOlderSchema = engine.ErrOlderSchema

	// ErrBadEntry is returned by Load, inside a *BadEntriesError, when the
	// file is intact but some entries cannot be decoded into the key and
	// value types or upgraded. The Snapshot returned with it holds every
	// other entry.
	ErrBadEntry = engine.ErrBadEntry

	// ErrTypeMismatch is returned by Load when the file's entries do not
	// decode as this binary's key and value types, in a file whose schema
	// this binary reads. Two cases:
	//
	//   - Entries have fields (in the key, the value, or any struct nested in
	//     them) that the types lack. Load fails with nothing but the Meta,
	//     and the file is not touched: a field this binary's type removed, one
	//     a later build added without bumping the schema, and a file written
	//     for another type look the same, and dropping the fields would lose
	//     them for good at the next save. The message names the first such
	//     entry, the field and the Go type that lacks it, and the fixes:
	//     declare the field again, or an upgrade for the old schema
	//     (WithSchema, WithUpgrade); last, named as lossy,
	//     WithDropUnknownFields. For a record that shares no field with the
	//     type (a file written for another type) it offers no option that
	//     drops data.
	//   - An entry holds a value of another JSON kind than its Go type (a
	//     string where an int is expected). It is a bad entry, and the
	//     *BadEntriesError matches ErrBadEntry as well; the message names the
	//     field, the Go type that holds it and the kinds, never the value.
	//
	// Unlike ErrNewerSchema, it does not mean that a newer binary wrote the
	// file: compare Meta.Schema with WithSchema's to tell.
	ErrTypeMismatch = engine.ErrTypeMismatch

	// ErrInvalidOption is returned by Open and Memory.Reopen when an option
	// is nil or its value is invalid (and by Open for an empty path): WithSchema(0), WithLockWait(-1), a
	// WithFileMode the owner cannot read and write, an upgrade chain with a
	// gap, a WithValidate function of other key or value types than the
	// checkpoint's. The message names the option.
	ErrInvalidOption = engine.ErrInvalidOption

	// ErrInvalidKeyType is returned by Open and Memory.Reopen (and by
	// CheckKeyType) when the key type cannot read back from JSON as itself
	// for any useful key: it holds a pointer, an interface, an unexported
	// field or a field tagged json:"-". The message names the field.
	ErrInvalidKeyType = engine.ErrInvalidKeyType

	// ErrLocked is returned by Open when another File, in this process or
	// another, holds the checkpoint's lock and the context ended (or the
	// lock wait elapsed) before it was released. Save, Commit and
	// Quarantine return it when this File's lock file was removed (with
	// its directory, say) and another File has since taken the lock at the
	// same path.
	ErrLocked = engine.ErrLocked

	// ErrUnsafe is returned by Open, Load, Save, Commit and Quarantine
	// when the checkpoint's directory, or what is at one of the names
	// this package uses, is not what its own writes leave there: a
	// directory that its group or others may write (unless it is
	// sticky) or that another user owns; a FIFO, a device, a socket or a
	// directory where a file should be; a file with a hard link from
	// outside the directory; a file another user owns; a lock file with
	// another name, or one root owns with a mode this process cannot make
	// 0600. The message names the path, what was found there and the fix
	// (chmod go-w DIR, rm FILE, ...); nothing is read from or written to
	// such a file. See the package documentation's Security section.
	ErrUnsafe = engine.ErrUnsafe

	// ErrClosed is returned by methods called after Close.
	ErrClosed = engine.ErrClosed

	// ErrUnreadable is returned by Save and Commit when the file on disk
	// could not be read by the last Load, or was written by another File
	// while this one's lock file was gone: it may hold state nobody has
	// looked at, so it is not replaced until a Load has read it or
	// Quarantine moved it aside.
	ErrUnreadable = engine.ErrUnreadable

	// ErrEncode is returned by Save and Commit, inside an *EncodeError,
	// when an entry cannot be written: its key or value cannot be encoded
	// as JSON (a NaN, a channel, a failing MarshalJSON), or its key would
	// not read back from JSON as the same key (see File). Nothing is
	// written.
	ErrEncode = engine.ErrEncode

	// ErrTornJournal is matched by a *TornJournalError: the journal ended with
	// a record that was never acknowledged.
	ErrTornJournal = engine.ErrTornJournal
)
