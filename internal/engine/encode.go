package engine

import (
	"bytes"
	"encoding/json"
	"reflect"
)

// encoder turns keys and values into entry lines. It reuses one buffer and
// one json.Encoder, so encoding allocates only the line it returns.
type encoder struct {
	scratch bytes.Buffer
	enc     *json.Encoder
}

func newEncoder() *encoder {
	e := &encoder{}
	e.enc = json.NewEncoder(&e.scratch)
	// Values are data, not HTML; escaping <, > and & only makes the file
	// harder to read.
	e.enc.SetEscapeHTML(false)
	return e
}

// appendJSON appends v's compact JSON to dst.
func (e *encoder) appendJSON(dst []byte, v any) ([]byte, error) {
	e.scratch.Reset()
	if err := e.enc.Encode(v); err != nil {
		return dst, err
	}
	return append(dst, bytes.TrimSuffix(e.scratch.Bytes(), []byte{'\n'})...), nil
}

// encodeEntry appends the line for k and v (without indent or comma) to
// dst, after checking that k reads back as itself. On error dst is
// returned as it was, and the error is an *EncodeError for the entry at
// index (-1 for Save).
func encodeEntry[K comparable, V any](e *encoder, keys *keyRule[K], dst []byte, k K, v V, index int) ([]byte, error) {
	start := len(dst)
	dst = append(dst, entryPrefix...)
	keyAt := len(dst)
	dst, err := e.appendJSON(dst, k)
	if err != nil {
		return dst[:start], &EncodeError{Key: k, Index: index, InKey: true, Reason: "cannot be encoded: " + encodeFailure(err), Err: err, typ: keys.typ}
	}
	if why, err := keys.check(k, dst[keyAt:]); why != "" {
		return dst[:start], &EncodeError{Key: k, Index: index, InKey: true, Reason: why, Err: err, typ: keys.typ}
	}
	keyEnd := len(dst)
	dst = append(dst, entryMiddle...)
	if dst, err = e.appendJSON(dst, v); err != nil {
		return dst[:start], &EncodeError{Key: k, Index: index, Reason: encodeFailure(err), Err: err, typ: reflect.TypeFor[V]().String(), keyJSON: shorten(dst[keyAt:keyEnd])}
	}
	return append(dst, '}'), nil
}
