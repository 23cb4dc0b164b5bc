// Package jsonvalue compares JSON texts as the values they spell: field
// order, spacing, escapes and the spelling of numbers (1e2 and 100) aside.
// The phaseshift command matches keys with it, and package migrate/control
// checks that a key read back as itself. DecodeFailure says why a text did
// not decode without quoting it, for package checkpoint and migrate/control
// alike.
//
// # Caveats
//
//   - Numbers are compared exactly, as the decimals they spell, so 2^53+1
//     is not 2^53, and the number 1 never equals the string "1". A number
//     is brought to a canonical form (its significant digits and its
//     exponent) in time and space linear in its length: 1e-999999 is nine
//     bytes, not the million digits of its expansion.
//   - An object with a field twice is refused (a *DuplicateFieldError),
//     not read as encoding/json reads it, keeping the last: a key typed
//     with a field twice names no entry.
package jsonvalue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
)

// Value is a JSON text decoded for comparison with Equal.
type Value struct{ v any }

// number is a JSON number in canonical form (see canonicalNumber): a type
// of its own, so that the number 1 never equals the string "1".
type number string

// DuplicateFieldError is returned by Decode for an object that has a
// field twice.
type DuplicateFieldError struct {
	Field string // the field's name, cut to 64 bytes
}

func (e *DuplicateFieldError) Error() string {
	return fmt.Sprintf("the field %q appears twice in one object", e.Field)
}

// Decode decodes one JSON value (what follows it is not read). An object
// with a field twice is an error, a *DuplicateFieldError.
func Decode(data []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return Value{}, err
	}
	return Value{v}, nil
}

// decodeValue reads the next value from dec, token by token, so that a
// field that comes twice is seen (encoding/json keeps the last).
func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Number:
		return canonicalNumber(string(t))
	case json.Delim:
		if t == '[' {
			return decodeArray(dec)
		}
		return decodeObject(dec) // '{': Token reports a misplaced ']' or '}' as an error
	}
	return tok, nil // a string, a bool or nil
}

func decodeArray(dec *json.Decoder) (any, error) {
	a := []any{}
	for dec.More() {
		v, err := decodeValue(dec)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
	}
	_, err := dec.Token() // ']'
	return a, err
}

func decodeObject(dec *json.Decoder) (any, error) {
	m := map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string) // Token returns an object's keys as strings
		if _, dup := m[name]; dup {
			if len(name) > 64 {
				name = name[:64]
			}
			return nil, &DuplicateFieldError{Field: name}
		}
		if m[name], err = decodeValue(dec); err != nil {
			return nil, err
		}
	}
	_, err := dec.Token() // '}'
	return m, err
}

// Equal reports whether a and b are the same JSON value.
func Equal(a, b Value) bool { return reflect.DeepEqual(a.v, b.v) }

// SameText reports whether the JSON texts a and b spell the same value;
// false if either is not JSON, or has an object with a field twice.
func SameText(a, b []byte) bool {
	av, errA := Decode(a)
	bv, errB := Decode(b)
	return errA == nil && errB == nil && Equal(av, bv)
}
