package cri_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/phaseshift/phaseshift/source"
	"github.com/phaseshift/phaseshift/source/cri"
)

func TestSandboxesErrors(t *testing.T) {
	ctx := context.Background()

	t.Run("socket missing", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "containerd", "containerd.sock")
		start := time.Now()
		_, err := dial(t, "unix://"+path).Sandboxes(ctx)
		assert.ErrorIs(t, err, cri.ErrSocketMissing)
		assert.ErrorIs(t, err, os.ErrNotExist)
		assert.Contains(t, err.Error(), "runtime socket "+path+" does not exist")
		assert.Contains(t, err.Error(), "is containerd running?")
		assert.Contains(t, err.Error(), "unix:///var/run/crio/crio.sock")
		assert.Less(t, time.Since(start), time.Second)
	})

	t.Run("directory where the socket should be", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "crio.sock")
		require.NoError(t, os.Mkdir(path, 0o755))
		_, err := dial(t, path).Sandboxes(ctx)
		assert.ErrorIs(t, err, cri.ErrSocketMissing)
		assert.Contains(t, err.Error(), "is a directory, not a socket")
		assert.Contains(t, err.Error(), "is CRI-O running?")
	})

	t.Run("runtime stopped, socket file left", func(t *testing.T) {
		_, srv := startRuntime(t, pod("a", "10.0.0.2"))
		l := dial(t, srv.Endpoint())
		_, err := l.Sandboxes(ctx)
		require.NoError(t, err)

		srv.Kill()
		require.FileExists(t, srv.Path)
		start := time.Now()
		_, err = l.Sandboxes(ctx)
		assert.ErrorIs(t, err, cri.ErrRuntimeNotResponding)
		assert.NotErrorIs(t, err, cri.ErrTimeout)
		assert.Contains(t, err.Error(), "runtime not answering at "+srv.Endpoint())
		assert.Equal(t, codes.Unavailable, status.Code(err), "the gRPC status must stay reachable")
		assert.Less(t, time.Since(start), 2*time.Second, "a refused connection must fail fast, not wait out the timeout")
	})

	t.Run("stale socket file at the first call", func(t *testing.T) {
		dir, err := os.MkdirTemp("", "cri")
		require.NoError(t, err)
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		path := filepath.Join(dir, "containerd.sock")
		lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		require.NoError(t, err)
		lis.SetUnlinkOnClose(false)
		require.NoError(t, lis.Close())

		_, err = dial(t, path).Sandboxes(ctx)
		assert.ErrorIs(t, err, cri.ErrRuntimeNotResponding)
		assert.ErrorIs(t, err, syscall.ECONNREFUSED)
		assert.Contains(t, err.Error(), "runtime not answering at "+path)
		assert.Contains(t, err.Error(), "connection refused")
	})

	t.Run("runtime slower than the timeout", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"))
		rt.SetDelay(time.Minute)
		start := time.Now()
		_, err := dial(t, srv.Endpoint(), cri.WithTimeout(100*time.Millisecond)).Sandboxes(ctx)
		assert.Less(t, time.Since(start), 2*time.Second)
		assert.ErrorIs(t, err, cri.ErrTimeout)
		assert.ErrorIs(t, err, cri.ErrRuntimeNotResponding)
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err))
		assert.Contains(t, err.Error(), srv.Endpoint())
		assert.Contains(t, err.Error(), "within 100ms")
	})

	t.Run("runtime hangs after listing", func(t *testing.T) {
		rt, srv := startRuntime(t)
		for i := range 40 {
			id := fmt.Sprintf("sb-%02d", i)
			rt.Add(pod(id, fmt.Sprintf("10.0.0.%d", i+2)))
			rt.DelayStatus(id, time.Minute)
		}
		start := time.Now()
		got, err := dial(t, srv.Endpoint(), cri.WithTimeout(200*time.Millisecond)).Sandboxes(ctx)
		assert.Less(t, time.Since(start), 2*time.Second, "a hung runtime must not be waited out sandbox by sandbox")
		assert.Nil(t, got)
		assert.False(t, source.Partial(err), "a runtime that stopped answering is not a per-sandbox problem")
		assert.ErrorIs(t, err, cri.ErrTimeout)
		assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "the last status call's gRPC status must stay reachable")
		assert.Contains(t, err.Error(), "stopped answering")
	})

	t.Run("caller's deadline first", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"))
		rt.SetDelay(time.Minute)
		ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
		assert.ErrorIs(t, err, cri.ErrTimeout)
		assert.Contains(t, err.Error(), "before the caller's deadline")
	})

	t.Run("caller cancels", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"))
		rt.SetDelay(time.Minute)
		ctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, cri.ErrTimeout)
	})

	t.Run("runtime without CRI v1", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"))
		rt.SetVersion("containerd", "v1.5.18")
		rt.SetV1Unimplemented(true)
		_, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
		assert.ErrorIs(t, err, cri.ErrUnsupportedAPI)
		assert.Equal(t, codes.Unimplemented, status.Code(err))
		assert.Contains(t, err.Error(), "containerd v1.5.18")
		assert.Contains(t, err.Error(), "does not support CRI v1, only v1alpha2")
	})
}
