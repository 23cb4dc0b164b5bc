package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// The command reads a journaled checkpoint (checkpoint.WithJournal) as a
// daemon's Load does: the file with its journal replayed.

// journaled writes, as a daemon with checkpoint.WithJournal does, a file
// holding entries 0..2 (phase migrate) and then two commits in the journal
// (phase contract): a put of entry 3 and a delete of entry 0. The state is
// entries 1..3. It returns the path.
func journaled(t *testing.T, dir string, states ...map[key]value) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(dir, "state.json")
	f, err := checkpoint.Open[key, value](ctx, path, append(checkpointtest.Schema(schema), checkpoint.WithJournal())...)
	require.NoError(t, err)
	defer f.Close()
	if len(states) == 0 {
		states = []map[key]value{entries(3)}
	}
	for _, s := range states {
		require.NoError(t, f.Save(ctx, checkpoint.Snapshot[key, value]{
			Meta: checkpoint.Meta{Phase: "migrate", Writer: "ipamd v1.8.0", BootID: "boot-1"}, Entries: s}))
	}
	m := checkpoint.Meta{Phase: "contract", Writer: "ipamd v1.9.0", BootID: "boot-1"}
	require.NoError(t, f.Commit(ctx, m, []checkpoint.Change[key, value]{{Key: k(3), Value: v(3)}}))
	require.NoError(t, f.Commit(ctx, m, []checkpoint.Change[key, value]{{Key: k(0), Delete: true}}))
	require.Equal(t, 2, f.Journal().Records, "the commits went to the journal")
	require.FileExists(t, path+".journal")
	return path
}

// journalState is what journaled leaves: entries 1..3.
func journalState() map[key]value {
	return map[key]value{k(1): v(1), k(2): v(2), k(3): v(3)}
}

// mustLoadJournaled reads path as a daemon WithJournal would.
func mustLoadJournaled(t *testing.T, path string) checkpoint.Snapshot[key, value] {
	t.Helper()
	f, err := checkpoint.Open[key, value](context.Background(), path, append(checkpointtest.Schema(schema), checkpoint.WithJournal())...)
	require.NoError(t, err)
	defer f.Close()
	s, err := f.Load(context.Background())
	require.NoError(t, err)
	return s
}

func TestJournalIsReplayed(t *testing.T) {
	path := journaled(t, t.TempDir())

	r := run(t, "list", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, journalState(), lines(t, r.stdout), "list shows the state a daemon restores")

	r = run(t, "verify", path)
	assert.Equal(t, 0, r.code, r.stderr)

	r = run(t, "inspect", "--json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var out struct {
		Entries int `json:"entries"`
		Header  struct {
			Seq uint64 `json:"seq"`
		} `json:"header"`
		File struct {
			Seq uint64 `json:"seq"`
		} `json:"file"`
		Journal *struct {
			Path    string `json:"path"`
			Records int    `json:"records"`
			Seq     uint64 `json:"seq"`
		} `json:"journal"`
	}
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, 3, out.Entries)
	require.NotNil(t, out.Journal)
	assert.Equal(t, path+".journal", out.Journal.Path)
	assert.Equal(t, 2, out.Journal.Records)
	assert.Equal(t, out.Header.Seq, out.Journal.Seq, "the header is the last commit's")
	assert.Equal(t, out.File.Seq+2, out.Header.Seq, "the state is two commits past the file")

	r = run(t, "inspect", path)
	assert.Contains(t, r.stdout, "journal:   state.json.journal:")
	assert.Contains(t, r.stdout, "2 records replayed")

	// A torn last record (a commit a crash cut short) is discarded and shown.
	jf, err := os.OpenFile(path+".journal", os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = jf.WriteString(`{"journal":1,"base":`)
	require.NoError(t, err)
	require.NoError(t, jf.Close())
	r = run(t, "inspect", path)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "a torn last record of 20 bytes discarded")
	r = run(t, "list", path)
	assert.Equal(t, journalState(), lines(t, r.stdout))
}

// The command reads a checkpoint through Load, so it shows a journaled
// checkpoint (checkpoint.WithJournal) as a daemon would restore it: the
// file with its journal replayed; and a journal damaged before its last
// record makes the checkpoint not intact.
func TestCommandReplaysTheJournal(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	f, err := checkpoint.Open[key, value](ctx, path, append(checkpointtest.Schema(schema), checkpoint.WithJournal())...)
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[key, value]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: entries(3)}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{Phase: "contract"}, []checkpoint.Change[key, value]{{Key: k(0), Delete: true}, {Key: k(7), Value: v(7)}}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{Phase: "contract"}, []checkpoint.Change[key, value]{{Key: k(8), Value: v(8)}}))
	require.NoError(t, f.Close())
	want := entries(3)
	delete(want, k(0))
	want[k(7)], want[k(8)] = v(7), v(8)

	r := run(t, "list", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, want, lines(t, r.stdout), "list shows the replayed state")
	r = run(t, "verify", path)
	assert.Equal(t, 0, r.code, r.stderr)

	j, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	j[3] ^= 0x01 // in the first of two records
	require.NoError(t, os.WriteFile(path+".journal", j, 0o600))
	r = run(t, "list", path)
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, path+".journal")
	r = run(t, "verify", path)
	assert.NotEqual(t, 0, r.code)
}

// TestDiffJournaledAndPrev attacks "every verb reads the file with
// its journal replayed" for diff: A is a journaled file, B its .prev (the
// file before the last save, without the journal's commits); and a
// quarantined copy is read with its own journal.
func TestDiffJournaledAndPrev(t *testing.T) {
	prevState := entries(2)                                       // c0, c1
	path := journaled(t, t.TempDir(), prevState, entries(3))      // file c0..c2, journal: +c3, -c0
	r := run(t, "diff", "--json", "--values", path, path+".prev") // A: c1..c3; B: c0, c1
	require.Equal(t, 1, r.code, r.stderr)
	var out diffOut
	decodeJSON(t, r.stdout, &out)
	var onlyA, onlyB []key
	for _, e := range out.OnlyInA {
		onlyA = append(onlyA, e.Key)
	}
	for _, e := range out.OnlyInB {
		onlyB = append(onlyB, e.Key)
	}
	assert.ElementsMatch(t, []key{k(2), k(3)}, onlyA, "c3 comes from the journal")
	assert.ElementsMatch(t, []key{k(0)}, onlyB, "c0 was deleted by the journal")
	assert.Empty(t, out.Different)

	r = run(t, "diff", path, path)
	assert.Equal(t, 0, r.code, r.stderr)

	// delete keeps the replaced file with its journal; diff reads the copy
	// with it, so the copy differs from the repair by the deleted key only.
	r = run(t, "delete", path, keyJSON(t, k(1)))
	require.Equal(t, 0, r.code, r.stderr)
	kept := kept(t, path)
	var copyPath string
	for _, q := range kept {
		if !bytes.HasSuffix([]byte(q), []byte(".journal")) {
			copyPath = q
		}
	}
	require.NotEmpty(t, copyPath)
	r = run(t, "diff", "--json", path, copyPath)
	require.Equal(t, 1, r.code, r.stderr)
	out = diffOut{}
	decodeJSON(t, r.stdout, &out)
	assert.Empty(t, out.OnlyInA)
	require.Len(t, out.OnlyInB, 1)
	assert.Equal(t, k(1), out.OnlyInB[0].Key)
	assert.Empty(t, out.Different)
}

// TestJournalValuesNeverInOutput attacks "Errors ... never show a
// value" with journals whose records hold secrets: a damaged record
// before the last (corrupt), and a torn last record; every verb's stderr
// (checked by run) and inspect's stdout must not show them.
func TestJournalValuesNeverInOutput(t *testing.T) {
	path := journaled(t, t.TempDir())
	journal := readBytes(t, path+".journal")
	require.Contains(t, string(journal), secret)
	damaged := bytes.Clone(journal)
	at := bytes.Index(damaged, []byte(secret))
	require.Less(t, at, bytes.IndexByte(damaged, '\n'), "the secret is in the first record")
	damaged[at+1] ^= 0x01
	require.NoError(t, os.WriteFile(path+".journal", damaged, 0o600))
	for _, args := range [][]string{
		{"verify", path}, {"inspect", path}, {"inspect", "--json", path}, {"list", path},
		{"get", path, keyJSON(t, k(3))}, {"delete", path, keyJSON(t, k(1))}, {"diff", path, path},
		{"reseal", "--i-edited-this-file-by-hand", path},
	} {
		r := run(t, args...)
		assert.NotEqual(t, 0, r.code, "%v: a damaged journal is not intact", args)
		assert.Contains(t, r.stderr+r.stdout, "journal", "%v names the journal", args)
		if args[0] == "inspect" || args[0] == "verify" {
			assert.NotContains(t, r.stdout, secret, "%v", args)
		}
	}
	assert.Empty(t, kept(t, path), "no repair ran on a damaged journal")

	// Torn: the last record cut in the middle of its value.
	last := bytes.LastIndex(journal, []byte(secret))
	require.Greater(t, last, bytes.IndexByte(journal, '\n'))
	require.NoError(t, os.WriteFile(path+".journal", journal[:last+len(secret)-2], 0o600))
	for _, args := range [][]string{{"verify", path}, {"inspect", path}, {"inspect", "--json", path}} {
		r := run(t, args...)
		assert.Equal(t, 0, r.code, "%v: a torn tail is discarded: %s", args, r.stderr)
		assert.NotContains(t, r.stdout, "tok-sec", "%v", args)
		assert.NotContains(t, r.stderr, "tok-sec", "%v", args)
	}
}

// inspect and verify show the header Load returns: on a journaled
// checkpoint, the seq, phase, writer, boot ID and time of the last commit
// (the journal's last record), with the file's own header shown beside it
// as the file's.
func TestHeaderIsWhatLoadRestores(t *testing.T) {
	path := journaled(t, t.TempDir())
	loaded := mustLoadJournaled(t, path)
	require.Equal(t, "contract", loaded.Meta.Phase)
	require.Equal(t, "ipamd v1.9.0", loaded.Meta.Writer)

	type header struct {
		Format, Schema        int
		Phase, Writer, BootID string
		Seq                   uint64
		SavedAt               time.Time
	}
	for _, verb := range []string{"inspect", "verify"} {
		r := run(t, verb, "--json", path)
		require.Equal(t, 0, r.code, r.stderr)
		var out struct {
			Header, File *header
		}
		decodeJSON(t, r.stdout, &out)
		require.NotNil(t, out.Header, verb)
		require.NotNil(t, out.File, verb)
		assert.Equal(t, loaded.Meta.Seq, out.Header.Seq, "%s: the last commit's seq", verb)
		assert.Equal(t, "contract", out.Header.Phase, verb)
		assert.Equal(t, "ipamd v1.9.0", out.Header.Writer, verb)
		assert.True(t, loaded.Meta.SavedAt.Equal(out.Header.SavedAt), "%s: the last commit's time", verb)
		assert.Equal(t, loaded.Meta.Format, out.Header.Format, verb)
		assert.Equal(t, schema, out.Header.Schema, verb)
		assert.Equal(t, loaded.Meta.Seq-2, out.File.Seq, "%s: the file's own seq, two commits before", verb)
		assert.Equal(t, "migrate", out.File.Phase, verb)
		assert.Equal(t, "ipamd v1.8.0", out.File.Writer, verb)
	}

	r := run(t, "inspect", path)
	require.Equal(t, 0, r.code, r.stderr)
	for _, want := range []string{
		fmt.Sprintf("seq:       %d\n", loaded.Meta.Seq), "phase:     contract\n", "writer:    ipamd v1.9.0\n",
		fmt.Sprintf("file:      seq %d, phase migrate, writer ipamd v1.8.0, saved ", loaded.Meta.Seq-2),
	} {
		assert.Contains(t, r.stdout, want)
	}
	r = run(t, "verify", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, fmt.Sprintf("seq %d, ", loaded.Meta.Seq))
	assert.Contains(t, r.stdout, fmt.Sprintf("2 journal records over the file's seq %d", loaded.Meta.Seq-2))
}

// commits writes, as a daemon WithJournal does, a file holding entries
// 0..2 and then n commits to its journal, the i-th a put of entry 10+i
// (phase contract, writer ipamd v1.9.0). It returns the path, the file's
// seq, and the journal's records, each with its newline.
func commits(t *testing.T, dir string, n int) (string, uint64, [][]byte) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(dir, "state.json")
	f, err := checkpoint.Open[key, value](ctx, path, append(checkpointtest.Schema(schema), checkpoint.WithJournal())...)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[key, value]{
		Meta: checkpoint.Meta{Phase: "migrate", Writer: "ipamd v1.8.0", BootID: "boot-1"}, Entries: entries(3)}))
	s, err := f.Load(ctx)
	require.NoError(t, err)
	m := checkpoint.Meta{Phase: "contract", Writer: "ipamd v1.9.0", BootID: "boot-1"}
	for i := range n {
		require.NoError(t, f.Commit(ctx, m, []checkpoint.Change[key, value]{{Key: k(10 + i), Value: v(10 + i)}}))
	}
	require.Equal(t, n, f.Journal().Records)
	recs := bytes.SplitAfter(readBytes(t, path+".journal"), []byte("\n"))
	require.Len(t, recs, n+1)
	require.Empty(t, recs[n])
	return path, s.Meta.Seq, recs[:n]
}

// damage flips a byte inside the value of record i of path's journal (its
// secret token), as bit rot would, and returns the journal.
func damage(t *testing.T, path string, recs [][]byte, i int) []byte {
	t.Helper()
	at := bytes.Index(recs[i], []byte(secret))
	require.Positive(t, at)
	recs[i] = bytes.Clone(recs[i])
	recs[i][at+1] ^= 0x01
	j := bytes.Join(recs, nil)
	require.NoError(t, os.WriteFile(path+".journal", j, 0o600))
	return j
}

// journalOut is the journal in inspect's --json output.
type journalOut struct {
	Path    string
	Bytes   int64
	Total   int
	Records int
	Seq     uint64
	Damage  *struct {
		Offset, Bytes int64
		Seq           uint64
		Reason        string
		Before, After struct {
			Records           int
			FirstSeq, LastSeq uint64
			Offset, Bytes     int64
		}
	}
}

// A journal damaged before its last record makes the checkpoint corrupt,
// and inspect shows where: the records before the damage (which Load
// would replay, and repair-journal keeps), the damaged record, and what
// follows it, by count, seq and byte offset, never by value.
func TestInspectShowsADamagedJournal(t *testing.T) {
	path, fileSeq, recs := commits(t, t.TempDir(), 4)
	j := damage(t, path, recs, 1)
	r0, r1, r2, r3 := int64(len(recs[0])), int64(len(recs[1])), int64(len(recs[2])), int64(len(recs[3]))

	r := run(t, "inspect", "--json", path)
	require.Equal(t, 4, r.code, r.stderr)
	assert.NotContains(t, r.stdout, secret)
	var out struct {
		Verdict string
		Journal *journalOut
	}
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, "corrupt", out.Verdict)
	require.NotNil(t, out.Journal)
	assert.Equal(t, int64(len(j)), out.Journal.Bytes)
	assert.Equal(t, 4, out.Journal.Total, "every record, replayable or not")
	assert.Zero(t, out.Journal.Records, "Load replays none: it refuses the journal")
	d := out.Journal.Damage
	require.NotNil(t, d)
	assert.Equal(t, r0, d.Offset)
	assert.Equal(t, r1, d.Bytes)
	assert.Contains(t, d.Reason, "checksum mismatch")
	assert.Equal(t, 1, d.Before.Records)
	assert.Equal(t, [2]uint64{fileSeq + 1, fileSeq + 1}, [2]uint64{d.Before.FirstSeq, d.Before.LastSeq})
	assert.Equal(t, [2]int64{0, r0}, [2]int64{d.Before.Offset, d.Before.Bytes})
	assert.Equal(t, 2, d.After.Records)
	assert.Equal(t, [2]uint64{fileSeq + 3, fileSeq + 4}, [2]uint64{d.After.FirstSeq, d.After.LastSeq})
	assert.Equal(t, [2]int64{r0 + r1, r2 + r3}, [2]int64{d.After.Offset, d.After.Bytes})

	r = run(t, "inspect", path)
	require.Equal(t, 4, r.code)
	assert.NotContains(t, r.stdout, secret)
	for _, want := range []string{
		fmt.Sprintf("state.json.journal: %d bytes, 4 records, damaged at byte %d", len(j), r0),
		fmt.Sprintf("before the damage: 1 record (seq %d), bytes 0-%d", fileSeq+1, r0),
		fmt.Sprintf("the damaged record: bytes %d-%d (", r0, r0+r1),
		fmt.Sprintf("after the damage: 2 records (seq %d-%d), bytes %d-%d", fileSeq+3, fileSeq+4, r0+r1, len(j)),
		"phaseshift repair-journal",
	} {
		assert.Contains(t, r.stdout, want)
	}
	r = run(t, "verify", path)
	assert.Equal(t, 4, r.code)
	assert.Contains(t, r.stderr, fmt.Sprintf("the record at byte %d is damaged", r0))
	assert.Contains(t, r.stderr, "phaseshift repair-journal "+path)
}

// A journaled file of a newer value schema than the daemon knows
// (--schema) is reported newer (exit 5), with the header of its last
// commit.
func TestNewerJournaledFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	f, err := checkpoint.Open[key, value](ctx, path, append(checkpointtest.Schema(schema+1), checkpoint.WithJournal())...)
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[key, value]{Meta: checkpoint.Meta{Phase: "migrate"}, Entries: entries(2)}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{Phase: "contract", Writer: "ipamd v2.0.0"}, []checkpoint.Change[key, value]{{Key: k(5), Value: v(5)}}))
	require.NoError(t, f.Close())

	r := run(t, "verify", "--json", "--schema", fmt.Sprint(schema), path)
	assert.Equal(t, 5, r.code, r.stderr)
	var out struct {
		Verdict      string
		Header, File *struct {
			Schema int
			Seq    uint64
			Phase  string
		}
	}
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, "newer", out.Verdict)
	require.NotNil(t, out.Header)
	assert.Equal(t, schema+1, out.Header.Schema)
	assert.Equal(t, "contract", out.Header.Phase, "the last commit's")
	assert.Equal(t, out.File.Seq+1, out.Header.Seq)
}

// A damaged file with an intact journal: inspect counts the journal's
// records and their seqs, not replayed, and so does the kept copy
// restore-prev leaves.
func TestInspectAJournalOverADamagedFile(t *testing.T) {
	path := journaled(t, t.TempDir(), entries(2), entries(3)) // file seq 2, records seq 3 and 4
	edit(t, path, "10.0.0.1", "10.0.0.9")
	r := run(t, "inspect", path)
	assert.Equal(t, 4, r.code)
	assert.Contains(t, r.stdout, fmt.Sprintf("state.json.journal: %d bytes, 2 records (seq 3-4), not replayed: Load refused the file they follow", len(readBytes(t, path+".journal"))))

	r = run(t, "restore-prev", "--accept-loss", path)
	require.Equal(t, 0, r.code, r.stderr)
	r = run(t, "inspect", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, ": corrupt, seq 2, ")
	assert.Contains(t, r.stdout, ", with its journal (2 records); kept before restore-prev at ")
}
