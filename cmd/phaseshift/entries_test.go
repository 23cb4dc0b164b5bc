package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// lines decodes list's output, one typed entry per line.
func lines(t *testing.T, out string) map[key]value {
	t.Helper()
	got := map[key]value{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var e struct {
			Key   key
			Value value
		}
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&e), "line %q", sc.Text())
		_, dup := got[e.Key]
		require.False(t, dup, "key listed twice")
		got[e.Key] = e.Value
	}
	return got
}

func TestListPrintsEveryEntryAsJSONLines(t *testing.T) {
	path := save(t, t.TempDir(), entries(50))
	r := run(t, "list", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, entries(50), lines(t, r.stdout))
	assert.Empty(t, r.stderr)

	// --json changes nothing: the lines are JSON already.
	r2 := run(t, "list", "--json", path)
	assert.Equal(t, r.stdout, r2.stdout)

	// The file's order, as jq would show it.
	var file struct{ Entries []json.RawMessage }
	require.NoError(t, json.Unmarshal(readBytes(t, path), &file))
	got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, got, len(file.Entries))
	for i, raw := range file.Entries {
		assert.Equal(t, string(raw), got[i])
	}
}

func TestListEmptyAndNotIntact(t *testing.T) {
	path := save(t, t.TempDir(), entries(0))
	r := run(t, "list", path)
	assert.Equal(t, 0, r.code)
	assert.Empty(t, r.stdout)

	edit(t, path, `"seq": 1`, `"seq": 7`)
	r = run(t, "list", path)
	assert.Equal(t, 4, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "checksum mismatch")

	r = run(t, "list", filepath.Join(t.TempDir(), "none.json"))
	assert.Equal(t, 3, r.code)
}

// A hand-edited file: list refuses it, and --ignore-checksum shows the
// edit, which the daemon would see after a reseal.
func TestListIgnoreChecksum(t *testing.T) {
	path := save(t, t.TempDir(), entries(3))
	edit(t, path, `"ip":"10.0.0.1"`, `"ip":"10.0.0.99"`)

	r := run(t, "list", "--ignore-checksum", path)
	require.Equal(t, 0, r.code, r.stderr)
	want := entries(3)
	want[k(1)] = value{IP: "10.0.0.99", Token: v(1).Token}
	assert.Equal(t, want, lines(t, r.stdout))
}

// Entries that cannot be read (a key twice, in a file whose checksum
// holds) are left out; the others are printed, and the exit says corrupt.
func TestListBadEntries(t *testing.T) {
	path := save(t, t.TempDir(), entries(3))
	editSealed(t, path, `"containerID":"c1"`, `"containerID":"c2"`)
	r := run(t, "list", path)
	assert.Equal(t, 4, r.code)
	assert.Contains(t, r.stderr, "printed the 2 readable entries")
	assert.Contains(t, r.stderr, "twice")
	assert.Len(t, lines(t, r.stdout), 2)
}

func TestGet(t *testing.T) {
	path := save(t, t.TempDir(), entries(5))
	r := run(t, "get", path, `{"network":"aws-cni","containerID":"c3","ifName":"eth0"}`)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, map[key]value{k(3): v(3)}, lines(t, r.stdout))

	// Spacing and field order do not matter.
	r = run(t, "get", path, `{ "ifName": "eth0", "containerID": "c3", "network": "aws-cni" }`)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, map[key]value{k(3): v(3)}, lines(t, r.stdout))

	// Flags may follow the arguments.
	r = run(t, "get", path, `{"network":"aws-cni","containerID":"c3","ifName":"eth0"}`, "--ignore-checksum")
	assert.Equal(t, 0, r.code, r.stderr)

	r = run(t, "get", path, `{"network":"aws-cni","containerID":"c9","ifName":"eth0"}`)
	assert.Equal(t, 1, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, `no entry with key {"network":"aws-cni","containerID":"c9","ifName":"eth0"}`)
	assert.Contains(t, r.stderr, "phaseshift list")

	r = run(t, "get", path, `{"network":"aws-cni",`)
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "not valid JSON")
	assert.NotContains(t, r.stderr, `"aws-cni"`, "the bad key is not echoed")

	r = run(t, "get", path, `c3`)
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, `'"c1"' for a string key`)
}

// Keys of other types: strings and numbers, a negative one after "--",
// and the number 1 is not the string "1".
func TestGetScalarKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ints.json")
	f, err := checkpoint.Open[int, string](context.Background(), path)
	require.NoError(t, err)
	require.NoError(t, f.Save(context.Background(), checkpoint.Snapshot[int, string]{Entries: map[int]string{-1: "minus", 1: "one", 100: "hundred"}}))
	require.NoError(t, f.Close())

	r := run(t, "get", path, "--", "-1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, `{"key":-1,"value":"minus"}`+"\n", r.stdout)

	r = run(t, "get", path, "-1")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, `goes after "--"`)

	r = run(t, "get", path, "1e2")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, `{"key":100,"value":"hundred"}`+"\n", r.stdout)

	r = run(t, "get", path, `"1"`)
	assert.Equal(t, 1, r.code)

	spath := filepath.Join(t.TempDir(), "strings.json")
	s, err := checkpoint.Open[string, int](context.Background(), spath)
	require.NoError(t, err)
	require.NoError(t, s.Save(context.Background(), checkpoint.Snapshot[string, int]{Entries: map[string]int{"<vm&1>": 1, "1": 2}}))
	require.NoError(t, s.Close())
	r = run(t, "get", spath, `"\u003cvm\u00261\u003e"`)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, `{"key":"<vm&1>","value":1}`+"\n", r.stdout)
}
