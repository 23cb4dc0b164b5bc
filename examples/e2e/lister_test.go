package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/phaseshift/phaseshift/source/cri"
)

// TestLister points source/cri at containerd.
func TestLister(t *testing.T) {
	n := e2eNode(t)
	ctx := suiteCtx
	require.NoError(t, n.useNetwork(ctx, ps("migrate")))
	require.NoError(t, n.removeAllPods(ctx))
	t.Cleanup(func() { assert.NoError(t, n.removeAllPods(ctx)) })

	// Two ready pods; one stopped; one whose sandbox process was killed
	// (failed); one in the node's network.
	var ready []string
	for range 2 {
		id, err := n.runPod(ctx, false)
		require.NoError(t, err)
		ready = append(ready, id)
	}
	stopped, err := n.runPod(ctx, false)
	require.NoError(t, err)
	require.NoError(t, n.stopPod(ctx, stopped))
	failed, err := n.runPod(ctx, false)
	require.NoError(t, err)
	require.NoError(t, n.killPodProcess(ctx, failed))
	host, err := n.runPod(ctx, true)
	require.NoError(t, err)

	l, err := cri.NewLister("unix://"+n.sock, cri.WithTimeout(2*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, l.Close()) })

	t.Run("lists the ready pod sandboxes, and only those", func(t *testing.T) {
		pods, err := n.readyPods(ctx)
		require.NoError(t, err)
		got, err := l.Sandboxes(ctx)
		require.NoError(t, err)
		require.Len(t, got, len(ready))
		for _, s := range got {
			assert.Contains(t, ready, s.ID)
			assert.Equal(t, podNamespace, s.Namespace)
			assert.True(t, strings.HasPrefix(s.Name, "pod-"), s.Name)
			assert.True(t, strings.HasPrefix(s.UID, prefix+"-uid-"), s.UID)
			assert.False(t, s.CreatedAt.IsZero())
			assert.False(t, s.HostNetwork)
			if assert.Len(t, s.IPs, 1) {
				assert.Equal(t, pods[s.ID], s.IPs[0], "containerd's IP for %s", s.ID)
			}
		}
		for _, gone := range []string{stopped, failed, host} {
			for _, s := range got {
				assert.NotEqual(t, gone, s.ID)
			}
		}

		withHost, err := cri.NewLister("unix://"+n.sock, cri.WithHostNetworkSandboxes())
		require.NoError(t, err)
		defer withHost.Close()
		got, err = withHost.Sandboxes(ctx)
		require.NoError(t, err)
		var hostNetwork []string
		for _, s := range got {
			if s.HostNetwork {
				hostNetwork = append(hostNetwork, s.ID)
			}
		}
		assert.Equal(t, []string{host}, hostNetwork)
	})

	t.Run("Runtime", func(t *testing.T) {
		info, err := l.Runtime(ctx)
		require.NoError(t, err)
		assert.Equal(t, "containerd", info.Name)
		assert.Equal(t, "v1", info.APIVersion)
		assert.Equal(t, containerdVersion(t), info.Version)
	})

	t.Run("a missing socket", func(t *testing.T) {
		missing, err := cri.NewLister(filepath.Join(n.dir, "missing", "containerd.sock"))
		require.NoError(t, err)
		defer missing.Close()
		_, err = missing.Sandboxes(ctx)
		assert.ErrorIs(t, err, cri.ErrSocketMissing)
		assert.ErrorContains(t, err, "is containerd running?")
	})

	t.Run("the ttrpc socket", func(t *testing.T) {
		ttrpc, err := cri.NewLister("unix://"+n.sock+".ttrpc", cri.WithTimeout(time.Minute))
		require.NoError(t, err)
		defer ttrpc.Close()
		_, err = ttrpc.Sandboxes(ctx)
		assert.ErrorIs(t, err, cri.ErrNotCRIEndpoint)
		assert.NotErrorIs(t, err, cri.ErrTimeout)
		assert.ErrorContains(t, err, "is it the .ttrpc socket? use containerd.sock")
	})

	t.Run("a frozen runtime", func(t *testing.T) {
		require.NoError(t, n.signal(syscall.SIGSTOP))
		thawed := false
		thaw := func() {
			if !thawed {
				thawed = true
				assert.NoError(t, n.signal(syscall.SIGCONT))
			}
		}
		defer thaw()
		require.NoError(t, waitFor(10*time.Second, "containerd to stop", n.frozen))
		fresh, err := cri.NewLister("unix://"+n.sock, cri.WithTimeout(time.Second))
		require.NoError(t, err)
		defer fresh.Close()
		for name, lister := range map[string]*cri.Lister{"connected before": l, "connecting now": fresh} {
			_, err := lister.Sandboxes(ctx)
			assert.ErrorIs(t, err, cri.ErrTimeout, name)
			assert.ErrorContains(t, err, "overloaded or hung", name)
		}
		thaw()
		_, err = l.Sandboxes(ctx)
		assert.NoError(t, err, "thawed")
	})

	t.Run("a killed runtime, and the same Lister after it restarts", func(t *testing.T) {
		for crash := range 3 {
			require.NoError(t, n.kill())
			require.FileExists(t, n.sock, "a killed containerd leaves its socket")
			// Down for two seconds, asked ten times a second, as a
			// daemon retrying its restore would: long enough for gRPC's
			// reconnect backoff to grow past a second.
			down := time.NewTicker(100 * time.Millisecond)
			for range 20 {
				<-down.C
				_, err := l.Sandboxes(ctx)
				require.ErrorIs(t, err, cri.ErrRuntimeNotResponding, "crash %d", crash)
				require.NotErrorIs(t, err, cri.ErrTimeout, "crash %d: at once, not after the timeout", crash)
				require.ErrorContains(t, err, "connection refused")
			}
			down.Stop()
			require.NoError(t, n.restart(ctx))
			got, err := l.Sandboxes(ctx)
			require.NoError(t, err, "crash %d: the first call once containerd answers again", crash)
			assert.Len(t, got, len(ready), "crash %d: the pods outlive containerd", crash)
		}
	})
}

// restart starts containerd again after a kill and waits until its CRI
// plugin answers, on a connection of the test's own made afresh (the old
// one may be waiting out gRPC's reconnect backoff).
func (n *node) restart(ctx context.Context) error {
	_ = n.conn.Close()
	conn, err := grpc.NewClient("unix://"+n.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	n.conn, n.rt = conn, runtimeapi.NewRuntimeServiceClient(conn)
	return n.start(ctx)
}

// containerdVersion is what containerd --version says its version is
// ("containerd github.com/containerd/containerd 1.6.20~ds1 <revision>").
func containerdVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("containerd", "--version").Output()
	require.NoError(t, err)
	fields := strings.Fields(string(out))
	require.GreaterOrEqual(t, len(fields), 3, "%s", out)
	return fields[2]
}
