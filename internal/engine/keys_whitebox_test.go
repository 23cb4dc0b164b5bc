package engine

import (
	"encoding/json"
	"testing"
)

// plainKey is a plain key type of every kind the fast path of the key
// check covers.
type plainKey struct {
	A string    `json:"a"`
	B [2]string `json:"b,omitempty"`
	N int64     `json:"n"`
	X float64   `json:"x"`
	F bool      `json:"f"`
	U uint8
}

// FuzzKeyCheck holds the key check to the truth: a key is accepted exactly
// when its JSON decodes to a key == to itself. For plain types the check
// only scans the JSON for the \ufffd escape; a miss there would let a key
// that does not read back into the file.
func FuzzKeyCheck(f *testing.F) {
	for _, s := range []string{"", "a", "\xff", "\ufffd", `\ufffd`, "\\\xff", `\\ufffd`, "a\u2028b", "\xed\xa0\x80", "\x00\x1f", "<&>", "🙂\xf0\x9f"} {
		f.Add(s, s+"x", int64(-1), 0.5, true)
	}
	strRule, keyRule := newKeyRule[string](), newKeyRule[plainKey]()
	if !strRule.plain || !keyRule.plain {
		f.Fatal("string and plainKey must take the fast path")
	}
	type named string
	namedRule := newKeyRule[named]()
	anyRule := newKeyRule[any]()
	enc := newEncoder()
	f.Fuzz(func(t *testing.T, a, b string, n int64, x float64, flag bool) {
		agree(t, &strRule, enc, a)
		agree(t, &namedRule, enc, named(b))
		agree(t, &keyRule, enc, plainKey{A: a, B: [2]string{b, a}, N: n, X: x, F: flag, U: uint8(n)})
		agree[any](t, &anyRule, enc, a)
		agree[any](t, &anyRule, enc, x)
		agree[any](t, &anyRule, enc, n)
	})
}

// agree fails t if the check accepts k and k does not read back, or
// refuses it and it does.
func agree[K comparable](t *testing.T, r *keyRule[K], enc *encoder, k K) {
	t.Helper()
	js, err := enc.appendJSON(nil, k)
	if err != nil {
		return // NaN and ±Inf do not encode at all
	}
	why, _ := r.check(k, js)
	var back K
	readsBack := json.Unmarshal(js, &back) == nil && back == k
	if (why == "") != readsBack {
		t.Fatalf("key %#v (JSON %s): check says %q, reads back: %v", k, js, why, readsBack)
	}
}
