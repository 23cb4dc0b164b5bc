package control_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/control"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// reportDaemon is a Store in phase 2 over an implicit legacy (a runtime
// that lists c0, c1 and c4, c4 with another address) and a checkpoint that
// holds c0 to c4, served with its restore's report: c2 and c3 are orphans,
// c4 diverged.
func reportDaemon(t *testing.T) (*daemon, migrate.Report[key]) {
	t.Helper()
	ctx := context.Background()
	d := startDaemon(t, 5)
	require.NoError(t, d.srv.Close())
	require.NoError(t, d.store.Close())

	legacy := &migratetest.Implicit[key, alloc]{}
	legacy.Set(k(0), alloc{IP: "10.0.0.0"})
	legacy.Set(k(1), alloc{IP: "10.0.0.1"})
	legacy.Set(k(4), alloc{IP: "10.0.9.9"})
	f, err := checkpoint.Open[key, alloc](ctx, d.path)
	require.NoError(t, err)
	d.store, err = migrate.New(migrate.Config[key, alloc]{Phase: migrate.PhaseMigrate, Legacy: legacy, Checkpoint: f,
		Equal: func(a, b alloc) bool { return a == b }})
	require.NoError(t, err)
	rep, err := d.store.Restore(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []key{k(2), k(3)}, rep.Orphaned)
	require.ElementsMatch(t, []key{k(4)}, rep.Diverged)
	d.srv, err = control.Listen(control.SocketPath(d.path), d.store, control.WithReport(rep))
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, d.srv.Close())
		_ = d.store.Close()
	})
	return d, rep
}

func raws(keys ...key) []json.RawMessage {
	out := make([]json.RawMessage, len(keys))
	for i, kk := range keys {
		out[i] = keyJSON(kk)
	}
	return out
}

// TestReportListsTheOpenKeys: the report request gives the restore's line
// and the orphaned and diverged keys, as JSON that get and delete take,
// less those a write or delete has settled since.
func TestReportListsTheOpenKeys(t *testing.T) {
	ctx := context.Background()
	d, rep := reportDaemon(t)
	got, err := d.client().Report(ctx)
	require.NoError(t, err)
	assert.Equal(t, rep.String(), got.Line)
	assert.Contains(t, got.Line, `orphaned 2 [{"network":"n","containerID":"c2"} {"network":"n","containerID":"c3"}]`)
	assert.Equal(t, raws(k(2), k(3)), got.Orphaned)
	assert.Equal(t, raws(k(4)), got.Diverged)
	line, err := d.client().Get(ctx, got.Orphaned[0])
	require.NoError(t, err, "a listed key is one get takes")
	assert.Contains(t, string(line), `"c2"`)

	require.NoError(t, d.store.Put(ctx, k(3), alloc{IP: "10.0.0.3"})) // its ADD, retried
	require.NoError(t, d.client().Delete(ctx, keyJSON(k(4))))
	got, err = d.client().Report(ctx)
	require.NoError(t, err)
	assert.Equal(t, raws(k(2)), got.Orphaned, "a write settles an orphan")
	assert.Empty(t, got.Diverged, "and a delete a divergence")
	assert.Equal(t, rep.String(), got.Line, "the line is the restore's")
}

// TestPruneOrphans: prune-orphans deletes, through the Store, the
// confirmed keys that are still orphans; an orphan written since, a key
// deleted since and a key that was never an orphan are kept, each with
// its reason, and the file agrees with the daemon afterwards.
func TestPruneOrphans(t *testing.T) {
	ctx := context.Background()
	d, _ := reportDaemon(t)
	listed, err := d.client().Report(ctx)
	require.NoError(t, err)
	require.Equal(t, raws(k(2), k(3)), listed.Orphaned)

	// Between the listing the operator confirmed and the prune: c3's ADD
	// came again, with its address.
	require.NoError(t, d.store.Put(ctx, k(3), alloc{IP: "10.0.0.3"}))
	res, err := d.client().PruneOrphans(ctx, append(listed.Orphaned, keyJSON(k(0)), keyJSON(k(2))))
	require.NoError(t, err)
	assert.Equal(t, []control.PruneResult{
		{Key: keyJSON(k(2)), Pruned: true},
		{Key: keyJSON(k(3)), Reason: "written since the restore: no longer an orphan, kept"},
		{Key: keyJSON(k(0)), Reason: "not an orphan of the daemon's last restore"},
	}, res, "c2 given twice is pruned once")
	_, ok := d.store.Get(k(2))
	assert.False(t, ok)
	_, ok = d.store.Get(k(3))
	assert.True(t, ok, "the orphan written since is kept")

	res, err = d.client().PruneOrphans(ctx, raws(k(2)))
	require.NoError(t, err)
	assert.Equal(t, []control.PruneResult{{Key: keyJSON(k(2)), Reason: "gone: deleted since the restore"}}, res)

	_, err = d.client().PruneOrphans(ctx, []json.RawMessage{json.RawMessage(`{"network":"n","containerID":"c3","x":1}`)})
	assert.ErrorIs(t, err, control.ErrBadKey)
	_, err = d.client().PruneOrphans(ctx, nil)
	var re *control.RemoteError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, control.CodeBadRequest, re.Code)

	require.NoError(t, d.srv.Close())
	require.NoError(t, d.store.Close())
	assert.Equal(t, map[key]alloc{k(0): {IP: "10.0.0.0"}, k(1): {IP: "10.0.0.1"}, k(3): {IP: "10.0.0.3"}, k(4): {IP: "10.0.9.9"}},
		fileEntries(t, d.path), "the prune is durable: the next start finds c2 gone")
}

// TestNoReport: a daemon that gave Listen no WithReport says so, and a
// Report of another key type, or of a Restore that failed, is refused.
func TestNoReport(t *testing.T) {
	ctx := context.Background()
	d := startDaemon(t, 1)
	_, err := d.client().Report(ctx)
	assert.ErrorIs(t, err, control.ErrNoReport)
	_, err = d.client().PruneOrphans(ctx, raws(k(0)))
	assert.ErrorIs(t, err, control.ErrNoReport)

	dir := t.TempDir()
	_, err = control.Listen(filepath.Join(dir, "a.sock"), d.store, control.WithReport(migrate.Report[string]{ReadFrom: migrate.ReadCheckpoint}))
	assert.ErrorIs(t, err, control.ErrInvalidOption)
	assert.ErrorContains(t, err, "the Store's key is a control_test.key")
	_, err = control.Listen(filepath.Join(dir, "b.sock"), d.store, control.WithReport(migrate.Report[key]{}))
	assert.ErrorIs(t, err, control.ErrInvalidOption)
}
