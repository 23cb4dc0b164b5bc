package cri_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/phaseshift/phaseshift/source/cri"
)

func TestNewLister(t *testing.T) {
	for _, endpoint := range []string{"unix:///run/containerd/containerd.sock", "/run/containerd/containerd.sock"} {
		t.Run("accepts "+endpoint, func(t *testing.T) {
			// The socket does not exist here: NewLister must not look.
			l, err := cri.NewLister(endpoint)
			require.NoError(t, err)
			assert.Equal(t, endpoint, l.Endpoint())
			assert.NoError(t, l.Close())
		})
	}

	for name, endpoint := range map[string]string{
		"rejects empty":         "",
		"rejects tcp":           "tcp://127.0.0.1:10010",
		"rejects npipe":         "npipe:////./pipe/containerd-containerd",
		"rejects relative path": "run/containerd/containerd.sock",
		"rejects unix relative": "unix://run/containerd/containerd.sock",
		"rejects too long path": "unix:///" + strings.Repeat("d/", 60) + "containerd.sock",
	} {
		t.Run(name, func(t *testing.T) {
			l, err := cri.NewLister(endpoint)
			require.Error(t, err)
			assert.Nil(t, l)
			assert.ErrorIs(t, err, cri.ErrInvalidEndpoint)
			if name != "rejects too long path" {
				assert.Contains(t, err.Error(), "unix:///path", "the error should say what is accepted")
			}
		})
	}

	t.Run("rejects invalid options", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			opts []cri.Option
			want string // what the error must say
		}{
			{"zero timeout", []cri.Option{cri.WithTimeout(0)}, "cri.WithTimeout(0s): the timeout must be positive"},
			{"negative timeout", []cri.Option{cri.WithTimeout(-time.Second)}, "cri.WithTimeout(-1s)"},
			{"zero size", []cri.Option{cri.WithMaxReceiveSize(0)}, "cri.WithMaxReceiveSize(0): the size must be positive"},
			{"negative size", []cri.Option{cri.WithMaxReceiveSize(-1)}, "cri.WithMaxReceiveSize(-1)"},
			{"nil option", []cri.Option{cri.WithTimeout(time.Second), nil}, "option 2 of 2 is nil"},
			{"bad option overridden later", []cri.Option{cri.WithTimeout(-2 * time.Second), cri.WithTimeout(time.Second)}, "cri.WithTimeout(-2s)"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				l, err := cri.NewLister("/run/containerd/containerd.sock", tc.opts...)
				assert.Nil(t, l)
				assert.ErrorIs(t, err, cri.ErrInvalidOption)
				assert.ErrorContains(t, err, tc.want)
			})
		}
	})

	t.Run("accepts valid options", func(t *testing.T) {
		l, err := cri.NewLister("/run/containerd/containerd.sock",
			cri.WithTimeout(time.Millisecond), cri.WithMaxReceiveSize(1), cri.WithHostNetworkSandboxes(),
			cri.WithLogger(zap.NewNop()), cri.WithLogger(nil))
		require.NoError(t, err)
		assert.NoError(t, l.Close())
	})

	t.Run("does no I/O until the first call", func(t *testing.T) {
		// A socket with a listener that counts connections and hangs up.
		// Waiting for a connect that must not come can only miss one on a
		// slow machine, never report one that did not happen.
		dir, err := os.MkdirTemp("", "cri")
		require.NoError(t, err)
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		path := filepath.Join(dir, "containerd.sock")
		lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		require.NoError(t, err)
		var accepted atomic.Int32
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				_ = c.Close()
			}
		}()
		t.Cleanup(func() { _ = lis.Close(); <-done })

		l := dial(t, path, cri.WithTimeout(time.Second))
		assert.Never(t, func() bool { return accepted.Load() > 0 }, 200*time.Millisecond, 10*time.Millisecond,
			"NewLister connected before any call")

		// The first call connects: this is what the check above would see.
		_, err = l.Runtime(context.Background())
		assert.ErrorIs(t, err, cri.ErrRuntimeNotResponding)
		assert.Eventually(t, func() bool { return accepted.Load() > 0 }, 5*time.Second, 10*time.Millisecond)
	})
}

func TestClose(t *testing.T) {
	_, srv := startRuntime(t, pod("a", "10.0.0.2"))
	l, err := cri.NewLister(srv.Endpoint())
	require.NoError(t, err)
	_, err = l.Sandboxes(context.Background())
	require.NoError(t, err)

	t.Run("is idempotent", func(t *testing.T) {
		assert.NoError(t, l.Close())
		assert.NoError(t, l.Close())
	})
	t.Run("later calls fail with ErrClosed", func(t *testing.T) {
		_, err := l.Sandboxes(context.Background())
		assert.ErrorIs(t, err, cri.ErrClosed)
		_, err = l.Runtime(context.Background())
		assert.ErrorIs(t, err, cri.ErrClosed)
	})
}

func TestRuntime(t *testing.T) {
	ctx := context.Background()

	t.Run("reports name and versions", func(t *testing.T) {
		rt, srv := startRuntime(t)
		rt.SetVersion("containerd", "v1.7.13")
		info, err := dial(t, srv.Endpoint()).Runtime(ctx)
		require.NoError(t, err)
		assert.Equal(t, cri.RuntimeInfo{Name: "containerd", Version: "v1.7.13", APIVersion: "v1"}, info)
		assert.Equal(t, "containerd v1.7.13 (CRI v1)", info.String())
	})

	t.Run("asks once", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"))
		l := dial(t, srv.Endpoint())
		for range 3 {
			_, err := l.Sandboxes(ctx)
			require.NoError(t, err)
		}
		_, err := l.Runtime(ctx)
		require.NoError(t, err)
		assert.Equal(t, 1, rt.Calls("Version"))
	})

	t.Run("asks again after a failure", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"))
		l := dial(t, srv.Endpoint())
		rt.SetV1Unimplemented(true)
		_, err := l.Sandboxes(ctx)
		require.ErrorIs(t, err, cri.ErrUnsupportedAPI)

		rt.SetV1Unimplemented(false)
		got, err := l.Sandboxes(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, ids(got))
		_, err = l.Sandboxes(ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, rt.Calls("Version"))
	})

	t.Run("unsupported runtime that does not say what it is", func(t *testing.T) {
		rt, srv := startRuntime(t)
		rt.SetVersion("", "")
		rt.SetV1Unimplemented(true)
		_, err := dial(t, srv.Endpoint()).Runtime(ctx)
		assert.ErrorIs(t, err, cri.ErrUnsupportedAPI)
		assert.Equal(t, codes.Unimplemented, status.Code(err), "the gRPC status must stay reachable")
		assert.Contains(t, err.Error(), "does not support CRI v1")
	})

	t.Run("finds a restarted runtime", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"))
		l := dial(t, srv.Endpoint())
		_, err := l.Sandboxes(ctx)
		require.NoError(t, err)
		srv.Close()

		_, err = l.Sandboxes(ctx)
		require.ErrorIs(t, err, cri.ErrSocketMissing)

		dir := filepath.Dir(srv.Path)
		require.NoError(t, os.MkdirAll(dir, 0o700))
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		again, err := rt.Serve(srv.Path)
		require.NoError(t, err)
		t.Cleanup(again.Close)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got, err := l.Sandboxes(ctx)
			assert.NoError(c, err)
			assert.Equal(c, []string{"a"}, ids(got))
		}, 5*time.Second, 50*time.Millisecond)
	})
}
