package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seal appends a valid checksum trailer to body, so that fuzzing reaches the
// layout and entry decoding behind the checksum.
func seal(body []byte) []byte {
	sum := crc32.Checksum(body, castagnoli)
	return append(append([]byte(nil), body...), fmt.Sprintf("%s%08x%s", checksumStart, sum, checksumEnd)...)
}

type fkey struct {
	A string `json:"a"`
	B int    `json:"b"`
}

// FuzzDecodeSealed fuzzes what lies behind the checksum: any body, sealed
// with a correct checksum, must decode or fail with a sentinel, never panic;
// and every entry it accepts must re-encode to a file that decodes to the
// same entries.
func FuzzDecodeSealed(f *testing.F) {
	keys := newKeyRule[fkey]()
	line, _ := encodeEntry(newEncoder(), &keys, nil, fkey{A: "x", B: 1}, map[string]int{"n": 1}, -1)
	good := appendFile(nil, Meta{Format: 1, Schema: 1, Phase: "expand", Seq: 3}, [][]byte{line, line[:len(line):len(line)]})
	f.Add(good[:len(good)-trailerLen])
	f.Add(appendFile(nil, Meta{Format: 1, Schema: 1}, nil)[:len(good)-trailerLen-len(line)*2-10])
	f.Add([]byte("{\n  \"format\": 1,\n  \"schema\": 1,\n  \"seq\": 0,\n  \"entries\": [\n    {\"key\":{},\"value\":null}\n  ],\n"))
	f.Add([]byte("{\n  \"format\": 2,\n  \"schema\": 1,\n  \"seq\": 0,\n  \"entries\": [\n  ],\n"))
	f.Add([]byte("{\n  \"format\": 1,\n  \"schema\": 9,\n  \"seq\": 0,\n  \"entries\": [\n  ],\n"))
	// A field the key type lacks, a field the value type (a map) takes, a
	// key with escapes, a bad time in the header.
	f.Add([]byte("{\n  \"format\": 1,\n  \"schema\": 1,\n  \"seq\": 0,\n  \"entries\": [\n    {\"key\":{\"a\":\"x\",\"c\":1},\"value\":{\"n\":1}},\n    {\"key\":{\"a\":\"\\ufffd\\\\\",\"b\":2},\"value\":{\"z\":1}}\n  ],\n"))
	f.Add([]byte("{\n  \"format\": 1,\n  \"schema\": 1,\n  \"seq\": 0,\n  \"savedAt\": \"now\",\n  \"entries\": [\n  ],\n"))

	cfg := defaultConfig()
	f.Fuzz(func(t *testing.T, body []byte) {
		res, err := decode[fkey, map[string]int](seal(body), &cfg, newEncoder())
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNewerSchema) && !errors.Is(err, ErrOlderSchema) {
				t.Fatalf("error matches no sentinel: %v", err)
			}
			return
		}
		if len(res.ents.index) != len(res.snap.Entries) {
			t.Fatalf("indexed %d lines for %d entries", len(res.ents.index), len(res.snap.Entries))
		}
		again, err := decode[fkey, map[string]int](appendFile(nil, res.snap.Meta, res.ents.lines), &cfg, newEncoder())
		if err != nil || len(again.bad) > 0 {
			t.Fatalf("re-encoded file does not decode: %v %v", err, again.bad)
		}
		if len(again.snap.Entries) != len(res.snap.Entries) {
			t.Fatalf("round trip changed the entry count")
		}
	})
}

// TestEntriesUndo applies random changes and undoes them: the entries must
// come back exactly; compaction keeps them too. A hash with many
// collisions (k mod 8) exercises the exact index as well as the hashed one.
func TestEntriesUndo(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	line := func(k int, v string) []byte { return []byte(fmt.Sprintf(`{"key":%d,"value":%q}`, k, v)) }
	for _, colliding := range []bool{false, true} {
		for round := 0; round < 300; round++ {
			e := newEntries[int](0)
			if colliding {
				e.hash = func(k int) uint64 { return uint64(k % 8) }
			}
			for i := 0; i < rng.Intn(200); i++ {
				e.put(i, line(i, "v"), nil)
			}
			for i := 0; i < rng.Intn(150); i++ {
				e.del(rng.Intn(200), nil)
			}
			checkIndex(t, e, 220)
			before := snapshotEntries(e, 220)
			var log []undoStep[int]
			for n := rng.Intn(30); n > 0; n-- {
				k := rng.Intn(220)
				if rng.Intn(2) == 0 {
					log = e.del(k, log)
				} else {
					log = e.put(k, line(k, fmt.Sprint("w", n)), log)
				}
				checkIndex(t, e, 220)
			}
			e.undo(log)
			checkIndex(t, e, 220)
			require.Equal(t, before, snapshotEntries(e, 220), "round %d: undo", round)
			if rng.Intn(2) == 0 {
				e.compact()
				checkIndex(t, e, 220)
				require.Equal(t, before, snapshotEntries(e, 220), "round %d: compact", round)
			}
		}
	}
}

// snapshotEntries returns what e holds for keys 0..n-1, found through the
// index as Commit finds them.
func snapshotEntries(e entries[int], n int) map[int]string {
	m := map[int]string{}
	for k := 0; k < n; k++ {
		if i, _, ok := e.find(k, nil); ok {
			m[k] = string(e.lines[i])
		}
	}
	return m
}

func checkIndex(t *testing.T, e entries[int], n int) {
	t.Helper()
	nonNil := 0
	for _, l := range e.lines {
		if l != nil {
			nonNil++
		}
	}
	require.Equal(t, len(e.index)+len(e.exact), nonNil, "every live line is indexed once")
	require.Equal(t, len(e.lines)-nonNil, e.dead, "dead counts the tombstones")
	found := 0
	for k := 0; k < n; k++ {
		if i, _, ok := e.find(k, nil); ok {
			found++
			lk, ok := e.key(e.lines[i])
			require.True(t, ok)
			require.Equal(t, k, lk, "find(%d) leads to its own line", k)
		}
	}
	require.Equal(t, nonNil, found)
}

func TestParseRejectsLayoutErrors(t *testing.T) {
	keys := newKeyRule[string]()
	line, err := encodeEntry(newEncoder(), &keys, nil, "k", 1, -1)
	require.NoError(t, err)
	good := string(appendFile(nil, Meta{Format: 1, Schema: 1, Seq: 1}, [][]byte{line, line}))
	body := good[:len(good)-trailerLen]
	for _, tc := range []struct{ name, from, to, want string }{
		{"missing comma between entries", `1},` + "\n", "1}\n", "not followed by a comma"},
		{"not indented", "    {", "   {", "not indented"},
		{"unknown header field", `"writer"`, `"author"`, "header is not valid"},
		{"no seq", `"seq": 1`, `"sequence": 1`, "header is not valid"},
		{"format zero", `"format": 1`, `"format": 0`, "format 0"},
		{"not an entry object", `{"key":"k","value":1}` + "\n", `["k",1]` + "\n", "not a {"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Contains(t, body, tc.from)
			i := strings.LastIndex(body, tc.from)
			_, err := parse(seal([]byte(body[:i] + tc.to + body[i+len(tc.from):])))
			require.ErrorIs(t, err, ErrCorrupt)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestDecodeRangeStaysInStep: a line with a wrong type, a line with two
// values, a line that is not JSON, a line with an unknown field and a line
// whose decoder fails (a time that does not parse) each fail alone; the
// lines around them decode.
func TestDecodeRangeStaysInStep(t *testing.T) {
	type val struct {
		N  int       `json:"n"`
		At time.Time `json:"at"`
	}
	lines := [][]byte{
		[]byte(`{"key":"a","value":{"n":1}}`),
		[]byte(`{"key":"b","value":{"n":"two"}}`),
		[]byte(`{"key":"c","value":{"n":3}}`),
		[]byte(`{"key":"d","value":{"n":4}} {"key":"x","value":{"n":9}}`),
		[]byte(`{"key":"e","value":{"n":5}}`),
		[]byte(`{"key":"f","value":`),
		[]byte(`{"key":"g","value":{"n":7}}`),
		[]byte(`{"key":"h","value":{"n":8,"m":1}}`),
		[]byte(`{"key":"i","value":{"n":9}}`),
		[]byte(`{"key":"j","value":{"at":"never"}}`),
		[]byte(`{"key":"k","value":{"n":11}}`),
	}
	cfg := defaultConfig()
	r := decodeResult[string, val]{snap: Snapshot[string, val]{Entries: map[string]val{}}, ents: newEntries[string](len(lines))}
	r.ents.lines = r.ents.lines[:len(lines)]
	sh := &shared[string, val]{r: &r}
	keys := newKeyRule[string]()
	w := &worker[string, val]{cfg: &cfg, keys: &keys, sh: sh, batch: make([]decoded[string, val], 0, insertBatch)}
	w.decodeRange(lines, 0, len(lines))
	w.done()
	got := map[string]int{}
	for k, v := range r.snap.Entries {
		got[k] = v.N
	}
	assert.Equal(t, map[string]int{"a": 1, "c": 3, "e": 5, "g": 7, "i": 9, "k": 11}, got)
	var idx []int
	for _, b := range r.bad {
		idx = append(idx, b.Index)
	}
	assert.Equal(t, []int{1, 3, 5, 9}, idx)
	require.Len(t, sh.unknown, 1)
	assert.Equal(t, 7, sh.unknown[0].Index)
	assert.Contains(t, sh.unknown[0].Error(), `field "m"`)
}

// TestSameKey: a put finds the line of its key by comparing the key's
// bytes when they are the same, and only then; a ,"value": inside the key
// (in a string, or as a field of a struct key) is not taken for the key's
// end, and a key spelled otherwise (by another encoder) is left to the
// decode.
func TestSameKey(t *testing.T) {
	line := func(key, value string) []byte { return []byte(entryPrefix + key + entryMiddle + value + "}") }
	for _, tc := range []struct {
		name string
		a, b []byte
		want bool
		end  int // keyJSONEnd(b) - len(entryPrefix); -1: not a line
	}{
		{"same string key", line(`"a"`, `1`), line(`"a"`, `2`), true, 3},
		{"another key", line(`"a"`, `1`), line(`"b"`, `1`), false, 3},
		{"a key that is a prefix of the other", line(`"ab"`, `1`), line(`"a"`, `1`), false, 3},
		{"value separator in a string", line(`"x,\"value\":y"`, `1`), line(`"x,\"value\":y"`, `2`), true, 15},
		{"struct key with a field named value", line(`{"a":1,"value":2}`, `1`), line(`{"a":1,"value":2}`, `3`), true, 17},
		{"nested", line(`{"a":[1,{"b":"]}"}],"c":"\\\""}`, `1`), line(`{"a":[1,{"b":"]}"}],"c":"\\\""}`, `1`), true, 31},
		{"the same key spelled otherwise", line(`"a"`, `1`), line(`"\u0061"`, `1`), false, 8},
		{"not a line", line(`"a"`, `1`), []byte(`{"k":"a"}`), false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, sameKey(tc.a, tc.b))
			want := 0
			if tc.end >= 0 {
				want = len(entryPrefix) + tc.end
			}
			assert.Equal(t, want, keyJSONEnd(tc.b))
		})
	}
}

// TestStreamFileIsAppendFile: a compaction streams the file in pieces
// (streamFile); the bytes, and the ends an append checks, are those of the
// file a save writes whole (appendFile), whatever the piece size, with
// deleted lines and without entries.
func TestStreamFileIsAppendFile(t *testing.T) {
	m := Meta{Format: 2, Schema: 3, Phase: "contract", Writer: "w", Behind: "phase 0", Seq: 9, SavedAt: time.Date(2026, 11, 30, 8, 0, 0, 1, time.UTC)}
	var lines [][]byte
	for i := range 300 {
		if i%7 == 3 {
			lines = append(lines, nil)
			continue
		}
		lines = append(lines, []byte(fmt.Sprintf(`{"key":"k%d","value":"%s"}`, i, strings.Repeat("v", i))))
	}
	for _, tc := range []struct {
		name  string
		lines [][]byte
	}{{"entries", lines}, {"none", nil}, {"all deleted", [][]byte{nil, nil}}, {"deleted first", append([][]byte{nil}, lines[:5]...)}} {
		want := appendFile(nil, m, tc.lines)
		for _, chunk := range []int{1, 100, 4096, 1 << 20} {
			var got []byte
			pieces := 0
			ends, err := streamFile(m, tc.lines, chunk, func(p []byte) error {
				got = append(got, p...)
				pieces++
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), "%s, pieces of %d", tc.name, chunk)
			assert.Equal(t, endsOf(want), ends, "%s, pieces of %d", tc.name, chunk)
			if chunk == 100 && tc.name == "entries" {
				assert.Greater(t, pieces, 100, "written in pieces")
			}
		}
	}
	_, err := streamFile(m, lines, 100, func([]byte) error { return errors.New("disk full") })
	require.EqualError(t, err, "disk full")
}

// TestAppendStringIsJSONMarshal: the header's strings are written as
// json.Marshal writes them, escapes and all.
func TestAppendStringIsJSONMarshal(t *testing.T) {
	for _, s := range []string{"", "contract", "ipamd v1.7.0", "a\"b", `back\slash`, "<tag>&", "tab\there", "new\nline", "é", "\u2028", "\x7f", "\xff", "~ ok !#$%'()*+,-./09:;=?@AZ[]^_`az{|}"} {
		want, err := json.Marshal(s)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(appendString([]byte("x"), s))[1:], "%q", s)
	}
}
