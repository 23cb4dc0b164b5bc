package jsonvalue_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

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
