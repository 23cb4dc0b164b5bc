package cri_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/phaseshift/phaseshift/source"
	"github.com/phaseshift/phaseshift/source/cri"
	"github.com/phaseshift/phaseshift/source/cri/critest"
)

func TestDial(t *testing.T) {
	for _, endpoint := range []string{"unix:///run/containerd/containerd.sock", "/run/containerd/containerd.sock"} {
		t.Run("accepts "+endpoint, func(t *testing.T) {
			// The socket does not exist here: Dial must not look.
			l, err := cri.Dial(endpoint)
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
			l, err := cri.Dial(endpoint)
			require.Error(t, err)
			assert.Nil(t, l)
			assert.ErrorIs(t, err, cri.ErrInvalidEndpoint)
			if name != "rejects too long path" {
				assert.Contains(t, err.Error(), "unix:///path", "the error should say what is accepted")
			}
		})
	}

	t.Run("rejects invalid options", func(t *testing.T) {
		for _, opt := range []cri.Option{cri.Timeout(0), cri.Timeout(-time.Second), cri.MaxReceiveSize(0)} {
			_, err := cri.Dial("/run/containerd/containerd.sock", opt)
			assert.ErrorIs(t, err, cri.ErrInvalidOption)
		}
	})
}

func TestClose(t *testing.T) {
	_, srv := startRuntime(t, pod("a", "10.0.0.2"))
	l, err := cri.Dial(srv.Endpoint())
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

func TestSandboxes(t *testing.T) {
	ctx := context.Background()

	t.Run("ready only", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"), pod("b", "10.0.0.3"))
		rt.SetReady("b", false)
		got, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, ids(got))
	})

	t.Run("ready only when the runtime ignores the state filter", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"), pod("b", "10.0.0.3"))
		rt.SetReady("a", false)
		rt.IgnoreFilter(true)
		got, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"b"}, ids(got))
	})

	t.Run("host network left out by default", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"), pod("node-exporter", "192.168.1.10"))
		rt.SetHostNetwork("node-exporter", true)
		got, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, ids(got))
	})

	t.Run("host network kept with IncludeHostNetwork", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"), pod("node-exporter", "192.168.1.10"))
		rt.SetHostNetwork("node-exporter", true)
		got, err := dial(t, srv.Endpoint(), cri.IncludeHostNetwork()).Sandboxes(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"a", "node-exporter"}, ids(got))
		assert.False(t, got[0].HostNetwork)
		assert.True(t, got[1].HostNetwork)
	})

	t.Run("dual stack", func(t *testing.T) {
		sb := pod("a", "10.0.0.2")
		sb.IPs = append(sb.IPs, "fd00:10::2")
		_, srv := startRuntime(t, sb)
		got, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00:10::2")}, got[0].IPs)
	})

	t.Run("no IP", func(t *testing.T) {
		_, srv := startRuntime(t, critest.Sandbox{ID: "a", Name: "pending", Namespace: "default"})
		got, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Empty(t, got[0].IPs)
	})

	t.Run("every field", func(t *testing.T) {
		created := time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.UTC)
		_, srv := startRuntime(t, critest.Sandbox{
			ID: "3f2a", Name: "coredns-5d78c9869d-x7k2p", Namespace: "kube-system", UID: "8c1e", Attempt: 2,
			CreatedAt:      created,
			Labels:         map[string]string{"k8s-app": "kube-dns"},
			Annotations:    map[string]string{"kubernetes.io/config.source": "api"},
			IPs:            []string{"10.0.0.2"},
			RuntimeHandler: "kata",
		})
		got, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
		require.NoError(t, err)
		require.Len(t, got, 1)
		sb := got[0]
		assert.Equal(t, "3f2a", sb.ID)
		assert.Equal(t, "coredns-5d78c9869d-x7k2p", sb.Name)
		assert.Equal(t, "kube-system", sb.Namespace)
		assert.Equal(t, "8c1e", sb.UID)
		assert.Equal(t, uint32(2), sb.Attempt)
		assert.True(t, created.Equal(sb.CreatedAt), "CreatedAt %v", sb.CreatedAt)
		assert.Equal(t, map[string]string{"k8s-app": "kube-dns"}, sb.Labels)
		assert.Equal(t, map[string]string{"kubernetes.io/config.source": "api"}, sb.Annotations)
		assert.Equal(t, "kata", sb.RuntimeHandler)
		assert.False(t, sb.HostNetwork)
	})

	t.Run("sorted by ID", func(t *testing.T) {
		_, srv := startRuntime(t, pod("c", "10.0.0.4"), pod("a", "10.0.0.2"), pod("b", "10.0.0.3"))
		got, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"a", "b", "c"}, ids(got))
	})

	t.Run("sandbox removed between list and status is skipped", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"), pod("b", "10.0.0.3"), pod("c", "10.0.0.4"))
		rt.VanishAfterList("b")
		got, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"a", "c"}, ids(got))
		assert.Equal(t, 3, rt.Calls("PodSandboxStatus"), "b must have been asked for and found gone")
	})

	t.Run("status failure for one sandbox is partial", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"), pod("b", "10.0.0.3"), pod("c", "10.0.0.4"))
		rt.FailStatus("b", status.Error(codes.Internal, "failed to get sandbox ip"))
		got, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
		require.Error(t, err)
		assert.Equal(t, []string{"a", "c"}, ids(got))
		assert.True(t, source.Partial(err))

		var sbErr *cri.SandboxError
		require.ErrorAs(t, err, &sbErr)
		assert.Equal(t, "b", sbErr.ID)
		assert.Equal(t, "pod-b", sbErr.Name)
		assert.Contains(t, err.Error(), "sandbox b (pod default/pod-b)")
		assert.Contains(t, err.Error(), "failed to get sandbox ip")
		assert.Equal(t, codes.Internal, status.Code(sbErr.Err), "the gRPC status must stay reachable")
	})

	t.Run("one sandbox whose status hangs is partial", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"), pod("b", "10.0.0.3"), pod("c", "10.0.0.4"))
		rt.DelayStatus("b", time.Minute)
		got, err := dial(t, srv.Endpoint(), cri.Timeout(300*time.Millisecond)).Sandboxes(ctx)
		assert.Equal(t, []string{"a", "c"}, ids(got))
		assert.True(t, source.Partial(err))
		assert.ErrorIs(t, err, cri.ErrTimeout)
		assert.Contains(t, err.Error(), "sandbox b")
	})

	t.Run("unparsable IP is partial", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"), pod("b", "10.0.0.3"))
		rt.SetIPs("b", "10.0.0.3", "10.0.0.300")
		got, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
		assert.Equal(t, []string{"a"}, ids(got))
		assert.True(t, source.Partial(err))
		assert.ErrorIs(t, err, cri.ErrInvalidIP)
		assert.Contains(t, err.Error(), "sandbox b")
		assert.Contains(t, err.Error(), "10.0.0.300")
	})

	t.Run("nil fields in answers do not panic", func(t *testing.T) {
		rt, srv := startRuntime(t,
			pod("bare-status", "10.0.0.2"), pod("nil-status", "10.0.0.3"), pod("nil-namespaces", "10.0.0.4"),
			pod("nil-options", "10.0.0.5"), pod("nil-extra-ip", "10.0.0.6"))
		rt.SetListHook(func(resp *runtimeapi.ListPodSandboxResponse) {
			resp.Items = append(resp.Items, nil, &runtimeapi.PodSandbox{})
			for _, item := range resp.Items {
				if item.GetId() == "bare-status" {
					item.Metadata = nil
					item.Labels = nil
				}
			}
		})
		rt.SetStatusHook(func(id string, resp *runtimeapi.PodSandboxStatusResponse) {
			ready := runtimeapi.PodSandboxState_SANDBOX_READY
			switch id {
			case "bare-status":
				resp.Status = &runtimeapi.PodSandboxStatus{State: ready}
			case "nil-status":
				resp.Status = nil
			case "nil-namespaces":
				resp.Status.Linux = &runtimeapi.LinuxPodSandboxStatus{}
			case "nil-options":
				resp.Status.Linux = &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{}}
			case "nil-extra-ip":
				resp.Status.Network.AdditionalIps = []*runtimeapi.PodIP{nil, {}}
			}
		})
		var got []cri.Sandbox
		var err error
		require.NotPanics(t, func() { got, err = dial(t, srv.Endpoint()).Sandboxes(ctx) })
		assert.Equal(t, []string{"bare-status", "nil-extra-ip", "nil-namespaces", "nil-options"}, ids(got))
		assert.ErrorIs(t, err, cri.ErrNoStatus)
		assert.Contains(t, err.Error(), "sandbox nil-status")
		assert.Contains(t, err.Error(), "without an ID")
		require.Len(t, got, 4)
		assert.Empty(t, got[0].IPs)
		assert.Empty(t, got[0].Name)
		assert.True(t, got[0].CreatedAt.IsZero())
		assert.Equal(t, []netip.Addr{netip.MustParseAddr("10.0.0.6")}, got[1].IPs)
	})

	t.Run("status calls are bounded", func(t *testing.T) {
		rt, srv := startRuntime(t)
		for i := range 100 {
			rt.Add(pod(fmt.Sprintf("sb-%03d", i), fmt.Sprintf("10.0.1.%d", i)))
		}
		rt.SetDelay(2 * time.Millisecond)
		got, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
		require.NoError(t, err)
		assert.Len(t, got, 100)
		assert.LessOrEqual(t, rt.MaxInFlight(), 8)
		assert.Greater(t, rt.MaxInFlight(), 1, "status calls should run concurrently")
	})

	t.Run("5000 sandboxes need more than gRPC's 4 MiB", func(t *testing.T) {
		const n = 5000
		rt, srv := startRuntime(t)
		// About 1 KiB of labels and annotations a pod, as pods with a
		// last-applied-configuration annotation easily carry.
		spec := strings.Repeat("x", 900)
		for i := range n {
			sb := pod(fmt.Sprintf("%064x", i), fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&0xff, i&0xff))
			sb.Labels = map[string]string{"app": "web", "pod-template-hash": "5d78c9869d"}
			sb.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": spec}
			rt.Add(sb)
		}
		var listSize int
		rt.SetListHook(func(resp *runtimeapi.ListPodSandboxResponse) { listSize = proto.Size(resp) })

		t.Run("listed with the default limit", func(t *testing.T) {
			got, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
			require.NoError(t, err)
			assert.Len(t, got, n)
			assert.Greater(t, listSize, 4<<20, "the answer must exceed gRPC's default limit for this test to mean anything")
		})
		t.Run("refused with a 4 MiB limit", func(t *testing.T) {
			got, err := dial(t, srv.Endpoint(), cri.MaxReceiveSize(4<<20)).Sandboxes(ctx)
			assert.Nil(t, got)
			assert.ErrorIs(t, err, cri.ErrResponseTooLarge)
			assert.False(t, source.Partial(err))
			assert.Contains(t, err.Error(), "MaxReceiveSize")
		})
	})

	t.Run("logs IDs but never annotation values", func(t *testing.T) {
		sb := pod("a", "10.0.0.2")
		sb.Annotations = map[string]string{"token": "s3cr3t-value"}
		rt, srv := startRuntime(t, sb, pod("b", "not-an-ip"), pod("c", "10.0.0.4"))
		rt.SetHostNetwork("c", true)
		core, logs := observer.New(zapcore.DebugLevel)
		_, err := dial(t, srv.Endpoint(), cri.Logger(zap.New(core))).Sandboxes(ctx)
		require.True(t, source.Partial(err))

		var sawID bool
		for _, entry := range logs.All() {
			text := entry.Message + fmt.Sprint(entry.ContextMap())
			assert.NotContains(t, text, "s3cr3t-value")
			sawID = sawID || entry.ContextMap()["sandbox"] == "b"
		}
		assert.True(t, sawID, "the sandbox that failed should be logged by ID")
	})
}

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
		_, err := dial(t, srv.Endpoint(), cri.Timeout(100*time.Millisecond)).Sandboxes(ctx)
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
		got, err := dial(t, srv.Endpoint(), cri.Timeout(200*time.Millisecond)).Sandboxes(ctx)
		assert.Less(t, time.Since(start), 2*time.Second, "a hung runtime must not be waited out sandbox by sandbox")
		assert.Nil(t, got)
		assert.False(t, source.Partial(err), "a runtime that stopped answering is not a per-sandbox problem")
		assert.ErrorIs(t, err, cri.ErrTimeout)
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
