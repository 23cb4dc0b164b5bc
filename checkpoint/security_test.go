package checkpoint_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// The tests of a hostile node (issue 34): what another user, or a process
// that could write the checkpoint's directory, plants at the names the
// package uses. Each failed on the code before the fix, as its comment
// says.

// saveOne writes a checkpoint with one entry at path and closes it.
func saveOne(t *testing.T, path string) {
	t.Helper()
	ctx := context.Background()
	f, err := checkpoint.Open[string, string](ctx, path)
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
	require.NoError(t, f.Close())
}

// unblocked runs fn and returns its error; if fn has not returned after a
// long while, blocked in an open of the FIFO at fifo, it opens the FIFO's
// other end, which lets fn go on, and fails the test.
func unblocked(t *testing.T, fifo string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		for _, flag := range []int{os.O_WRONLY, os.O_RDONLY} {
			if w, err := os.OpenFile(fifo, flag|syscall.O_NONBLOCK, 0); err == nil {
				_ = w.Close()
			}
		}
		<-done
		t.Fatalf("blocked for 20s on the FIFO at %s", fifo)
		return nil
	}
}

// A FIFO at the checkpoint's, the journal's or the lock's name is refused,
// without blocking. Before, Load blocked forever in open(2) on the
// checkpoint or the journal (a context cannot cancel it), and Open took a
// flock on a FIFO at the lock's name.
func TestFIFOIsRefusedWithoutBlocking(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"checkpoint", ".journal", ".lock"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			fifo := path
			if name != "checkpoint" {
				saveOne(t, path)
				fifo = path + name
				if name == ".journal" {
					// A journal exists only after a commit.
					require.NoFileExists(t, fifo)
				}
				_ = os.Remove(fifo)
			}
			require.NoError(t, syscall.Mkfifo(fifo, 0o600))
			err := unblocked(t, fifo, func() error {
				f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithLockWait(0))
				if err != nil {
					return err
				}
				defer f.Close()
				_, err = f.Load(ctx)
				return err
			})
			require.ErrorIs(t, err, checkpoint.ErrUnsafe)
			assert.Contains(t, err.Error(), fifo)
			assert.Contains(t, err.Error(), "a named pipe (FIFO), not a regular file")
			assert.Contains(t, err.Error(), "rm "+fifo, "says what to do")
		})
	}
}

// The lock file is 0600 whatever WithFileMode says, and an older lock file
// with a looser mode is made 0600: flock needs only read access, so a
// lock file others can read is a lock others can hold, keeping the daemon
// from starting. Before, the lock file took WithFileMode's mode, and a
// user of a 0755 directory (hostPath DirectoryOrCreate) took the lock.
func TestLockFileIsPrivate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755)) // as a hostPath DirectoryOrCreate makes it
	path := filepath.Join(dir, "state.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithFileMode(0o644))
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
	require.NoError(t, f.Close())
	assertMode(t, path, 0o644) // for a monitoring agent, say
	assertMode(t, path+".lock", 0o600)

	require.NoError(t, os.Chmod(path+".lock", 0o644)) // as an older version left it
	f, err = checkpoint.Open[string, string](ctx, path, checkpoint.WithFileMode(0o644))
	require.NoError(t, err)
	assertMode(t, path+".lock", 0o600)
	require.NoError(t, f.Close())

	if os.Geteuid() != 0 {
		t.Skip("trying the lock as another user needs root")
	}
	// Another user tries to hold the lock while no daemon runs.
	cmd := exec.Command("flock", "--nonblock", "--exclusive", path+".lock", "true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "another user took the lock: %s", out)
	assert.Contains(t, string(out), "Permission denied")
}

func assertMode(t *testing.T, name string, want os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(name)
	require.NoError(t, err)
	assert.Equal(t, want, fi.Mode().Perm(), "%s: mode %v", name, fi.Mode())
}

// ErrLocked names the holder the kernel shows (/proc/locks), not only the
// PID in the lock file, which anyone who can write the file can change.
// Before, the error named the PID in the file alone.
func TestLockedNamesTheKernelsHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.json")
	child := startLockHolder(t, path)
	require.NoError(t, os.WriteFile(path+".lock", []byte("1\n"), 0o600)) // a lie

	_, err := checkpoint.Open[podKey, alloc](context.Background(), path, checkpoint.WithLockWait(0))
	require.ErrorIs(t, err, checkpoint.ErrLocked)
	assert.Contains(t, err.Error(), fmt.Sprintf("by process %d", child.Process.Pid))
	assert.Contains(t, err.Error(), "according to the kernel (/proc/locks)")
	assert.Contains(t, err.Error(), "the lock file names process 1, which the kernel does not show holding it")
}

// A hard link planted at the lock's name is refused, and the file it
// shares is not truncated. Before, Open opened the name with O_CREAT
// without O_EXCL, truncated it and wrote its PID into it: into whatever
// file the link led to.
func TestHardLinkAtTheLockIsNotTruncated(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	victim := filepath.Join(t.TempDir(), "precious")
	require.NoError(t, os.WriteFile(victim, []byte("precious\n"), 0o600))
	require.NoError(t, os.Link(victim, path+".lock"))

	_, err := checkpoint.Open[string, string](context.Background(), path, checkpoint.WithLockWait(0))
	require.ErrorIs(t, err, checkpoint.ErrUnsafe)
	assert.Contains(t, err.Error(), path+".lock")
	assert.Contains(t, err.Error(), "2 hard links")
	b, err := os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, "precious\n", string(b), "the linked file is untouched")
}

// A checkpoint with a hard link from outside its directory is refused;
// one whose other name is in its directory (path and .prev share a file
// between a save's two renames, and a crash can leave them so) is read.
// Before, Load read the file whatever its links.
func TestHardLinkFromOutsideIsRefused(t *testing.T) {
	ctx := context.Background()
	outside := filepath.Join(t.TempDir(), "elsewhere.json")
	saveOne(t, outside)
	path := filepath.Join(t.TempDir(), "state.json")
	require.NoError(t, os.Link(outside, path))

	f, err := checkpoint.Open[string, string](ctx, path)
	require.NoError(t, err)
	_, err = f.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrUnsafe)
	assert.Contains(t, err.Error(), "2 hard links, 1 of them outside its directory")
	require.NoError(t, f.Close())

	// Inside: path and path.prev are one file, as a crash can leave them.
	require.NoError(t, os.Remove(path))
	saveOne(t, path)
	require.NoError(t, os.Link(path, path+".prev"))
	f, err = checkpoint.Open[string, string](ctx, path)
	require.NoError(t, err)
	s, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "1"}, s.Entries)
	require.NoError(t, f.Close())
}

// A file another user owns is refused. Before, Load read it.
func TestAnotherUsersFileIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user needs root")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	saveOne(t, path)
	require.NoError(t, os.Chown(path, 65534, 65534))
	f, err := checkpoint.Open[string, string](ctx, path)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrUnsafe)
	assert.Contains(t, err.Error(), "owned by uid 65534, neither this process's uid 0 nor root")
	assert.Contains(t, err.Error(), "chown 0 "+path)
}

// Open checks the directory: owned by this user or root, and writable by
// nobody else unless sticky. Before, any directory was accepted.
func TestDirectoryIsChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode os.FileMode
		uid  int // -1: this process's
		ok   bool
	}{
		{"0755, as hostPath DirectoryOrCreate makes it", 0o755, -1, true},
		{"0700", 0o700, -1, true},
		{"1777, as /tmp", 0o777 | os.ModeSticky, -1, true},
		{"0777", 0o777, -1, false},
		{"0775", 0o775, -1, false},
		{"0757", 0o757, -1, false},
		{"another user's 0755", 0o755, 65534, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.uid >= 0 && os.Geteuid() != 0 {
				t.Skip("giving a directory to another user needs root")
			}
			dir := filepath.Join(t.TempDir(), "d")
			require.NoError(t, os.Mkdir(dir, 0o700))
			require.NoError(t, os.Chmod(dir, tc.mode))
			if tc.uid >= 0 {
				require.NoError(t, os.Chown(dir, tc.uid, tc.uid))
			}
			f, err := checkpoint.Open[string, string](context.Background(), filepath.Join(dir, "state.json"))
			if tc.ok {
				require.NoError(t, err)
				require.NoError(t, f.Close())
				return
			}
			require.ErrorIs(t, err, checkpoint.ErrUnsafe)
			assert.Contains(t, err.Error(), dir)
			if tc.uid >= 0 {
				assert.Contains(t, err.Error(), "owned by uid 65534")
			} else {
				assert.Contains(t, err.Error(), "chmod go-w "+dir, "names the fix")
			}
			assert.NoFileExists(t, filepath.Join(dir, "state.json.lock"), "nothing is created in it")
		})
	}
}

// atSeq rewrites the checkpoint at path (seq 1) to seq, with a checksum
// that holds: what anyone who can write the file can do, since CRC-32C is
// no secret.
func atSeq(t *testing.T, path string, seq uint64) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	body := strings.Replace(string(b[:bytes.LastIndex(b, []byte(`  "checksum"`))]), "\"seq\": 1,", fmt.Sprintf("\"seq\": %d,", seq), 1)
	sum := crc32.Checksum([]byte(body), crc32.MakeTable(crc32.Castagnoli))
	require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, "%s  \"checksum\": \"crc32c:%08x\"\n}\n", body, sum), 0o600))
}

// A checkpoint at seq 2^64-1 (or anywhere at or above 2^63, which no
// writer reaches by counting saves) is refused as corrupt, so that no save
// after it wraps to seq 0, which would make the new file look older than
// the one it replaced; once it is quarantined, saves start again. Before,
// the file loaded and the next save wrote seq 0.
func TestSeqAtTheTopIsRefused(t *testing.T) {
	ctx := context.Background()
	for _, seq := range []uint64{math.MaxUint64, 1 << 63} {
		t.Run(strconv.FormatUint(seq, 10), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithoutJournal())
			require.NoError(t, err)
			defer f.Close()
			require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
			atSeq(t, path, seq)

			_, err = f.Load(ctx)
			require.ErrorIs(t, err, checkpoint.ErrCorrupt)
			assert.Contains(t, err.Error(), "at or above 2^63")
			assert.Contains(t, err.Error(), "quarantine it")
			err = f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "2"}})
			require.ErrorIs(t, err, checkpoint.ErrUnreadable, "no save over it")
			_, err = f.Quarantine(ctx)
			require.NoError(t, err)
			require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "2"}}))
			s, err := f.Load(ctx)
			require.NoError(t, err)
			assert.NotZero(t, s.Meta.Seq)
			assert.Less(t, s.Meta.Seq, uint64(1<<63), "counting on from this File's last save")
		})
	}
}
