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

	r := run(t, "restore-prev", path)
	require.Equal(t, 0, r.code, r.stderr)
	got := mustLoad(t, path)
	assert.Equal(t, entries(2), got.Entries)
	assert.Greater(t, got.Meta.Seq, uint64(2), "above the file the journal followed (seq 2)")
	_, err = os.Stat(path + ".journal")
	assert.ErrorIs(t, err, os.ErrNotExist, "the repair removed the journal")
	kept := quarantined(t, path)
	var journals int
	for _, q := range kept {
		if filepath.Ext(q) == ".journal" {
			journals++
			assert.Equal(t, j, readBytes(t, q), "the damaged journal is kept")
		}
	}
	assert.Equal(t, 1, journals, "kept: %v", kept)
}
