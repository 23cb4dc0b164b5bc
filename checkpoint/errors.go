package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/phaseshift/phaseshift/internal/fsys"
	"github.com/phaseshift/phaseshift/internal/jsonvalue"
)

// These errors are returned by Load, grouped by what went wrong with the
// file. Match them with errors.Is; the error text also names the path and
// the detail.
var (
	// ErrNotExist is returned by Load when there is no checkpoint file yet.
	// It matches fs.ErrNotExist too.
	ErrNotExist = fmt.Errorf("checkpoint does not exist: %w", fs.ErrNotExist)

	// ErrCorrupt is returned by Load when the file is not an intact
	// checkpoint: a checksum mismatch, truncation, bad JSON or a wrong
	// shape. The file is not used, and Save refuses to replace it until it
	// has been moved aside with Quarantine.
	ErrCorrupt = errors.New("checkpoint is corrupt")

	// ErrNewerSchema is returned by Load when the file was written with a
	// newer value schema, or a newer file format, than this binary knows:
	// typically after a downgrade. The message gives both numbers. It is
	// also returned when entries have fields (in the key, the value, or any
	// struct nested in them) that this binary's types do not have: a newer
	// binary wrote them without bumping the schema, and dropping the fields
	// would lose them for good at the next save. The message names the
	// first such entry and field; WithDropUnknownFields lets Load drop them.
	ErrNewerSchema = errors.New("checkpoint schema is newer than this binary's")

	// ErrOlderSchema is returned by Load when the file's value schema is
	// older than the oldest upgrade registered with WithUpgrade, so there
	// is no way to bring it to the current schema.
	ErrOlderSchema = errors.New("checkpoint schema is older than any registered upgrade")

	// ErrBadEntry is returned by Load, inside a *BadEntriesError, when the
	// file is intact but some entries cannot be decoded into the key and
	// value types or upgraded. The Snapshot returned with it holds every
	// other entry.
	ErrBadEntry = errors.New("checkpoint entry cannot be read")
)

// These errors are returned by Open and Memory.Reopen: configuration
// mistakes.
var (
	// ErrInvalidOption is returned by Open and Memory.Reopen when an option
	// is nil or its value is invalid (and by Open for an empty path): WithSchema(0), WithLockWait(-1), a
	// WithFileMode the owner cannot read and write, an upgrade chain with a
	// gap, a WithValidate function of other key or value types than the
	// checkpoint's. The message names the option.
	ErrInvalidOption = errors.New("invalid option")

	// ErrInvalidKeyType is returned by Open and Memory.Reopen (and by
	// CheckKeyType) when the key type cannot read back from JSON as itself
	// for any useful key: it holds a pointer, an interface, an unexported
	// field or a field tagged json:"-". The message names the field.
	ErrInvalidKeyType = errors.New("key type cannot be stored")
)

// These errors are returned by Open and by methods of an open checkpoint.
var (
	// ErrLocked is returned by Open when another File, in this process or
	// another, holds the checkpoint's lock and the context ended (or the
	// lock wait elapsed) before it was released. Save, Commit and
	// Quarantine return it when this File's lock file was removed (with
	// its directory, say) and another File has since taken the lock at the
	// same path.
	ErrLocked = errors.New("checkpoint is locked")

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
	ErrUnsafe = fsys.ErrUnsafe

	// ErrClosed is returned by methods called after Close.
	ErrClosed = errors.New("checkpoint is closed")

	// ErrUnreadable is returned by Save and Commit when the file on disk
	// could not be read by the last Load, or was written by another File
	// while this one's lock file was gone: it may hold state nobody has
	// looked at, so it is not replaced until a Load has read it or
	// Quarantine moved it aside.
	ErrUnreadable = errors.New("refusing to replace a checkpoint that could not be read")

	// ErrEncode is returned by Save and Commit, inside an *EncodeError,
	// when an entry cannot be written: its key or value cannot be encoded
	// as JSON (a NaN, a channel, a failing MarshalJSON), or its key would
	// not read back from JSON as the same key (see File). Nothing is
	// written.
	ErrEncode = errors.New("checkpoint entry cannot be encoded")
)

// EncodeError is returned, wrapped, by Save and Commit when an entry cannot
// be written. errors.Is(err, ErrEncode) reports true, and errors.As finds it
// with the entry's key.
//
// Its text names the key's or value's Go type and says what is wrong; it
// shows the key (as JSON) only when the key is not at fault, and never the
// value or the text of the underlying error, which encoding/json and
// MarshalJSON methods write with the value quoted.
type EncodeError struct {
	Key    any    // the entry's key, as given to Save or Commit
	Index  int    // the position of the entry's change in Commit's changes; -1 for Save
	InKey  bool   // the key is at fault; otherwise the value is
	Reason string // what is wrong, naming Go types and fields, never a value
	// Err is the error of encoding/json or of a MarshalJSON or decoding
	// method, if one caused this; nil when the key encoded but would not
	// read back as itself. Its text may quote the value: do not log it.
	Err error

	typ     string // the Go type at fault
	keyJSON string // the key as the file would hold it, when the value is at fault
}

// Error says which entry and why, without the value.
func (e *EncodeError) Error() string {
	if e.InKey {
		return fmt.Sprintf("%v: a key of Go type %s %s", ErrEncode, e.typ, e.Reason)
	}
	return fmt.Sprintf("%v: the value of key %s (Go type %s): %s", ErrEncode, e.keyJSON, e.typ, e.Reason)
}

// Is makes errors.Is(err, ErrEncode) true.
func (e *EncodeError) Is(target error) bool { return target == ErrEncode }

// Unwrap returns Err.
func (e *EncodeError) Unwrap() error { return e.Err }

// encodeFailure describes an error of json.Marshal (or of a json.Encoder)
// without its text: encoding/json quotes invalid json.Number literals in
// its messages, and a MarshalJSON or MarshalText error is the type's own
// text, which may quote anything.
func encodeFailure(err error) string {
	var (
		me  *json.MarshalerError
		ute *json.UnsupportedTypeError
		uve *json.UnsupportedValueError
	)
	switch {
	case errors.As(err, &me):
		var se *json.SyntaxError
		if errors.As(me.Err, &se) {
			return fmt.Sprintf("the MarshalJSON method of Go type %v returned invalid JSON (at offset %d)", me.Type, se.Offset)
		}
		return fmt.Sprintf("the MarshalJSON or MarshalText method of Go type %v failed (its message is not shown, as it may quote the value; EncodeError.Err holds it)", me.Type)
	case errors.As(err, &ute):
		return fmt.Sprintf("it holds Go type %v, which JSON cannot encode", ute.Type)
	case errors.As(err, &uve):
		switch {
		case uve.Str == "NaN" || uve.Str == "+Inf" || uve.Str == "-Inf":
			return "it holds a float JSON cannot represent (" + uve.Str + ")"
		case strings.HasPrefix(uve.Str, "encountered a cycle via "):
			return "it holds a pointer cycle (" + uve.Str + ")" // names a type, not a value
		}
		return "it holds a value JSON cannot represent"
	case strings.HasPrefix(err.Error(), "json: invalid number literal"):
		return "it holds a json.Number that is not a JSON number"
	}
	return fmt.Sprintf("encoding/json refused it (%T; its message is not shown, as it may quote the value)", err)
}

// BadEntriesError is returned by Load when the file is intact (its checksum
// holds) but some entries could not be decoded or upgraded. The Snapshot
// returned with it holds the rest. errors.Is(err, ErrBadEntry) reports true.
type BadEntriesError struct {
	Path    string
	Total   int // entries in the file
	Entries []EntryError
}

// EntryError is one entry that could not be read.
type EntryError struct {
	Index int    // position in the file's entry list, from 0
	Key   string // the key as it appears in the file (keys are not secret; values may be)
	Err   error

	raw string // the key's whole JSON, to find a later change to the same entry
}

// badEntry is the EntryError of the entry (or journal change) at index i,
// whose line is line.
func badEntry(i int, line []byte, err error) EntryError {
	raw := rawKeyJSON(line)
	return EntryError{Index: i, Key: shorten(raw), Err: err, raw: string(raw)}
}

// Error names the entry by position and key, not by value.
func (e EntryError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("entry %d: %v", e.Index, e.Err)
	}
	return fmt.Sprintf("entry %d (key %s): %v", e.Index, e.Key, e.Err)
}

// Unwrap returns the cause.
func (e EntryError) Unwrap() error { return e.Err }

// Error lists the bad entries.
func (e *BadEntriesError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "checkpoint %s: %d of %d entries cannot be read", e.Path, len(e.Entries), e.Total)
	for i, ee := range e.Entries {
		if i == 8 {
			fmt.Fprintf(&b, "; and %d more", len(e.Entries)-i)
			break
		}
		b.WriteString("; ")
		b.WriteString(ee.Error())
	}
	return b.String()
}

// Is makes errors.Is(err, ErrBadEntry) true.
func (e *BadEntriesError) Is(target error) bool { return target == ErrBadEntry }

// Unwrap returns the per-entry errors.
func (e *BadEntriesError) Unwrap() []error {
	errs := make([]error, len(e.Entries))
	for i, ee := range e.Entries {
		errs[i] = ee
	}
	return errs
}

// decodeError returns the error to report for an entry line that did not
// decode, saying whether the key or the value is at fault, in words that
// never quote either: decoders do quote their input (netip.ParseAddr,
// time.Parse, json.Number), and these errors reach Report.Errors and logs,
// where values must never go. (The key is shown by EntryError.Key.)
func decodeError[K comparable](line []byte, err error) error {
	part := "value"
	var se *json.SyntaxError
	if errors.As(err, &se) {
		part = "entry"
	} else if raw := rawKeyJSON(line); raw != nil {
		var k K
		if kerr := strictUnmarshal(raw, &k); kerr != nil {
			return &entryDecodeError{part: "key", err: kerr}
		}
	}
	return &entryDecodeError{part: part, err: err}
}

// entryDecodeError is an entry whose key or value does not decode. Its text
// names the JSON kind, the field and the Go type involved, never the
// input; the decoder's error stays reachable with errors.As.
type entryDecodeError struct {
	part string // "key", "value" or "entry"
	err  error
}

func (e *entryDecodeError) Error() string {
	return fmt.Sprintf("the %s does not decode: %s", e.part, jsonvalue.DecodeFailure(e.err))
}

func (e *entryDecodeError) Unwrap() error { return e.err }

// rejectedError is an entry that decoded but that the WithValidate function
// rejected. Its text includes the function's error as returned, which the
// function's author keeps free of values (see WithValidate); errors.Is and
// errors.As reach that error.
type rejectedError struct{ err error }

func (e *rejectedError) Error() string {
	return "rejected by the WithValidate function: " + e.err.Error()
}

func (e *rejectedError) Unwrap() error { return e.err }

// unknownFieldsError is the error of a Load that found entries with fields
// the key or value type does not have. It matches ErrNewerSchema.
type unknownFieldsError struct {
	first EntryError // the first such entry; its Err names the field
	count int        // how many entries
	total int        // entries in the file
}

func (e *unknownFieldsError) Error() string {
	return fmt.Sprintf("%v: %d of %d entries have fields that the Go types of this binary do not have (first: %v): a newer binary wrote them without bumping the schema (WithSchema); upgrade the binary, quarantine the file, or open it WithDropUnknownFields to drop those fields", ErrNewerSchema, e.count, e.total, e.first)
}

func (e *unknownFieldsError) Is(target error) bool { return target == ErrNewerSchema }

// Unwrap returns the first such entry's error, which holds the decoder's.
func (e *unknownFieldsError) Unwrap() error { return e.first }

// corrupt returns an error matching ErrCorrupt that says what is wrong.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// corruptBecause is corrupt with a cause that stays reachable with
// errors.Is and errors.As but out of the text: the causes are the errors of
// encoding/json, time and hex on the file's bytes, which quote them.
func corruptBecause(cause error, format string, args ...any) error {
	return &quietError{msg: ErrCorrupt.Error() + ": " + fmt.Sprintf(format, args...), errs: []error{ErrCorrupt, cause}}
}

// quietError is an error whose text is msg alone and that wraps errs.
type quietError struct {
	msg  string
	errs []error
}

func (e *quietError) Error() string   { return e.msg }
func (e *quietError) Unwrap() []error { return e.errs }

// pathError says which operation and step failed on which path, the way
// fs.PathError does, so that errors.As(err, *fs.PathError) works too.
func pathError(op, path string, err error) error {
	return &fs.PathError{Op: "checkpoint " + op, Path: path, Err: err}
}
