package main_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type diffOut struct {
	A, B      string
	OnlyInA   []diffItem
	OnlyInB   []diffItem
	Different []diffItem
}

type diffItem struct {
	Key    key
	Value  *value
	ValueA *value `json:"a"`
	ValueB *value `json:"b"`
}

func TestDiff(t *testing.T) {
	a := entries(4) // c0..c3
	delete(a, k(0))
	a[k(2)] = value{IP: "10.0.0.200", Token: v(2).Token}
	a[k(7)] = v(7)
	path := save(t, t.TempDir(), entries(4), a)
	prev := path + ".prev"

	r := run(t, "diff", "--json", path, prev)
	require.Equal(t, 1, r.code, r.stderr)
	var out diffOut
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, path, out.A)
	assert.Equal(t, prev, out.B)
	require.Len(t, out.OnlyInA, 1)
	assert.Equal(t, k(7), out.OnlyInA[0].Key)
	assert.Nil(t, out.OnlyInA[0].Value, "values only with --values")
	require.Len(t, out.OnlyInB, 1)
	assert.Equal(t, k(0), out.OnlyInB[0].Key)
	require.Len(t, out.Different, 1)
	assert.Equal(t, k(2), out.Different[0].Key)
	assert.Nil(t, out.Different[0].ValueA)

	r = run(t, "diff", "--json", "--values", path, prev)
	require.Equal(t, 1, r.code)
	out = diffOut{}
	decodeJSON(t, r.stdout, &out)
	require.NotNil(t, out.OnlyInA[0].Value)
	assert.Equal(t, v(7), *out.OnlyInA[0].Value)
	assert.Equal(t, v(0), *out.OnlyInB[0].Value)
	assert.Equal(t, a[k(2)], *out.Different[0].ValueA)
	assert.Equal(t, v(2), *out.Different[0].ValueB)

	r = run(t, "diff", path, prev)
	require.Equal(t, 1, r.code)
	assert.Contains(t, r.stdout, "only in A: 1\n  {\"network\":\"aws-cni\",\"containerID\":\"c7\",\"ifName\":\"eth0\"}\n")
	assert.Contains(t, r.stdout, "only in B: 1\n")
	assert.Contains(t, r.stdout, "different: 1\n")
	assert.NotContains(t, r.stdout, secret, "values only with --values")
	assert.Contains(t, r.stdout, "seq 2, schema 2, phase migrate")

	r = run(t, "diff", path, path)
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "the entries are the same")
}

// A file that is not intact stops diff with its verdict, and names it;
// --ignore-checksum compares a hand-edited one.
func TestDiffNotIntact(t *testing.T) {
	path := save(t, t.TempDir(), entries(2), entries(2))
	edit(t, path, `"ip":"10.0.0.1"`, `"ip":"10.0.0.66"`)

	r := run(t, "diff", path+".prev", path)
	assert.Equal(t, 4, r.code)
	assert.Contains(t, r.stderr, path+": checkpoint is corrupt")

	r = run(t, "diff", "--ignore-checksum", "--json", path, path+".prev")
	require.Equal(t, 1, r.code, r.stderr)
	var out diffOut
	decodeJSON(t, r.stdout, &out)
	require.Len(t, out.Different, 1)
	assert.Equal(t, k(1), out.Different[0].Key)

	r = run(t, "diff", path, path+".missing")
	assert.Equal(t, 4, r.code, "A is checked first")
	r = run(t, "diff", path+".prev", path+".missing")
	assert.Equal(t, 3, r.code)
}
