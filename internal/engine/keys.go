package engine

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/phaseshift/phaseshift/internal/jsonvalue"
)

// A key is stored as its JSON and found again by decoding that JSON and
// comparing with ==: the index confirms a hash hit that way, and a restart
// has nothing else to go on. A key whose JSON does not decode to a key ==
// to itself would be lost or doubled: a second write of it appends a
// second line, a Delete misses it, a restart serves another key in its
// place. So every key a Save or Commit writes is checked first, and one
// that fails is refused with an *EncodeError (ErrEncode).
//
// The check is exact and runs for every key written. For most key types it
// costs next to nothing: a type made only of booleans, numbers and strings
// (in structs of exported, untagged-or-plainly-tagged fields, and arrays),
// without custom JSON or text methods, loses nothing in its JSON round trip
// but invalid UTF-8, which encoding/json writes as the escape \ufffd; for
// those, scanning the key's JSON for that escape is the whole check. Other
// types (time.Time, pointers, interfaces, unexported fields, custom
// marshalers, ",string" fields) are decoded back and compared, a decode of
// the key's few bytes per key written.

// keyRule checks that keys of type K read back from JSON as themselves.
type keyRule[K comparable] struct {
	// plain: K is built from bool, number and string kinds only, so that
	// its JSON loses nothing but invalid UTF-8 (see plainType).
	plain bool
	// comparable, for a K that holds an interface, tells whether a key's
	// dynamic types can be compared at all (an interface may hold a map);
	// nil for other K.
	comparable func(K) error
	typ        string // K's name, for errors
}

func newKeyRule[K comparable]() keyRule[K] {
	t := reflect.TypeFor[K]()
	return keyRule[K]{plain: plainType(t, 0), comparable: hashableCheck[K](), typ: t.String()}
}

// check returns why k, whose JSON is js, does not read back as itself
// ("" if it does), and the decoder's error if decoding js failed.
func (r *keyRule[K]) check(k K, js []byte) (string, error) {
	if r.plain && !hasReplacedUTF8(js) {
		return "", nil
	}
	return r.readBack(k, js)
}

// readBack is the slow path of check: decode and compare. A plain key gets
// here only when it fails, to say which field is at fault. (It is a
// function of its own so that k escapes to the heap only on this path.)
func (r *keyRule[K]) readBack(k K, js []byte) (string, error) {
	if r.comparable != nil && r.comparable(k) != nil {
		return "holds a value that cannot be compared (a map, slice or func inside an interface): it cannot be a key", nil
	}
	var back K
	if err := json.Unmarshal(js, &back); err != nil {
		return "does not decode from its own JSON: " + jsonvalue.DecodeFailure(err), err
	}
	if r.comparable != nil && r.comparable(back) != nil {
		return "would read back from JSON as a value that cannot be compared (an object or a list inside an interface)", nil
	}
	if back == k {
		return "", nil
	}
	why := whyDifferent(reflect.ValueOf(&k).Elem(), reflect.ValueOf(&back).Elem(), "", 0)
	return "would not read back from JSON as the same key, so the checkpoint could not find it again (after a restart, or to replace or delete it): " + why, nil
}

// hasReplacedUTF8 reports whether js, the JSON encoding/json wrote for a
// plain value, holds the escape \ufffd. encoding/json writes that escape
// for each byte of invalid UTF-8 and for nothing else (a valid U+FFFD is
// written as itself), so for a plain value it is exactly the sign that a
// string will not read back as it was.
func hasReplacedUTF8(js []byte) bool {
	for i := 0; ; {
		j := bytes.IndexByte(js[i:], '\\')
		if j < 0 {
			return false
		}
		i += j
		if i+1 < len(js) && js[i+1] == 'u' {
			if bytes.HasPrefix(js[i+2:], []byte("fffd")) {
				return true
			}
			i += 6
		} else {
			i += 2 // an escaped character, possibly a backslash
		}
		if i >= len(js) {
			return false
		}
	}
}

var (
	timeType    = reflect.TypeFor[time.Time]()
	numberType  = reflect.TypeFor[json.Number]()
	jsonMethods = []reflect.Type{
		reflect.TypeFor[json.Marshaler](),
		reflect.TypeFor[json.Unmarshaler](),
		reflect.TypeFor[encoding.TextMarshaler](),
		reflect.TypeFor[encoding.TextUnmarshaler](),
	}
)

// customJSON reports whether t or *t has a JSON or text method, which
// may write anything.
func customJSON(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	for _, m := range jsonMethods {
		if t.Implements(m) || pt.Implements(m) {
			return true
		}
	}
	return false
}

// plainType reports whether every value of t reads back from
// encoding/json's output as itself, invalid UTF-8 in strings aside: t is a
// bool, a number or a string kind, or an array or struct of such, with no
// custom JSON or text method anywhere and nothing encoding/json treats
// specially (json.Number, embedded fields, unexported or omitted fields,
// the ",string" option, field names that could clash).
func plainType(t reflect.Type, depth int) bool {
	if depth > 32 || customJSON(t) || t == numberType {
		return false
	}
	switch t.Kind() {
	case reflect.Bool, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return true
	case reflect.Array:
		return plainType(t.Elem(), depth+1)
	case reflect.Struct:
		return plainStruct(t, depth)
	}
	return false
}

func plainStruct(t reflect.Type, depth int) bool {
	names := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || f.Anonymous {
			return false
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" && opts == "" {
			return false // not stored at all
		}
		for _, o := range strings.Split(opts, ",") {
			if o == "string" {
				return false
			}
		}
		if name == "" {
			name = f.Name
		}
		// Decoding matches names case-insensitively when no name matches
		// exactly; simple ASCII names that differ in more than case keep
		// that out of the way.
		folded := strings.ToLower(name)
		if !simpleName(name) || names[folded] {
			return false
		}
		names[folded] = true
		if !plainType(f.Type, depth+1) {
			return false
		}
	}
	return true
}

func simpleName(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return s != ""
}

// whyDifferent explains why a (a key) and b (what its JSON decodes to)
// differ, naming the first field at fault and its type, never a value.
func whyDifferent(a, b reflect.Value, path string, depth int) string {
	t := a.Type()
	at := "the key"
	if path != "" {
		at = "field " + path
	}
	at += " (" + t.String() + ")"
	switch {
	case depth > 32:
		return at + " reads back as a different value"
	case t == timeType:
		return at + ": a time.Time carries a monotonic clock reading and a *time.Location, which JSON does not keep; use t.Round(0).UTC() in keys"
	case customJSON(t):
		return at + ": its MarshalJSON or MarshalText method does not write everything == compares"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return at + " is a pointer: JSON stores what it points to, and reading it back makes a new pointer, never == to the old one; use a value"
	case reflect.Interface:
		if a.IsNil() || b.IsNil() || a.Elem().Type() != b.Elem().Type() {
			return fmt.Sprintf("%s: an interface holding %s reads back from JSON as %s", at, typeName(a), typeName(b))
		}
		return whyDifferent(a.Elem(), b.Elem(), path, depth+1)
	case reflect.String:
		if !utf8.ValidString(a.String()) {
			return at + " is a string that is not valid UTF-8: JSON stores U+FFFD in place of the invalid bytes"
		}
	case reflect.Array:
		for i := range a.Len() {
			if !a.Index(i).Equal(b.Index(i)) {
				return whyDifferent(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i), depth+1)
			}
		}
	case reflect.Struct:
		return whyStructDifferent(a, b, path, at, depth)
	}
	return at + " reads back from JSON as a different value"
}

func whyStructDifferent(a, b reflect.Value, path, at string, depth int) string {
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Name == "_" || a.Field(i).Equal(b.Field(i)) {
			continue // == ignores blank fields
		}
		name := f.Name
		if path != "" {
			name = path + "." + f.Name
		}
		switch {
		case !f.IsExported():
			return fmt.Sprintf("field %s (%s) is unexported, so JSON does not store it: keys that differ only there would be one entry", name, f.Type)
		case f.Tag.Get("json") == "-":
			return fmt.Sprintf("field %s (%s) is tagged json:\"-\", so JSON does not store it", name, f.Type)
		}
		return whyDifferent(a.Field(i), b.Field(i), name, depth+1)
	}
	return at + " reads back from JSON as a different value"
}

func typeName(v reflect.Value) string {
	if v.IsNil() {
		return "nil"
	}
	return v.Elem().Type().String()
}

// CheckKeyType is checkpoint.CheckKeyType: see its documentation there.
func CheckKeyType[K comparable]() error {
	t := reflect.TypeFor[K]()
	if why := keyTypeProblem(t, "", 0); why != "" {
		return fmt.Errorf("checkpoint: %w: key type %s: %s", ErrInvalidKeyType, t, why)
	}
	return nil
}

// keyTypeProblem says why keys of type t, at field path, cannot be stored,
// or "".
func keyTypeProblem(t reflect.Type, path string, depth int) string {
	at := "the key"
	if path != "" {
		at = "field " + path + " (" + t.String() + ")"
	}
	switch {
	case depth > 32 || customJSON(t):
		return ""
	case t.Kind() == reflect.Pointer:
		return at + " is a pointer: JSON stores what it points to, and reading it back makes a new pointer, never == to the old one; use a value"
	case t.Kind() == reflect.Interface:
		return at + " is an interface: JSON reads it back as whatever the JSON looks like (a float64 for a number, a map for a struct), not as what was stored; use a concrete type"
	case t.Kind() == reflect.Chan || t.Kind() == reflect.UnsafePointer || t.Kind() == reflect.Complex64 || t.Kind() == reflect.Complex128:
		return at + " is a " + t.Kind().String() + ", which JSON cannot encode"
	case t.Kind() == reflect.Array:
		return keyTypeProblem(t.Elem(), path+"[]", depth+1)
	case t.Kind() == reflect.Struct:
		return structKeyProblem(t, path, depth)
	}
	return ""
}

func structKeyProblem(t reflect.Type, path string, depth int) string {
	for i := range t.NumField() {
		f := t.Field(i)
		name := f.Name
		if path != "" {
			name = path + "." + f.Name
		}
		switch {
		case f.Name == "_":
			continue // == ignores blank fields
		case !f.IsExported() && !(f.Anonymous && f.Type.Kind() == reflect.Struct):
			return fmt.Sprintf("field %s (%s) is unexported, so JSON does not store it: keys that differ only there would be one entry; export it or leave it out of the key", name, f.Type)
		case f.Tag.Get("json") == "-":
			return fmt.Sprintf("field %s (%s) is tagged json:\"-\", so JSON does not store it: keys that differ only there would be one entry", name, f.Type)
		}
		if why := keyTypeProblem(f.Type, name, depth+1); why != "" {
			return why
		}
	}
	return ""
}

// CheckEntry is checkpoint.CheckEntry: see its documentation there.
func CheckEntry[K comparable, V any](key K, value V) error {
	keys := keyRuleFor[K]()
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	var err error
	s.buf, err = encodeEntry(s.enc, keys, s.buf[:0], key, value, -1)
	if cap(s.buf) > 64<<10 {
		s.buf = nil // do not keep a huge value's buffer in the pool
	}
	return err
}

// EncodedChange is checkpoint.EncodedChange: see its documentation there.
type EncodedChange[K comparable, V any] struct {
	key  K
	line []byte // the entry's line; nil for a delete
	del  bool
	made bool // made by EncodeChange
}

// EncodeChange is checkpoint.EncodeChange: see its documentation there.
func EncodeChange[K comparable, V any](ch Change[K, V]) (EncodedChange[K, V], error) {
	if ch.Delete {
		return EncodedChange[K, V]{key: ch.Key, del: true, made: true}, nil
	}
	keys := keyRuleFor[K]()
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	var err error
	s.buf, err = encodeEntry(s.enc, keys, s.buf[:0], ch.Key, ch.Value, -1)
	line := bytes.Clone(s.buf) // its own bytes: the core keeps them as the entry's line
	if cap(s.buf) > 64<<10 {
		s.buf = nil // do not keep a huge value's buffer in the pool
	}
	if err != nil {
		return EncodedChange[K, V]{}, err
	}
	return EncodedChange[K, V]{key: ch.Key, line: line, made: true}, nil
}

// scratch is an encoder and a buffer for CheckEntry and EncodeChange.
type scratch struct {
	enc *encoder
	buf []byte
}

var (
	scratchPool = sync.Pool{New: func() any { return &scratch{enc: newEncoder()} }}
	keyRules    sync.Map // reflect.Type -> *keyRule[K], for CheckEntry
)

// keyRuleFor returns the keyRule of K, made once per type.
func keyRuleFor[K comparable]() *keyRule[K] {
	t := reflect.TypeFor[K]()
	if r, ok := keyRules.Load(t); ok {
		return r.(*keyRule[K])
	}
	r := newKeyRule[K]()
	actual, _ := keyRules.LoadOrStore(t, &r)
	return actual.(*keyRule[K])
}

// hashableCheck returns, for a key type that holds an interface, a check
// that a decoded key can be a map key: JSON decodes an object into a map,
// and a map inside an interface key would panic the insert. For other key
// types it returns nil: every value of them is hashable.
func hashableCheck[K comparable]() func(K) error {
	if !holdsInterface(reflect.TypeFor[K](), 0) {
		return nil
	}
	return func(k K) error {
		if !reflect.ValueOf(&k).Elem().Comparable() {
			return errors.New("the key holds a value that cannot be a map key (an object or a list where the key type has an interface)")
		}
		return nil
	}
}

func holdsInterface(t reflect.Type, depth int) bool {
	if depth > 32 {
		return true
	}
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.Array:
		return holdsInterface(t.Elem(), depth+1)
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if holdsInterface(t.Field(i).Type, depth+1) {
				return true
			}
		}
	}
	return false
}
