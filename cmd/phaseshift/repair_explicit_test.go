package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// The repairs of the phaseshift command followed by a daemon's restart,
// over an explicit legacy (one the Store writes, as host-local's files or
// a registry): phase 3 does not write it, so after phase 3 the checkpoint
// is the only side with every acknowledged write.

// explicitNode is a daemon's Store over a real journaled checkpoint and an
// explicit legacy, restarted in any phase.
type explicitNode struct {
	t    *testing.T
	path string
	lg   *migratetest.Explicit[key, value]
}

func newExplicitNode(t *testing.T) *explicitNode {
	return &explicitNode{t: t, path: filepath.Join(t.TempDir(), "state.json"), lg: &migratetest.Explicit[key, value]{}}
}

// start restores a Store in phase p; the caller closes it.
func (n *explicitNode) start(p migrate.Phase) (*migrate.Store[key, value], migrate.Report[key], error) {
	n.t.Helper()
	cp, err := checkpoint.Open[key, value](context.Background(), n.path, checkpointtest.Schema(schema)...)
	require.NoError(n.t, err)
	s, err := migrate.New(migrate.Config[key, value]{Phase: p, Legacy: n.lg, Checkpoint: cp})
	require.NoError(n.t, err)
	rep, err := s.Restore(context.Background())
	return s, rep, err
}

// mustStart restores a Store in phase p, failing the test if it refuses.
func (n *explicitNode) mustStart(p migrate.Phase) *migrate.Store[key, value] {
	n.t.Helper()
	s, _, err := n.start(p)
	require.NoError(n.t, err)
	return s
}

// toPhase3 runs phase 2 with entries 0-3, then phase 3, whose writes
// (delete 0, put 4 and 5) reach the checkpoint only; compactions in
// phase 3 first (rewrites of entries 1-3) make .prev a file phase 3
// wrote. It returns what phase 3 acknowledged.
func (n *explicitNode) toPhase3(compactions bool) map[key]value {
	n.t.Helper()
	ctx := context.Background()
	s := n.mustStart(migrate.PhaseMigrate)
	for i := range 4 {
		require.NoError(n.t, s.Put(ctx, k(i), v(i)))
	}
	require.NoError(n.t, s.Close())
	s = n.mustStart(migrate.PhaseContract)
	for j := 0; compactions && j < 400; j++ {
		w := v(1 + j%3)
		w.Token = fmt.Sprintf("%s%d-%d", secret, 1+j%3, j)
		require.NoError(n.t, s.Put(ctx, k(1+j%3), w))
	}
	require.NoError(n.t, s.Delete(ctx, k(0)))
	require.NoError(n.t, s.Put(ctx, k(4), v(4)))
	require.NoError(n.t, s.Put(ctx, k(5), v(5)))
	want := served(s)
	require.NoError(n.t, s.Close())
	return want
}

// rotJournal flips a bit in a record of the journal before its last.
func (n *explicitNode) rotJournal() {
	n.t.Helper()
	j := readBytes(n.t, n.path+".journal")
	j[len(j)/4] ^= 0x20
	require.NoError(n.t, os.WriteFile(n.path+".journal", j, 0o600))
}

// TestRestorePrevOverAnExplicitLegacyPhase3LeftStale: at phase 3 over an
// explicit legacy, bit rot in the journal makes the sole copy unreadable;
// the refusal advises `phaseshift restore-prev`, saying that "phase 3
// then refuses it until phase 2 has rebuilt it from legacy". Followed
// exactly: restore-prev, phase 3 refuses (it does), then phase 2. But
// legacy is stale (phase 3 never wrote it), and .prev is the phase-2 file
// (phase 3's first save made it .prev), whose header says phase 2 wrote
// it, so rule 9 does not see that legacy is stale: phase 2 lets legacy
// decide and serves the state from before phase 3 - c0, deleted in phase
// 3, is served, and c4 and c5, acknowledged in phase 3, are lost (their
// addresses free for the next ADD). Fails on main: phase 2 starts and
// serves c0-c3. Phase 2 must refuse (neither side holds every write), or
// serve exactly what was acknowledged.
func TestRestorePrevOverAnExplicitLegacyPhase3LeftStale(t *testing.T) {
	n := newExplicitNode(t)
	want := n.toPhase3(false)
	n.rotJournal()

	s, _, err := n.start(migrate.PhaseContract)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	require.Contains(t, err.Error(), "phaseshift restore-prev PATH")
	require.Contains(t, err.Error(), "phase 3 refuses it, and phases 1 and 2 rebuild it from a legacy that holds every write, or refuse it over one phase 3 left stale")
	require.NoError(t, s.Close())

	r := run(t, "restore-prev", "--accept-loss", n.path)
	require.Equal(t, 0, r.code, r.stderr)
	s, _, err = n.start(migrate.PhaseContract)
	require.ErrorIs(t, err, migrate.ErrStale, "phase 3 refuses what restore-prev put back")
	require.NoError(t, s.Close())

	s, rep, err := n.start(migrate.PhaseMigrate)
	defer s.Close()
	if err != nil {
		require.ErrorIs(t, err, migrate.ErrUnsafeRestore)
		return
	}
	assert.Equal(t, want, served(s), "phase 2 after restore-prev over a legacy phase 3 left stale (%s): it serves what phase 3 deleted and loses what it acknowledged", rep)
}

// TestUnsafeRestoreAdviceCanBeFollowed: the same, after phase 3 compacted
// its journal, so that .prev is a file phase 3 wrote: phase 2 then refuses
// the file restore-prev put back (rule 9, ErrUnsafeRestore: neither side
// holds every acknowledged write), and its advice names phaseshift
// clear-mark. Followed exactly, it works: without a flag it shows the mark
// and changes nothing (exit 9); with --accept-loss (this node ran phase 3
// since, so legacy cannot rebuild the file) phase 2 serves the file as it
// is and rewrites legacy from it. (Found by a review: the advice before
// named a restore-kept of the damaged copy, which restore-kept refuses.)
func TestUnsafeRestoreAdviceCanBeFollowed(t *testing.T) {
	n := newExplicitNode(t)
	n.toPhase3(true)
	n.rotJournal()
	r := run(t, "restore-prev", "--accept-loss", n.path)
	require.Equal(t, 0, r.code, r.stderr)

	s, _, err := n.start(migrate.PhaseMigrate)
	require.ErrorIs(t, err, migrate.ErrUnsafeRestore)
	require.Contains(t, err.Error(), "`phaseshift clear-mark PATH` says how to go on")
	require.NoError(t, s.Close())

	before := readBytes(t, n.path)
	r = run(t, "clear-mark", n.path)
	assert.Equal(t, 9, r.code, "without a flag: %s", r.stderr)
	assert.Contains(t, r.stderr, "restored by phaseshift restore-prev")
	assert.Equal(t, before, readBytes(t, n.path), "nothing changed")

	r = run(t, "clear-mark", "--accept-loss", n.path)
	require.Equal(t, 0, r.code, r.stderr)
	restored := mustLoad(t, n.path)
	assert.Empty(t, restored.Meta.Behind)

	s, rep, err := n.start(migrate.PhaseMigrate)
	require.NoError(t, err, "the advice, followed, gets the daemon started")
	assert.Equal(t, restored.Entries, served(s), "the file as it is (%s)", rep)
	assert.Equal(t, restored.Entries, n.lg.Snapshot(), "legacy rewritten from it")
	require.NoError(t, s.Close())
}

// TestRestoreKeptAfterCommitsIsNotServedAsCurrent: an offline `phaseshift
// delete` prints how to undo it (`phaseshift restore-kept --replace-intact
// PATH COPY`). Run after the daemon made more commits (c0 deleted, c4
// added), it puts back a file that lacks them, as restore-prev does; but
// unlike restore-prev's, its file is not marked behind, so phase 3 serves
// it as current: c0 (deleted) served, c4 (acknowledged) lost, and the
// explicit legacy, stale since phase 3, "agrees" - no alert. Phase 3 must
// refuse it (ErrStale), as it refuses restore-prev's, or serve the undo
// with the commits since. Fails on main: phase 3 starts and serves c0, c1
// and c2.
func TestRestoreKeptAfterCommitsIsNotServedAsCurrent(t *testing.T) {
	ctx := context.Background()
	n := newExplicitNode(t)
	s := n.mustStart(migrate.PhaseMigrate)
	for i := range 3 {
		require.NoError(t, s.Put(ctx, k(i), v(i)))
	}
	require.NoError(t, s.Close())
	require.NoError(t, n.mustStart(migrate.PhaseContract).Close())

	r := run(t, "delete", n.path, `{"network":"aws-cni","containerID":"c1","ifName":"eth0"}`)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "undo with: phaseshift restore-kept --replace-intact")
	copies := kept(t, n.path)
	require.Len(t, copies, 1)

	s = n.mustStart(migrate.PhaseContract)
	require.NoError(t, s.Delete(ctx, k(0)))
	require.NoError(t, s.Put(ctx, k(4), v(4)))
	want := served(s)
	want[k(1)] = v(1) // what the undo is for: the delete undone, the commits since kept
	require.NoError(t, s.Close())

	r = run(t, "restore-kept", "--accept-loss", "--replace-intact", n.path, copies[0])
	require.Equal(t, 0, r.code, r.stderr)
	s, rep, err := n.start(migrate.PhaseContract)
	defer s.Close()
	if err != nil {
		require.ErrorIs(t, err, migrate.ErrStale)
		return
	}
	assert.Equal(t, want, served(s), "phase 3 after restore-kept of a copy older than the commits since (%s)", rep)
}

// TestClearMarkLegacyCurrent: where nothing says which phase wrote the
// file restore-prev replaced (its header is unreadable), restore-prev
// assumes phase 3 may have, and phase 2 over an explicit legacy refuses.
// The operator who knows this node never ran phase 3 says so with
// clear-mark --legacy-current, and phase 2 rebuilds the file from legacy,
// which holds every acknowledged write: nothing is lost.
func TestClearMarkLegacyCurrent(t *testing.T) {
	ctx := context.Background()
	n := newExplicitNode(t)
	s := n.mustStart(migrate.PhaseMigrate)
	for i := range 4 {
		require.NoError(t, s.Put(ctx, k(i), v(i)))
	}
	require.NoError(t, s.Close())
	s = n.mustStart(migrate.PhaseMigrate)
	for j := 0; j < 400; j++ { // compactions: .prev is a file phase 2 wrote
		w := v(1 + j%3)
		w.Token = fmt.Sprintf("%s%d-%d", secret, 1+j%3, j)
		require.NoError(t, s.Put(ctx, k(1+j%3), w))
	}
	require.NoError(t, s.Delete(ctx, k(0)))
	require.NoError(t, s.Put(ctx, k(4), v(4)))
	want := served(s)
	require.NoError(t, s.Close())
	require.FileExists(t, n.path+".prev")

	data := readBytes(t, n.path)
	data[3] ^= 0x20 // the header no longer reads
	require.NoError(t, os.WriteFile(n.path, data, 0o600))
	r := run(t, "restore-prev", n.path)
	require.Equal(t, 0, r.code, r.stderr)

	s, _, err := n.start(migrate.PhaseMigrate)
	require.ErrorIs(t, err, migrate.ErrUnsafeRestore, "nothing says phase 3 did not write the file replaced")
	require.NoError(t, s.Close())

	r = run(t, "clear-mark", "--legacy-current", n.path)
	require.Equal(t, 0, r.code, r.stderr)
	s, rep, err := n.start(migrate.PhaseMigrate)
	require.NoError(t, err)
	assert.Equal(t, want, served(s), "rebuilt from legacy (%s)", rep)
	require.NoError(t, s.Close())
	s = n.mustStart(migrate.PhaseContract)
	assert.Equal(t, want, served(s), "and phase 3 follows")
	require.NoError(t, s.Close())
}
