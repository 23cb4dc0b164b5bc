package cri_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source/cri"
	"github.com/phaseshift/phaseshift/source/cri/critest"
)

// podKey and podAlloc are an ipamd-style daemon's entries; CRI shows a
// sandbox under placeholder network and interface names.
type podKey struct{ Network, ContainerID, IfName string }

type podAlloc struct{ IPs []netip.Addr }

// daemon is one node: a real CRI gRPC server, and a daemon's Store over a
// real checkpoint file, restarted in any phase.
type daemon struct {
	t       *testing.T
	runtime *critest.Runtime
	lister  *cri.Lister
	path    string
	store   *migrate.Store[podKey, podAlloc]
}

func newDaemon(t *testing.T) *daemon {
	rt := critest.New()
	srv, err := rt.Serve("")
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	l, err := cri.NewLister(srv.Endpoint())
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	d := &daemon{t: t, runtime: rt, lister: l, path: filepath.Join(t.TempDir(), "ipam.json")}
	t.Cleanup(func() {
		if d.store != nil {
			d.store.Close()
		}
	})
	return d
}

// start restarts the daemon in phase p (the old binary: a Store without
// checkpoint in phase 0).
func (d *daemon) start(p migrate.Phase, oldBinary bool) migrate.Report[podKey] {
	d.t.Helper()
	if d.store != nil {
		require.NoError(d.t, d.store.Close())
	}
	legacy, err := cri.Reader(d.lister, func(sb cri.Sandbox) (podKey, podAlloc, bool) {
		return podKey{"_migrated-from-cri", sb.ID, "unknown"}, podAlloc{IPs: sb.IPs}, len(sb.IPs) > 0
	})
	require.NoError(d.t, err)
	cfg := migrate.Config[podKey, podAlloc]{Phase: p, Legacy: legacy,
		Match: func(k podKey) podKey { return podKey{ContainerID: k.ContainerID} },
		Equal: func(a, b podAlloc) bool { return slices.Equal(a.IPs, b.IPs) },
		// No two pods hold one address, as every ipamd-style adapter says
		// (examples/ipam, examples/vpccni).
		Unique: func(a podAlloc) []string {
			parts := make([]string, 0, len(a.IPs))
			for _, ip := range a.IPs {
				parts = append(parts, ip.String())
			}
			return parts
		}}
	if !oldBinary {
		cp, err := checkpoint.Open[podKey, podAlloc](context.Background(), d.path)
		require.NoError(d.t, err)
		cfg.Checkpoint = cp
	}
	s, err := migrate.New(cfg)
	require.NoError(d.t, err)
	d.store = s
	rep, err := s.Restore(context.Background())
	require.NoError(d.t, err)
	return rep
}

// add is a CNI ADD, then the runtime makes the sandbox ready.
func (d *daemon) add(id, ip string) {
	d.t.Helper()
	a := podAlloc{IPs: []netip.Addr{netip.MustParseAddr(ip)}}
	require.NoError(d.t, d.store.Put(context.Background(), podKey{"aws-cni", id, "eth0"}, a))
	d.runtime.Add(critest.Sandbox{ID: id, Name: id, Namespace: "default", IPs: []string{ip}})
}

// del is a CNI DEL, then the runtime removes the sandbox.
func (d *daemon) del(id string) {
	d.t.Helper()
	require.NoError(d.t, d.store.Delete(context.Background(), podKey{"aws-cni", id, "eth0"}))
	d.runtime.Remove(id)
}

// addresses returns who holds each address the daemon serves, failing
// the test for an address served to two pods the runtime lists (live
// holders). An address also served to a pod the runtime no longer lists
// is that gone pod's leak, allowed only where rep names the gone pod in
// Report.Orphaned; it is left out of the map.
func (d *daemon) addresses(rep migrate.Report[podKey]) map[string]string {
	d.t.Helper()
	live := map[string]bool{}
	for _, sb := range d.runtime.Sandboxes() {
		live[sb.ID] = true
	}
	holders := map[string]string{}
	for k, v := range d.store.All() {
		if !live[k.ContainerID] {
			assert.Contains(d.t, rep.Orphaned, k, "%s is served, the runtime does not list it, and the report does not name it", k.ContainerID)
			continue
		}
		for _, ip := range v.IPs {
			if other, ok := holders[ip.String()]; ok {
				d.t.Errorf("%s is served to %s and to %s, both live", ip, other, k.ContainerID)
			}
			holders[ip.String()] = k.ContainerID
		}
	}
	return holders
}

// TestPhase2AfterTheOldBinaryOverCRI is issue 32's item 4 through a real
// CRI server: fleet at 1, then 2; a node back to the old binary, which
// DELs pod-3 and ADDs pod-9 with pod-3's address; straight back to phase
// 2. Under issue 41's rules the first restore cannot tell which of pod-3
// (only the checkpoint holds it) and pod-9 (only the runtime lists it)
// holds 10.0.0.3: it serves both, names pod-3 as an orphan and reports the
// shared address, and the address is not free. pod-3 is gone, so that is
// its leak, named; no address is served to two live pods. The next restore
// sees pod-9 listed and held, and drops pod-3; then nothing is left to
// reconcile.
func TestPhase2AfterTheOldBinaryOverCRI(t *testing.T) {
	d := newDaemon(t)
	d.start(migrate.PhaseExpand, false)
	for i := 1; i <= 4; i++ {
		d.add(fmt.Sprintf("pod-%d", i), fmt.Sprintf("10.0.0.%d", i))
	}
	d.start(migrate.PhaseMigrate, false)
	d.add("pod-5", "10.0.0.5")

	d.start(migrate.PhaseLegacy, true) // the old binary
	d.del("pod-3")
	d.add("pod-9", "10.0.0.3") // pod-3's address, which the old binary freed

	want := map[string]string{"10.0.0.1": "pod-1", "10.0.0.2": "pod-2", "10.0.0.3": "pod-9", "10.0.0.4": "pod-4", "10.0.0.5": "pod-5"}
	rep := d.start(migrate.PhaseMigrate, false)
	assert.Equal(t, want, d.addresses(rep))
	assert.Equal(t, []podKey{{"aws-cni", "pod-3", "eth0"}}, rep.Orphaned, "pod-3's leak is named")
	assert.Empty(t, rep.Dropped, "neither side shows pod-9 both listed and held yet")
	require.Len(t, rep.Errors, 1, rep.String())
	assert.ErrorIs(t, rep.Errors[0], migrate.ErrValueShared)
	held, ok := d.store.Get(podKey{"aws-cni", "pod-3", "eth0"})
	require.True(t, ok, "10.0.0.3 stays taken")
	assert.Equal(t, []netip.Addr{netip.MustParseAddr("10.0.0.3")}, held.IPs)

	rep = d.start(migrate.PhaseMigrate, false)
	assert.Equal(t, want, d.addresses(rep))
	assert.Equal(t, []podKey{{"aws-cni", "pod-3", "eth0"}}, rep.Dropped, "pod-9 is listed and held now")
	assert.Empty(t, rep.Orphaned, "nothing is left for a person to prune")
	assert.Empty(t, rep.Errors)

	rep = d.start(migrate.PhaseMigrate, false)
	assert.Equal(t, want, d.addresses(rep))
	assert.Empty(t, rep.Dropped)
	assert.Empty(t, rep.Orphaned)
	assert.False(t, rep.CheckpointRewritten)

	// And on to phase 3, which the gate now allows.
	rep = d.start(migrate.PhaseContract, false)
	assert.Equal(t, want, d.addresses(rep))
}
