package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ipamReport is what examples/ipam --serve says first: its restore.
type ipamReport struct {
	Phase      string `json:"phase"`
	ReadFrom   string `json:"readFrom"`
	Restored   int    `json:"restored"`
	Backfilled int    `json:"backfilled"`
	Orphaned   int    `json:"orphaned"`
	Rewritten  bool   `json:"rewritten"`
	Line       string `json:"line"`
}

// ipamEntry is one allocation examples/ipam dumps.
type ipamEntry struct {
	Key struct {
		Network     string `json:"network"`
		ContainerID string `json:"containerID"`
		IfName      string `json:"ifName"`
	} `json:"key"`
	IPs []netip.Addr `json:"ips"`
}

// restoreIPAM runs examples/ipam against containerd in phase, with flags,
// as a daemon starting on the node does, and returns its restore report
// and the allocations it serves, by container.
func (n *node) restoreIPAM(ctx context.Context, t *testing.T, state, phase string, flags ...string) (ipamReport, map[string]netip.Addr) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	args := append([]string{"--cri", "unix://" + n.sock, "--state", state, "--phase", phase, "--pool", subnet, "--serve"}, flags...)
	cmd := exec.CommandContext(ctx, n.ipamBin, args...)
	cmd.Stdin = bytes.NewReader([]byte(`{"op":"dump"}` + "\n" + `{"op":"exit"}` + "\n"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "examples/ipam in phase %s: %s", phase, stderr.String())
	sc := bufio.NewScanner(bytes.NewReader(out))
	var first struct {
		OK     bool       `json:"ok"`
		Report ipamReport `json:"report"`
	}
	var dump struct {
		OK      bool        `json:"ok"`
		Entries []ipamEntry `json:"entries"`
	}
	require.True(t, sc.Scan())
	require.NoError(t, json.Unmarshal(sc.Bytes(), &first))
	require.True(t, sc.Scan())
	require.NoError(t, json.Unmarshal(sc.Bytes(), &dump))
	require.True(t, first.OK && dump.OK, "%s", out)
	got := map[string]netip.Addr{}
	for _, e := range dump.Entries {
		assert.Equal(t, "_migrated-from-cri", e.Key.Network, "entries learned from CRI carry the placeholders")
		assert.Equal(t, "unknown", e.Key.IfName)
		if assert.Len(t, e.IPs, 1) {
			got[e.Key.ContainerID] = e.IPs[0]
		}
	}
	return first.Report, got
}

// TestIPAMRestore runs examples/ipam, the daemon that moves its state from
// CRI to a checkpoint, against containerd's real pods in phases 0, 1 and
// 2. Phases 0 and 1 restore every ready pod from CRI, and phase 1 writes
// the checkpoint; after a pod is removed and another created while no
// daemon ran, phase 2 backfills the new pod from CRI and keeps the removed
// one as an orphan: CRI's listing lags both ways (a sandbox whose ADD is
// in flight is not listed yet either), so neither its silence nor a pod
// the checkpoint never held is evidence that a pod is gone (issue 41,
// path 1). The orphan's address is no live pod's.
func TestIPAMRestore(t *testing.T) {
	n := e2eNode(t)
	ctx := suiteCtx
	require.NoError(t, n.useNetwork(ctx, ps("legacy")))
	require.NoError(t, n.removeAllPods(ctx))
	t.Cleanup(func() { assert.NoError(t, n.removeAllPods(ctx)) })
	var ids []string
	for range 3 {
		id, err := n.runPod(ctx, false)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	pods, err := n.readyPods(ctx)
	require.NoError(t, err)
	state := filepath.Join(n.dir, "ipam", "ipam.json")

	rep, got := n.restoreIPAM(ctx, t, state, "legacy", "--old-binary")
	assert.Equal(t, "legacy", rep.ReadFrom, rep.Line)
	assert.Equal(t, pods, got, "the old binary serves every pod CRI lists")
	assert.NoFileExists(t, state, "the old binary does not write the checkpoint")
	rep, got = n.restoreIPAM(ctx, t, state, "legacy")
	assert.Equal(t, "legacy", rep.ReadFrom, rep.Line)
	assert.Equal(t, pods, got, "phase 0 serves every pod CRI lists")
	// With no checkpoint, phase 0 writes one with what CRI lists, level
	// with it: it marks the keys it writes from then on, and a run that
	// writes nothing leaves nothing to distrust (issue 41, path 6).
	assert.True(t, rep.Rewritten, rep.Line)
	assert.NotContains(t, rep.Line, "left behind legacy", "nothing written, nothing marked")
	assert.FileExists(t, state)

	rep, got = n.restoreIPAM(ctx, t, state, "expand")
	assert.Equal(t, "checkpoint+legacy", rep.ReadFrom, "phase 0's checkpoint and CRI: %s", rep.Line)
	assert.NotContains(t, rep.Line, "left behind legacy", "phase 1 read CRI in full")
	assert.Equal(t, pods, got, "phase 1 serves every pod CRI lists")
	assert.FileExists(t, state)

	removed := ids[0]
	require.NoError(t, n.removePod(ctx, removed))
	added, err := n.runPod(ctx, false)
	require.NoError(t, err)
	now, err := n.readyPods(ctx)
	require.NoError(t, err)

	rep, got = n.restoreIPAM(ctx, t, state, "migrate")
	assert.Equal(t, "checkpoint+legacy", rep.ReadFrom, rep.Line)
	assert.Equal(t, 1, rep.Backfilled, "the new pod, from CRI: %s", rep.Line)
	assert.Equal(t, 1, rep.Orphaned, "the removed pod, kept: %s", rep.Line)
	assert.NotContains(t, rep.Line, "dropped", "nothing shows a pod gone")
	assert.NotContains(t, rep.Line, "never held")
	for id, ip := range now {
		assert.Equal(t, ip, got[id], "every ready pod is served with its address")
	}
	assert.Contains(t, got, added)
	assert.Equal(t, pods[removed], got[removed], "the orphan, with the address it had")
	for id, ip := range now {
		assert.NotEqual(t, ip, got[removed], "the orphan's address is %s's", id)
	}
	assert.Len(t, got, len(now)+1)
}
