package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/template"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// node is one machine's containerd with its CRI plugin and CNI setup, all
// under dir.
type node struct {
	dir     string // the suite's directory: phaseshift-e2e-* in the temporary directory
	config  string // containerd's configuration file
	sock    string // containerd's gRPC socket, where CRI is served
	cniBin  string // the CNI plugins
	cniConf string // the CNI network configuration directory
	dataDir string // host-local's dataDir (and the checkpoint's directory)
	ipamBin string // examples/ipam, built

	ctd  *exec.Cmd // containerd; nil while it is not running
	done chan struct{}

	conn *grpc.ClientConn // to sock, for the tests' own CRI calls
	rt   runtimeapi.RuntimeServiceClient
}

// setup takes the suite's lock, sweeps what a killed run left, and
// starts containerd with the plugins, the image and a network in place.
func setup(ctx context.Context) (*node, error) {
	if err := takeLock(ctx); err != nil {
		return nil, err
	}
	if err := sweep(); err != nil {
		return nil, fmt.Errorf("sweeping what an earlier run left: %w", err)
	}
	dir, err := os.MkdirTemp("", prefix+"-")
	if err != nil {
		return nil, err
	}
	n := &node{
		dir:     dir,
		config:  filepath.Join(dir, "config.toml"),
		sock:    filepath.Join(dir, "containerd.sock"),
		cniBin:  filepath.Join(dir, "cni", "bin"),
		cniConf: filepath.Join(dir, "cni", "net.d"),
		dataDir: filepath.Join(dir, "cni", "networks"),
	}
	for _, d := range []string{n.cniBin, n.cniConf, n.dataDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := n.build(ctx); err != nil {
		return nil, err
	}
	if err := n.writeNetwork(runner{plugin: ourPlugin, phase: "legacy"}); err != nil {
		return nil, err
	}
	if err := n.writeConfig(); err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+n.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	n.conn, n.rt = conn, runtimeapi.NewRuntimeServiceClient(conn)
	if err := n.start(ctx); err != nil {
		return nil, err
	}
	if err := n.importImage(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// containerdConfig is containerd's configuration: everything under the
// suite's directory, the CRI plugin with the suite's image and CNI
// directories, runc with the cgroupfs driver.
var containerdConfig = template.Must(template.New("config").Parse(`version = 2
root = "{{.Dir}}/root"
state = "{{.Dir}}/state"
# The opt plugin would make /opt/containerd. The runtime v1 plugin cannot
# go: containerd 1.6's tasks service, which CRI needs, requires it.
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{{.Sock}}"

[plugins."io.containerd.runtime.v1.linux"]
  runtime_root = "{{.Dir}}/runc-v1"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.Image}}"
  netns_mounts_under_state_dir = true
  # CRI gives a sandbox an oom_score_adj of -998, which needs
  # CAP_SYS_RESOURCE; some sandboxes' root lacks it. This keeps it at
  # containerd's own or above.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBin}}"
    conf_dir = "{{.CNIConf}}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{{.Dir}}/runc"
        SystemdCgroup = false
`))

func (n *node) writeConfig() error {
	var b strings.Builder
	err := containerdConfig.Execute(&b, map[string]string{
		"Dir": n.dir, "Sock": n.sock, "Image": pauseImage, "CNIBin": n.cniBin, "CNIConf": n.cniConf,
	})
	if err != nil {
		return err
	}
	return os.WriteFile(n.config, []byte(b.String()), 0o644)
}

// start starts containerd and waits until its CRI plugin answers and its
// network is ready. containerd gets a parent-death signal, so that it
// dies with the test process however that ends.
func (n *node) start(ctx context.Context) error {
	logf, err := os.OpenFile(filepath.Join(n.dir, "containerd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command("containerd", "--config", n.config)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start containerd: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	n.ctd, n.done = cmd, done
	return n.waitReady(ctx)
}

// waitReady waits until the CRI plugin says the runtime and its network
// are ready.
func (n *node) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		select {
		case <-n.done:
			return fmt.Errorf("containerd exited: see %s", filepath.Join(n.dir, "containerd.log"))
		default:
		}
		st, err := n.rt.Status(ctx, &runtimeapi.StatusRequest{})
		if err == nil {
			ready := 0
			for _, c := range st.GetStatus().GetConditions() {
				if c.GetStatus() && (c.GetType() == runtimeapi.RuntimeReady || c.GetType() == runtimeapi.NetworkReady) {
					ready++
				}
			}
			if ready == 2 {
				return nil
			}
			err = fmt.Errorf("conditions %v", st.GetStatus().GetConditions())
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd's CRI plugin not ready: %w", errors.Join(ctx.Err(), last))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill kills containerd with SIGKILL, as a crash does: its sockets stay,
// and its shims and pods run on.
func (n *node) kill() error {
	if n.ctd == nil {
		return nil
	}
	if err := n.ctd.Process.Kill(); err != nil {
		return err
	}
	<-n.done
	n.ctd = nil
	return nil
}

// signal sends containerd sig (SIGSTOP freezes it, SIGCONT thaws it).
func (n *node) signal(sig syscall.Signal) error {
	if n.ctd == nil {
		return errors.New("containerd is not running")
	}
	return n.ctd.Process.Signal(sig)
}

// stop ends containerd (thawed first, in case a test froze it) and closes
// the tests' connection; the sweep removes the rest.
func (n *node) stop() {
	if n.ctd != nil {
		_ = n.ctd.Process.Signal(syscall.SIGCONT)
		_ = n.ctd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			_ = n.ctd.Process.Kill()
			<-n.done
		}
		n.ctd = nil
	}
	if n.conn != nil {
		_ = n.conn.Close()
	}
}

// frozen reports whether containerd is stopped by a signal.
func (n *node) frozen() bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n.ctd.Process.Pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && strings.HasPrefix(string(stat[i+1:]), " T")
}

// logTail is the end of containerd's log, for a failure's message.
func (n *node) logTail(lines int) string {
	b, err := os.ReadFile(filepath.Join(n.dir, "containerd.log"))
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return "containerd's log, last lines:\n" + strings.Join(all[max(0, len(all)-lines):], "\n")
}
