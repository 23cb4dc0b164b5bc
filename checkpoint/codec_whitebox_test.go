package checkpoint

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand"
	"strings"
	"testing"

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
	enc := newEncoder()
	line, _ := enc.appendEntry(nil, fkey{A: "x", B: 1}, map[string]int{"n": 1})
	good := appendFile(nil, Meta{Format: 1, Schema: 1, Phase: "expand", Seq: 3}, [][]byte{line, line[:len(line):len(line)]})
	f.Add(good[:len(good)-trailerLen])
	f.Add(appendFile(nil, Meta{Format: 1, Schema: 1}, nil)[:len(good)-trailerLen-len(line)*2-10])
	f.Add([]byte("{\n  \"format\": 1,\n  \"schema\": 1,\n  \"seq\": 0,\n  \"entries\": [\n    {\"key\":{},\"value\":null}\n  ],\n"))
	f.Add([]byte("{\n  \"format\": 2,\n  \"schema\": 1,\n  \"seq\": 0,\n  \"entries\": [\n  ],\n"))
	f.Add([]byte("{\n  \"format\": 1,\n  \"schema\": 9,\n  \"seq\": 0,\n  \"entries\": [\n  ],\n"))

	cfg := defaultConfig()
	f.Fuzz(func(t *testing.T, body []byte) {
		res, err := decode[fkey, map[string]int](seal(body), &cfg, newEncoder())
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNewerSchema) && !errors.Is(err, ErrOlderSchema) {
				t.Fatalf("error matches no sentinel: %v", err)
			}
			return
		}
		if len(res.ents.keys) != len(res.snap.Entries) {
			t.Fatalf("kept %d lines for %d entries", len(res.ents.keys), len(res.snap.Entries))
		}
		again, err := decode[fkey, map[string]int](appendFile(nil, res.snap.Meta, res.ents.raws), &cfg, newEncoder())
		if err != nil || len(again.bad) > 0 {
			t.Fatalf("re-encoded file does not decode: %v %v", err, again.bad)
		}
		if len(again.snap.Entries) != len(res.snap.Entries) {
			t.Fatalf("round trip changed the entry count")
		}
	})
}

// TestEntriesUndo applies random changes and undoes them: the entries must
// come back exactly, index included.
func TestEntriesUndo(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 500; round++ {
		e := newEntries[int](0)
		for i := 0; i < rng.Intn(20); i++ {
			e.add(i, []byte(fmt.Sprint("v", i)))
		}
		before := snapshotEntries(e)
		var log []undoStep[int]
		for n := rng.Intn(30); n > 0; n-- {
			k := rng.Intn(30)
			if rng.Intn(2) == 0 {
				log = e.del(k, log)
			} else {
				log = e.put(k, []byte(fmt.Sprint("w", k, "-", n)), log)
			}
			checkIndex(t, e)
		}
		e.undo(log)
		checkIndex(t, e)
		require.Equal(t, before, snapshotEntries(e), "round %d", round)
	}
}

func snapshotEntries(e entries[int]) map[int]string {
	m := make(map[int]string, len(e.keys))
	for i, k := range e.keys {
		m[k] = string(e.raws[i])
	}
	return m
}

func checkIndex(t *testing.T, e entries[int]) {
	t.Helper()
	require.Len(t, e.index, len(e.keys))
	require.Len(t, e.raws, len(e.keys))
	for i, k := range e.keys {
		require.Equal(t, i, e.index[k])
	}
}

func TestParseRejectsLayoutErrors(t *testing.T) {
	enc := newEncoder()
	line, err := enc.appendEntry(nil, "k", 1)
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
