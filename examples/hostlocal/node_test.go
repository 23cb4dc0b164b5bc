package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/source/hostlocal"
)

const testNetwork = "mynet"

// runner is who serves an exec: the real host-local (phase "") or this
// plugin in a phase.
type runner struct {
	plugin string
	phase  string
}

var hl = runner{plugin: hostLocal}

func ps(phase string) runner { return runner{plugin: ourPlugin, phase: phase} }

func (r runner) String() string {
	if r.plugin == hostLocal {
		return "host-local"
	}
	return "phaseshift/" + r.phase
}

// node is one node's CNI setup, driven as a runtime drives it: a data
// directory (host-local's files and the checkpoints), libcni with its own
// cache directory, and both plugins on CNI_PATH. Its boot ID is the test
// hook's (envBootID), set for the test with Setenv, so the node is
// rebooted by changing it.
type node struct {
	tb        testing.TB
	dataDir   string
	binDir    string
	ranges    string // the "ranges" of the ipam section, JSON
	cni       *libcni.CNIConfig
	extraIPAM map[string]any // more ipam fields, for the tests that need them
}

func newNode(tb testing.TB) *node {
	tb.Helper()
	bin := plugins(tb)
	dir := tb.TempDir()
	n := &node{
		tb:      tb,
		dataDir: filepath.Join(dir, "networks"),
		binDir:  bin,
		ranges:  `[[{"subnet": "10.22.0.0/24"}]]`,
		// An explicit Exec: with nil, libcni v1.3.0 sets its default
		// lazily, unsynchronised, and concurrent first calls race.
		cni: libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(dir, "cache"),
			&invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}}),
	}
	n.reboot("boot-1")
	return n
}

// reboot gives the node a new boot ID. The caller forgets the containers
// the reboot killed.
func (n *node) reboot(id string) { n.tb.Setenv(envBootID, id) }

// conf is the network configuration of runner r: its plugin as the one
// plugin of the list, with host-local's ipam section, plus the phase for
// this plugin.
func (n *node) conf(r runner) []byte {
	ipam := map[string]any{
		"type":    r.plugin,
		"dataDir": n.dataDir,
		"ranges":  json.RawMessage(n.ranges),
	}
	if r.plugin == ourPlugin {
		ipam["phase"] = r.phase
	}
	for k, v := range n.extraIPAM {
		ipam[k] = v
	}
	b, err := json.Marshal(map[string]any{
		"cniVersion": "1.1.0",
		"name":       testNetwork,
		"plugins":    []any{map[string]any{"type": r.plugin, "ipam": ipam}},
	})
	require.NoError(n.tb, err)
	return b
}

func (n *node) list(r runner) *libcni.NetworkConfigList {
	l, err := libcni.ConfListFromBytes(n.conf(r))
	require.NoError(n.tb, err)
	return l
}

func rt(id string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: id, NetNS: "/var/run/netns/" + id, IfName: "eth0"}
}

func ctxFor(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	tb.Cleanup(cancel)
	return ctx
}

// add is a runtime's ADD through libcni; it returns the first address.
func (n *node) add(r runner, id string) (netip.Addr, error) {
	res, err := n.cni.AddNetworkList(ctxFor(n.tb), n.list(r), rt(id))
	if err != nil {
		return netip.Addr{}, err
	}
	return firstAddr(res)
}

func firstAddr(res types.Result) (netip.Addr, error) {
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(cur.IPs) == 0 {
		return netip.Addr{}, errors.New("the result has no address")
	}
	a, _ := netip.AddrFromSlice(cur.IPs[0].Address.IP)
	return a.Unmap(), nil
}

func (n *node) del(r runner, id string) error {
	return n.cni.DelNetworkList(ctxFor(n.tb), n.list(r), rt(id))
}

func (n *node) check(r runner, id string) error {
	return n.cni.CheckNetworkList(ctxFor(n.tb), n.list(r), rt(id))
}

// gc is a runtime's GC through libcni: it DELs the attachments libcni has
// cached that are not valid, then sends GC with the valid ones.
func (n *node) gc(r runner, valid ...string) error {
	args := &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}}
	for _, id := range valid {
		args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: id, IfName: "eth0"})
	}
	return n.cni.GCNetworkList(ctxFor(n.tb), n.list(r), args)
}

func (n *node) status(r runner) error {
	return n.cni.GetStatusNetworkList(ctxFor(n.tb), n.list(r))
}

// ipamConf is what a main plugin such as bridge passes to its IPAM plugin:
// its own configuration, with the ipam section.
func (n *node) ipamConf(r runner) []byte {
	var l struct {
		Plugins []map[string]any `json:"plugins"`
	}
	require.NoError(n.tb, json.Unmarshal(n.conf(r), &l))
	p := l.Plugins[0]
	p["type"], p["cniVersion"], p["name"] = "bridge", "1.1.0", testNetwork
	b, err := json.Marshal(p)
	require.NoError(n.tb, err)
	return b
}

// delegateEnv sets the environment a main plugin runs in, which
// pkg/invoke's Delegate functions pass on to the IPAM plugin.
func (n *node) delegateEnv(id string) {
	n.tb.Setenv("CNI_CONTAINERID", id)
	n.tb.Setenv("CNI_NETNS", "/var/run/netns/"+id)
	n.tb.Setenv("CNI_IFNAME", "eth0")
	n.tb.Setenv("CNI_PATH", n.binDir)
	n.tb.Setenv("CNI_ARGS", "")
}

// delegateAdd is what bridge and ptp do to get addresses:
// invoke.DelegateAdd with the IPAM type, from their own environment.
func (n *node) delegateAdd(r runner, id string) (netip.Addr, error) {
	n.delegateEnv(id)
	res, err := invoke.DelegateAdd(ctxFor(n.tb), r.plugin, n.ipamConf(r), nil)
	if err != nil {
		return netip.Addr{}, err
	}
	return firstAddr(res)
}

func (n *node) delegateCheck(r runner, id string) error {
	n.delegateEnv(id)
	return invoke.DelegateCheck(ctxFor(n.tb), r.plugin, n.ipamConf(r), nil)
}

// addMany runs one ADD per ID at once, as a runtime starting many pods
// does, and returns each ID's address.
func (n *node) addMany(r func(i int) runner, ids []string) map[string]netip.Addr {
	n.tb.Helper()
	var mu sync.Mutex
	got := map[string]netip.Addr{}
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := n.add(r(i), id)
			errs[i] = err
			mu.Lock()
			got[id] = a
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.NoError(n.tb, errors.Join(errs...))
	return got
}

func (n *node) checkpointPath() string {
	return filepath.Join(n.dataDir, checkpointDir, testNetwork+".json")
}

// files lists host-local's files as an address per container.
func (n *node) files() map[string]netip.Addr {
	n.tb.Helper()
	src, err := hostlocal.Open(n.dataDir, testNetwork)
	require.NoError(n.tb, err)
	defer src.Close()
	all, err := src.List(ctxFor(n.tb))
	require.NoError(n.tb, err)
	return byContainer(n.tb, func(yield func(key, alloc) bool) {
		for k, v := range all {
			if !yield(k, v) {
				return
			}
		}
	})
}

// checkpointed reads the checkpoint as an address per container, and its
// header.
func (n *node) checkpointed() (map[string]netip.Addr, checkpoint.Meta) {
	n.tb.Helper()
	f, err := checkpoint.Open[key, alloc](ctxFor(n.tb), n.checkpointPath(), checkpoint.WithLockWait(30*time.Second))
	require.NoError(n.tb, err)
	defer f.Close()
	snap, err := f.Load(ctxFor(n.tb))
	if errors.Is(err, checkpoint.ErrNotExist) {
		return map[string]netip.Addr{}, snap.Meta
	}
	require.NoError(n.tb, err)
	return byContainer(n.tb, func(yield func(key, alloc) bool) {
		for k, v := range snap.Entries {
			if !yield(k, v) {
				return
			}
		}
	}), snap.Meta
}

func byContainer(tb testing.TB, all func(yield func(key, alloc) bool)) map[string]netip.Addr {
	tb.Helper()
	out := map[string]netip.Addr{}
	for k, v := range all {
		assert.Equal(tb, testNetwork, k.Network)
		if !strings.HasPrefix(k.ContainerID, "old-") { // pre-v0.8.0 files name no interface
			assert.Equal(tb, "eth0", k.IfName, "container %s", k.ContainerID)
		}
		if assert.Len(tb, v.IPs, 1, "container %s", k.ContainerID) {
			out[k.ContainerID] = v.IPs[0]
		}
	}
	return out
}

// model is what the runtime was told: the address of every live
// container. It fails the test when an ADD hands out an address a live
// container holds.
type model struct {
	tb   testing.TB
	live map[string]netip.Addr
}

func newModel(tb testing.TB) *model { return &model{tb: tb, live: map[string]netip.Addr{}} }

func (m *model) added(id string, a netip.Addr) {
	m.tb.Helper()
	require.True(m.tb, a.IsValid(), "ADD %s returned no address", id)
	for other, b := range m.live {
		require.NotEqual(m.tb, a, b, "address %s given to %s while %s holds it", a, id, other)
	}
	m.live[id] = a
}

func (m *model) deleted(id string) { delete(m.live, id) }

func (m *model) String() string { return fmt.Sprint(m.live) }
