package main_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

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
	assert.Equal(t, out.Header.Seq+2, out.Journal.Seq, "the state is two commits past the file")

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

func TestDeleteFoldsTheJournal(t *testing.T) {
	path := journaled(t, t.TempDir())

	r := run(t, "delete", path, `{"network":"aws-cni","containerID":"c1","ifName":"eth0"}`)
	require.Equal(t, 0, r.code, r.stderr)
	want := journalState()
	delete(want, k(1))
	assert.Equal(t, want, mustLoad(t, path).Entries)
	assert.NoFileExists(t, path+".journal", "the journal is folded into the file")

	kept := quarantined(t, path)
	require.Len(t, kept, 2, "the replaced file and its journal")
	assert.FileExists(t, kept[0]+".journal")
	r = run(t, "inspect", path)
	assert.Contains(t, r.stdout, "with its journal (2 records)", "inspect reads a kept copy with its journal")
	assert.Contains(t, r.stdout, "quarantined copies: 1")

	// The daemon goes on with its journal over the repaired file.
	ctx := context.Background()
	f, err := checkpoint.Open[key, value](ctx, path, append(checkpointtest.Schema(schema), checkpoint.WithJournal())...)
	require.NoError(t, err)
	defer f.Close()
	s, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, s.Entries)
	assert.Equal(t, "contract", s.Meta.Phase, "the repair keeps the phase of the last commit")
}

func TestRestorePrevDropsTheJournal(t *testing.T) {
	path := journaled(t, t.TempDir(), entries(2), entries(3))
	seqBefore := mustLoad(t, path).Meta.Seq

	r := run(t, "restore-prev", "--replace-intact", path)
	require.Equal(t, 0, r.code, r.stderr)
	s := mustLoad(t, path)
	assert.Equal(t, entries(2), s.Entries, ".prev, without the journal's commits")
	assert.Greater(t, s.Meta.Seq, seqBefore, "a seq above the journal's")
	assert.NoFileExists(t, path+".journal", "its records followed the file replaced")
	kept := quarantined(t, path)
	require.Len(t, kept, 2)
	assert.Equal(t, journalState(), lines(t, run(t, "list", kept[0]).stdout), "the copy kept has the journal's commits")
}

// TestRestorePrevLeftoverJournalIsStale: had the removal of the journal not
// reached the disk (a crash right after the new file's rename), its
// records would be skipped, not replayed over the restored file.
func TestRestorePrevLeftoverJournalIsStale(t *testing.T) {
	path := journaled(t, t.TempDir(), entries(2), entries(3))
	journal := readBytes(t, path+".journal")
	require.Equal(t, 0, run(t, "restore-prev", "--replace-intact", path).code)
	require.NoError(t, os.WriteFile(path+".journal", journal, 0o600))
	assert.Equal(t, entries(2), mustLoad(t, path).Entries)
}

func TestResealFoldsTheJournal(t *testing.T) {
	path := journaled(t, t.TempDir())
	edit(t, path, `"ip":"10.0.0.2"`, `"ip":"10.0.0.99"`)
	r := run(t, "verify", path)
	require.Equal(t, 4, r.code, "the edit broke the checksum")

	r = run(t, "reseal", "--i-edited-this-file-by-hand", path)
	require.Equal(t, 0, r.code, r.stderr)
	s := mustLoad(t, path)
	want := journalState()
	want[k(2)] = value{IP: "10.0.0.99", Token: v(2).Token}
	assert.Equal(t, want, s.Entries, "the edit, with the journal's commits over it")
	assert.Equal(t, "contract", s.Meta.Phase, "the phase of the last commit, not of the file's last compaction")
	assert.NoFileExists(t, path+".journal")
}
