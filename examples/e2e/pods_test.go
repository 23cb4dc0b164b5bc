package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podNamespace is the Kubernetes namespace the suite's pods are in.
const podNamespace = prefix

var podCount int

// runPod creates and starts a pod sandbox as the kubelet does, in the
// pod network (or the node's, with hostNetwork), and returns its ID.
func (n *node) runPod(ctx context.Context, hostNetwork bool) (string, error) {
	podCount++
	name := fmt.Sprintf("pod-%03d", podCount)
	mode, hostname := runtimeapi.NamespaceMode_POD, name
	if hostNetwork {
		// The node's network namespace comes with its UTS namespace, whose
		// hostname is the node's: the kubelet sets none.
		mode, hostname = runtimeapi.NamespaceMode_NODE, ""
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	resp, err := n.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: fmt.Sprintf("%s-uid-%03d", prefix, podCount), Namespace: podNamespace},
		Hostname:     hostname,
		LogDirectory: filepath.Join(n.dir, "pods", name),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: cgroupParent,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: mode},
			},
		},
	}})
	if err != nil {
		return "", fmt.Errorf("RunPodSandbox %s: %w\n%s", name, err, n.logTail(20))
	}
	return resp.GetPodSandboxId(), nil
}

// stopPod stops a pod sandbox: its container is killed and its network
// torn down (a CNI DEL), and it stays, not ready, until removed.
func (n *node) stopPod(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := n.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("StopPodSandbox %s: %w", id, err)
	}
	return nil
}

// removePod stops and removes a pod sandbox, as the kubelet does when a
// pod is deleted.
func (n *node) removePod(ctx context.Context, id string) error {
	if err := n.stopPod(ctx, id); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := n.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("RemovePodSandbox %s: %w", id, err)
	}
	return nil
}

// readyPods is what containerd reports: the IP of every ready pod sandbox
// in the pod network.
func (n *node) readyPods(ctx context.Context) (map[string]netip.Addr, error) {
	list, err := n.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	if err != nil {
		return nil, err
	}
	out := map[string]netip.Addr{}
	for _, item := range list.GetItems() {
		st, err := n.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: item.GetId()})
		if err != nil {
			return nil, err
		}
		if st.GetStatus().GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE {
			continue
		}
		ip, err := netip.ParseAddr(st.GetStatus().GetNetwork().GetIp())
		if err != nil {
			return nil, fmt.Errorf("pod sandbox %s: %w", item.GetId(), err)
		}
		out[item.GetId()] = ip
	}
	return out, nil
}

// allPods lists every pod sandbox of the suite, ready or not.
func (n *node) allPods(ctx context.Context) ([]string, error) {
	list, err := n.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, item := range list.GetItems() {
		if item.GetMetadata().GetNamespace() == podNamespace {
			ids = append(ids, item.GetId())
		}
	}
	return ids, nil
}

// removeAllPods removes every pod sandbox of the suite.
func (n *node) removeAllPods(ctx context.Context) error {
	ids, err := n.allPods(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := n.removePod(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// killPodProcess kills a pod's sandbox container with SIGKILL, as an OOM
// kill or a crash does, and waits until containerd reports the sandbox
// not ready.
func (n *node) killPodProcess(ctx context.Context, id string) error {
	st, err := n.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		return err
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
		return fmt.Errorf("pod sandbox %s: no pid in its verbose status (%v)", id, err)
	}
	if err := syscall.Kill(info.Pid, syscall.SIGKILL); err != nil {
		return err
	}
	return waitFor(30*time.Second, "the killed pod sandbox to be not ready", func() bool {
		st, err := n.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
		return err == nil && st.GetStatus().GetState() == runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	})
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
