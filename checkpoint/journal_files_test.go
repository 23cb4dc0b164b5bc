package checkpoint_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The journal as a file beside the checkpoint: quarantined with it, never
// followed through a symlink, checked against the file it follows, given
// the file's mode.

// TestJournalQuarantineJournalAlone attacks "a journal whose file is
// missing is corruption: Load fails with ErrCorrupt, Save and Commit refuse
// (ErrUnreadable), and Quarantine moves ... the journal aside": with no
// file at all, only a journal.
func TestJournalQuarantineJournalAlone(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("b", "2")}))
	require.NoError(t, f.Close())
	j, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))

	g, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer g.Close()
	_, err = g.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt, "a journal without its file")
	assert.ErrorIs(t, g.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "3")}), checkpoint.ErrUnreadable)
	assert.ErrorIs(t, g.Save(ctx, checkpoint.Snapshot[string, string]{}), checkpoint.ErrUnreadable)
	_, err = os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist, "the refusals wrote nothing")

	dst, err := g.Quarantine(ctx)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(dst, path+".corrupt-"), dst)
	assert.True(t, strings.HasSuffix(dst, ".journal"), "the journal keeps its suffix: %s", dst)
	moved, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.Equal(t, j, moved, "the journal is kept aside, byte for byte")
	_, err = os.Stat(path + ".journal")
	assert.ErrorIs(t, err, os.ErrNotExist)

	s, err := g.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNotExist, "after Quarantine, nothing")
	assert.Empty(t, s.Entries)
	require.NoError(t, g.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "3")}))
	s, err = g.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"c": "3"}, s.Entries, "a fresh start, without the quarantined journal")
}

// TestJournalSymlinkNotFollowed attacks "a symlink planted at any
// name this package uses is reported or replaced, never followed" for the
// journal: a symlink at path+".journal" to a file of the attacker's. Load
// must not read through it as the journal, and a Commit must not append to
// its target.
func TestJournalSymlinkNotFollowed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("b", "2")}))
	real, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	target := filepath.Join(dir, "victim")
	require.NoError(t, os.WriteFile(target, real, 0o600)) // a valid journal, even
	require.NoError(t, os.Remove(path+".journal"))
	require.NoError(t, os.Symlink(target, path+".journal"))

	_, err = f.Load(ctx)
	require.Error(t, err, "a symlinked journal is reported, not read through")
	assert.Contains(t, err.Error(), path+".journal")

	// A File that has not read it yet: its Commit must not append to the
	// symlink's target.
	require.NoError(t, os.Remove(path+".journal"))
	_, err = f.Load(ctx)
	require.NoError(t, err)
	require.NoError(t, os.Symlink(target, path+".journal"))
	err = f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "3")})
	after, rerr := os.ReadFile(target)
	require.NoError(t, rerr)
	assert.Equal(t, real, after, "the symlink's target is never written (commit error: %v)", err)
}

// TestJournalChangedUnderAnOpenFile attacks "that the journal is as
// long as this File left it (if not, the commit writes the whole file
// instead)": the journal cut short or removed by hand under an open File.
// The commit succeeds and what the File acknowledged, all of it, is on
// disk after.
func TestJournalChangedUnderAnOpenFile(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		do   func(t *testing.T, journal string)
	}{
		{"cut", func(t *testing.T, journal string) {
			data, err := os.ReadFile(journal)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(journal, data[:bytes.IndexByte(data, '\n')+1], 0o600))
		}},
		{"removed", func(t *testing.T, journal string) { require.NoError(t, os.Remove(journal)) }},
		{"emptied", func(t *testing.T, journal string) { require.NoError(t, os.WriteFile(journal, nil, 0o600)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.json")
			f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
			require.NoError(t, err)
			defer f.Close()
			require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("b", "2")}))
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "3")}))
			tc.do(t, path+".journal")
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("d", "4")}))
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sdel("a")}))
			require.NoError(t, f.Close())
			g, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
			require.NoError(t, err)
			defer g.Close()
			s, err := g.Load(ctx)
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"b": "2", "c": "3", "d": "4"}, s.Entries, "every acknowledged commit")
			assert.Equal(t, uint64(5), s.Meta.Seq)
		})
	}
}

// TestJournalQuarantineTogether attacks "Quarantine moves the file
// and the journal aside together (path+".corrupt-<time>" and the same
// name + ".journal")" on a real file with a corrupt journal, and checks
// that the kept pair loads as it was.
func TestJournalQuarantineTogether(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("b", "2")}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "3")}))
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	j, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	bad := bytes.Clone(j)
	bad[5] ^= 1 // the first of two records
	require.NoError(t, os.WriteFile(path+".journal", bad, 0o600))
	_, err = f.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	require.ErrorIs(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("d", "4")}), checkpoint.ErrUnreadable)
	assert.Equal(t, bad, mustRead(t, path+".journal"), "a refused commit leaves the journal alone")

	dst, err := f.Quarantine(ctx)
	require.NoError(t, err)
	assert.Equal(t, file, mustRead(t, dst))
	assert.Equal(t, bad, mustRead(t, dst+".journal"), "the journal beside its file, under the same name")
	assert.NoFileExists(t, path)
	assert.NoFileExists(t, path+".journal")
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("d", "4")}))
	s, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"d": "4"}, s.Entries)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

// TestJournalEmptyWithoutFile attacks "a journal whose file is
// missing is corruption" at its edge: an empty journal without its file
// holds no records, so Load reports no checkpoint, and the next commit
// starts afresh and removes it.
func TestJournalEmptyWithoutFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, os.WriteFile(path+".journal", nil, 0o600))
	_, err = f.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNotExist)
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("a", "1")}))
	assert.NoFileExists(t, path+".journal", "the empty journal was removed by the first save")
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("b", "2")}))
	s, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "1", "b": "2"}, s.Entries)
	assert.Equal(t, 1, f.Journal().Records)
}

// TestJournalFileReplacedUnderTheDaemon attacks "it checks ... that
// the checkpoint the journal follows is still at its path" (Durable
// appends): an operator copies .prev over the checkpoint by hand,
// bypassing the lock, while a WithJournal File has it open and appends.
// An acknowledged commit must not be appended to a journal that no longer
// follows the file at the path: the restart would find the checkpoint
// corrupt and serve none of them.
func TestJournalFileReplacedUnderTheDaemon(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1", "b": "2"}}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "3")}))
	// cp state.json.prev state.json (a copy: a new inode, an older seq).
	require.NoError(t, os.WriteFile(path+".tmp-by-hand", mustRead(t, path+".prev"), 0o600))
	require.NoError(t, os.Rename(path+".tmp-by-hand", path))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("d", "4")}))
	require.NoError(t, f.Close())

	g, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer g.Close()
	s, err := g.Load(ctx)
	require.NoError(t, err, "an acknowledged commit left the checkpoint unreadable")
	assert.Equal(t, map[string]string{"a": "1", "b": "2", "c": "3", "d": "4"}, s.Entries)
}

// TestJournalFileMode attacks "The checkpoint, its .prev copy, its
// journal and the lock file are created 0600 (see WithFileMode)": the
// journal gets the file's mode, the default and a chosen one, whatever
// the umask lets through.
func TestJournalFileMode(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []os.FileMode{0o600, 0o640} {
		path := filepath.Join(t.TempDir(), "s.json")
		opts := []checkpoint.Option{checkpoint.WithJournal()}
		if mode != 0o600 {
			opts = append(opts, checkpoint.WithFileMode(mode))
		}
		f, err := checkpoint.Open[string, string](ctx, path, opts...)
		require.NoError(t, err)
		require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
		require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("b", "2")}))
		require.NoError(t, f.Close())
		for _, name := range []string{path, path + ".journal"} {
			fi, err := os.Stat(name)
			require.NoError(t, err)
			assert.Equal(t, mode, fi.Mode().Perm(), name)
		}
	}
}

// TestJournalFileOverwrittenInPlace attacks the same promise for a file
// written over in place, which keeps its inode: `cp state.json.prev
// state.json` (cp truncates and writes the target it finds), `: >
// state.json`, and an in-place write of a file of the same size and
// header. Every commit acknowledged after it must still be loaded by the
// next Open (found on main: the commit after the cp returned nil, and the
// next Load failed with ErrCorrupt).
func TestJournalFileOverwrittenInPlace(t *testing.T) {
	cpPrev := func(t *testing.T, path string) {
		cp, err := exec.LookPath("cp")
		if err != nil {
			t.Skip("no cp on this machine:", err)
		}
		out, err := exec.Command(cp, path+".prev", path).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, path string)
	}{
		{"cp of .prev", cpPrev},
		{"truncated", func(t *testing.T, path string) { require.NoError(t, os.Truncate(path, 0)) }},
		{"same size and header, other entries, resealed", func(t *testing.T, path string) {
			data := mustRead(t, path)
			edited := bytes.Replace(data, []byte(`"value":"2"`), []byte(`"value":"9"`), 1)
			require.NotEqual(t, data, edited)
			// Recompute the checksum, as a careful hand edit would: the
			// file's header and size are those of the file the journal
			// follows, and its mtime may be too (one clock tick).
			at := bytes.LastIndex(edited, []byte("  \"checksum\": \"crc32c:"))
			require.Positive(t, at)
			sum := fmt.Sprintf("%08x", crc32.Checksum(edited[:at], crc32.MakeTable(crc32.Castagnoli)))
			edited = append(edited[:at:at], fmt.Sprintf("  \"checksum\": \"crc32c:%s\"\n}\n", sum)...)
			require.Len(t, edited, len(data))
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteAt(edited, 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "s.json")
			f, err := checkpoint.Open[string, string](ctx, path)
			require.NoError(t, err)
			defer f.Close()
			require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
			require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1", "b": "2"}}))
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "3")}))
			ino := inode(t, path)
			tc.write(t, path)
			require.Equal(t, ino, inode(t, path), "written over in place, not replaced")
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("d", "4")}))
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("e", "5")}))
			require.NoError(t, f.Close())

			g, err := checkpoint.Open[string, string](ctx, path)
			require.NoError(t, err)
			defer g.Close()
			s, err := g.Load(ctx)
			require.NoError(t, err, "acknowledged commits left the checkpoint unreadable")
			assert.Equal(t, map[string]string{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5"}, s.Entries)
		})
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return fi.Sys().(*syscall.Stat_t).Ino
}
