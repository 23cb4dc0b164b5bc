package cri_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/phaseshift/phaseshift/source"
	"github.com/phaseshift/phaseshift/source/cri"
)

// byIP maps a sandbox to its first IP and its ID, as an IPAM daemon
// restoring allocations does, and leaves out sandboxes without an IP.
func byIP(sb cri.Sandbox) (netip.Addr, string, bool) {
	if len(sb.IPs) == 0 {
		return netip.Addr{}, "", false
	}
	return sb.IPs[0], sb.ID, true
}

func TestReader(t *testing.T) {
	ctx := context.Background()
	ip := netip.MustParseAddr

	t.Run("maps sandboxes and skips what fn refuses", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"), pod("b", "10.0.0.3"), pod("c", "10.0.0.4"))
		rt.SetIPs("b")
		got, err := reader(t, dial(t, srv.Endpoint()), byIP).List(ctx)
		require.NoError(t, err)
		assert.Equal(t, map[netip.Addr]string{ip("10.0.0.2"): "a", ip("10.0.0.4"): "c"}, got)
	})

	t.Run("partial listing passes through", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"), pod("b", "10.0.0.3"))
		rt.FailStatus("b", status.Error(codes.Internal, "boom"))
		got, err := reader(t, dial(t, srv.Endpoint()), byIP).List(ctx)
		assert.Equal(t, map[netip.Addr]string{ip("10.0.0.2"): "a"}, got)
		assert.True(t, source.Partial(err))
		var sbErr *cri.SandboxError
		require.ErrorAs(t, err, &sbErr)
		assert.Equal(t, "b", sbErr.ID)
	})

	t.Run("failed listing returns no entries", func(t *testing.T) {
		l := dial(t, filepath.Join(t.TempDir(), "containerd.sock"))
		got, err := reader(t, l, byIP).List(ctx)
		assert.Nil(t, got)
		assert.ErrorIs(t, err, cri.ErrSocketMissing)
		assert.False(t, source.Partial(err))
	})

	t.Run("duplicate key keeps the newer sandbox and reports the clash", func(t *testing.T) {
		old, fresh := pod("z-old", "10.0.0.2"), pod("a-new", "10.0.0.2")
		old.CreatedAt = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
		fresh.CreatedAt = old.CreatedAt.Add(time.Minute)
		// Listed in ID order, the newer sandbox comes first here and last
		// in the reverse case: both must keep the newer one.
		for name, pair := range map[string][2]string{"newer first": {"a-new", "z-old"}, "newer last": {"z-new", "a-old"}} {
			t.Run(name, func(t *testing.T) {
				newID, oldID := pair[0], pair[1]
				n, o := fresh, old
				n.ID, o.ID = newID, oldID
				_, srv := startRuntime(t, n, o, pod("other", "10.0.0.9"))
				got, err := reader(t, dial(t, srv.Endpoint()), byIP).List(ctx)
				assert.Equal(t, map[netip.Addr]string{ip("10.0.0.2"): newID, ip("10.0.0.9"): "other"}, got)
				assert.True(t, source.Partial(err))
				assert.ErrorIs(t, err, cri.ErrDuplicateKey)
				var sbErr *cri.SandboxError
				require.ErrorAs(t, err, &sbErr)
				assert.Equal(t, oldID, sbErr.ID, "the error should name the sandbox left out")
				assert.Contains(t, err.Error(), "kept sandbox "+newID)
			})
		}
	})

	t.Run("is not a source.Writer", func(t *testing.T) {
		r := reader(t, dial(t, "/run/containerd/containerd.sock"), byIP)
		_, isWriter := r.(source.Writer[netip.Addr, string])
		assert.False(t, isWriter, "CRI learns of sandboxes from the runtime; nothing may write to it")
	})

	t.Run("needs a Lister and a function", func(t *testing.T) {
		l := dial(t, "/run/containerd/containerd.sock")
		r, err := cri.Reader[netip.Addr, string](l, nil)
		assert.Nil(t, r)
		assert.ErrorIs(t, err, cri.ErrInvalidOption)
		assert.ErrorContains(t, err, "mapping function is nil")

		r, err = cri.Reader(nil, byIP)
		assert.Nil(t, r)
		assert.ErrorIs(t, err, cri.ErrInvalidOption)
		assert.ErrorContains(t, err, "Lister is nil")
	})
}

// reader returns a Reader over l with fn, failing the test if it cannot be
// made.
func reader[K comparable, V any](t *testing.T, l *cri.Lister, fn func(cri.Sandbox) (K, V, bool)) source.Reader[K, V] {
	t.Helper()
	r, err := cri.Reader(l, fn)
	require.NoError(t, err)
	return r
}
