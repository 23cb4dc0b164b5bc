package e2e

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// walk is the rollout TestPhaseWalk takes a node through: forward, back
// to the old behaviour, a refused jump from it to phase 3, the real
// host-local in the middle, and back and forth between 2 and 3.
var walk = []struct {
	r       runner
	refused bool // phase 3 right after phase 0: every ADD and DEL is refused
}{
	{r: ps("legacy")},
	{r: ps("expand")},
	{r: ps("migrate")},
	{r: ps("legacy")},
	{r: ps("contract"), refused: true},
	{r: ps("migrate")},
	{r: runner{plugin: hostLocal}},
	{r: ps("migrate")},
	{r: ps("contract")},
	{r: ps("migrate")},
	{r: ps("contract")},
	{r: ps("legacy")},
	{r: ps("expand")},
}

func ps(phase string) runner { return runner{plugin: ourPlugin, phase: phase} }

// TestPhaseWalk walks a node with real pods through the rollout. At every
// step the CRI plugin loads the step's network configuration, two pods
// are created and the oldest removed, and then the pod IPs containerd
// reports are compared with host-local's files and with the checkpoint,
// each where the step keeps it current: the files in phases 0 to 2 and
// under host-local, the checkpoint in phases 1 to 3. At the refused step
// both the new pod and the removal of an old one fail, saying why; the
// removal's network is torn down at the next step, and until then its
// address stays allocated.
func TestPhaseWalk(t *testing.T) {
	n := e2eNode(t)
	ctx := suiteCtx
	require.NoError(t, n.useNetwork(ctx, ps("expand")))
	require.NoError(t, n.removeAllPods(ctx))

	var alive []string                 // ready pods, oldest first
	ips := map[string]netip.Addr{}     // every pod's address, as containerd gave it
	pending := map[string]netip.Addr{} // pods stopped whose network was not torn down
	for i, step := range walk {
		require.NoError(t, n.useNetwork(ctx, step.r), "step %d", i)
		if step.refused {
			_, err := n.runPod(ctx, false)
			require.Error(t, err, "step %d (%s): a new pod", i, step.r)
			assert.Contains(t, err.Error(), "restore (phase 3, contract)", "step %d: the CNI error says why", i)
			t.Logf("step %d (%s): a new pod is refused: %v", i, step.r, err)
			err = n.stopPod(ctx, alive[0])
			require.Error(t, err, "step %d (%s): the removal of a pod", i, step.r)
			assert.Contains(t, err.Error(), "restore (phase 3, contract)", "step %d", i)
			pending[alive[0]] = ips[alive[0]]
			alive = alive[1:]
		} else {
			for id := range pending {
				require.NoError(t, n.removePod(ctx, id), "step %d (%s): the pod whose removal was refused", i, step.r)
				delete(pending, id)
			}
			for range 2 {
				id, err := n.runPod(ctx, false)
				require.NoError(t, err, "step %d (%s)", i, step.r)
				alive = append(alive, id)
			}
			require.NoError(t, n.removePod(ctx, alive[0]), "step %d (%s)", i, step.r)
			alive = alive[1:]
		}
		pods, err := n.readyPods(ctx)
		require.NoError(t, err)
		require.ElementsMatch(t, alive, sortedKeys(pods), "step %d (%s): containerd's ready pods", i, step.r)
		for id, ip := range pods {
			ips[id] = ip
		}
		n.checkSides(ctx, t, i, step.r, step.refused, pods, pending)
	}
	require.NoError(t, n.removeAllPods(ctx))
}

// checkSides compares the allocations with the pods: every address given
// once, and each side the step keeps current holding exactly the pods'
// addresses (and those of pods whose network is still up).
func (n *node) checkSides(ctx context.Context, t *testing.T, i int, r runner, refused bool, pods, pending map[string]netip.Addr) {
	t.Helper()
	want := map[string]netip.Addr{}
	seen := map[netip.Addr]string{}
	for _, m := range []map[string]netip.Addr{pods, pending} {
		for id, ip := range m {
			if other, dup := seen[ip]; dup {
				t.Errorf("step %d (%s): %s given to %s and %s", i, r, ip, id, other)
			}
			seen[ip] = id
			want[id] = ip
		}
	}
	if r.plugin == hostLocal || r.phase != "contract" {
		files, err := n.files(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, files, "step %d (%s): host-local's files", i, r)
	}
	if r.plugin == ourPlugin && r.phase != "legacy" && !refused {
		cp, err := n.checkpointed(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, cp, "step %d (%s): the checkpoint", i, r)
	}
}
