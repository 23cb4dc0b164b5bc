package jsonvalue_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/internal/jsonvalue"
)

func TestSameText(t *testing.T) {
	same := [][2]string{
		{`{"a":1,"b":2}`, `{ "b": 2, "a": 1 }`},
		{`100`, `1e2`},
		{`"\u0041"`, `"A"`},
		{`[1.50,{"x":null}]`, `[1.5,{"x":null}]`},
	}
	for _, c := range same {
		assert.True(t, jsonvalue.SameText([]byte(c[0]), []byte(c[1])), "%s %s", c[0], c[1])
	}
	differ := [][2]string{
		{`1`, `"1"`},
		{`9007199254740993`, `9007199254740992`},
		{`{"a":1}`, `{"a":1,"b":null}`},
		{`[1,2]`, `[2,1]`},
		{`{"a":`, `{"a":`},
	}
	for _, c := range differ {
		assert.False(t, jsonvalue.SameText([]byte(c[0]), []byte(c[1])), "%s %s", c[0], c[1])
	}
}

// Numbers compare exactly, however they are spelt, and exponents of any
// length are added to exactly.
func TestNumbers(t *testing.T) {
	same := [][2]string{
		{`100`, `1E+2`}, {`100`, `100.000`}, {`100`, `0.1e3`}, {`100`, `1000e-1`},
		{`0`, `-0`}, {`0`, `0.000e-5`}, {`0`, `0e99999999999999999999999999`},
		{`-1.5`, `-15e-1`}, {`1e-999999`, `10e-1000000`}, {`0.001`, `1e-3`},
		{`1e123456789012345678901234567890`, `10e123456789012345678901234567889`},
		{`1e-123456789012345678901234567890`, `0.1e-123456789012345678901234567889`},
		{`1e1000000000000000000`, `100e999999999999999998`},
		{`1e-1000000000000000000`, `0.01e-999999999999999998`},
	}
	for _, c := range same {
		assert.True(t, jsonvalue.SameText([]byte(c[0]), []byte(c[1])), "%s %s", c[0], c[1])
	}
	differ := [][2]string{
		{`1e-999999`, `1e-999998`}, {`1`, `-1`}, {`1.5`, `15`},
		{`1e123456789012345678901234567890`, `1e123456789012345678901234567891`},
		{`1e1000000000000000000`, `1e999999999999999999`},
		{`1e-1000000000000000000`, `1e-999999999999999999`},
		{`9007199254740993`, `9007199254740992`},
	}
	for _, c := range differ {
		assert.False(t, jsonvalue.SameText([]byte(c[0]), []byte(c[1])), "%s %s", c[0], c[1])
	}
}

// The canonical form agrees with big.Rat (the exact rationals the numbers
// spell) on numbers big.Rat can expand.
func TestNumbersAgreeWithRat(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	spell := func() string {
		s := ""
		if r.IntN(2) == 0 {
			s = "-"
		}
		s += strconv.Itoa(r.IntN(3) * int(math.Pow10(r.IntN(3))))
		if r.IntN(2) == 0 {
			s += "." + strings.Repeat("0", r.IntN(2)) + strconv.Itoa(r.IntN(30))
		}
		if r.IntN(2) == 0 {
			s += "e" + strconv.Itoa(r.IntN(9)-4)
		}
		return s
	}
	for range 20000 {
		a, b := spell(), spell()
		ra, _ := new(big.Rat).SetString(a)
		rb, _ := new(big.Rat).SetString(b)
		require.Equal(t, ra.Cmp(rb) == 0, jsonvalue.SameText([]byte(a), []byte(b)), "%s %s", a, b)
	}
}

// Comparing 1e-999999 (9 bytes) with another number takes memory of the
// order of their length. Before, each was expanded through big.Rat to a
// string of a million digits.
func TestNumbersAreNotExpanded(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	same := jsonvalue.SameText([]byte(`[1e-999999]`), []byte(`[1e-999998]`))
	runtime.ReadMemStats(&after)
	assert.False(t, same)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(256<<10), "bytes allocated to compare two 9-byte numbers")
}

// An object with a field twice is refused: it names no one value.
func TestDuplicateFields(t *testing.T) {
	for _, s := range []string{`{"a":1,"a":2}`, `{"a":1,"\u0061":1}`, `[{"x":{"b":1,"b":1}}]`} {
		_, err := jsonvalue.Decode([]byte(s))
		var de *jsonvalue.DuplicateFieldError
		require.ErrorAs(t, err, &de, s)
		assert.Contains(t, []string{"a", "b"}, de.Field)
		assert.False(t, jsonvalue.SameText([]byte(s), []byte(s)), s)
	}
	assert.True(t, jsonvalue.SameText([]byte(`{"a":{"b":1},"b":{"a":1}}`), []byte(`{"b":{"a":1},"a":{"b":1}}`)))
}
