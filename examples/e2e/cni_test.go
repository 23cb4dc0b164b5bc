package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/source/hostlocal"
)

// network is the CNI network the pods are on, and its subnet.
const (
	network = prefix
	subnet  = "10.222.0.0/24"
)

// runner is who serves the network's IPAM: the real host-local,
// examples/hostlocal in a phase, or examples/ipam through the relay
// plugin (whose phase is the daemon's).
type runner struct {
	plugin string
	phase  string // "legacy", "expand", "migrate" or "contract"; "" for host-local
}

func (r runner) String() string {
	switch r.plugin {
	case hostLocal:
		return "host-local"
	case relayPlugin:
		return "examples/ipam, through the relay"
	}
	return "phase " + r.phase
}

// generation counts the network configurations written, so that a test
// can tell when containerd has loaded the last one.
var generation int

// writeNetwork writes the CNI network configuration (bridge, with r as
// its IPAM plugin), replacing the last one in one rename, and returns its
// generation marker.
func (n *node) writeNetwork(r runner) error {
	generation++
	ipam := map[string]any{"type": r.plugin, "ranges": [][]map[string]string{{{"subnet": subnet}}}, "dataDir": n.dataDir}
	switch r.plugin {
	case ourPlugin:
		ipam["phase"] = r.phase
	case relayPlugin:
		ipam = map[string]any{"type": r.plugin, "socket": n.relaySocket()}
	}
	conf, err := json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       network,
		// libcni keeps a list's unknown fields to itself: the marker
		// shows in the CRI plugin's status which configuration it loaded.
		"phaseshiftGeneration": generationMarker(),
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": bridgeName, "isGateway": false, "ipMasq": false, "ipam": ipam,
		}},
	}, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(n.cniConf, "10-"+network+".conflist")
	tmp := path + ".tmp" // not a configuration to libcni, which reads .conf, .conflist and .json
	if err := os.WriteFile(tmp, conf, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func generationMarker() string { return fmt.Sprintf("generation-%04d", generation) }

// useNetwork writes the network configuration for r and waits until the
// CRI plugin has loaded it (it watches the directory and reloads on its
// own time).
func (n *node) useNetwork(ctx context.Context, r runner) error {
	if err := n.writeNetwork(r); err != nil {
		return err
	}
	marker := generationMarker()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		st, err := n.rt.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
		if err == nil && strings.Contains(st.GetInfo()["cniconfig"], marker) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd did not load the network configuration for %s: %w", r, errors.Join(ctx.Err(), err))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// files reads host-local's files: an address per container.
func (n *node) files(ctx context.Context) (map[string]netip.Addr, error) {
	src, err := hostlocal.Open(n.dataDir, network)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if err := src.Lock(ctx); err != nil {
		return nil, err
	}
	all, err := src.List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]netip.Addr{}
	for k, v := range all {
		if len(v.IPs) != 1 {
			return nil, fmt.Errorf("host-local's files give %s %d addresses", k, len(v.IPs))
		}
		out[k.ContainerID] = v.IPs[0]
	}
	return out, nil
}

// checkpointPath is examples/hostlocal's checkpoint for the network, at
// its default place.
func (n *node) checkpointPath() string {
	return filepath.Join(n.dataDir, ".phaseshift", network+".json")
}

// checkpointed reads the checkpoint: an address per container.
func (n *node) checkpointed(ctx context.Context) (map[string]netip.Addr, error) {
	f, err := checkpoint.Open[hostlocal.Key, hostlocal.Allocation](ctx, n.checkpointPath(), checkpoint.WithLockWait(30*time.Second))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	snap, err := f.Load(ctx)
	if errors.Is(err, checkpoint.ErrNotExist) {
		return map[string]netip.Addr{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]netip.Addr{}
	for k, v := range snap.Entries {
		if len(v.IPs) != 1 {
			return nil, fmt.Errorf("the checkpoint gives %s %d addresses", k, len(v.IPs))
		}
		out[k.ContainerID] = v.IPs[0]
	}
	return out, nil
}
