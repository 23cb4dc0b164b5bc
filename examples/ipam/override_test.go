package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/source/cri/critest"
)

// TestNodePhaseOverrideIsReadAsThePackagesReadTheirFiles: the override
// <state>.phase sits beside the checkpoint, whose files are all opened
// without following a symlink or blocking (README, Security), and errors
// carry paths, never what a file holds. The override is read with
// os.ReadFile: a symlink there is followed, and whatever the file it
// points to holds is quoted, whole, in the error the daemon prints and
// exits with (a FIFO there, likewise followed and opened blocking, hangs
// the daemon before it serves, ignoring SIGTERM: seen with the built
// binary and timeout(1)). Fails on main: the target's contents are in
// the daemon's stderr.
func TestNodePhaseOverrideIsReadAsThePackagesReadTheirFiles(t *testing.T) {
	_, l := runtimeFor(t, critest.Sandbox{ID: "c1", Name: "p1", Namespace: "default", IPs: []string{"10.0.0.2"}})
	dir := t.TempDir()
	state := filepath.Join(dir, "ipam.json")
	secret := filepath.Join(t.TempDir(), "credentials")
	require.NoError(t, os.WriteFile(secret, []byte("aws_secret_access_key=tok-secret-override\n"), 0o600))
	require.NoError(t, os.Symlink(secret, state+".phase"))

	var out, stderr bytes.Buffer
	code := run(context.Background(), []string{"--cri", l.Endpoint(), "--state", state, "--phase", "migrate"}, nil, &out, &stderr)
	t.Logf("exit %d: %s", code, stderr.String())
	assert.NotEqual(t, 0, code, "a symlink at the override is not followed")
	assert.Contains(t, stderr.String(), state+".phase", "the error names the override")
	assert.NotContains(t, stderr.String(), "tok-secret-override", "the error quotes what the file a symlink points to holds")
}

// TestNodePhaseOverrideFIFOIsRefused: a FIFO at the override is refused at
// once, not opened for reading, which would block the daemon before it
// serves (and hung it on main until kill -9).
func TestNodePhaseOverrideFIFOIsRefused(t *testing.T) {
	_, l := runtimeFor(t, critest.Sandbox{ID: "c1", Name: "p1", Namespace: "default", IPs: []string{"10.0.0.2"}})
	state := filepath.Join(t.TempDir(), "ipam.json")
	require.NoError(t, syscall.Mkfifo(state+".phase", 0o600))
	var out, stderr bytes.Buffer
	code := run(context.Background(), []string{"--cri", l.Endpoint(), "--state", state, "--phase", "migrate"}, nil, &out, &stderr)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr.String(), "not a regular file")
}
