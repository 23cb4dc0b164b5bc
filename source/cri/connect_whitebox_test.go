package cri

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/connectivity"

	"github.com/phaseshift/phaseshift/source/cri/critest"
)

// TestRedialAfterTransientFailure drives the Lister's gRPC connection into
// TRANSIENT_FAILURE, where gRPC retries only after its backoff, as it is
// when a runtime dies between connect's probe and the call. Once a runtime
// listens again, the next call finds it through a new connection, and the
// old one is closed.
func TestRedialAfterTransientFailure(t *testing.T) {
	dir, err := os.MkdirTemp("", "cri")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "containerd.sock")

	// A socket file nothing listens on, as a crashed runtime leaves.
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	require.NoError(t, err)
	lis.SetUnlinkOnClose(false)
	require.NoError(t, lis.Close())

	l, err := NewLister(path, WithTimeout(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	old := l.ch
	old.conn.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for s := old.conn.GetState(); s != connectivity.TransientFailure; s = old.conn.GetState() {
		require.True(t, old.conn.WaitForStateChange(ctx, s), "the connection never failed")
	}

	require.NoError(t, os.Remove(path))
	rt := critest.New()
	rt.Add(critest.Sandbox{ID: "a", IPs: []string{"10.0.0.2"}})
	srv, err := rt.Serve(path)
	require.NoError(t, err)
	t.Cleanup(srv.Close)

	got, err := l.Sandboxes(ctx)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.NotSame(t, old, l.ch, "a connection in TRANSIENT_FAILURE must be replaced")
	assert.Equal(t, connectivity.Shutdown, old.conn.GetState(), "the replaced connection must be closed")
	assert.Zero(t, l.ch.users, "every call released its channel")
}
