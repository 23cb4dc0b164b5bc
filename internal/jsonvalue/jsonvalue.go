// Package jsonvalue compares JSON texts as the values they spell: field
// order, spacing, escapes and the spelling of numbers (1e2 and 100) aside.
// The phaseshift command matches keys with it, and package migrate/control
// checks that a key read back as itself. DecodeFailure says why a text did
// not decode without quoting it, for package checkpoint and migrate/control
// alike.
//
// # Caveats
//
//   - Numbers are compared as the exact rationals they spell, so 2^53+1 is
//     not 2^53, and the number 1 never equals the string "1".
//   - An object with a field twice keeps its last value, as encoding/json
//     does.
package jsonvalue

import (
	"bytes"
	"encoding/json"
	"math/big"
	"reflect"
)

// Value is a JSON text decoded for comparison with Equal.
type Value struct{ v any }

// number is a JSON number as the exact rational it spells: a type of its
// own, so that the number 1 never equals the string "1".
type number string

// Decode decodes one JSON value.
func Decode(data []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return Value{}, err
	}
	return Value{normalize(v)}, nil
}

// Equal reports whether a and b are the same JSON value.
func Equal(a, b Value) bool { return reflect.DeepEqual(a.v, b.v) }

// SameText reports whether the JSON texts a and b spell the same value;
// false if either is not JSON.
func SameText(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return json.Valid(a)
	}
	av, errA := Decode(a)
	bv, errB := Decode(b)
	return errA == nil && errB == nil && Equal(av, bv)
}

func normalize(v any) any {
	switch x := v.(type) {
	case json.Number:
		if r, ok := new(big.Rat).SetString(string(x)); ok {
			return number(r.RatString())
		}
		return number(x)
	case map[string]any:
		for k, e := range x {
			x[k] = normalize(e)
		}
	case []any:
		for i, e := range x {
			x[i] = normalize(e)
		}
	}
	return v
}
