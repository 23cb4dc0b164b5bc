package engine

import (
	"encoding"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"

	"github.com/phaseshift/phaseshift/internal/jsonvalue"
)

// A file that does not decode as this binary's types is told apart from
// one a newer binary wrote (ErrNewerSchema, decided by the header's schema
// alone): its error names the field and the Go type that lacks it, or that
// holds another kind of value. encoding/json says only the field's name
// for a field the type lacks, so mismatchOf walks the JSON beside the Go
// type to find which type it is; this runs only on the error path.

// mismatch is what mismatchOf learned about a key or value that did not
// decode into its Go type: never the JSON's content, only names and kinds.
type mismatch struct {
	field   string // the JSON name of the field at fault; "" for the whole key or value
	owner   string // the Go type that lacks the field, or whose field holds another kind
	unknown bool   // the field is one owner does not have
	foreign bool   // the JSON object that holds it has none of owner's fields
	kind    string // for a value of another kind: the JSON kind found ("string")
	want    string // and the Go type expected
}

// String describes the mismatch in the words the errors use.
func (m mismatch) String() string {
	switch {
	case m.unknown && m.foreign:
		return "field " + quoteName(m.field) + " of type " + m.owner + ": this binary's type has no such field, and the record has none of that type's fields"
	case m.unknown:
		return "field " + quoteName(m.field) + " of type " + m.owner + ": this binary's type has no such field"
	case m.field != "":
		return "field " + quoteName(m.field) + " of type " + m.owner + ": cannot decode a JSON " + m.kind + " into Go type " + m.want
	}
	return "cannot decode a JSON " + m.kind + " into Go type " + m.want
}

// mismatchOf describes err, the error of decoding data into Go type t, if
// err says that data is of another type: a field t (or a type inside it)
// does not have, or a value of another JSON kind than the Go type takes.
// prefix is the first element of the field paths of a json.UnmarshalTypeError
// ("key" or "value": the entry line is decoded as a whole). Errors of
// syntax or of a type's own decoding method are not mismatches.
func mismatchOf(t reflect.Type, data []byte, err error, prefix string) (mismatch, bool) {
	if name, ok := jsonvalue.UnknownField(err); ok {
		m := mismatch{field: name, owner: t.String(), unknown: true}
		if owner, foreign, found := findUnknown(t, data, name); found {
			m.owner, m.foreign = owner.String(), foreign
		}
		return m, true
	}
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Type == nil {
		return mismatch{}, false
	}
	kind, _, _ := strings.Cut(te.Value, " ") // "number 1234" quotes the number
	m := mismatch{kind: kind, want: te.Type.String()}
	path := strings.Split(te.Field, ".")
	if len(path) > 0 && path[0] == prefix {
		path = path[1:]
	}
	if len(path) == 0 || path[0] == "" {
		return m, true
	}
	m.field = path[len(path)-1]
	m.owner = te.Struct
	if owner := fieldOwner(t, path[:len(path)-1]); owner != nil {
		m.owner = owner.String()
	}
	return m, true
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// decodesItself reports whether encoding/json hands t's JSON to a method
// of t (or leaves it as it is, for an interface): nothing inside it is
// judged by field.
func decodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Kind() == reflect.Interface || p.Implements(jsonUnmarshaler) || p.Implements(textUnmarshaler)
}

// elem is what JSON inside t decodes into: through pointers, and for
// fieldOwner also through slices, arrays and maps, whose field paths
// encoding/json does not name.
func elem(t reflect.Type, containers bool) reflect.Type {
	for {
		switch k := t.Kind(); {
		case k == reflect.Pointer:
			t = t.Elem()
		case containers && (k == reflect.Slice || k == reflect.Array || k == reflect.Map):
			t = t.Elem()
		default:
			return t
		}
	}
}

// fieldOwner follows path, JSON field names from t, to the struct type the
// last of them leads to, or returns nil.
func fieldOwner(t reflect.Type, path []string) reflect.Type {
	t = elem(t, true)
	for _, name := range path {
		if t.Kind() != reflect.Struct {
			return nil
		}
		f, ok := jsonFields(t).lookup(name)
		if !ok {
			return nil
		}
		t = elem(f, true)
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	return t
}

// findUnknown looks in data, JSON decoded into t, for the object that holds
// a field name its Go type does not have, and returns that type and
// whether the object has none of the type's fields.
func findUnknown(t reflect.Type, data []byte, name string) (owner reflect.Type, foreign, found bool) {
	t = elem(t, false)
	if decodesItself(t) {
		return nil, false, false
	}
	switch t.Kind() {
	case reflect.Struct:
		return findInStruct(t, data, name)
	case reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return nil, false, false
		}
		for _, k := range sortedKeys(obj) {
			if owner, foreign, found = findUnknown(t.Elem(), obj[k], name); found {
				return owner, foreign, true
			}
		}
	case reflect.Slice, reflect.Array:
		var list []json.RawMessage
		if json.Unmarshal(data, &list) != nil {
			return nil, false, false
		}
		for _, v := range list {
			if owner, foreign, found = findUnknown(t.Elem(), v, name); found {
				return owner, foreign, true
			}
		}
	}
	return nil, false, false
}

// findInStruct is findUnknown for a struct type t.
func findInStruct(t reflect.Type, data []byte, name string) (owner reflect.Type, foreign, found bool) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return nil, false, false
	}
	fields := jsonFields(t)
	shared, here := 0, false
	for k := range obj {
		if _, ok := fields.lookup(k); ok {
			shared++
		} else if k == name {
			here = true
		}
	}
	if here {
		return t, shared == 0, true
	}
	for _, k := range sortedKeys(obj) {
		if f, ok := fields.lookup(k); ok {
			if owner, foreign, found = findUnknown(f, obj[k], name); found {
				return owner, foreign, true
			}
		}
	}
	return nil, false, false
}

func sortedKeys(obj map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// fieldSet is a struct type's fields as encoding/json names them.
type fieldSet map[string]reflect.Type

// lookup finds a JSON object key's field as encoding/json does: the exact
// name, else one that differs only in case.
func (s fieldSet) lookup(key string) (reflect.Type, bool) {
	if t, ok := s[key]; ok {
		return t, true
	}
	for name, t := range s {
		if strings.EqualFold(name, key) {
			return t, true
		}
	}
	return nil, false
}

// jsonFields returns struct type t's fields under their JSON names: the
// tag's name or the Go name, fields tagged "-" and unexported ones left
// out, an untagged embedded struct's fields promoted. (Conflicts between
// promoted fields, which encoding/json resolves by depth, only make a
// field be found under the name it would not get; the error path only.)
func jsonFields(t reflect.Type) fieldSet {
	s := fieldSet{}
	addFields(s, t, 0)
	return s
}

func addFields(s fieldSet, t reflect.Type, depth int) {
	if depth > 8 {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			if ft := elem(f.Type, false); ft.Kind() == reflect.Struct {
				addFields(s, ft, depth+1)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, taken := s[name]; !taken {
			s[name] = f.Type
		}
	}
}

// quoteName quotes a field name, which the decoder already cut short.
func quoteName(name string) string {
	b, _ := json.Marshal(name)
	return string(b)
}
