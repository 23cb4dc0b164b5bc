package e2e

import (
	"context"
	"fmt"
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
	c := newChurn(t)
	ctx, n := suiteCtx, c.n
	c.restart("expand")
	ids := c.runPods(3)
	pods, err := n.readyPods(ctx)
	require.NoError(t, err)
	rep := c.restart("expand")
	assert.Equal(t, 3, rep.Restored, "phase 1 restores the running pods from CRI: %s", rep.Line)
	n.checkServed(ctx, t, c.d, "phase 1's restore")

	// The DEL in flight.
	stopped := ids[2]
	finishStop := c.stopHeld(stopped)
	states, err := n.sandboxStates(ctx)
	require.NoError(t, err)
	require.Equal(t, runtimeapi.PodSandboxState_SANDBOX_NOTREADY, states[stopped],
		"containerd lists the sandbox whose CNI DEL is in flight, NOTREADY (its container is stopped before the DEL)")
	st, err := n.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: stopped})
	require.NoError(t, err)
	t.Logf("DEL in flight: containerd lists %s %s with IP %q", stopped[:12], states[stopped], st.GetStatus().GetNetwork().GetIp())
	assert.NotContains(t, n.criListed(ctx, t), stopped, "source/cri lists READY sandboxes only")

	// The ADD in flight.
	newPod, newIP, finishRun := c.runHeld()
	require.Equal(t, pods[stopped], newIP, "the daemon gives the new pod the address the DEL freed (the lowest free)")
	states, err = n.sandboxStates(ctx)
	require.NoError(t, err)
	require.NotContains(t, states, newPod, "containerd lists a sandbox only once its network is set up")
	t.Logf("ADD in flight: %s acknowledged with %s, not listed", newPod[:12], newIP)

	rep = c.restart("migrate")
	assert.NotContains(t, rep.Line, "never held", "no run that skips the checkpoint ran")
	require.NoError(t, finishRun())
	require.NoError(t, finishStop())
	live := n.checkServed(ctx, t, c.d, "phase 2's restore, with an ADD and a DEL in flight")
	assert.Equal(t, newIP, live[newPod], "containerd's IP for the pod whose ADD was in flight")
	assert.NotContains(t, live, stopped)
	c.checkNextADD(live)
}

// TestPodChurnAcrossTwoRestarts is the closest sequence containerd 1.6
// plays to the "legacy lists 1 entry the checkpoint never held":
// under containerd a DEL in flight never shows in source/cri's listing
// (TestPodChurnAcrossARestart), so what CRI lists READY and the
// checkpoint lacks can only be a pod whose acknowledged ADD a restore
// dropped. Phase 1 used to take CRI's word on which entries exist, so a
// phase-1 restart with an ADD in flight dropped it; the sandbox is READY
// once the ADD returns. Then TestPodChurnAcrossARestart's DEL
// and ADD in flight, across the restart into phase 2. Checked against the
// node after each restart, and the daemon's next ADD after the last, as
// there.
//
// Before an observing legacy's silence stopped dropping what the
// checkpoint holds (rule 21), it failed at the phase-1 restart: that
// restore dropped the pod whose ADD was in flight ("dropped 1 ... stale
// checkpoint: it differs from legacy ... a phase-0 run or a crash"), and
// its address was free while the pod held it (the daemon's next ADD got
// it). Before rule 7's second half went, it failed at phase 2 as well, as
// the issue says: "legacy lists 1 entry the checkpoint never held", and
// the pod whose ADD was in flight there was dropped too.
func TestPodChurnAcrossTwoRestarts(t *testing.T) {
	c := newChurn(t)
	ctx, n := suiteCtx, c.n
	c.restart("expand")
	ids := c.runPods(3)
	c.restart("expand")

	first, firstIP, finishFirst := c.runHeld()
	c.restart("expand")
	require.NoError(t, finishFirst())
	live := n.checkServed(ctx, t, c.d, "phase 1's restore, with an ADD in flight")
	assert.Equal(t, firstIP, live[first])

	stopped := ids[2]
	finishStop := c.stopHeld(stopped)
	_, _, finishRun := c.runHeld()
	rep := c.restart("migrate")
	assert.NotContains(t, rep.Line, "never held", "no run that skips the checkpoint ran")
	require.NoError(t, finishRun())
	require.NoError(t, finishStop())
	live = n.checkServed(ctx, t, c.d, "phase 2's restore, with an ADD and a DEL in flight")
	c.checkNextADD(live)
}

// churn is a node whose pods' IPAM is examples/ipam, through the relay,
// restarted as a test says.
type churn struct {
	t        *testing.T
	n        *node
	r        *relay
	d        *ipamd // the daemon running, attached to the relay
	state    string
	inFlight sync.WaitGroup // the CRI calls made in the background
}

// newChurn installs the relay plugin and the network that uses it, with
// no pod and no daemon yet. At cleanup held calls are released, and the
// pods removed through the daemon running then, so that their DELs
// release their addresses.
func newChurn(t *testing.T) *churn {
	n := e2eNode(t)
	ctx := suiteCtx
	require.NoError(t, n.installRelayPlugin())
	c := &churn{t: t, n: n, r: n.startRelay(t), state: filepath.Join(n.dir, "churn", t.Name(), "ipam.json")}
	require.NoError(t, n.useNetwork(ctx, runner{plugin: relayPlugin}))
	require.NoError(t, n.removeAllPods(ctx))
	require.NoError(t, os.MkdirAll(filepath.Dir(c.state), 0o755))
	t.Cleanup(func() {
		c.r.mu.Lock()
		for _, h := range c.r.hold {
			h.let()
		}
		c.r.mu.Unlock()
		c.inFlight.Wait()
		assert.NoError(t, n.removeAllPods(ctx))
		c.r.attach(nil)
		if c.d != nil {
			assert.NoError(t, c.d.exit())
		}
	})
	return c
}

// restart stops the daemon (if one runs) and starts it in phase over the
// same checkpoint, and returns its restore report.
func (c *churn) restart(phase string) ipamReport {
	c.t.Helper()
	c.r.attach(nil)
	if c.d != nil {
		require.NoError(c.t, c.d.exit(), "examples/ipam's exit")
		c.d = nil
	}
	d, err := c.n.startIPAMD(suiteCtx, c.state, phase)
	require.NoError(c.t, err)
	c.d = d
	c.r.attach(d)
	c.t.Logf("restore in phase %s: %s", phase, d.report.Line)
	return d.report
}

// runPods runs count pods, one after another, and returns their IDs.
func (c *churn) runPods(count int) []string {
	c.t.Helper()
	var ids []string
	for range count {
		id, err := c.n.runPod(suiteCtx, false)
		require.NoError(c.t, err)
		ids = append(ids, id)
	}
	return ids
}

// stopHeld starts StopPodSandbox for id and returns once the daemon has
// acknowledged its CNI DEL, which the relay holds; finish lets it go and
// returns StopPodSandbox's error.
func (c *churn) stopHeld(id string) (finish func() error) {
	c.t.Helper()
	h := c.r.holdNext("DEL")
	done := make(chan error, 1)
	c.inFlight.Add(1)
	go func() { defer c.inFlight.Done(); done <- c.n.stopPod(suiteCtx, id) }()
	a := c.wait(h)
	require.Equal(c.t, id, a.ContainerID, "the held DEL is the stopped pod's")
	return func() error { h.let(); return <-done }
}

// runHeld starts RunPodSandbox and returns once the daemon has
// acknowledged its CNI ADD, which the relay holds: the sandbox's ID and
// the address acknowledged. finish lets it go and returns RunPodSandbox's
// error.
func (c *churn) runHeld() (id string, ip netip.Addr, finish func() error) {
	c.t.Helper()
	h := c.r.holdNext("ADD")
	type created struct {
		id  string
		err error
	}
	done := make(chan created, 1)
	c.inFlight.Add(1)
	go func() {
		defer c.inFlight.Done()
		id, err := c.n.runPod(suiteCtx, false)
		done <- created{id, err}
	}()
	a := c.wait(h)
	require.Len(c.t, a.IPs, 1)
	return a.ContainerID, a.IPs[0], func() error {
		h.let()
		got := <-done
		if got.err == nil && got.id != a.ContainerID {
			return fmt.Errorf("RunPodSandbox made %s; the held ADD was for %s", got.id, a.ContainerID)
		}
		return got.err
	}
}

// wait waits, for at most a minute, until the daemon has acknowledged h.
func (c *churn) wait(h *held) acked {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(suiteCtx, time.Minute)
	defer cancel()
	a, err := h.wait(ctx)
	require.NoError(c.t, err)
	return a
}

// checkNextADD runs a pod, the daemon's next ADD, and checks that it got
// none of the addresses of live, the sandboxes live before it; then checks
// the daemon against the node again.
func (c *churn) checkNextADD(live map[string]netip.Addr) {
	c.t.Helper()
	next := c.runPods(1)[0]
	now, err := c.n.readyPods(suiteCtx)
	require.NoError(c.t, err)
	for id, ip := range live {
		assert.NotEqual(c.t, ip, now[next], "the daemon's next ADD got %s, which %s holds", ip, id[:12])
	}
	c.n.checkServed(suiteCtx, c.t, c.d, "the next ADD")
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
