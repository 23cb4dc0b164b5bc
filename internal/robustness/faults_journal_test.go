package robustness_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/fsys/fsystest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// TestJournalFaultsThroughTheStore injects a failure into each step of a
// journal append under a Store whose checkpoint is opened WithJournal, in
// every phase that writes the checkpoint: each write fails with
// migrate.ErrCheckpointWrite naming the step and the journal; the Store
// serves the last commit; a restart (a new File on the same path) serves
// exactly the last commit, not the failed write; and once the fault clears
// the next write succeeds.
//
// How I checked that it has teeth: removing the Truncate in disk.cutBack
// (internal/engine/disk_journal.go, appendJournal) fails the fsync case in every phase with
// "the restart serves the last commit" (the write reported failed came
// back; a failed or short write leaves at most a torn tail, which replay
// discards anyway).
func TestJournalFaultsThroughTheStore(t *testing.T) {
	ctx := context.Background()
	faults := []struct {
		op, step string
		err      error // nil for a short write
		journal  bool  // matched on the journal's path, else the checkpoint's
	}{
		{fsystest.OpRead, "journal: read checkpoint", syscall.EIO, false},
		{fsystest.OpAppend, "journal open", syscall.EMFILE, true},
		{fsystest.OpWrite, "journal write", syscall.ENOSPC, true},
		{fsystest.ShortWrite, "journal write", nil, true},
		{fsystest.OpFsync, "journal fsync", syscall.EIO, true},
	}
	for _, p := range []migrate.Phase{migrate.PhaseExpand, migrate.PhaseMigrate, migrate.PhaseContract} {
		for _, f := range faults {
			t.Run(fmt.Sprintf("phase%d/%s/%v", p, f.op, f.err), func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "state.json")
				faulty := &fsystest.Faulty{}
				legacy := &migratetest.Explicit[string, string]{}
				cp, err := checkpoint.Open[string, string](ctx, path, fsystest.WithFS(faulty), checkpoint.WithJournal())
				require.NoError(t, err)
				s, err := migrate.New(migrate.Config[string, string]{Phase: p, Legacy: legacy, Checkpoint: cp})
				require.NoError(t, err)
				_, err = s.Restore(ctx)
				require.NoError(t, err)
				require.NoError(t, s.Put(ctx, "a", "1"))
				require.NoError(t, s.Put(ctx, "b", "2"))
				require.NoError(t, s.Put(ctx, "c", "3"), "an append")
				_, err = os.Stat(path + ".journal")
				require.NoError(t, err, "the writes went to the journal")
				committed := map[string]string{"a": "1", "b": "2", "c": "3"}

				target := path
				if f.journal {
					target = path + ".journal"
				}
				faulty.Fail(f.op, target, f.err, 1)
				err = s.Put(ctx, "a", "10")
				require.Error(t, err)
				assert.ErrorIs(t, err, migrate.ErrCheckpointWrite)
				if f.err != nil {
					assert.ErrorIs(t, err, f.err)
				} else {
					assert.ErrorIs(t, err, io.ErrShortWrite)
				}
				assert.Contains(t, err.Error(), f.step)
				assert.Contains(t, err.Error(), path)
				assert.Equal(t, committed, collect(s), "the store serves the last commit")
				faulty.Clear()

				// A restart, as after a crash now: only acknowledged writes.
				assert.Equal(t, committed, loadJournaled(t, path), "the restart serves the last commit")

				require.NoError(t, s.Put(ctx, "z", "26"))
				committed["z"] = "26"
				assert.Equal(t, committed, collect(s))
				require.NoError(t, s.Close())
				assert.Equal(t, committed, loadJournaled(t, path), "the checkpoint holds what the store served")
				if p.WritesLegacy() {
					assert.Equal(t, committed, legacy.Snapshot())
				}
			})
		}
	}
}

// loadJournaled reads the checkpoint at path, journal included, as the
// next process would (without the lock: the test's own File holds it).
func loadJournaled(t *testing.T, path string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"state.json", "state.json.journal"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(path), name))
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	f, err := checkpoint.Open[string, string](context.Background(), filepath.Join(dir, "state.json"))
	require.NoError(t, err)
	defer f.Close()
	s, err := f.Load(context.Background())
	require.NoError(t, err)
	return s.Entries
}

// TestJournalSymlinkIsNotFollowed plants a symlink at path+".journal",
// pointing at a valid journal outside: Restore must refuse it (Load reads
// the journal with O_NOFOLLOW) rather than replay it, and the target keeps
// its bytes, as TestSymlinksAreNotFollowed does for the other names.
//
// How I checked that it has teeth: reading the journal with os.ReadFile
// (following links) in disk.readJournal makes Restore succeed and serve
// the outside journal's "stolen" entry.
func TestJournalSymlinkIsNotFollowed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	cp, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	require.NoError(t, cp.Save(ctx, checkpoint.Snapshot[string, string]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: map[string]string{"a": "1"}}))
	require.NoError(t, cp.Commit(ctx, checkpoint.Meta{Phase: "contract"}, []checkpoint.Change[string, string]{{Key: "stolen", Value: "x"}}))
	require.NoError(t, cp.Close())
	victim := filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.Rename(path+".journal", victim))
	want, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.NoError(t, os.Symlink(victim, path+".journal"))

	cp, err = checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	s, err := migrate.New(migrate.Config[string, string]{Phase: migrate.PhaseContract, Checkpoint: cp})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Restore(ctx)
	require.Error(t, err, "Restore must refuse a symlinked journal")
	assert.Contains(t, err.Error(), "refusing to follow a symlink")
	assert.ErrorIs(t, s.Put(ctx, "b", "2"), migrate.ErrNotRestored)
	got, err := os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "the symlink's target changed")
}
