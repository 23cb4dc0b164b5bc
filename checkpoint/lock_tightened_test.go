package checkpoint_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// Tightening a loose lock file's mode does not take the lock back from
// who could read it before: flock needs only an open descriptor, and a
// chmod does not close the ones already open. Another user who opened the
// lock file while an older version left it 0644 (issue 34 item 1) keeps
// that descriptor across the upgrade, lets the daemon start (Open tightens
// the file to 0600 and says nothing), and takes the lock whenever the
// daemon is down - a restart, a crash - so that it can never start again.
// The package doc says of the lock file: "made 0600 (flock needs only read
// access: a lock file others can read is a lock others can hold)"; a lock
// file others have read is still a lock others can hold, until it is
// replaced by a new file.
//
// It fails on the current code: the second Open fails with ErrLocked,
// held by the other user's process.
func TestTighteningTheLockFileRevokesEarlierReaders(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("acting as another user needs root")
	}
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("needs flock(1)")
	}
	ctx := context.Background()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755)) // a hostPath DirectoryOrCreate
	for p := filepath.Dir(dir); p != filepath.Dir(p); p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		require.NoError(t, os.Chmod(p, fi.Mode().Perm()|0o011))
	}
	path := filepath.Join(dir, "state.json")
	saveOne(t, path)
	lock := path + ".lock"
	require.NoError(t, os.Chmod(lock, 0o644)) // as an older version left it (WithFileMode(0o644))

	// Another user opens the lock file while it is readable, and locks
	// it later, when told to.
	other := exec.Command("sh", "-c", `exec 3<"$1" || exit 1; echo opened; read x; flock -n -x 3 && echo locked; read y`, "sh", lock)
	other.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	in, err := other.StdinPipe()
	require.NoError(t, err)
	out, err := other.StdoutPipe()
	require.NoError(t, err)
	other.Stderr = os.Stderr
	require.NoError(t, other.Start())
	t.Cleanup(func() { _ = in.Close(); _ = other.Wait() })
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan() && lines.Text() == "opened", "the other user could not open the 0644 lock file")

	// The upgraded daemon starts: the lock file is made 0600.
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithFileMode(0o644))
	require.NoError(t, err)
	fi, err := os.Stat(lock)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.NoError(t, f.Close()) // a restart

	_, err = io.WriteString(in, "go\n")
	require.NoError(t, err)
	require.True(t, lines.Scan() && lines.Text() == "locked", "the other user could not take the lock")

	f, err = checkpoint.Open[string, string](ctx, path, checkpoint.WithFileMode(0o644), checkpoint.WithLockWait(0))
	if err == nil {
		_ = f.Close()
	}
	assert.NoError(t, err, "another user holds the daemon's lock through a descriptor it opened before the lock file was tightened")
}
