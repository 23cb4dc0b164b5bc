package engine

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

type mmInner struct {
	Port int `json:"port"`
}

type mmBase struct {
	ID string `json:"id"`
}

type mmOuter struct {
	mmBase
	Name  string             `json:"name"`
	List  []*mmInner         `json:"list"`
	ByKey map[string]mmInner `json:"byKey"`
	Raw   json.RawMessage    `json:"raw"`
	Any   any                `json:"any"`
}

// TestMismatchNamesTheTypeThatLacksTheField decodes JSON into mmOuter as an
// entry's value is decoded and checks which field and Go type the mismatch
// names: through an embedded struct, pointers, slices and maps, and never
// inside a type that decodes itself or an interface.
func TestMismatchNamesTheTypeThatLacksTheField(t *testing.T) {
	for _, tc := range []struct {
		name, value, want string
	}{
		{"top level", `{"name":"a","zone":"z"}`, `field "zone" of type engine.mmOuter: this binary's type has no such field`},
		{"embedded field is known", `{"id":"x","name":"a","extra":1}`, `field "extra" of type engine.mmOuter: this binary's type has no such field`},
		{"in a slice of pointers", `{"name":"a","list":[{"port":1},{"port":2,"mtu":9}]}`, `field "mtu" of type engine.mmInner: this binary's type has no such field`},
		{"in a map", `{"byKey":{"a":{"port":1,"mtu":9}}}`, `field "mtu" of type engine.mmInner: this binary's type has no such field`},
		{"no shared field", `{"other":1}`, `field "other" of type engine.mmOuter: this binary's type has no such field, and the record has none of that type's fields`},
		{"a kind in a slice", `{"list":[{"port":"secret"}]}`, `field "port" of type engine.mmInner: cannot decode a JSON string into Go type int`},
		{"a kind in a map", `{"byKey":{"a":{"port":true}}}`, `field "port" of type engine.mmInner: cannot decode a JSON bool into Go type int`},
		{"the whole value", `"secret"`, `cannot decode a JSON string into Go type engine.mmOuter`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := []byte(`{"key":"k","value":` + tc.value + `}`)
			var e kv[string, mmOuter]
			err := strictUnmarshal(line, &e)
			if err == nil {
				t.Fatal("decoded")
			}
			derr := decodeError[string, mmOuter](line, err)
			if !strings.Contains(derr.Error(), tc.want) {
				t.Errorf("got %q, want it to contain %q", derr.Error(), tc.want)
			}
			if strings.Contains(derr.Error(), "secret") {
				t.Errorf("the error quotes the value: %q", derr.Error())
			}
		})
	}
	// JSON that decodes itself is never walked into.
	if _, _, found := findUnknown(reflect.TypeFor[json.RawMessage](), []byte(`{"a":1}`), "a"); found {
		t.Error("found a field inside json.RawMessage")
	}
}
