package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/internal/testbin"
	"github.com/phaseshift/phaseshift/migrate"
)

// The operator's repair on a live node: the daemon runs (a child process
// holding the checkpoint's lock) with --control-socket, and the built
// phaseshift command deletes a leaked entry through the socket. The
// daemon's memory and its file agree afterwards, and its next start
// restores the same. A user who is neither the daemon's nor root is
// refused.
func TestPhaseshiftDeletesThroughTheControlSocket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, err := testbin.Build(t.TempDir(), "phaseshift", "github.com/phaseshift/phaseshift/cmd/phaseshift", nil, nil)
	require.NoError(t, err)
	_, l := runtimeFor(t)
	endpoint := l.Endpoint()
	dir := t.TempDir()
	state := filepath.Join(dir, "ipam.json")
	self, err := os.Executable()
	require.NoError(t, err)

	d, _, err := startDaemon(ctx, self, endpoint, state, migrate.PhaseContract, "--control-socket")
	require.NoError(t, err)
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.kill()
		}
	})
	for _, id := range []string{"c1", "c2", "c3"} {
		_, err := d.call(request{Op: "add", ID: id})
		require.NoError(t, err)
	}
	require.FileExists(t, state+".control.sock")

	phaseshift := func(cred *syscall.Credential, args ...string) (string, string, int) {
		cmd := exec.CommandContext(ctx, bin, args...)
		if cred != nil {
			bin2 := filepath.Join(t.TempDir(), "phaseshift")
			data, err := os.ReadFile(bin)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(bin2, data, 0o755))
			require.NoError(t, os.Chmod(filepath.Dir(bin2), 0o755))
			cmd = exec.CommandContext(ctx, bin2, args...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			require.NoError(t, err)
		}
		return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
	}
	leaked := `{"network":"demo-net","containerID":"c2","ifName":"eth0"}`
	out, errOut, code := phaseshift(nil, "delete", state, leaked)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "through the running daemon (PID ")
	assert.Contains(t, out, "control socket "+state+".control.sock")

	dump, err := d.call(request{Op: "dump"})
	require.NoError(t, err)
	var memory []string
	for _, e := range dump.Entries {
		memory = append(memory, e.Key.ContainerID)
	}
	assert.Equal(t, []string{"c1", "c3"}, memory, "the daemon no longer serves c2")
	out, errOut, code = phaseshift(nil, "list", "--file", state)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, []string{"c1", "c3"}, containerIDs(t, out), "and its file agrees")
	out, errOut, code = phaseshift(nil, "list", state)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, []string{"c1", "c3"}, containerIDs(t, out), "list through the socket")

	if os.Geteuid() == 0 {
		for p := dir; p != filepath.Dir(p); p = filepath.Dir(p) {
			fi, err := os.Stat(p)
			require.NoError(t, err)
			require.NoError(t, os.Chmod(p, fi.Mode().Perm()|0o011))
		}
		require.NoError(t, os.Chmod(state+".control.sock", 0o666)) // the daemon's own check, not the mode, refuses
		_, errOut, code = phaseshift(&syscall.Credential{Uid: 65534, Gid: 65534}, "delete", state, `{"network":"demo-net","containerID":"c1","ifName":"eth0"}`)
		assert.Equal(t, 6, code, errOut)
		assert.Contains(t, errOut, "uid 65534 is neither the daemon's (uid 0) nor root")
	} else {
		t.Log("not root: the refusal of another user is tested where the tests run as root (syscall.Credential needs it)")
	}

	require.NoError(t, d.exit())
	assert.NoFileExists(t, state+".control.sock", "removed at exit")
	m, _ := open(t, migrate.PhaseContract, nil, state)
	var restored []string
	for k := range m.Entries() {
		restored = append(restored, k.ContainerID)
	}
	slices.Sort(restored)
	assert.Equal(t, []string{"c1", "c3"}, restored, "the next start restores what the daemon served")
}

// containerIDs reads phaseshift list's output.
func containerIDs(t *testing.T, out string) []string {
	t.Helper()
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e struct{ Key Key }
		require.NoError(t, json.Unmarshal([]byte(line), &e))
		ids = append(ids, e.Key.ContainerID)
	}
	slices.Sort(ids)
	return ids
}
