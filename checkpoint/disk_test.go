package checkpoint_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/fsys/fsystest"
)

// TestOpenLeavesAnotherCheckpointsTemporaryFileAlone opens dir/vm while a
// save of a checkpoint whose name starts with "vm" (dir/vm1, dir/vm0) has
// written its temporary file and not yet renamed it: the save must still
// succeed, and the temporary file must still be there after the Open.
//
// How it failed before the fix: Open's cleanup took any "."+"vm"+digits
// for its own leftover (renameio names a temporary file "."+base+a random
// int63), so it deleted ".vm0<digits>" every time, and ".vm1<digits>"
// whenever the random number had fewer than 19 digits (about one save in
// nine; hence the rounds): "opening vm removed .vm0868...", then the save
// failed with "rename ... no such file or directory".
func TestOpenLeavesAnotherCheckpointsTemporaryFileAlone(t *testing.T) {
	for _, tc := range []struct {
		other  string
		rounds int
	}{{"vm0", 1}, {"vm1", 60}, {"vm.json", 3}, {"v", 3}} {
		t.Run(tc.other, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			other := filepath.Join(dir, tc.other)
			faulty := &fsystest.Faulty{}
			f1, err := checkpoint.Open[string, string](ctx, other, fsystest.WithFS(faulty))
			require.NoError(t, err)
			defer f1.Close()
			for round := range tc.rounds {
				reached, release := faulty.Pause(fsystest.OpFsync, other)
				saved := make(chan error, 1)
				want := map[string]string{"round": fmt.Sprint(round)}
				go func() {
					saved <- f1.Save(ctx, checkpoint.Snapshot[string, string]{Entries: want})
				}()
				select {
				case <-reached:
				case <-time.After(10 * time.Second):
					t.Fatal("the save never reached its fsync")
				}
				temp := newFiles(t, dir, tc.other, tc.other+".lock", tc.other+".prev")
				require.Len(t, temp, 1, "the save has one temporary file")

				f, err := checkpoint.Open[string, string](ctx, filepath.Join(dir, "vm"))
				require.NoError(t, err)
				_, err = os.Stat(filepath.Join(dir, temp[0]))
				release()
				require.NoError(t, f.Close())
				assert.NoError(t, err, "round %d: opening vm removed %s, the live temporary file of %s", round, temp[0], tc.other)
				require.NoError(t, <-saved, "round %d: the save of %s must not be broken by opening vm", round, tc.other)
				s, err := f1.Load(ctx)
				require.NoError(t, err)
				require.Equal(t, want, s.Entries)
			}
		})
	}
}

// newFiles lists dir's names other than those given and vm's own.
func newFiles(t *testing.T, dir string, known ...string) []string {
	t.Helper()
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, n := range names {
		if !slices.Contains(known, n.Name()) && n.Name() != "vm.lock" {
			out = append(out, n.Name())
		}
	}
	return out
}

// TestSaveRecreatesARemovedCheckpoint removes the checkpoint under an open
// File, as an operator's rm or a cleanup script would: the next Commit and
// the next Save must write the whole state the File holds again, and log
// once per disappearance that the file had gone.
//
// How it failed before the fix: every save began by hard-linking the
// missing file as .prev, so each one failed with "checkpoint save: keep
// previous ...: link ... no such file or directory", for ever.
func TestSaveRecreatesARemovedCheckpoint(t *testing.T) {
	ctx := context.Background()
	core, logs := observer.New(zapcore.InfoLevel)
	// WithoutJournal: every commit replaces the file and keeps .prev (with
	// the journal, a commit over a removed file writes it whole too; see
	// TestJournalCheckpointRemovedWhileOpen).
	f, path := openFile(t, checkpoint.WithLogger(zap.New(core)), checkpoint.WithoutJournal())
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(2)}))
	want := entriesN(2)
	put := func(id string) []checkpoint.Change[podKey, alloc] {
		want[key(id)] = alloc{IP: netip.MustParseAddr("10.1.1.1")}
		return []checkpoint.Change[podKey, alloc]{{Key: key(id), Value: want[key(id)]}}
	}
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, put("x")))
	disappeared := func() int { return logs.FilterMessageSnippet("had disappeared").Len() }

	require.NoError(t, os.Remove(path))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, put("y")), "a Commit after the file was removed")
	got := loadPath(t, path)
	assert.Equal(t, want, got.Entries, "the Commit wrote every entry, not just its change")
	assert.Equal(t, uint64(3), got.Meta.Seq, "the sequence goes on")
	assert.Equal(t, 1, disappeared(), "the disappearance is logged once")
	assert.Equal(t, uint64(1), loadPath(t, path+".prev").Meta.Seq, ".prev is left as it was")

	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, put("z")))
	assert.Equal(t, want, loadPath(t, path).Entries)
	assert.Equal(t, uint64(3), loadPath(t, path+".prev").Meta.Seq, "the next save keeps the recreated file as .prev")
	assert.Equal(t, 1, disappeared(), "a save that finds the file logs nothing")

	require.NoError(t, os.Remove(path))
	require.NoError(t, os.Remove(path+".prev"))
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(3)}), "a Save after the file was removed")
	assert.Equal(t, entriesN(3), loadPath(t, path).Entries)
	assert.Equal(t, 2, disappeared())
	for _, e := range logs.FilterMessageSnippet("had disappeared").All() {
		assert.Equal(t, path, e.ContextMap()["path"])
	}
}

// TestSaveRecreatesARemovedDirectory removes the checkpoint's directory,
// lock file included, under an open File (and, in the second case, creates
// it again empty): the next save must recreate the directory as Open does
// (0700), write the whole state, and take the lock again at its path, so
// that a second Open is still refused.
//
// How it failed before the fix: the save failed on the missing file (as
// in TestSaveRecreatesARemovedCheckpoint), and a second Open took a fresh
// lock file at the same path: two owners.
func TestSaveRecreatesARemovedDirectory(t *testing.T) {
	for _, recreate := range []bool{false, true} {
		t.Run(fmt.Sprintf("recreated=%v", recreate), func(t *testing.T) {
			ctx := context.Background()
			core, logs := observer.New(zapcore.InfoLevel)
			f, path := openFile(t, checkpoint.WithLogger(zap.New(core)))
			dir := filepath.Dir(path)
			require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(2)}))

			require.NoError(t, os.RemoveAll(dir))
			if recreate {
				require.NoError(t, os.Mkdir(dir, 0o700))
			}
			ch := []checkpoint.Change[podKey, alloc]{{Key: key("new"), Value: alloc{}}}
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, ch))
			want := entriesN(2)
			want[key("new")] = alloc{}
			assert.Equal(t, want, loadPath(t, path).Entries)
			fi, err := os.Stat(dir)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
			assert.FileExists(t, path+".lock")

			_, err = checkpoint.Open[podKey, alloc](ctx, path, checkpoint.WithLockWait(0))
			require.ErrorIs(t, err, checkpoint.ErrLocked, "the File took the lock again at its path")
			assert.Equal(t, 1, logs.FilterMessageSnippet("lock file had disappeared").Len())
			assert.Equal(t, 1, logs.FilterMessageSnippet("checkpoint file had disappeared").Len())
		})
	}
}

// TestSaveAfterAnotherFileTookTheLock removes the directory of an open
// File, so that a second File can open the same path (nothing is left to
// stop it), and has that second File save. The first File must then refuse
// to save (ErrLocked) while the second holds the lock, and, once the second
// has closed, still refuse to overwrite what it wrote until a Load has read
// it.
//
// How it failed before the fix: the first File's save replaced the second
// File's checkpoint while the second held the lock ("Expected error with
// "checkpoint is locked" in chain but got nil").
func TestSaveAfterAnotherFileTookTheLock(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(2)}))
	require.NoError(t, os.RemoveAll(filepath.Dir(path)))

	g, err := checkpoint.Open[podKey, alloc](ctx, path, checkpoint.WithLockWait(0))
	require.NoError(t, err, "the lock file went with the directory")
	_, err = g.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNotExist)
	theirs := map[podKey]alloc{key("theirs"): {}}
	require.NoError(t, g.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: theirs}))

	err = f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(3)})
	require.ErrorIs(t, err, checkpoint.ErrLocked, "another File holds the lock at the path now")
	assert.Contains(t, err.Error(), path)
	err = f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{{Key: key("c"), Value: alloc{}}})
	require.ErrorIs(t, err, checkpoint.ErrLocked)
	assert.Equal(t, theirs, loadPath(t, path).Entries, "the other File's checkpoint is untouched")

	require.NoError(t, g.Close())
	err = f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(3)})
	require.Error(t, err, "another File wrote the checkpoint while this one had no lock at the path")
	assert.ErrorIs(t, err, checkpoint.ErrUnreadable)
	assert.Equal(t, theirs, loadPath(t, path).Entries, "what the other File wrote is untouched")
	_, err = checkpoint.Open[podKey, alloc](ctx, path, checkpoint.WithLockWait(0))
	require.ErrorIs(t, err, checkpoint.ErrLocked, "the first File holds the lock again")

	s, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, theirs, s.Entries)
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{{Key: key("c"), Value: alloc{}}}), "after a Load, saves work again")
	theirs[key("c")] = alloc{}
	assert.Equal(t, theirs, loadPath(t, path).Entries)
}
