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
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/internal/fsys"
	"github.com/phaseshift/phaseshift/internal/fsys/fsystest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// saveFaults are the failures injected into each step of a checkpoint
// save. where says which path the fault is matched on.
var saveFaults = []struct {
	op, step string
	err      error // nil for a short write, which reports io.ErrShortWrite
	where    string
}{
	{fsystest.OpCreate, "create temporary file", syscall.ENOSPC, "path"},
	{fsystest.OpCreate, "create temporary file", syscall.EROFS, "path"},
	{fsystest.OpWrite, "write", syscall.ENOSPC, "path"},
	{fsystest.OpWrite, "write", syscall.EIO, "path"},
	{fsystest.ShortWrite, "write", nil, "path"},
	{fsystest.OpFsync, "fsync", syscall.EIO, "path"},
	{fsystest.OpClose, "close", syscall.EIO, "path"},
	{fsystest.OpRename, "rename", syscall.EROFS, "path"},
	{fsystest.OpRename, "rename", syscall.EXDEV, "path"},
	{fsystest.OpLink, "keep previous", syscall.EIO, "prevtmp"},
	{fsystest.OpRename, "keep previous", syscall.ENOSPC, "prev"},
	{fsystest.OpSyncDir, "fsync directory", syscall.EIO, "dir"},
}

// TestSaveFaultsThroughTheStore injects each save fault under a Store on a
// real checkpoint file, in every phase that writes the checkpoint, for
// every kind of write. The checkpoint is opened WithoutJournal, so that
// every write is a save (TestJournalFaultsThroughTheStore injects the
// faults of an append, the default). Each write must fail with an error that matches
// migrate.ErrCheckpointWrite and the errno and names the step and the
// path; the Store keeps serving what was committed; the checkpoint file
// (byte for byte) and explicit legacy (compensated) stay at the last
// commit; and once the fault clears the next write succeeds and the file
// holds exactly what the Store serves.
//
// How I checked that it has teeth: making disk.replace ignore the error of
// f.Sync() fails the fsync cases with "An error is expected but got nil";
// and before commit 985e3e4 the directory-fsync cases failed with "the
// checkpoint file must hold the last commit" (the save reported failed was
// visible in the file), which that commit fixed.
func TestSaveFaultsThroughTheStore(t *testing.T) {
	ctx := context.Background()
	writes := []struct {
		name string
		do   func(s *migrate.Store[string, string]) error
	}{
		{"put new", func(s *migrate.Store[string, string]) error { return s.Put(ctx, "c", "3") }},
		{"put over", func(s *migrate.Store[string, string]) error { return s.Put(ctx, "a", "10") }},
		{"delete", func(s *migrate.Store[string, string]) error { return s.Delete(ctx, "a") }},
		{"update", func(s *migrate.Store[string, string]) error {
			return s.Update(ctx, func(tx *migrate.Tx[string, string]) error {
				tx.Put("c", "3")
				tx.Delete("b")
				return nil
			})
		}},
	}
	committed := map[string]string{"a": "1", "b": "2"}
	for _, p := range []migrate.Phase{migrate.PhaseExpand, migrate.PhaseMigrate, migrate.PhaseContract} {
		for _, f := range saveFaults {
			name := fmt.Sprintf("phase%d/%s/%v", p, f.op, f.err)
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "state.json")
				target := map[string]string{"path": path, "dir": dir, "prev": path + ".prev", "prevtmp": filepath.Join(dir, ".state.json.prev-tmp")}[f.where]
				faulty := &fsystest.Faulty{}
				legacy := &migratetest.Explicit[string, string]{}
				s := openStoreWith(t, faulty, path, p, legacy, checkpoint.WithoutJournal())
				require.NoError(t, s.Put(ctx, "a", "1"))
				require.NoError(t, s.Put(ctx, "b", "2"))
				before, err := os.ReadFile(path)
				require.NoError(t, err)
				for _, w := range writes {
					faulty.Fail(f.op, target, f.err, 1)
					err := w.do(s)
					require.Error(t, err, w.name)
					assert.ErrorIs(t, err, migrate.ErrCheckpointWrite, w.name)
					if f.err != nil {
						assert.ErrorIs(t, err, f.err, w.name)
					} else {
						assert.ErrorIs(t, err, io.ErrShortWrite, w.name)
					}
					assert.Contains(t, err.Error(), "save: "+f.step, w.name)
					assert.Contains(t, err.Error(), path, w.name)

					assert.Equal(t, committed, collect(s), "%s: the store serves the last commit", w.name)
					v, ok := s.Get("a")
					assert.True(t, ok && v == "1", "%s: Get serves the last commit", w.name)
					after, err := os.ReadFile(path)
					require.NoError(t, err)
					assert.Equal(t, string(before), string(after), "%s: the checkpoint file must hold the last commit", w.name)
					if p.WritesLegacy() {
						assert.Equal(t, committed, legacy.Snapshot(), "%s: legacy holds the last commit (compensated)", w.name)
					}
					faulty.Clear()
				}

				// The fault cleared: the next write works, and builds on
				// the last commit, not on the failed writes.
				require.NoError(t, s.Put(ctx, "z", "26"))
				want := map[string]string{"a": "1", "b": "2", "z": "26"}
				assert.Equal(t, want, collect(s))
				assert.Equal(t, want, loadFile(t, path), "the checkpoint holds what the store serves")
				if p.WritesLegacy() {
					assert.Equal(t, want, legacy.Snapshot())
				}
			})
		}
	}
}

// TestLoadFaultsThroughTheStore fails the checkpoint's read at Restore in
// every phase that reads it: Restore fails naming the path and the errno,
// serves nothing, takes no writes, leaves the file alone, and succeeds once
// the fault clears. A failure of the save a restore makes (phase 1's
// rewrite, phase 2's backfill) and of a quarantine fail Restore the same
// way.
//
// How I checked that it has teeth: making migrate's readCheckpoint treat a
// read error like unreadable content (record it in Report.Errors,
// quarantine, go on) fails every read case with "Restore must fail on a
// read error".
func TestLoadFaultsThroughTheStore(t *testing.T) {
	ctx := context.Background()
	for _, p := range []migrate.Phase{migrate.PhaseLegacy, migrate.PhaseExpand, migrate.PhaseMigrate, migrate.PhaseContract} {
		for _, errno := range []error{syscall.EIO, syscall.EACCES} {
			t.Run(fmt.Sprintf("read/phase%d/%v", p, errno), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "state.json")
				want := map[string]string{"a": "1"}
				writeFile(t, path, migrate.PhaseMigrate, want)
				before, _ := os.ReadFile(path)
				legacy := &migratetest.Explicit[string, string]{}
				legacy.Replace(want)
				faulty := &fsystest.Faulty{}
				faulty.Fail(fsystest.OpRead, path, errno, 1)
				s := newStore(t, faulty, path, p, legacy)
				_, err := s.Restore(ctx)
				require.Error(t, err, "Restore must fail on a read error")
				assert.ErrorIs(t, err, errno)
				assert.Contains(t, err.Error(), path)
				assert.Zero(t, s.Len(), "a failed restore serves nothing")
				assert.ErrorIs(t, s.Put(ctx, "b", "2"), migrate.ErrNotRestored)
				after, _ := os.ReadFile(path)
				assert.Equal(t, before, after, "the file is left alone")

				_, err = s.Restore(ctx)
				require.NoError(t, err, "restore works once the fault cleared")
				assert.Equal(t, want, collect(s))
				require.NoError(t, s.Put(ctx, "b", "2"))
			})
		}
	}
	for _, p := range []migrate.Phase{migrate.PhaseExpand, migrate.PhaseMigrate} {
		for _, f := range saveFaults {
			if f.where == "prev" || f.where == "prevtmp" {
				continue // the restore's save is the file's first
			}
			t.Run(fmt.Sprintf("rewrite/phase%d/%s/%v", p, f.op, f.err), func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "state.json")
				legacy := &migratetest.Explicit[string, string]{}
				legacy.Replace(map[string]string{"a": "1"})
				faulty := &fsystest.Faulty{}
				target := map[string]string{"path": path, "dir": dir}[f.where]
				faulty.Fail(f.op, target, f.err, 1)
				s := newStore(t, faulty, path, p, legacy)
				_, err := s.Restore(ctx)
				require.Error(t, err)
				assert.Contains(t, err.Error(), "saving the restored state")
				assert.Contains(t, err.Error(), "save: "+f.step)
				assert.Zero(t, s.Len())
				_, err = s.Restore(ctx)
				require.NoError(t, err)
				assert.Equal(t, map[string]string{"a": "1"}, loadFile(t, path))
			})
		}
	}
	t.Run("quarantine", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "state.json")
		require.NoError(t, os.WriteFile(path, []byte("garbage"), 0o600))
		legacy := &migratetest.Explicit[string, string]{}
		legacy.Replace(map[string]string{"a": "1"})
		faulty := &fsystest.Faulty{}
		faulty.Fail(fsystest.OpLink, "", syscall.EIO, 1)
		s := newStore(t, faulty, path, migrate.PhaseMigrate, legacy)
		_, err := s.Restore(ctx)
		require.ErrorIs(t, err, syscall.EIO)
		assert.Contains(t, err.Error(), "could not be moved aside")
		b, _ := os.ReadFile(path)
		assert.Equal(t, "garbage", string(b), "the unreadable file stays in place")
		rep, err := s.Restore(ctx)
		require.NoError(t, err)
		assert.NotEmpty(t, rep.Quarantined)
		q, _ := os.ReadFile(rep.Quarantined)
		assert.Equal(t, "garbage", string(q))
	})
}

// newStore opens the checkpoint at path through faulty, with opts, and
// builds a Store for phase on it and legacy; the Store is closed at cleanup.
func newStore(t *testing.T, faulty fsys.FS, path string, p migrate.Phase, legacy *migratetest.Explicit[string, string], opts ...checkpoint.Option) *migrate.Store[string, string] {
	t.Helper()
	cp, err := checkpoint.Open[string, string](context.Background(), path, append([]checkpoint.Option{fsystest.WithFS(faulty)}, opts...)...)
	require.NoError(t, err)
	s, err := migrate.New(migrate.Config[string, string]{Phase: p, Legacy: legacy, Checkpoint: cp})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// openStoreWith is newStore, restored.
func openStoreWith(t *testing.T, faulty fsys.FS, path string, p migrate.Phase, legacy *migratetest.Explicit[string, string], opts ...checkpoint.Option) *migrate.Store[string, string] {
	t.Helper()
	s := newStore(t, faulty, path, p, legacy, opts...)
	_, err := s.Restore(context.Background())
	require.NoError(t, err)
	return s
}

func collect[K comparable, V any](s *migrate.Store[K, V]) map[K]V {
	m := map[K]V{}
	for k, v := range s.All() {
		m[k] = v
	}
	return m
}

// loadFile reads the checkpoint at path as another process would.
func loadFile(t *testing.T, path string) map[string]string {
	t.Helper()
	m := checkpoint.NewMemory[string, string]()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	checkpointtest.SetBytes(m, b)
	s, err := m.Load(context.Background())
	require.NoError(t, err)
	return s.Entries
}

// writeFile writes a checkpoint at path as a Store in phase would have.
func writeFile(t *testing.T, path string, phase migrate.Phase, entries map[string]string) {
	t.Helper()
	f, err := checkpoint.Open[string, string](context.Background(), path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Save(context.Background(), checkpoint.Snapshot[string, string]{Meta: checkpoint.Meta{Phase: phase.String()}, Entries: entries}))
}
