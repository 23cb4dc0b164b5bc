package main_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// The command reads a checkpoint through Load, so it shows a journaled
// checkpoint (checkpoint.WithJournal) as a daemon would restore it: the
// file with its journal replayed; and a journal damaged before its last
// record makes the checkpoint not intact.
func TestCommandReplaysTheJournal(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	f, err := checkpoint.Open[key, value](ctx, path, checkpoint.WithSchema(schema), checkpoint.WithJournal())
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
