package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strings"

	"github.com/phaseshift/phaseshift/internal/fsys"
	"github.com/phaseshift/phaseshift/internal/jsonvalue"
)

// These errors are returned by Load, grouped by what went wrong with the
// file. Match them with errors.Is; the error text also names the path and
// the detail.
var (
	// ErrNotExist is checkpoint.ErrNotExist: see its documentation there.
	ErrNotExist = fmt.Errorf("checkpoint does not exist: %w", fs.ErrNotExist)

	// ErrCorrupt is checkpoint.ErrCorrupt: see its documentation there.
	ErrCorrupt = errors.New("checkpoint is corrupt")

	// ErrNewerSchema is checkpoint.ErrNewerSchema: see its documentation there.
	ErrNewerSchema = errors.New("checkpoint schema is newer than this binary's")

	// ErrOlderSchema is checkpoint.ErrOlderSchema: see its documentation there.
	ErrOlderSchema = errors.New("checkpoint schema is older than any registered upgrade")

	// ErrBadEntry is checkpoint.ErrBadEntry: see its documentation there.
	ErrBadEntry = errors.New("checkpoint entry cannot be read")

	// ErrTypeMismatch is checkpoint.ErrTypeMismatch: see its documentation there.
	ErrTypeMismatch = errors.New("checkpoint does not decode as this binary's types")
)

// These errors are returned by Open and Memory.Reopen: configuration
// mistakes.
var (
	// ErrInvalidOption is checkpoint.ErrInvalidOption: see its documentation there.
	ErrInvalidOption = errors.New("invalid option")

	// ErrInvalidKeyType is checkpoint.ErrInvalidKeyType: see its documentation there.
	ErrInvalidKeyType = errors.New("key type cannot be stored")
)

// These errors are returned by Open and by methods of an open checkpoint.
var (
	// ErrLocked is checkpoint.ErrLocked: see its documentation there.
	ErrLocked = errors.New("checkpoint is locked")

	// ErrUnsafe is checkpoint.ErrUnsafe: see its documentation there.
	ErrUnsafe = fsys.ErrUnsafe

	// ErrClosed is checkpoint.ErrClosed: see its documentation there.
	ErrClosed = errors.New("checkpoint is closed")

	// ErrUnreadable is checkpoint.ErrUnreadable: see its documentation there.
	ErrUnreadable = errors.New("refusing to replace a checkpoint that could not be read")

	// ErrEncode is checkpoint.ErrEncode: see its documentation there.
	ErrEncode = errors.New("checkpoint entry cannot be encoded")
)

// EncodeError is checkpoint.EncodeError: see its documentation there.
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

// BadEntriesError is checkpoint.BadEntriesError: see its documentation there.
type BadEntriesError struct {
	Path    string
	Total   int // entries in the file
	Entries []EntryError
}

// EntryError is checkpoint.EntryError: see its documentation there.
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
// where values must never go. (The key is shown by EntryError.Key.) A key
// or value of another type than this binary's names the field and the Go
// type at fault and matches ErrTypeMismatch.
func decodeError[K comparable, V any](line []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &entryDecodeError{part: "entry", err: err}
	}
	var raw rawKV
	if json.Unmarshal(line, &raw) != nil {
		return &entryDecodeError{part: "value", err: err}
	}
	var k K
	if kerr := strictUnmarshal(raw.Key, &k); kerr != nil {
		return keyDecodeError[K](raw.Key, kerr)
	}
	return partDecodeError(reflect.TypeFor[V](), "value", raw.Value, err)
}

// keyDecodeError is decodeError for a key, whose JSON is raw, that did not
// decode with err.
func keyDecodeError[K comparable](raw []byte, err error) error {
	return partDecodeError(reflect.TypeFor[K](), "key", raw, err)
}

// partDecodeError is the error of the key or value (part) whose JSON is
// data, which did not decode into Go type t with err.
func partDecodeError(t reflect.Type, part string, data []byte, err error) error {
	e := &entryDecodeError{part: part, err: err}
	if m, ok := mismatchOf(t, data, err, part); ok {
		e.typ, e.mismatch = t.String(), &m
	}
	return e
}

// entryDecodeError is an entry whose key or value does not decode. Its text
// names the JSON kind, the field and the Go type involved, never the
// input; the decoder's error stays reachable with errors.As.
type entryDecodeError struct {
	part     string // "key", "value" or "entry"
	err      error
	typ      string    // the key or value's Go type, when mismatch is set
	mismatch *mismatch // set when the part is of another type than this binary's; it matches ErrTypeMismatch
}

func (e *entryDecodeError) Error() string {
	if e.mismatch != nil {
		return fmt.Sprintf("the %s does not decode as this binary's type %s: %v", e.part, e.typ, e.mismatch)
	}
	return fmt.Sprintf("the %s does not decode: %s", e.part, jsonvalue.DecodeFailure(e.err))
}

// Is makes errors.Is(err, ErrTypeMismatch) true for a key or value of
// another type than this binary's.
func (e *entryDecodeError) Is(target error) bool {
	return target == ErrTypeMismatch && e.mismatch != nil
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
// the key or value type does not have. It matches ErrTypeMismatch, not
// ErrNewerSchema: it is only returned for a file whose schema this binary
// reads (a newer one is refused by its header), so what the fields mean
// cannot be told from the file: a field this binary's type removed, one a
// later build added without bumping the schema, or a file written for
// another type. Its text says which fixes lose nothing.
type unknownFieldsError struct {
	first      EntryError // the first such entry; its Err names the field
	count      int        // how many entries
	total      int        // entries in the file
	fileSchema int        // the file's schema
	schema     int        // this binary's (WithSchema)
}

func (e *unknownFieldsError) Error() string {
	return fmt.Sprintf("%v: in %d of %d entries, the file's record has a field this binary's type lacks (first: %v): %s", ErrTypeMismatch, e.count, e.total, e.first, e.fixes())
}

// fixes says how to read the file without losing the fields: the option
// that drops them comes last, named as lossy, and not at all for a file
// written for another type, where it would drop everything.
func (e *unknownFieldsError) fixes() string {
	const lossy = "only if the field's data is not needed, checkpoint.WithDropUnknownFields, which is lossy: the next save deletes the field from every entry for good"
	var ede *entryDecodeError
	if errors.As(e.first.Err, &ede) && ede.mismatch != nil && ede.mismatch.foreign {
		return "the record shares no field with this binary's type, so the file was written for another key or value type: open it with the type that wrote it, or give this checkpoint another path"
	}
	if e.fileSchema < e.schema {
		return fmt.Sprintf("the file has schema %d, and the upgrade from schema %d to %d leaves the field in: make that upgrade (checkpoint.WithUpgrade(%d, fn)) delete or rename it, or declare the field again in the type; %s",
			e.fileSchema, e.fileSchema, e.schema, e.fileSchema, lossy)
	}
	return fmt.Sprintf("the file has schema %d, as this binary does: if this binary's type removed the field, declare the field again (it may stay unused), or bump the schema with checkpoint.WithSchema(%d) and register checkpoint.WithUpgrade(%d, fn) whose fn deletes the field from the old records; if a later build of this program added the field without bumping the schema, run that build; %s",
		e.fileSchema, e.schema+1, e.schema, lossy)
}

func (e *unknownFieldsError) Is(target error) bool { return target == ErrTypeMismatch }

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
