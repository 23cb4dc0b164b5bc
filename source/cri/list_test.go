package cri_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
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
	"google.golang.org/protobuf/protoadapt"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/phaseshift/phaseshift/source"
	"github.com/phaseshift/phaseshift/source/cri"
	"github.com/phaseshift/phaseshift/source/cri/critest"
)

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

	t.Run("host network kept with WithHostNetworkSandboxes", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"), pod("node-exporter", "192.168.1.10"))
		rt.SetHostNetwork("node-exporter", true)
		got, err := dial(t, srv.Endpoint(), cri.WithHostNetworkSandboxes()).Sandboxes(ctx)
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
		got, err := dial(t, srv.Endpoint(), cri.WithTimeout(300*time.Millisecond)).Sandboxes(ctx)
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

	// issue 34 item 9: before, the error quoted the address whole, twice
	// (a 2 MiB error for 1 MiB of garbage, in Report.Errors and the log).
	t.Run("a huge address is bounded in the error", func(t *testing.T) {
		rt, srv := startRuntime(t, pod("a", "10.0.0.2"), pod("b", "10.0.0.3"))
		garbage := strings.Repeat("\x1b[2J", 1<<20/4)
		rt.SetIPs("b", "10.0.0.3", garbage)
		got, err := dial(t, srv.Endpoint(), cri.WithMaxReceiveSize(16<<20)).Sandboxes(ctx)
		assert.Equal(t, []string{"a"}, ids(got))
		assert.ErrorIs(t, err, cri.ErrInvalidIP)
		assert.Less(t, len(err.Error()), 1024, "the error's length")
		assert.Contains(t, err.Error(), fmt.Sprintf("(%d bytes)", len(garbage)))
		assert.NotContains(t, err.Error(), "\x1b", "quoted, not raw")
	})

	t.Run("nil fields in answers do not panic", func(t *testing.T) {
		rt, srv := startRuntime(t,
			pod("bare-status", "10.0.0.2"), pod("nil-status", "10.0.0.3"), pod("nil-namespaces", "10.0.0.4"),
			pod("nil-options", "10.0.0.5"), pod("nil-extra-ip", "10.0.0.6"))
		rt.SetListHook(func(resp *runtimeapi.ListPodSandboxResponse) {
			resp.Items = append(resp.Items, &runtimeapi.PodSandbox{})
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
				resp.Status.Network.AdditionalIps = []*runtimeapi.PodIP{{}}
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
		rt.SetListHook(func(resp *runtimeapi.ListPodSandboxResponse) { listSize = proto.Size(protoadapt.MessageV2Of(resp)) })

		t.Run("listed with the default limit", func(t *testing.T) {
			got, err := dial(t, srv.Endpoint()).Sandboxes(ctx)
			require.NoError(t, err)
			assert.Len(t, got, n)
			assert.Greater(t, listSize, 4<<20, "the answer must exceed gRPC's default limit for this test to mean anything")
		})
		t.Run("refused with a 4 MiB limit", func(t *testing.T) {
			got, err := dial(t, srv.Endpoint(), cri.WithMaxReceiveSize(4<<20)).Sandboxes(ctx)
			assert.Nil(t, got)
			assert.ErrorIs(t, err, cri.ErrResponseTooLarge)
			assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the gRPC status must stay reachable")
			assert.False(t, source.Partial(err))
			assert.Contains(t, err.Error(), "WithMaxReceiveSize")
		})
	})

	t.Run("logs IDs but never annotation values", func(t *testing.T) {
		sb := pod("a", "10.0.0.2")
		sb.Annotations = map[string]string{"token": "s3cr3t-value"}
		rt, srv := startRuntime(t, sb, pod("b", "not-an-ip"), pod("c", "10.0.0.4"))
		rt.SetHostNetwork("c", true)
		core, logs := observer.New(zapcore.DebugLevel)
		_, err := dial(t, srv.Endpoint(), cri.WithLogger(zap.New(core))).Sandboxes(ctx)
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
