package control_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/control"
)

// *migrate.Store is what Listen serves.
var _ control.Store[key, alloc] = (*migrate.Store[key, alloc])(nil)

// envClient makes the test binary a client of the socket it names: a
// process of another user, when the test runs it with other credentials.
const envClient = "PHASESHIFT_CONTROL_TEST_CLIENT"

func TestMain(m *testing.M) {
	if path := os.Getenv(envClient); path != "" {
		_, err := control.NewClient(path).List(context.Background(), func([]byte) error { return nil })
		fmt.Print(errorKind(err))
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// errorKind names what err is, for a child to report.
func errorKind(err error) string {
	switch {
	case err == nil:
		return "served"
	case errors.Is(err, control.ErrRefused):
		return "refused: " + err.Error()
	case errors.Is(err, os.ErrPermission):
		return "permission denied"
	}
	return "other: " + err.Error()
}

type key struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
}

type alloc struct {
	IP string `json:"ip"`
}

// daemon is a Store on a real checkpoint file in phase 3, served on its
// control socket, as a daemon runs it.
type daemon struct {
	path  string
	store *migrate.Store[key, alloc]
	srv   *control.Server[key, alloc]
}

func startDaemon(t *testing.T, n int, opts ...control.Option) *daemon {
	t.Helper()
	ctx := context.Background()
	d := &daemon{path: filepath.Join(t.TempDir(), "state.json")}
	f, err := checkpoint.Open[key, alloc](ctx, d.path)
	require.NoError(t, err)
	d.store, err = migrate.New(migrate.Config[key, alloc]{Phase: migrate.PhaseContract, Checkpoint: f})
	require.NoError(t, err)
	_, err = d.store.Restore(ctx)
	require.NoError(t, err)
	for i := range n {
		require.NoError(t, d.store.Put(ctx, k(i), alloc{IP: fmt.Sprintf("10.0.0.%d", i)}))
	}
	d.srv, err = control.Listen(control.SocketPath(d.path), d.store, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, d.srv.Close())
		_ = d.store.Close()
	})
	return d
}

func k(i int) key { return key{Network: "n", ContainerID: fmt.Sprintf("c%d", i)} }

func keyJSON(kk key) json.RawMessage {
	b, _ := json.Marshal(kk)
	return b
}

func (d *daemon) client() *control.Client { return control.NewClient(d.srv.Path()) }

// fileEntries reads the checkpoint as the next start of the daemon would.
func fileEntries(t *testing.T, path string) map[key]alloc {
	t.Helper()
	f, err := checkpoint.Open[key, alloc](context.Background(), path)
	require.NoError(t, err)
	defer f.Close()
	s, err := f.Load(context.Background())
	require.NoError(t, err)
	return s.Entries
}

func TestListGetDelete(t *testing.T) {
	ctx := context.Background()
	d := startDaemon(t, 3)
	assert.Equal(t, d.path+".control.sock", d.srv.Path())

	var lines []string
	res, err := d.client().List(ctx, func(l []byte) error {
		lines = append(lines, string(l))
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, control.ListResult{Count: 3}, res)
	assert.Equal(t, []string{
		`{"key":{"network":"n","containerID":"c0"},"value":{"ip":"10.0.0.0"}}` + "\n",
		`{"key":{"network":"n","containerID":"c1"},"value":{"ip":"10.0.0.1"}}` + "\n",
		`{"key":{"network":"n","containerID":"c2"},"value":{"ip":"10.0.0.2"}}` + "\n",
	}, lines)

	line, err := d.client().Get(ctx, json.RawMessage(`{ "containerID": "c1", "network": "n" }`))
	require.NoError(t, err)
	assert.Equal(t, `{"key":{"network":"n","containerID":"c1"},"value":{"ip":"10.0.0.1"}}`+"\n", string(line))

	require.NoError(t, d.client().Delete(ctx, keyJSON(k(1))))
	_, ok := d.store.Get(k(1))
	assert.False(t, ok, "gone from the daemon's memory")
	// The daemon's file, read as its next start reads it.
	require.NoError(t, d.srv.Close())
	require.NoError(t, d.store.Close())
	assert.Equal(t, map[key]alloc{k(0): {IP: "10.0.0.0"}, k(2): {IP: "10.0.0.2"}}, fileEntries(t, d.path), "and from its file")
	assert.NoFileExists(t, d.srv.Path(), "Close removes the socket")
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	d := startDaemon(t, 2)
	c := d.client()

	_, err := c.Get(ctx, keyJSON(k(9)))
	assert.ErrorIs(t, err, control.ErrNoSuchKey)
	assert.ErrorIs(t, c.Delete(ctx, keyJSON(k(9))), control.ErrNoSuchKey)

	for name, bad := range map[string]string{
		"a field the key type lacks": `{"network":"n","containerID":"c0","ifName":"eth0"}`,
		"a value of another type":    `{"network":"n","containerID":987654}`,
		"not JSON":                   `{"network":`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Get(ctx, json.RawMessage(bad))
			if name == "not JSON" {
				// The request line itself is not JSON.
				var re *control.RemoteError
				require.ErrorAs(t, err, &re)
				assert.Equal(t, control.CodeBadRequest, re.Code)
				return
			}
			assert.ErrorIs(t, err, control.ErrBadKey)
			assert.NotContains(t, err.Error(), `"n"`, "the key's values are not quoted")
			assert.NotContains(t, err.Error(), "987654", "the key's values are not quoted")
		})
	}
	assert.Len(t, fileEntries0(t, d), 2, "nothing was deleted")

	// A request that is not one of the three.
	conn, err := net.Dial("unix", d.srv.Path())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte(`{"op":"put","key":{"network":"n","containerID":"c0"}}` + "\n"))
	require.NoError(t, err)
	var st struct{ Status, Code, Error string }
	require.NoError(t, json.NewDecoder(conn).Decode(&st))
	assert.Equal(t, "error", st.Status)
	assert.Equal(t, control.CodeBadRequest, st.Code)
	assert.Contains(t, st.Error, "use list, get, delete, report or prune-orphans")
}

// fileEntries0 is the daemon's memory.
func fileEntries0(t *testing.T, d *daemon) map[key]alloc {
	t.Helper()
	m := map[key]alloc{}
	for kk, v := range d.store.All() {
		m[kk] = v
	}
	return m
}

// A key whose JSON does not read back (a float that JSON cannot carry
// exactly) is refused, so that a key typed by hand never names another
// entry than it says.
func TestKeysMustReadBack(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	type fkey struct{ N float64 }
	f, err := checkpoint.Open[fkey, int](ctx, path)
	require.NoError(t, err)
	store, err := migrate.New(migrate.Config[fkey, int]{Phase: migrate.PhaseContract, Checkpoint: f})
	require.NoError(t, err)
	defer store.Close()
	_, err = store.Restore(ctx)
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, fkey{N: 9007199254740992}, 1))
	srv, err := control.Listen(control.SocketPath(path), store)
	require.NoError(t, err)
	defer srv.Close()
	c := control.NewClient(srv.Path())

	_, err = c.Get(ctx, json.RawMessage(`{"N":9007199254740993}`))
	assert.ErrorIs(t, err, control.ErrBadKey, "2^53+1 decodes to 2^53: another key")
	assert.ErrorIs(t, c.Delete(ctx, json.RawMessage(`{"N":9007199254740993}`)), control.ErrBadKey)
	_, ok := store.Get(fkey{N: 9007199254740992})
	assert.True(t, ok, "nothing deleted")
	_, err = c.Get(ctx, json.RawMessage(`{"N":9.007199254740992e15}`))
	assert.NoError(t, err, "the same number, spelt otherwise")
}

// The socket is owner-only; a socket a dead daemon left is replaced;
// anything else at the path is not; a path too long for a socket is an
// error naming it.
func TestSocketFile(t *testing.T) {
	d := startDaemon(t, 1)
	fi, err := os.Lstat(d.srv.Path())
	require.NoError(t, err)
	assert.Equal(t, os.ModeSocket|0o600, fi.Mode()&(os.ModeSocket|os.ModePerm))
	entries, err := os.ReadDir(filepath.Dir(d.path))
	require.NoError(t, err)
	for _, e := range entries {
		assert.False(t, strings.HasPrefix(e.Name(), ".ctl-"), "no temporary socket left: %s", e.Name())
	}

	// A daemon killed with SIGKILL leaves its socket: the next replaces it.
	dir := t.TempDir()
	sock := control.SocketPath(filepath.Join(dir, "state.json"))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	require.NoError(t, err)
	ln.SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	srv, err := control.Listen(sock, d.store)
	require.NoError(t, err)
	_, err = control.NewClient(sock).List(context.Background(), func([]byte) error { return nil })
	assert.NoError(t, err)
	require.NoError(t, srv.Close())
	require.NoError(t, srv.Close(), "Close is idempotent")

	// Not a socket: left alone.
	require.NoError(t, os.WriteFile(sock, []byte("mine"), 0o600))
	_, err = control.Listen(sock, d.store)
	assert.ErrorContains(t, err, "is not a socket")
	assert.FileExists(t, sock)

	long := filepath.Join(dir, strings.Repeat("d", 120), "state.json")
	_, err = control.Listen(control.SocketPath(long), d.store)
	assert.ErrorContains(t, err, "a unix socket's path is at most 107")

	_, err = control.Listen(sock+"2", d.store, control.WithTimeout(0))
	assert.ErrorIs(t, err, control.ErrInvalidOption)
	_, err = control.Listen(sock+"2", d.store, nil)
	assert.ErrorIs(t, err, control.ErrInvalidOption)
}

// Close removes the socket only if it is still the one Listen made.
func TestCloseLeavesAnotherSocket(t *testing.T) {
	d := startDaemon(t, 1)
	require.NoError(t, os.Remove(d.srv.Path()))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: d.srv.Path(), Net: "unix"})
	require.NoError(t, err)
	defer ln.Close()
	require.NoError(t, d.srv.Close())
	assert.FileExists(t, d.srv.Path())
}

// More connections than the server serves at once are answered busy, not
// queued.
func TestBusy(t *testing.T) {
	d := startDaemon(t, 1, control.WithTimeout(time.Minute))
	var held []net.Conn
	for range 4 {
		c, err := net.Dial("unix", d.srv.Path())
		require.NoError(t, err)
		held = append(held, c) // connected, request not sent: each holds a slot
	}
	_, err := d.client().List(context.Background(), func([]byte) error { return nil })
	var re *control.RemoteError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, control.CodeBusy, re.Code)
	for _, c := range held {
		_ = c.Close()
	}
}

// A peer of another user is refused, by the socket's mode first and by
// its credentials (SO_PEERCRED) when the mode lets it connect; root and
// the daemon's user are served. The other user is a child process run
// with other credentials, which needs root.
func TestAnotherUserIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a peer as another user needs root (syscall.Credential); run the tests as root to check SO_PEERCRED")
	}
	d := startDaemon(t, 1)
	// The other user must reach the socket's directory.
	for dir := filepath.Dir(d.path); dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		require.NoError(t, err)
		if fi.Mode().Perm()&0o001 == 0 {
			require.NoError(t, os.Chmod(dir, fi.Mode().Perm()|0o011))
		}
	}
	// The test binary, where the other user can run it.
	self := filepath.Join(t.TempDir(), "control.test")
	exe, err := os.Executable()
	require.NoError(t, err)
	data, err := os.ReadFile(exe)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(self, data, 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(self), 0o755))
	asNobody := func() string {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), envClient+"="+d.srv.Path())
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Run(), out.String())
		return out.String()
	}
	assert.Equal(t, "permission denied", asNobody(), "the socket is owner-only")

	require.NoError(t, os.Chmod(d.srv.Path(), 0o666)) // as if its mode were loosened
	got := asNobody()
	assert.True(t, strings.HasPrefix(got, "refused: "), got)
	assert.Contains(t, got, "uid 65534 is neither the daemon's (uid 0) nor root")

	_, err = d.client().List(context.Background(), func([]byte) error { return nil })
	assert.NoError(t, err, "root is served")
}
