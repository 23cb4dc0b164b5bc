package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// What inspect and verify say of a damaged file is what they read of it:
// the header's seq, the entries up to the damage (a lower bound, said so)
// and the journal's records before the damage; never "0 entries" for a
// file that holds some (issue 42, item 1).

// damagedOut is what inspect and verify --json say of a damaged file.
type damagedOut struct {
	Verdict        string
	Entries        *int
	EntriesAtLeast bool
	Header         *struct{ Seq uint64 }
	Damage         *struct {
		Where  string
		Offset int64
	}
}

// damagedFiles are damaged files, each made by the library and then
// damaged as a disk or a hand would, with what can be read of them.
var damagedFiles = []struct {
	name    string
	make    func(t *testing.T, dir string) string
	entries int    // read up to the damage
	seq     uint64 // the header's
	text    string // inspect's entries line
}{
	{"checksum mismatch", func(t *testing.T, dir string) string {
		path := save(t, dir, entries(2), entries(3))
		edit(t, path, `"ip":"10.0.0.1"`, `"ip":"10.0.0.5"`)
		return path
	}, 3, 2, "entries:   at least 3, up to the damage (every entry line reads; the damage is in a value, the header or the checksum)"},
	{"truncated in its third entry", func(t *testing.T, dir string) string {
		path := save(t, dir, entries(2), entries(3))
		data := readBytes(t, path)
		at := bytes.Index(data, []byte("\"entries\": [\n"))
		require.Positive(t, at)
		for range 3 { // to the third entry's line
			at += bytes.IndexByte(data[at:], '\n') + 1
		}
		require.NoError(t, os.WriteFile(path, data[:at+20], 0o600)) // cut in it
		return path
	}, 2, 2, "entries:   at least 2, up to the damage (entry 3, at byte "},
	{"journal damaged after 6 commits", func(t *testing.T, dir string) string {
		path, _, recs := commits(t, dir, 6) // the file: 3 entries; each commit adds one
		damage(t, path, recs, 3)
		return path
	}, 6, 4, "entries:   at least 6, up to the damage (the file's and the journal's 3 records before it)"},
}

func TestInspectAndVerifyCountWhatTheyRead(t *testing.T) {
	for _, tc := range damagedFiles {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.make(t, t.TempDir())
			for _, verb := range []string{"inspect", "verify"} {
				r := run(t, verb, "--json", path)
				assert.Equal(t, 4, r.code, r.stderr)
				var out damagedOut
				decodeJSON(t, r.stdout, &out)
				assert.Equal(t, "corrupt", out.Verdict)
				require.NotNil(t, out.Entries, verb)
				assert.Equal(t, tc.entries, *out.Entries, "%s counts the entries it read", verb)
				assert.True(t, out.EntriesAtLeast, "%s says the count is a lower bound", verb)
				require.NotNil(t, out.Header, verb)
				assert.Equal(t, tc.seq, out.Header.Seq, verb)
			}
			r := run(t, "inspect", path)
			assert.Equal(t, 4, r.code)
			assert.Contains(t, r.stdout, tc.text)
			assert.NotContains(t, r.stdout, "entries:   0")
			assert.Contains(t, r.stdout, fmt.Sprintf("seq:       %d\n", tc.seq))
			r = run(t, "verify", path)
			assert.Equal(t, 4, r.code)
			assert.Contains(t, r.stdout, fmt.Sprintf("%s: corrupt (seq %d; at least %d entries read up to the damage)", path, tc.seq, tc.entries))
		})
	}
}

// A file whose header does not read has no count to give: inspect says
// so, and --json gives null, not 0.
func TestInspectOfAFileWithoutAHeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	require.NoError(t, os.WriteFile(path, []byte("not a checkpoint\n"), 0o600))
	r := run(t, "inspect", "--json", path)
	assert.Equal(t, 4, r.code)
	var out damagedOut
	decodeJSON(t, r.stdout, &out)
	assert.Nil(t, out.Entries)
	r = run(t, "inspect", path)
	assert.Contains(t, r.stdout, "entries:   not read (the header does not read)")
}

// restore-prev and restore-kept say what the replacement lacks against the
// file it replaces, in entries and seqs, and refuse (exit 9, nothing
// changed) to put back one that lacks entries the file holds, as far as it
// reads, unless --accept-loss says so.
func TestRestoreRefusesToLoseEntries(t *testing.T) {
	t.Run("restore-prev over a corrupt file holding 3 entries", func(t *testing.T) {
		path := save(t, t.TempDir(), entries(2), entries(3))
		edit(t, path, `"ip":"10.0.0.2"`, `"ip":"10.0.0.6"`) // in the entry .prev lacks
		before := readBytes(t, path)
		r := run(t, "restore-prev", path)
		assert.Equal(t, 9, r.code, r.stderr)
		assert.Contains(t, r.stderr, path+".prev (seq 1, 2 entries) lacks against "+path+" (seq 2, at least 3 entries read): 1 entry only in "+path+", 0 with other values, and seq 2")
		assert.Contains(t, r.stderr, "--accept-loss")
		assert.NotContains(t, r.stderr, "usage:")
		assert.Equal(t, before, readBytes(t, path), "nothing changed")
		assert.Empty(t, kept(t, path))

		r = run(t, "restore-prev", "--accept-loss", "--json", path)
		require.Equal(t, 0, r.code, r.stderr)
		var out struct {
			Lacks *struct {
				Entries, OnlyInReplaced, Different int
				FirstSeq, LastSeq                  uint64
			}
		}
		decodeJSON(t, r.stdout, &out)
		require.NotNil(t, out.Lacks)
		assert.Equal(t, 1, out.Lacks.OnlyInReplaced)
		assert.Equal(t, 1, out.Lacks.Entries)
		assert.Equal(t, [2]uint64{2, 2}, [2]uint64{out.Lacks.FirstSeq, out.Lacks.LastSeq})
		assert.Equal(t, entries(2), mustLoad(t, path).Entries)
	})
	t.Run("restore-prev over a journal damaged after 6 commits", func(t *testing.T) {
		// .prev holds no entry (the file before the one the journal
		// follows); the state up to the damage holds 6.
		ctx := context.Background()
		path := filepath.Join(t.TempDir(), "state.json")
		f, err := checkpoint.Open[key, value](ctx, path, append(checkpointtest.Schema(schema), checkpoint.WithJournal())...)
		require.NoError(t, err)
		require.NoError(t, f.Save(ctx, checkpoint.Snapshot[key, value]{Meta: checkpoint.Meta{Phase: "migrate"}, Entries: entries(0)}))
		require.NoError(t, f.Save(ctx, checkpoint.Snapshot[key, value]{Meta: checkpoint.Meta{Phase: "migrate"}, Entries: entries(3)}))
		for i := range 6 {
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{Phase: "migrate"}, []checkpoint.Change[key, value]{{Key: k(10 + i), Value: v(10 + i)}}))
		}
		require.NoError(t, f.Close())
		recs := bytes.SplitAfter(readBytes(t, path+".journal"), []byte("\n"))
		damage(t, path, recs[:6], 3)
		before := readBytes(t, path)

		r := run(t, "restore-prev", "--lock-wait", "1s", path)
		assert.Equal(t, 9, r.code, r.stderr)
		assert.Contains(t, r.stderr, path+".prev (seq 1, 0 entries) lacks against "+path+" (seq 8, at least 6 entries read): 6 entries only in "+path+", 0 with other values, and seqs 2-8")
		assert.Contains(t, r.stderr, "phaseshift repair-journal")
		assert.Equal(t, before, readBytes(t, path), "nothing changed")
	})
	t.Run("restore-kept of a copy with fewer entries", func(t *testing.T) {
		dir := t.TempDir()
		path := save(t, dir, entries(1))
		f, err := checkpoint.Open[key, value](context.Background(), path, checkpointtest.Schema(schema)...)
		require.NoError(t, err)
		moved, err := f.Quarantine(context.Background())
		require.NoError(t, err)
		require.NoError(t, f.Close())
		path = save(t, dir, entries(2), entries(3)) // seq 1 and 2
		before := readBytes(t, path)

		r := run(t, "restore-kept", "--replace-intact", path, filepath.Base(moved))
		assert.Equal(t, 9, r.code, r.stderr)
		assert.Contains(t, r.stderr, moved+" (seq 1, 1 entry) lacks against "+path+" (seq 2, 3 entries): 2 entries only in "+path+", 0 with other values, and seq 2")
		assert.Contains(t, r.stderr, "--accept-loss")
		assert.Equal(t, before, readBytes(t, path), "nothing changed")

		r = run(t, "restore-kept", "--replace-intact", "--accept-loss", path, filepath.Base(moved))
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "it lacks 2 entries of the file it replaced (2 only in it, 0 with other values) and seq 2")
		assert.Equal(t, entries(1), mustLoad(t, path).Entries)
	})
}
