package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/control"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// envDaemon makes the test binary a daemon of the checkpoint it names:
// a migrate.Store in phase 3 on a checkpoint.File WithJournal, served on
// its control socket with its restore's report. It says "ready" on
// stdout, then answers "dump" with its Store's entries as one JSON line,
// "put N" by putting entry N, and "exit" by closing and exiting.
const envDaemon = "PHASESHIFT_CMD_TEST_DAEMON"

// envLegacy makes the test daemon run phase 2 over a runtime (an implicit
// legacy) that lists the entries of the comma-separated numbers it holds:
// the checkpoint's others are the restore's orphans.
const envLegacy = "PHASESHIFT_CMD_TEST_LEGACY"

// daemonConfig is the test daemon's Store: phase 3, or phase 2 over the
// runtime envLegacy lists.
func daemonConfig(f *checkpoint.File[key, value]) migrate.Config[key, value] {
	cfg := migrate.Config[key, value]{Phase: migrate.PhaseContract, Checkpoint: f, Version: "test daemon"}
	if list, ok := os.LookupEnv(envLegacy); ok {
		rt := &migratetest.Implicit[key, value]{}
		for _, n := range strings.Split(list, ",") {
			if i, err := strconv.Atoi(n); err == nil {
				rt.Set(k(i), v(i))
			}
		}
		cfg.Phase, cfg.Legacy, cfg.Equal = migrate.PhaseMigrate, rt, func(a, b value) bool { return a == b }
	}
	return cfg
}

func runDaemon(path string) int {
	ctx := context.Background()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "test daemon:", err)
		return 1
	}
	f, err := checkpoint.Open[key, value](ctx, path, append(checkpointtest.Schema(schema), checkpoint.WithJournal())...)
	if err != nil {
		return fail(err)
	}
	store, err := migrate.New(daemonConfig(f))
	if err != nil {
		return fail(err)
	}
	defer store.Close()
	rep, err := store.Restore(ctx)
	if err != nil {
		return fail(err)
	}
	srv, err := control.Listen(control.SocketPath(path), store, control.WithReport(rep))
	if err != nil {
		return fail(err)
	}
	defer srv.Close()
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "dump":
			var ents []entryOf
			for k, v := range store.All() {
				ents = append(ents, entryOf{k, v})
			}
			line, _ := json.Marshal(ents)
			fmt.Println(string(line))
		case "exit":
			return 0
		default:
			var i int
			if _, err := fmt.Sscanf(sc.Text(), "put %d", &i); err != nil {
				return fail(err)
			}
			if err := store.Put(ctx, k(i), v(i)); err != nil {
				return fail(err)
			}
			fmt.Println("put")
		}
	}
	return 0
}

type entryOf struct {
	Key   key
	Value value
}

// daemonProc is a running test daemon.
type daemonProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// startDaemon starts a test daemon on path, with env, and waits for it
// to serve.
func startDaemon(t *testing.T, path string, env ...string) *daemonProc {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self)
	cmd.Env = append(append(os.Environ(), envDaemon+"="+path), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	d := &daemonProc{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	d.out.Buffer(nil, 16<<20)
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Kill()
			_ = d.cmd.Wait()
		}
	})
	require.True(t, d.out.Scan(), "the daemon did not start")
	require.Equal(t, "ready", d.out.Text())
	return d
}

// dump returns what the daemon's Store serves.
func (d *daemonProc) dump(t *testing.T) map[key]value {
	t.Helper()
	_, err := io.WriteString(d.in, "dump\n")
	require.NoError(t, err)
	require.True(t, d.out.Scan())
	var ents []entryOf
	require.NoError(t, json.Unmarshal(d.out.Bytes(), &ents))
	m := map[key]value{}
	for _, e := range ents {
		m[e.Key] = e.Value
	}
	return m
}

// stop makes the daemon close its Store and exit.
func (d *daemonProc) stop(t *testing.T) {
	t.Helper()
	_, err := io.WriteString(d.in, "exit\n")
	require.NoError(t, err)
	require.NoError(t, d.cmd.Wait())
}

// kill stops it with SIGKILL: its socket stays behind, its lock goes.
func (d *daemonProc) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, d.cmd.Process.Kill())
	_ = d.cmd.Wait()
}

// With a daemon running, holding the checkpoint's lock and serving its
// control socket: list and get read its Store, and delete goes through its
// Store's Delete, so that its memory and its file agree afterwards; the
// repairs of the file still refuse (exit 7).
func TestLiveDaemon(t *testing.T) {
	path := journaled(t, t.TempDir())
	d := startDaemon(t, path)
	require.Equal(t, journalState(), d.dump(t))

	r := run(t, "inspect", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, fmt.Sprintf("lock:      held by PID %d", d.cmd.Process.Pid))
	assert.Contains(t, r.stdout, "control:   "+path+".control.sock: list, get and delete go to the running daemon's Store")

	r = run(t, "list", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, journalState(), lines(t, r.stdout))
	r = run(t, "get", path, keyJSON(t, k(2)))
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, map[key]value{k(2): v(2)}, lines(t, r.stdout))
	r = run(t, "get", path, keyJSON(t, k(0)))
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.stderr, "has no entry with key")

	r = run(t, "delete", "--json", path, keyJSON(t, k(2)))
	require.Equal(t, 0, r.code, r.stderr)
	var out repairOut
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, "delete", out.Action)
	assert.Equal(t, k(2), out.Key)
	assert.Empty(t, out.Kept, "the daemon's own write: no copy")
	want := journalState()
	delete(want, k(2))
	assert.Equal(t, want, d.dump(t), "gone from the daemon's memory")
	r = run(t, "list", "--file", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, want, lines(t, r.stdout), "and from its file, now")

	r = run(t, "delete", path, keyJSON(t, k(2)))
	assert.Equal(t, 1, r.code, "a second delete finds nothing")
	r = run(t, "delete", path, `{"network":"aws-cni","containerID":"c1","ifName":"eth0","extra":1}`)
	assert.Equal(t, 2, r.code, "a key the daemon's type cannot read back")
	assert.Contains(t, r.stderr, "does not decode as the daemon's key type")
	r = run(t, "restore-prev", "--lock-wait", "50ms", "--replace-intact", path)
	assert.Equal(t, 7, r.code, "a repair of the file needs the daemon stopped")

	d.stop(t)
	assert.Equal(t, want, mustLoadJournaled(t, path).Entries, "what the next start restores")
	assert.NoFileExists(t, path+".control.sock")
}

// A daemon killed with SIGKILL leaves its socket behind but not its lock:
// the command reads and repairs the file as without a daemon.
func TestLiveDaemonKilled(t *testing.T) {
	path := journaled(t, t.TempDir())
	d := startDaemon(t, path)
	d.kill(t)
	require.FileExists(t, path+".control.sock")

	r := run(t, "inspect", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "left by a daemon that is gone")
	r = run(t, "delete", "--json", path, keyJSON(t, k(1)))
	require.Equal(t, 0, r.code, r.stderr)
	var out repairOut
	decodeJSON(t, r.stdout, &out)
	assert.NotEmpty(t, out.Kept, "a repair of the file, which keeps a copy")
	assert.NotContains(t, mustLoadJournaled(t, path).Entries, k(1))
}

// A daemon killed with SIGKILL leaves its socket behind, and the next one
// holds the lock without serving a socket: inspect says nothing answers on
// it, and list and delete use the file (delete waits for the lock).
func TestLiveDaemonKilledAndAnotherHoldsTheLock(t *testing.T) {
	path := journaled(t, t.TempDir())
	d := startDaemon(t, path)
	d.kill(t)
	require.FileExists(t, path+".control.sock")
	holdLock(t, path)

	r := run(t, "inspect", "--json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var out struct{ Control struct{ Used bool } }
	decodeJSON(t, r.stdout, &out)
	assert.False(t, out.Control.Used, "nothing answers on the socket")
	r = run(t, "inspect", path)
	assert.Contains(t, r.stdout, "nothing answers on it")
	assert.NotContains(t, r.stdout, "go to the running daemon's Store")
	r = run(t, "delete", "--lock-wait", "50ms", path, keyJSON(t, k(1)))
	assert.Equal(t, 7, r.code, "the file's lock is held: %s", r.stderr)
}

// A user who is neither the daemon's nor root cannot use its socket: the
// socket's mode keeps it out, and so does the daemon's check of its peer
// (SO_PEERCRED) when the mode would let it in. The command then exits 6
// and the daemon's Store is unchanged. Running the command as another
// user needs root.
func TestLiveDaemonRefusesAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running the command as another user needs root (syscall.Credential); run the tests as root to check the socket's mode and SO_PEERCRED")
	}
	dir := t.TempDir()
	path := journaled(t, dir)
	d := startDaemon(t, path)
	// The other user reaches the directory, the lock file and the command.
	for p := dir; p != filepath.Dir(p); p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		require.NoError(t, os.Chmod(p, fi.Mode().Perm()|0o011))
	}
	require.NoError(t, os.Chmod(path+".lock", 0o644))
	bin := filepath.Join(t.TempDir(), "phaseshift")
	require.NoError(t, os.WriteFile(bin, readBytes(t, command(t)), 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(bin), 0o755))
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}

	r := runAs(t, bin, nobody, "delete", path, keyJSON(t, k(1)))
	assert.Equal(t, 6, r.code, r.stderr)
	assert.Contains(t, r.stderr, "permission denied")
	assert.Contains(t, r.stderr, "run as the daemon's user or root")

	require.NoError(t, os.Chmod(path+".control.sock", 0o666)) // as if its mode were loosened
	r = runAs(t, bin, nobody, "delete", path, keyJSON(t, k(1)))
	assert.Equal(t, 6, r.code, r.stderr)
	assert.Contains(t, r.stderr, "refused this user")
	assert.Contains(t, r.stderr, "uid 65534 is neither the daemon's (uid 0) nor root")
	assert.Equal(t, journalState(), d.dump(t), "nothing deleted")
}
