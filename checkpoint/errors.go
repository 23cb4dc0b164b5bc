package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
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
	// typically after a downgrade. The message gives both numbers.
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

// These errors are returned by Open and by methods of an open checkpoint.
var (
	// ErrLocked is returned by Open when another File, in this process or
	// another, holds the checkpoint's lock and the context ended (or the
	// lock wait elapsed) before it was released.
	ErrLocked = errors.New("checkpoint is locked")

	// ErrClosed is returned by methods called after Close.
	ErrClosed = errors.New("checkpoint is closed")

	// ErrUnreadable is returned by Save and Commit when the file on disk
	// could not be read by the last Load: it may hold state nobody has
	// looked at, so it is not replaced until Quarantine moved it aside.
	ErrUnreadable = errors.New("refusing to replace a checkpoint that could not be read")

	// ErrEncode is returned by Save and Commit when a key or value cannot
	// be encoded as JSON (a NaN, a channel, a failing MarshalJSON). Nothing
	// is written.
	ErrEncode = errors.New("checkpoint entry cannot be encoded")
)

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
// decode: err itself when the key is at fault (keys are not secret), and
// otherwise a *valueError, whose text does not quote the value. Decoders
// of value types do quote their input (netip.ParseAddr, time.Parse), and
// these errors reach Report.Errors and logs, where values must never go.
func decodeError[K comparable](line []byte, err error) error {
	var raw rawKV
	if json.Unmarshal(line, &raw) == nil && len(raw.Key) > 0 {
		var k K
		if kerr := json.Unmarshal(raw.Key, &k); kerr != nil {
			return kerr
		}
	}
	return &valueError{err: err}
}

// valueError is an entry whose value does not decode. Its text names the
// JSON kind and the Go type involved, never the value; the decoder's error
// stays reachable with errors.As.
type valueError struct{ err error }

func (e *valueError) Error() string {
	var te *json.UnmarshalTypeError
	if errors.As(e.err, &te) {
		kind, _, _ := strings.Cut(te.Value, " ") // "number 1234" quotes the number
		field := ""
		if te.Field != "" {
			field = " in field " + te.Field
		}
		return fmt.Sprintf("the value does not decode: a JSON %s%s where Go type %v is expected", kind, field, te.Type)
	}
	var se *json.SyntaxError
	if errors.As(e.err, &se) {
		return fmt.Sprintf("the entry is not valid JSON (at offset %d)", se.Offset)
	}
	return fmt.Sprintf("the value does not decode (%T; its message is not shown, as it may quote the value)", e.err)
}

func (e *valueError) Unwrap() error { return e.err }

// pathError says which operation and step failed on which path, the way
// fs.PathError does, so that errors.As(err, *fs.PathError) works too.
func pathError(op, path string, err error) error {
	return &fs.PathError{Op: "checkpoint " + op, Path: path, Err: err}
}
