package main_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// envImpostor makes the test binary a process of another user that serves
// a control socket at the path it names and answers every request "ok",
// with one entry of its own choosing for a list or a get.
const envImpostor = "PHASESHIFT_CMD_TEST_IMPOSTOR"

// impostorIP is the address of the entry the impostor makes up.
const impostorIP = "203.0.113.66"

func runImpostor(sock string) int {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "impostor:", err)
		return 1
	}
	_ = os.Chmod(sock, 0o777) // anyone may connect: root and the daemon's user too
	fmt.Println("ready")
	for {
		c, err := ln.Accept()
		if err != nil {
			return 0
		}
		_, _ = bufio.NewReader(c).ReadString('\n')
		fmt.Fprintf(c, `{"key":{"network":"aws-cni","containerID":"c99","ifName":"eth0"},"value":{"ip":%q,"token":""}}`+"\n", impostorIP)
		fmt.Fprintln(c, `{"status":"ok","count":1}`)
		_ = c.Close()
	}
}

// TestImpostorControlSocketInAStickyDirectory: checkpoint.Open and
// control.Listen accept a directory that others may write when it is
// sticky ("others may create names but not remove or rename this
// user's"), but the name PATH.control.sock is not the daemon's until it
// creates it, and the control socket is opt-in: another user can create
// it first and serve it. The command uses a socket whenever a process
// holds the checkpoint's lock and a socket is at the name, and never asks
// who serves it (the socket's owner, the server's SO_PEERCRED): delete
// then reports "its Store's Delete made it durable" and exits 0 while the
// entry is still in the daemon's file, and list prints the impostor's
// entries as the daemon's.
//
// It fails on the current code: delete exits 0 with the entry still
// there, and list prints the impostor's made-up entry.
func TestImpostorControlSocketInAStickyDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a process as another user needs root (syscall.Credential)")
	}
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, os.ModeSticky|0o777)) // sticky, as /tmp: Open and Listen accept it
	for p := filepath.Dir(dir); p != filepath.Dir(p); p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		require.NoError(t, os.Chmod(p, fi.Mode().Perm()|0o011))
	}
	path := filepath.Join(dir, "state.json")
	// The daemon: it holds the lock and serves no control socket (it is
	// opt-in).
	f, err := checkpoint.Open[key, value](t.Context(), path, checkpointtest.Schema(schema)...)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Save(t.Context(), checkpoint.Snapshot[key, value]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: entries(3)}))

	// The impostor, uid 65534, creates PATH.control.sock and serves it.
	self, err := os.Executable()
	require.NoError(t, err)
	exe := filepath.Join(t.TempDir(), "impostor")
	require.NoError(t, os.WriteFile(exe, readBytes(t, self), 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(exe), 0o755))
	imp := exec.Command(exe)
	imp.Env = append(os.Environ(), envImpostor+"="+path+".control.sock")
	imp.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	imp.Stderr = os.Stderr
	out, err := imp.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, imp.Start())
	t.Cleanup(func() { _ = imp.Process.Kill(); _ = imp.Wait() })
	sc := bufio.NewScanner(out)
	require.True(t, sc.Scan() && sc.Text() == "ready", "the impostor did not start")

	r := run(t, "delete", path, keyJSON(t, k(1)))
	snap, err := f.Load(t.Context())
	require.NoError(t, err)
	_, still := snap.Entries[k(1)]
	assert.False(t, r.code == 0 && still, "delete exited 0 (%q) while the daemon's file still holds the entry: another user's socket answered", r.stdout)

	r = run(t, "list", path)
	assert.NotContains(t, r.stdout, impostorIP, "list printed another user's made-up entry as the daemon's")
}
