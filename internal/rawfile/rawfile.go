// Package rawfile holds the types through which the phaseshift command
// (cmd/phaseshift) reads and repairs a checkpoint without knowing its Go
// types: keys as their JSON text ([Key]), values as json.RawMessage.
// Package internal/engine's ReadRaw, LockRaw, NamesOf and Kept fill them
// with the engine's own reading, checking, locking and writing code, so
// that the command sees what a daemon's Load would restore (see Caveats).
// Only this module can import this package, so none of it is part of
// checkpoint's API.
//
// # Caveats
//
//   - Read opens the file without its lock: a daemon may replace the file
//     while it is read. Each Read reads the file once and then its journal,
//     so a save in between can show an older state or a corrupt journal.
//   - A file is read with the value schema its header names, so a file of a
//     newer schema than the daemon's reads as intact here: the command does
//     not know the daemon's schema unless it is told. Unknown fields, which a
//     daemon's types would refuse, cannot be seen without those types.
//   - These types are as narrow as the command needs; they are not an API
//     for programs, which know their types and use checkpoint.File.
package rawfile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/phaseshift/phaseshift/internal/jsonvalue"
)

// Key is an entry's key as the JSON text the file holds, compacted. It
// reads back from its own JSON as itself, as checkpoint requires of keys.
type Key string

// ParseKey checks that s is one JSON value, with no object in it that has
// a field twice (which would name no one key: encoding/json keeps the
// last), and returns it as a Key. Its error never quotes s (an operator
// may paste a value by mistake), only a field's name.
func ParseKey(s string) (Key, error) {
	var k Key
	if err := k.UnmarshalJSON([]byte(s)); err != nil {
		return "", err
	}
	var de *jsonvalue.DuplicateFieldError
	if _, err := jsonvalue.Decode([]byte(k)); errors.As(err, &de) {
		return "", fmt.Errorf("the key has the field %q twice: give each field once", de.Field)
	}
	return k, nil
}

// MarshalJSON returns the key's JSON; the zero Key has none.
func (k Key) MarshalJSON() ([]byte, error) {
	if k == "" {
		return nil, errors.New("rawfile: the zero Key has no JSON")
	}
	return []byte(k), nil
}

// UnmarshalJSON keeps data, compacted, as the key.
func (k *Key) UnmarshalJSON(data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("the key is empty: give it as JSON")
	}
	// Unmarshal, unlike Compact, reports where the JSON goes wrong.
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("the key is not valid JSON (it goes wrong at byte %d)", se.Offset)
		}
		return errors.New("the key is not valid JSON")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return errors.New("the key is not valid JSON")
	}
	*k = Key(b.String())
	return nil
}

// Header is a checkpoint file's header: checkpoint.Meta, which this package
// cannot name.
type Header struct {
	Format  int
	Schema  int
	Phase   string
	Writer  string
	BootID  string
	Behind  string
	Seq     uint64
	SavedAt time.Time
}

// Entry is one entry of a checkpoint.
type Entry struct {
	Key   Key
	Value json.RawMessage
}

// File is what Read learned about a checkpoint file.
type File struct {
	Path string
	// Size is the file's length in bytes; -1 when it could not be read.
	Size int64
	// Header is the file's header; valid when HeaderErr is nil, which it
	// can be when the checksum fails (a hand edit) or the format is newer.
	Header    Header
	HeaderErr error
	// ChecksumErr says why the checksum does not hold; nil when it holds.
	// It is nil, too, when the file could not be read at all (see Err).
	ChecksumErr error
	// Entries are the entries checkpoint's Load returned, in the file's
	// order when it loaded cleanly (sorted by key otherwise).
	Entries []Entry
	// Err is the error checkpoint's Load returned: nil for an intact file;
	// one matching checkpoint.ErrNotExist, ErrCorrupt, ErrNewerSchema or
	// ErrBadEntry; or the error of reading the file.
	Err error
	// Meta is the header Load returned: the file's, with the phase,
	// writer, boot ID, seq and time of the last journal record replayed
	// over it, if any; Header when Load failed before it read one. It is
	// what a daemon's Load restores, and what a repair writes back.
	Meta Header
	// Journal is what the journal beside the file held (see
	// checkpoint.WithJournal); Entries include its records.
	Journal Journal
	// UpToDamage is what reads of a file Load refused as corrupt, up to
	// the damage, so that a count of its entries is one that was read;
	// nil when Load did not refuse it as corrupt, or when its header, or
	// the state the journal's records follow, does not read.
	UpToDamage *Partial
}

// Partial is what reads of a damaged checkpoint before its damage: the
// file held at least these entries.
type Partial struct {
	// Entries are the entries read before the damage, in order.
	Entries []Entry
	// Meta is the header of that state: the file's, or, when the damage
	// is in the journal, that of its last record before the damage.
	Meta Header
	// Journal says that the damage is in the journal (Journal.Damage says
	// where): Entries are the file's with the records before it replayed.
	Journal bool
	// Line is the index of the file's first entry line that does not
	// read as the writer wrote it (or repeats a key), and Offset its byte
	// offset in the file; Line is -1 when every entry line reads (the
	// damage is in a value, the header or the checksum) or Journal is set.
	Line   int
	Offset int64
}

// Journal is what Read learned of the journal beside a checkpoint.
type Journal struct {
	Path   string
	Exists bool
	Bytes  int64 // its size
	// All describes every record in it, whole or not, replayable or not
	// (lines, and a last one without its end of line).
	All Run
	// Records is the number of records replayed over the file, Stale the
	// number skipped because the file already held them.
	Records, Stale int
	// TornBytes is the size of a torn last record Load discarded (a commit
	// a crash cut short, never acknowledged); 0 if none.
	TornBytes int64
	// Seq is the Seq of the state Load returned: the last replayed
	// record's, or the file's.
	Seq uint64
	// Damage says where Load refused the journal; nil when it did not
	// (or when the file itself is what Load refused).
	Damage *Damage
}

// Damage is where a journal is damaged: the first record that Load's
// replay refused (one that fails its checksum or its shape and is not the
// last, one out of sequence, one that follows another file), what comes
// before it and what follows it. It never holds a record's bytes.
type Damage struct {
	Offset, Bytes int64  // the refused record's place in the journal
	Seq           uint64 // its seq, when its header reads; 0 otherwise
	Reason        string // why Load refused it
	// Before are the records before it, which Load replayed or skipped as
	// stale: what a repair that keeps every intact record keeps.
	Before Run
	// After are the records after it, which cannot be replayed without it.
	After Run
	// FileMissing says that the file the journal follows is missing: no
	// record is refused, and every one is in After.
	FileMissing bool
}

// Run is a run of consecutive records of a journal.
type Run struct {
	Records           int
	FirstSeq, LastSeq uint64 // of the first and last records that read; 0 if none reads
	Offset, Bytes     int64  // where the run starts in the journal, and its length
}

// Options changes how Read reads a file.
type Options struct {
	// IgnoreChecksum reads a file whose checksum fails as if it held, so
	// that the entries of a hand-edited file can be seen (and resealed).
	// The file's layout must still be the writer's: one entry per line.
	IgnoreChecksum bool
	// JournalUpToDamage reads a journal that Load refuses (Journal.Damage)
	// only up to its damage: Entries and Meta are then the file with the
	// records before the damage replayed, what a repair keeps.
	JournalUpToDamage bool
}

// Locked is a checkpoint opened under its lock, for a repair. Read it
// before Delete or Replace.
type Locked interface {
	// Read reads the file as Read does, under the lock.
	Read(ctx context.Context, opt Options) *File
	// Delete removes key from the file last read (it must have loaded
	// cleanly), keeping every other entry's line as it is; the replaced
	// file becomes path.prev, as with every save. h gives the phase,
	// writer and boot ID to write; format, schema, seq and time are set
	// as Save sets them.
	Delete(ctx context.Context, h Header, key Key) error
	// KeepCopy links the file at path to a new name that says which
	// repair kept it (path.before-<verb>-<UTC time>), and its journal, if
	// any, to that name + ".journal", durably, leaving them in place, and
	// returns the name; a journal without its file is kept alone, and the
	// journal's name returned.
	KeepCopy(ctx context.Context, verb string) (string, error)
	// PruneKept removes the oldest copies kept by repairs beyond the bound
	// (see package checkpoint's Kept copies), best effort, and returns
	// the names of those it removed. A repair calls it once it is done.
	PruneKept(ctx context.Context) ([]string, error)
	// Replace writes h and entries as the checkpoint, in that order,
	// whatever is at path now (the caller has kept a copy of it), durably,
	// with a fresh checksum and a seq above both seqAbove and the seq last
	// read; it leaves path.prev as it is, so that .prev only ever holds a
	// file that loaded. h.Schema is written as the schema. Then it removes
	// the journal, durably: its records follow the file replaced (entries
	// read from a file with a journal include the journal's records).
	Replace(ctx context.Context, h Header, entries []Entry, seqAbove uint64) error
	// Discard removes the file and its journal, durably, whatever they
	// hold (the caller has kept a copy of them, and checked that the file
	// is empty), leaving path.prev as it is: a daemon then finds no
	// checkpoint at path.
	Discard(ctx context.Context) error
	// Close releases the lock.
	Close() error
}

// Names are the files package checkpoint keeps beside a checkpoint.
type Names struct {
	Prev string // the previous good file
	Lock string // the lock file
}

// Why is why a copy was kept.
type Why string

const (
	// WhyQuarantine is a copy checkpoint's Quarantine made of a file Load
	// could not use (path.corrupt-<time>). A phaseshift command older than
	// the names by verb kept the files its repairs replaced under the same
	// name.
	WhyQuarantine Why = "quarantine"
	// WhyRepair is a copy a repair of the phaseshift command made of the
	// file it replaced (path.before-<verb>-<time>).
	WhyRepair Why = "repair"
)

// Copy is a copy kept beside a checkpoint.
type Copy struct {
	Path    string // the copy; the file may be missing (HasFile)
	Journal string // its journal, or ""
	HasFile bool   // false: a journal kept without the file it followed
	Why     Why
	Verb    string    // the repair's verb, for WhyRepair
	At      time.Time // when it was kept
}
