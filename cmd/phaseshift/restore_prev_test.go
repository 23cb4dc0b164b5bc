package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// restore-prev puts .prev back, durably, above both seqs; the corrupt file
// is kept as a quarantined copy, byte for byte; .prev stays as it was.
func TestRestorePrev(t *testing.T) {
	path := save(t, t.TempDir(), entries(2), entries(3))
	prevBefore := readBytes(t, path+".prev")
	edit(t, path, `"ip":"10.0.0.1"`, `"ip":"10.0.0.5"`)
	bad := readBytes(t, path)
	_, err := load(t, path)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)

	r := run(t, "restore-prev", path)
	require.Equal(t, 9, r.code, ".prev lacks an entry the file holds: %s", r.stderr)
	assert.Equal(t, bad, readBytes(t, path))
	r = run(t, "restore-prev", "--accept-loss", "--json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var out repairOut
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, "restore-prev", out.Action)
	assert.Equal(t, path+".prev", out.From)
	assert.Equal(t, "corrupt", out.Replaced)

	got := mustLoad(t, path)
	assert.Equal(t, entries(2), got.Entries)
	assert.Equal(t, uint64(3), got.Meta.Seq, "above both files' seqs (1 and 2)")
	assert.Equal(t, "ipamd v1.8.0", got.Meta.Writer)
	assert.Equal(t, schema, got.Meta.Schema)
	assert.Equal(t, prevBefore, readBytes(t, path+".prev"))
	require.Equal(t, []string{out.Kept}, kept(t, path))
	assert.Equal(t, bad, readBytes(t, out.Kept))

	// The daemon goes on from there: its next save is seq 4.
	f, err := checkpoint.Open[key, value](context.Background(), path, checkpointtest.Schema(schema)...)
	require.NoError(t, err)
	_, err = f.Load(context.Background())
	require.NoError(t, err)
	require.NoError(t, f.Save(context.Background(), checkpoint.Snapshot[key, value]{Entries: entries(1)}))
	require.NoError(t, f.Close())
	assert.Equal(t, uint64(4), mustLoad(t, path).Meta.Seq)
}

func TestRestorePrevRefusals(t *testing.T) {
	t.Run("intact file without --replace-intact", func(t *testing.T) {
		path := save(t, t.TempDir(), entries(2), entries(3))
		before := readBytes(t, path)
		r := run(t, "restore-prev", path)
		assert.Equal(t, 9, r.code, "a refusal, not a usage error")
		assert.Contains(t, r.stderr, "--replace-intact")
		assert.NotContains(t, r.stderr, "usage:")
		assert.Equal(t, before, readBytes(t, path))

		r = run(t, "restore-prev", "--accept-loss", "--replace-intact", path)
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "restored "+path+" from "+path+".prev (seq 1, 2 entries), written as seq 3")
		assert.Equal(t, entries(2), mustLoad(t, path).Entries)
		require.Len(t, kept(t, path), 1)
		assert.Equal(t, before, readBytes(t, kept(t, path)[0]))
	})
	t.Run("missing file, .prev there", func(t *testing.T) {
		path := save(t, t.TempDir(), entries(2), entries(3))
		require.NoError(t, os.Remove(path))
		r := run(t, "restore-prev", path)
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, entries(2), mustLoad(t, path).Entries)
		assert.Empty(t, kept(t, path), "nothing was replaced")
	})
	t.Run("no .prev", func(t *testing.T) {
		path := save(t, t.TempDir(), entries(2))
		edit(t, path, "10.0.0.1", "10.0.0.2")
		r := run(t, "restore-prev", path)
		assert.Equal(t, 3, r.code)
		assert.Contains(t, r.stderr, "cannot restore "+path+".prev")
	})
	t.Run("corrupt .prev", func(t *testing.T) {
		path := save(t, t.TempDir(), entries(2), entries(3))
		edit(t, path, "10.0.0.1", "10.0.0.2")
		edit(t, path+".prev", "10.0.0.1", "10.0.0.2")
		before := readBytes(t, path)
		r := run(t, "restore-prev", path)
		assert.Equal(t, 4, r.code)
		assert.Equal(t, before, readBytes(t, path))
		assert.Empty(t, kept(t, path))
	})
	t.Run("locked", func(t *testing.T) {
		path := save(t, t.TempDir(), entries(2), entries(3))
		holdLock(t, path)
		r := run(t, "restore-prev", "--lock-wait", "50ms", "--replace-intact", path)
		assert.Equal(t, 7, r.code)
	})
	t.Run("a newer file without --replace-intact", func(t *testing.T) {
		// Written by a newer phaseshift: kept for the roll-forward, as
		// verify advises, unless the operator says otherwise.
		path := save(t, t.TempDir(), entries(2), entries(3))
		editSealed(t, path, `"format": 1`, `"format": 3`)
		before := readBytes(t, path)
		r := run(t, "restore-prev", path)
		assert.Equal(t, 9, r.code, r.stderr)
		assert.Contains(t, r.stderr, "newer")
		assert.Contains(t, r.stderr, "--replace-intact")
		assert.Equal(t, before, readBytes(t, path))
		assert.Empty(t, kept(t, path))

		r = run(t, "restore-prev", "--replace-intact", path)
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, entries(2), mustLoad(t, path).Entries)
	})
}

// restore-prev over a damaged file whose journal is intact: the file it
// writes has a seq above every record of the journal it sets aside, so
// that no reader takes the journal's records for ones that follow it; the
// copy of a damaged file is kept for inspection, and no undo is offered
// that restore-kept would refuse.
func TestRestorePrevOverADamagedFileWithItsJournal(t *testing.T) {
	path := journaled(t, t.TempDir(), entries(2), entries(3)) // .prev seq 1, file seq 2, records seq 3 and 4
	edit(t, path, "10.0.0.1", "10.0.0.2")
	r := run(t, "restore-prev", "--accept-loss", path)
	require.Equal(t, 0, r.code, r.stderr)
	got := mustLoadJournaled(t, path)
	assert.Equal(t, entries(2), got.Entries)
	assert.Greater(t, got.Meta.Seq, uint64(4), "above the journal's last record (seq 4)")
	assert.Contains(t, r.stdout, "is kept as")
	assert.NotContains(t, r.stdout, "undo with", "restore-kept refuses a damaged copy")
}

// restore-prev over a journaled checkpoint whose journal is damaged: .prev
// goes back with a Seq above the file the journal followed, the journal is
// removed from the path (a damaged one would keep the checkpoint
// unreadable) and kept beside the quarantined copy of the file.
func TestRestorePrevWithAJournal(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	f, err := checkpoint.Open[key, value](ctx, path, append(checkpointtest.Schema(schema), checkpoint.WithJournal())...)
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[key, value]{Entries: entries(2)}))
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[key, value]{Entries: entries(3)})) // .prev: entries(2), seq 1
	for i := 5; i < 8; i++ {
		require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[key, value]{{Key: k(i), Value: v(i)}}))
	}
	require.NoError(t, f.Close())
	j, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	j[3] ^= 0x01
	require.NoError(t, os.WriteFile(path+".journal", j, 0o600))
	_, err = load(t, path)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)

	r := run(t, "restore-prev", "--accept-loss", path)
	require.Equal(t, 0, r.code, r.stderr)
	got := mustLoad(t, path)
	assert.Equal(t, entries(2), got.Entries)
	assert.Greater(t, got.Meta.Seq, uint64(2), "above the file the journal followed (seq 2)")
	_, err = os.Stat(path + ".journal")
	assert.ErrorIs(t, err, os.ErrNotExist, "the repair removed the journal")
	kept := kept(t, path)
	var journals int
	for _, q := range kept {
		if filepath.Ext(q) == ".journal" {
			journals++
			assert.Equal(t, j, readBytes(t, q), "the damaged journal is kept")
		}
	}
	assert.Equal(t, 1, journals, "kept: %v", kept)
}

func TestRestorePrevDropsTheJournal(t *testing.T) {
	path := journaled(t, t.TempDir(), entries(2), entries(3))
	seqBefore := mustLoad(t, path).Meta.Seq

	r := run(t, "restore-prev", "--accept-loss", "--replace-intact", path)
	require.Equal(t, 0, r.code, r.stderr)
	s := mustLoad(t, path)
	assert.Equal(t, entries(2), s.Entries, ".prev, without the journal's commits")
	assert.Greater(t, s.Meta.Seq, seqBefore, "a seq above the journal's")
	assert.NoFileExists(t, path+".journal", "its records followed the file replaced")
	kept := kept(t, path)
	require.Len(t, kept, 2)
	assert.Equal(t, journalState(), lines(t, run(t, "list", kept[0]).stdout), "the copy kept has the journal's commits")
}

// TestRestorePrevLeftoverJournalIsStale: had the removal of the journal not
// reached the disk (a crash right after the new file's rename), its
// records would be skipped, not replayed over the restored file.
func TestRestorePrevLeftoverJournalIsStale(t *testing.T) {
	path := journaled(t, t.TempDir(), entries(2), entries(3))
	journal := readBytes(t, path+".journal")
	require.Equal(t, 0, run(t, "restore-prev", "--accept-loss", "--replace-intact", path).code)
	require.NoError(t, os.WriteFile(path+".journal", journal, 0o600))
	assert.Equal(t, entries(2), mustLoad(t, path).Entries)
}

// A journal left without its file (the file removed by hand, or a
// quarantine cut short by a crash) is corrupt; restore-prev puts .prev
// back as quarantine would have left it: the journal is kept aside alone
// (PATH.before-restore-prev-<time>.journal) and removed from the path, and
// the restored file's seq is above every record's.
func TestRestorePrevOverAJournalWithoutItsFile(t *testing.T) {
	path, fileSeq, recs := commits(t, t.TempDir(), 3)
	require.NoError(t, os.Rename(path, path+".prev")) // seq 1: the journal follows it, and the file is gone
	journal := readBytes(t, path+".journal")
	_, err := load(t, path)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)

	r := run(t, "inspect", path)
	assert.Equal(t, 4, r.code)
	assert.Contains(t, r.stdout, fmt.Sprintf("state.json.journal: %d bytes, 3 records (seq %d-%d), but the file they follow is missing", len(journal), fileSeq+1, fileSeq+3))

	r = run(t, "restore-prev", "--json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var out repairOut
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, "corrupt", out.Replaced)
	assert.True(t, strings.HasPrefix(out.Kept, path+".before-restore-prev-"), out.Kept)
	assert.True(t, strings.HasSuffix(out.Kept, ".journal"), "only the journal was there to keep: %s", out.Kept)
	assert.Equal(t, journal, readBytes(t, out.Kept))
	assert.NoFileExists(t, path+".journal")
	s := mustLoadJournaled(t, path)
	assert.Equal(t, entries(3), s.Entries)
	assert.Greater(t, s.Meta.Seq, fileSeq+uint64(len(recs)), "above the seq of every record it set aside")

	r = run(t, "inspect", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, filepath.Base(out.Kept)+": a journal kept without its file, 3 records")
	assert.Contains(t, r.stdout, "; kept before restore-prev at ")
}
