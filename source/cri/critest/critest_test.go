package critest_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/phaseshift/phaseshift/source/cri/critest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// client connects a plain CRI client to srv, closed when the test ends.
func client(t *testing.T, srv *critest.Server) runtimeapi.RuntimeServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+srv.Path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

func TestServer(t *testing.T) {
	t.Run("temporary socket is removed by Close", func(t *testing.T) {
		srv, err := critest.New().Serve("")
		require.NoError(t, err)
		assert.Less(t, len(srv.Path), 100, "the socket path must fit in sun_path")
		assert.Equal(t, "unix://"+srv.Path, srv.Endpoint())
		srv.Close()
		srv.Close()
		assert.NoDirExists(t, filepath.Dir(srv.Path))
	})

	t.Run("Kill leaves a stale socket file", func(t *testing.T) {
		srv, err := critest.New().Serve("")
		require.NoError(t, err)
		srv.Kill()
		assert.FileExists(t, srv.Path)
		_, err = net.Dial("unix", srv.Path)
		assert.Error(t, err, "nothing may listen on a killed runtime's socket")
		srv.Close()
		assert.NoFileExists(t, srv.Path)
	})

	t.Run("refuses a path in use", func(t *testing.T) {
		srv, err := critest.New().Serve("")
		require.NoError(t, err)
		defer srv.Close()
		_, err = critest.New().Serve(srv.Path)
		assert.Error(t, err)
	})
}

func TestRuntime(t *testing.T) {
	ctx := context.Background()
	rt := critest.New()
	rt.Add(
		critest.Sandbox{ID: "a", Name: "web", Namespace: "shop", Labels: map[string]string{"app": "web"}, IPs: []string{"10.0.0.2", "fd00::2"}},
		critest.Sandbox{ID: "b", Name: "db", Namespace: "shop", NotReady: true},
		critest.Sandbox{ID: "c", Name: "exporter", Namespace: "mon", HostNetwork: true},
	)
	srv, err := rt.Serve("")
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	c := client(t, srv)

	t.Run("honours the list filter", func(t *testing.T) {
		ready := &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}
		for name, tc := range map[string]struct {
			filter *runtimeapi.PodSandboxFilter
			want   []string
		}{
			"none":  {nil, []string{"a", "b", "c"}},
			"ready": {&runtimeapi.PodSandboxFilter{State: ready}, []string{"a", "c"}},
			"id":    {&runtimeapi.PodSandboxFilter{Id: "b"}, []string{"b"}},
			"label": {&runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "web"}}, []string{"a"}},
		} {
			t.Run(name, func(t *testing.T) {
				resp, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: tc.filter})
				require.NoError(t, err)
				var got []string
				for _, item := range resp.GetItems() {
					got = append(got, item.GetId())
				}
				assert.Equal(t, tc.want, got)
			})
		}
	})

	t.Run("status reports IPs and network mode", func(t *testing.T) {
		resp, err := c.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "a"})
		require.NoError(t, err)
		assert.Equal(t, "10.0.0.2", resp.GetStatus().GetNetwork().GetIp())
		require.Len(t, resp.GetStatus().GetNetwork().GetAdditionalIps(), 1)
		assert.Equal(t, "fd00::2", resp.GetStatus().GetNetwork().GetAdditionalIps()[0].GetIp())
		assert.Equal(t, runtimeapi.NamespaceMode_POD, resp.GetStatus().GetLinux().GetNamespaces().GetOptions().GetNetwork())

		resp, err = c.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "c"})
		require.NoError(t, err)
		assert.Equal(t, runtimeapi.NamespaceMode_NODE, resp.GetStatus().GetLinux().GetNamespaces().GetOptions().GetNetwork())
	})

	t.Run("status of an unknown sandbox is NotFound", func(t *testing.T) {
		_, err := c.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "nope"})
		assert.Equal(t, codes.NotFound, status.Code(err))
	})

	t.Run("calls it does not serve are Unimplemented", func(t *testing.T) {
		_, err := c.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		assert.Equal(t, codes.Unimplemented, status.Code(err))
	})

	t.Run("Sandboxes returns copies", func(t *testing.T) {
		got := rt.Sandboxes()
		require.Len(t, got, 3)
		got[0].Labels["app"] = "changed"
		assert.Equal(t, "web", rt.Sandboxes()[0].Labels["app"])
	})
}
