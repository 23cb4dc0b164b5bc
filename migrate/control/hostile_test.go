package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/fsys/fsystest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/control"
)

// The tests of a hostile node and of a slow or panicking daemon (issue 34
// items 2, 5, 8, 10-14). Each failed on the code before the fix, as its
// comment says.

// Listen changes the mode of no name in the socket's directory: it binds
// and chmods the socket in a new 0700 directory of its own, and renames it
// into place. inotify reports a change of mode (IN_ATTRIB) of any name in
// the directory. Before, Listen bound .ctl-<hex> in the shared directory
// and chmodded it by name, and a chmod by name follows whatever another
// user who can write the directory swapped in for it (a symlink to a file
// root then made 0600): the event came.
func TestListenChmodsNoNameInTheDirectory(t *testing.T) {
	d := startDaemon(t, 1)
	dir := t.TempDir()
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	require.NoError(t, err)
	defer unix.Close(in)
	_, err = unix.InotifyAddWatch(in, dir, unix.IN_ATTRIB|unix.IN_CREATE)
	require.NoError(t, err)
	srv, err := control.Listen(control.SocketPath(filepath.Join(dir, "state.json")), d.store)
	require.NoError(t, err)
	require.NoError(t, srv.Close())
	buf := make([]byte, 64<<10)
	n, err := unix.Read(in, buf)
	require.NoError(t, err, "Listen created something in the directory: an event is there")
	created := 0
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
		off += unix.SizeofInotifyEvent + int(ev.Len)
		assert.Zero(t, ev.Mask&unix.IN_ATTRIB, "the mode of %s in the shared directory was changed", name)
		if ev.Mask&unix.IN_CREATE != 0 {
			created++
		}
	}
	assert.NotZero(t, created)
}

// Listen never changes the mode of a file another process swaps in for its
// socket: the attack itself. An attacker watches the directory (inotify)
// and, as soon as a name appears, puts a symlink to a victim file in its
// place. (Before, the attack needs to win a race between two system calls:
// TestListenChmodsNoNameInTheDirectory is the test that failed.)
func TestListenChmodsNothingSwappedIn(t *testing.T) {
	d := startDaemon(t, 1)
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.WriteFile(victim, []byte("x"), 0o644))
	in, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(in)
	_, err = unix.InotifyAddWatch(in, dir, unix.IN_CREATE)
	require.NoError(t, err)
	var stop atomic.Bool
	attacked := make(chan struct{})
	go func() {
		defer close(attacked)
		buf := make([]byte, 64<<10)
		for !stop.Load() {
			n, err := unix.Read(in, buf)
			if err != nil || n <= 0 {
				return
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
				off += unix.SizeofInotifyEvent + int(ev.Len)
				if strings.HasPrefix(name, ".ctl-") {
					p := filepath.Join(dir, name)
					_ = os.Remove(p)
					_ = os.Symlink(victim, p)
				}
			}
		}
	}()
	sock := control.SocketPath(filepath.Join(dir, "state.json"))
	for range 300 {
		srv, err := control.Listen(sock, d.store)
		if err == nil {
			require.NoError(t, srv.Close())
		}
		fi, err := os.Stat(victim)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "Listen chmodded the file a symlink swapped in for its socket led to")
		clean(t, dir)
	}
	stop.Store(true)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "wake"), nil, 0o600)) // an event for the reader
	<-attacked
}

// clean removes what the attacker and Listen left in dir.
func clean(t *testing.T, dir string) {
	t.Helper()
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, n := range names {
		require.NoError(t, os.RemoveAll(filepath.Join(dir, n.Name())))
	}
}

// Listen checks the socket's directory as checkpoint.Open does. Before,
// it listened in a directory anyone could write.
func TestListenChecksTheDirectory(t *testing.T) {
	d := startDaemon(t, 1)
	dir := filepath.Join(t.TempDir(), "shared")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.Chmod(dir, 0o777))
	_, err := control.Listen(control.SocketPath(filepath.Join(dir, "state.json")), d.store)
	require.ErrorIs(t, err, control.ErrUnsafe)
	assert.Contains(t, err.Error(), "chmod go-w "+dir)

	require.NoError(t, os.Chmod(dir, 0o777|os.ModeSticky)) // as /tmp
	srv, err := control.Listen(control.SocketPath(filepath.Join(dir, "state.json")), d.store)
	require.NoError(t, err)
	require.NoError(t, srv.Close())
}

// A second Listen on a socket that is still served is refused, and the
// first server goes on serving. Before, the second took the socket over.
func TestListenDoesNotTakeOverAServedSocket(t *testing.T) {
	d := startDaemon(t, 2)
	_, err := control.Listen(d.srv.Path(), d.store)
	require.ErrorIs(t, err, control.ErrInUse)
	assert.Contains(t, err.Error(), fmt.Sprintf("process %d", os.Getpid()))
	res, err := d.client().List(context.Background(), func([]byte) error { return nil })
	require.NoError(t, err)
	assert.Equal(t, 2, res.Count, "the first server still answers")
}

// panicky is a value whose MarshalJSON panics while panicking is set: a
// user's type with a bug that shows only on some values.
type panicky struct{ N int }

var panicking atomic.Bool

func (p panicky) MarshalJSON() ([]byte, error) {
	if panicking.Load() {
		panic("boom")
	}
	return json.Marshal(p.N)
}

func (p *panicky) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &p.N) }

// A panicking MarshalJSON on list or get is answered as a failure, and
// the daemon goes on serving. Before, the panic killed the daemon (here:
// the test binary).
func TestPanickingMarshalJSONIsRecovered(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	f, err := checkpoint.Open[string, panicky](ctx, path)
	require.NoError(t, err)
	store, err := migrate.New(migrate.Config[string, panicky]{Phase: migrate.PhaseContract, Checkpoint: f})
	require.NoError(t, err)
	defer store.Close()
	_, err = store.Restore(ctx)
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, "a", panicky{N: 1}))
	srv, err := control.Listen(control.SocketPath(path), store)
	require.NoError(t, err)
	defer srv.Close()
	c := control.NewClient(srv.Path())

	panicking.Store(true)
	_, err = c.List(ctx, func([]byte) error { return nil })
	var re *control.RemoteError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, control.CodeFailed, re.Code)
	assert.Contains(t, re.Message, "the daemon panicked answering list (a string")
	_, err = c.Get(ctx, json.RawMessage(`"a"`))
	require.ErrorAs(t, err, &re)
	assert.Equal(t, control.CodeFailed, re.Code)
	panicking.Store(false)
	line, err := c.Get(ctx, json.RawMessage(`"a"`))
	require.NoError(t, err, "still serving")
	assert.Equal(t, `{"key":"a","value":1}`+"\n", string(line))
}

// A client that makes one request at a time is never told busy, even
// with all but one slot held by other connections. Before, a slot was
// given back only after the answer was read and the connection closed,
// and 58-194 of 500 such requests were answered busy.
func TestSequentialRequestsAreNeverBusy(t *testing.T) {
	d := startDaemon(t, 3, control.WithTimeout(time.Minute))
	for range 3 {
		c, err := net.Dial("unix", d.srv.Path())
		require.NoError(t, err)
		defer c.Close() // connected, request not sent: each holds a slot
	}
	busy := 0
	for range 500 {
		_, err := d.client().List(context.Background(), func([]byte) error { return nil })
		var re *control.RemoteError
		if errors.As(err, &re) && re.Code == control.CodeBusy {
			busy++
			continue
		}
		require.NoError(t, err)
	}
	assert.Zero(t, busy, "requests answered busy")
}

// A delete whose save outlasts WithTimeout is reported done once it is
// durable. Before, the connection's deadline, set when it was accepted,
// had passed by then: the client read EOF, and phaseshift delete said the
// delete failed although it had happened.
func TestSlowDeleteIsReportedDone(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	faulty := &fsystest.Faulty{}
	f, err := checkpoint.Open[key, alloc](ctx, path, fsystest.WithFS(faulty))
	require.NoError(t, err)
	store, err := migrate.New(migrate.Config[key, alloc]{Phase: migrate.PhaseContract, Checkpoint: f})
	require.NoError(t, err)
	defer store.Close()
	_, err = store.Restore(ctx)
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, k(1), alloc{IP: "10.0.0.1"}))
	require.NoError(t, store.Put(ctx, k(2), alloc{IP: "10.0.0.2"}))
	const timeout = 100 * time.Millisecond
	srv, err := control.Listen(control.SocketPath(path), store, control.WithTimeout(timeout))
	require.NoError(t, err)
	defer srv.Close()

	reached, release := faulty.Pause(fsystest.OpFsync, path+".journal")
	done := make(chan error, 1)
	go func() { done <- control.NewClient(srv.Path()).Delete(ctx, keyJSON(k(1))) }()
	<-reached // the Delete's commit is writing
	// What is tested is a save that outlasts the timeout: let it pass.
	<-time.After(3 * timeout)
	release()
	require.NoError(t, <-done, "the delete is durable: it is reported done")
	_, ok := store.Get(k(1))
	assert.False(t, ok)
}

// A key with a field twice is refused as a bad key. Before, the last of
// the two won, and the key named another entry than the first field says.
func TestKeyWithAFieldTwiceIsRefused(t *testing.T) {
	d := startDaemon(t, 3)
	twice := json.RawMessage(`{"network":"n","containerID":"c1","containerID":"c2"}`)
	_, err := d.client().Get(context.Background(), twice)
	require.ErrorIs(t, err, control.ErrBadKey)
	assert.Contains(t, err.Error(), `the key has the field "containerID" twice`)
	require.ErrorIs(t, d.client().Delete(context.Background(), twice), control.ErrBadKey)
	assert.Len(t, fileEntries0(t, d), 3, "nothing deleted")
}

// get answers with the key the entry is stored under, as list shows it,
// not the key asked for: with a Match, they differ. Before, get echoed the
// key asked for.
func TestGetAnswersWithTheStoredKey(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	f, err := checkpoint.Open[key, alloc](ctx, path)
	require.NoError(t, err)
	byContainer := func(kk key) key { return key{ContainerID: kk.ContainerID} }
	store, err := migrate.New(migrate.Config[key, alloc]{Phase: migrate.PhaseContract, Checkpoint: f, Match: byContainer})
	require.NoError(t, err)
	defer store.Close()
	_, err = store.Restore(ctx)
	require.NoError(t, err)
	stored := key{Network: "_migrated-from-cri", ContainerID: "c1"}
	require.NoError(t, store.Put(ctx, stored, alloc{IP: "10.0.0.1"}))
	srv, err := control.Listen(control.SocketPath(path), store)
	require.NoError(t, err)
	defer srv.Close()
	c := control.NewClient(srv.Path())

	var listed []string
	_, err = c.List(ctx, func(l []byte) error { listed = append(listed, string(l)); return nil })
	require.NoError(t, err)
	got, err := c.Get(ctx, keyJSON(key{Network: "aws-cni", ContainerID: "c1"}))
	require.NoError(t, err)
	assert.Equal(t, `{"key":{"network":"_migrated-from-cri","containerID":"c1"},"value":{"ip":"10.0.0.1"}}`+"\n", string(got))
	assert.Equal(t, listed, []string{string(got)}, "get and list agree")
}
