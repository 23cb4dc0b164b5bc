package e2e

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/phaseshift/phaseshift/source/cri"
)

// TestPodChurnAcrossARestart is issue 41's path 1 under containerd: pod
// churn while the IPAM daemon (examples/ipam, the pods' IPAM through the
// relay plugin) restarts from phase 1 into phase 2, with a CNI ADD and a
// CNI DEL that the daemon acknowledged and the runtime has not finished.
//
//   - Phase 1 restores three running pods from CRI.
//   - A pod is stopped; the relay holds its CNI DEL once the daemon has
//     acknowledged it, so StopPodSandbox is in flight. containerd lists
//     the sandbox, but NOTREADY: StopPodSandbox stops the sandbox
//     container and waits for its exit before the CNI DEL, so a sandbox
//     whose DEL is in flight is never READY, and source/cri, which lists
//     READY sandboxes only, leaves it out. The issue's "a DEL for a pod
//     whose sandbox is still listed" is, under containerd 1.6, this:
//     listed by containerd, not by the daemon's legacy reader.
//   - A pod is created; the relay holds its CNI ADD once the daemon has
//     acknowledged it (the address the stopped pod freed: the allocator
//     takes the lowest free one), so RunPodSandbox is in flight.
//     containerd does not list the sandbox at all: it adds it to its store
//     only once its network is set up and its container started.
//   - The daemon restarts in phase 2 with both in flight, then both
//     finish.
//
// The checks are the node's, not the restore rules': every pod sandbox
// containerd reports READY is served with the address containerd reports
// for it, no address is served twice, and the daemon's next ADD (a new
// pod) gets none of the addresses live sandboxes hold.
func TestPodChurnAcrossARestart(t *testing.T) {
	n := e2eNode(t)
	ctx := suiteCtx
	require.NoError(t, n.installRelayPlugin())
	r := n.startRelay(t)
	require.NoError(t, n.useNetwork(ctx, runner{plugin: relayPlugin}))
	require.NoError(t, n.removeAllPods(ctx))
	state := filepath.Join(n.dir, "churn", "ipam.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(state), 0o755))

	var d *ipamd // the daemon running, attached to the relay
	restart := func(phase string) ipamReport {
		t.Helper()
		r.attach(nil)
		if d != nil {
			require.NoError(t, d.exit(), "examples/ipam's exit")
		}
		var err error
		d, err = n.startIPAMD(ctx, state, phase)
		require.NoError(t, err)
		r.attach(d)
		t.Logf("restore in phase %s: %s", phase, d.report.Line)
		return d.report
	}
	// Cleanup goes through the daemon running then, so that the pods'
	// DELs release their addresses; held calls are released first
	// (relay.close runs after this).
	var inFlight sync.WaitGroup // the CRI calls the test makes in the background
	t.Cleanup(func() {
		r.mu.Lock()
		for _, h := range r.hold {
			h.let()
		}
		r.mu.Unlock()
		inFlight.Wait()
		assert.NoError(t, n.removeAllPods(ctx))
		r.attach(nil)
		if d != nil {
			assert.NoError(t, d.exit())
		}
	})

	restart("expand")
	var ids []string
	for range 3 {
		id, err := n.runPod(ctx, false)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	pods, err := n.readyPods(ctx)
	require.NoError(t, err)
	rep := restart("expand")
	assert.Equal(t, 3, rep.Restored, "phase 1 restores the running pods from CRI: %s", rep.Line)
	n.checkServed(ctx, t, d, "phase 1's restore")

	// The DEL in flight.
	stopped := ids[2]
	del := r.holdNext("DEL")
	stopDone := make(chan error, 1)
	inFlight.Add(1)
	go func() { defer inFlight.Done(); stopDone <- n.stopPod(ctx, stopped) }()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	a, err := del.wait(wctx)
	require.NoError(t, err)
	require.Equal(t, stopped, a.ContainerID, "the held DEL is the stopped pod's")
	states, err := n.sandboxStates(ctx)
	require.NoError(t, err)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_NOTREADY, states[stopped],
		"containerd lists the sandbox whose CNI DEL is in flight, NOTREADY (its container is stopped before the DEL)")
	st, err := n.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: stopped})
	require.NoError(t, err)
	t.Logf("DEL in flight: containerd lists %s %s with IP %q", stopped[:12], states[stopped], st.GetStatus().GetNetwork().GetIp())
	assert.NotContains(t, n.criListed(ctx, t), stopped, "source/cri lists READY sandboxes only")

	// The ADD in flight.
	add := r.holdNext("ADD")
	type created struct {
		id  string
		err error
	}
	addDone := make(chan created, 1)
	inFlight.Add(1)
	go func() {
		defer inFlight.Done()
		id, err := n.runPod(ctx, false)
		addDone <- created{id, err}
	}()
	a, err = add.wait(wctx)
	require.NoError(t, err)
	require.Len(t, a.IPs, 1)
	newPod, newIP := a.ContainerID, a.IPs[0]
	require.Equal(t, pods[stopped], newIP, "the daemon gives the new pod the address the DEL freed (the lowest free)")
	states, err = n.sandboxStates(ctx)
	require.NoError(t, err)
	require.NotContains(t, states, newPod, "containerd lists a sandbox only once its network is set up")
	t.Logf("ADD in flight: %s acknowledged with %s, not listed", newPod[:12], newIP)

	rep = restart("migrate")
	assert.NotContains(t, rep.Line, "never held", "no run that skips the checkpoint ran")

	add.let()
	del.let()
	c := <-addDone
	require.NoError(t, c.err)
	require.Equal(t, newPod, c.id)
	require.NoError(t, <-stopDone)
	live := n.checkServed(ctx, t, d, "phase 2's restore, with an ADD and a DEL in flight")
	assert.Equal(t, newIP, live[newPod], "containerd's IP for the pod whose ADD was in flight")
	assert.NotContains(t, live, stopped)

	next, err := n.runPod(ctx, false)
	require.NoError(t, err)
	now, err := n.readyPods(ctx)
	require.NoError(t, err)
	for id, ip := range live {
		assert.NotEqual(t, ip, now[next], "the daemon's next ADD got %s, which %s holds", ip, id)
	}
	n.checkServed(ctx, t, d, "the next ADD")
}

// checkServed checks the daemon against the node: every pod sandbox
// containerd reports READY in the pod network is served with the address
// containerd reports for it, and no address is served twice. It returns
// the ready sandboxes' addresses.
func (n *node) checkServed(ctx context.Context, t *testing.T, d *ipamd, when string) map[string]netip.Addr {
	t.Helper()
	live, err := n.readyPods(ctx)
	require.NoError(t, err)
	served, err := d.served()
	require.NoError(t, err)
	for id, ip := range live {
		got, ok := served[id]
		assert.True(t, ok && got == ip, "%s: sandbox %s holds %s; the daemon serves %v (served: %v)", when, id[:12], ip, got, ok)
	}
	holder := map[netip.Addr]string{}
	for id, ip := range served {
		if other, dup := holder[ip]; dup {
			t.Errorf("%s: %s served to %s and %s", when, ip, id[:12], other[:12])
		}
		holder[ip] = id
	}
	return live
}

// sandboxStates is what containerd lists, in every state: a state per
// pod sandbox of the suite.
func (n *node) sandboxStates(ctx context.Context) (map[string]runtimeapi.PodSandboxState, error) {
	list, err := n.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string]runtimeapi.PodSandboxState{}
	for _, item := range list.GetItems() {
		if item.GetMetadata().GetNamespace() == podNamespace {
			out[item.GetId()] = item.GetState()
		}
	}
	return out, nil
}

// criListed is what source/cri, the daemon's legacy reader, lists.
func (n *node) criListed(ctx context.Context, t *testing.T) []string {
	t.Helper()
	l, err := cri.NewLister("unix://" + n.sock)
	require.NoError(t, err)
	defer l.Close()
	got, err := l.Sandboxes(ctx)
	require.NoError(t, err)
	ids := make([]string, len(got))
	for i, s := range got {
		ids[i] = s.ID
	}
	return ids
}
