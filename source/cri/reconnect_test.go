package cri_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/phaseshift/phaseshift/source/cri"
)

// shortSocketPath returns a socket path in a new temporary directory short
// enough for sun_path, removed when the test ends.
func shortSocketPath(t *testing.T, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cri")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, name)
}

// TestReconnectAfterCrash kills a runtime process with -9, leaving its
// socket file behind, keeps it down while the same Lister keeps asking,
// and restarts it: every call while it is down fails at once with
// ErrRuntimeNotResponding, and the first call after the new process
// listens succeeds. gRPC's own reconnect waits out a backoff that grows
// to seconds while the runtime is down, so a Lister that relied on it
// would fail that first call (issue 26: 5 of 6 runs with one crash).
func TestReconnectAfterCrash(t *testing.T) {
	ctx := context.Background()
	path := shortSocketPath(t, "containerd.sock")
	// A call that hung would wait out this timeout and fail with
	// ErrTimeout; a call that fails at once fails with something else.
	l := dial(t, path, cri.WithTimeout(time.Minute))

	rt := startChild(t, path)
	got, err := l.Sandboxes(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids(got))

	for crash := range 2 {
		rt.kill()
		require.FileExists(t, path, "a killed runtime leaves its socket file")

		// Down for a few seconds, asked ten times a second, as a daemon
		// retrying its restore would: long enough for gRPC's backoff to
		// grow past a second.
		down := time.NewTicker(100 * time.Millisecond)
		for range 30 {
			<-down.C
			_, err := l.Sandboxes(ctx)
			require.ErrorIs(t, err, cri.ErrRuntimeNotResponding, "crash %d: while the runtime is down", crash)
			require.NotErrorIs(t, err, cri.ErrTimeout, "crash %d: a call while the runtime is down must fail at once", crash)
			require.ErrorContains(t, err, "connection refused")
			require.ErrorIs(t, err, syscall.ECONNREFUSED)
			require.Equal(t, codes.Unavailable, status.Code(err), "the gRPC status the call would have failed with")
		}
		down.Stop()

		rt = startChild(t, path)
		got, err := l.Sandboxes(ctx)
		require.NoError(t, err, "crash %d: the first call after the runtime listens again", crash)
		assert.Equal(t, []string{"a"}, ids(got))
		info, err := l.Runtime(ctx)
		require.NoError(t, err)
		assert.Equal(t, "child-runtime", info.Name)
	}
}
