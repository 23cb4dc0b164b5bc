package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/internal/testbin"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source/cri/critest"
)

// The example's own phase 0, run from the built binary as an operator runs
// it, is this library's phase 0: it opens the checkpoint, and its restore
// marks it behind legacy, so that phase 3 straight after it refuses
// instead of serving what phase 0 deleted (issue 32, item 3).

var (
	buildIPAMOnce sync.Once
	ipamBin       string
	ipamBuildErr  error
)

// builtIPAM builds this command once per test binary, into a directory of
// the first test that asks, and returns its path.
func builtIPAM(t *testing.T) string {
	t.Helper()
	buildIPAMOnce.Do(func() {
		ipamBin, ipamBuildErr = testbin.Build(binDir, "ipam", ".", nil, nil)
	})
	require.NoError(t, ipamBuildErr)
	return ipamBin
}

// startBuilt starts the built binary as a daemon (--serve) in phase with
// flags, and returns it with its restore report, or the error and what it
// wrote to stderr when it did not start (and has exited).
func startBuilt(t *testing.T, endpoint, state, phase string, flags ...string) (*daemon, *reportJSON, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	args := append([]string{"--serve", "--cri", endpoint, "--state", state, "--phase", phase, "--lock-wait", "10s"}, flags...)
	cmd := exec.CommandContext(ctx, builtIPAM(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	d := &daemon{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	d.out.Buffer(make([]byte, 64<<10), 16<<20)
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = d.kill()
		}
	})
	var first response
	if err := d.read(&first); err != nil || first.Report == nil {
		werr := cmd.Wait()
		return nil, nil, stderr.String(), fmt.Errorf("the daemon did not start (%v, %v): %s", err, werr, first.Error)
	}
	return d, first.Report, "", nil // its log is read only once it has exited
}

// pods is a node's runtime and the pods on it, with their addresses.
type pods struct {
	rt   *critest.Runtime
	have map[string]netip.Addr
}

func (p *pods) add(t *testing.T, d *daemon, id string) {
	t.Helper()
	p.rt.Add(critest.Sandbox{ID: id, Name: id, Namespace: "default", UID: "uid-" + id, CreatedAt: time.Now()})
	resp, err := d.call(request{Op: "add", ID: id})
	require.NoError(t, err)
	require.Len(t, resp.IPs, 1)
	p.rt.SetIPs(id, resp.IPs[0].String())
	p.have[id] = resp.IPs[0]
}

func (p *pods) del(t *testing.T, d *daemon, id string) {
	t.Helper()
	_, err := d.call(request{Op: "del", ID: id})
	require.NoError(t, err)
	p.rt.Remove(id)
	delete(p.have, id)
}

// served returns what d serves, by container, and any address it serves
// to two containers.
func served(t *testing.T, d *daemon) (map[string]netip.Addr, []string) {
	t.Helper()
	resp, err := d.call(request{Op: "dump"})
	require.NoError(t, err)
	got, owner := map[string]netip.Addr{}, map[netip.Addr]string{}
	var twice []string
	for _, e := range resp.Entries {
		for _, ip := range e.IPs {
			if o, dup := owner[ip]; dup {
				twice = append(twice, fmt.Sprintf("%s to %s and %s", ip, o, e.Key.ContainerID))
			}
			owner[ip] = e.Key.ContainerID
			got[e.Key.ContainerID] = ip
		}
	}
	return got, twice
}

// TestPhase0ThenPhase3Refuses: a node at phase 3 sent back to the
// example's phase 0 (--phase legacy), where a pod is deleted and another
// one given its address, and straight back to phase 3: phase 3 refuses to
// start rather than serve the deleted pod and the address twice. The
// phase-0 run writes (a DEL and an ADD), so its keyed mark names keys;
// one that wrote nothing would not make phase 3 refuse (issue 41).
func TestPhase0ThenPhase3Refuses(t *testing.T) {
	rt := critest.New()
	srv, err := rt.Serve(filepath.Join(t.TempDir(), "cri.sock"))
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	state := filepath.Join(t.TempDir(), "ipam.json")
	p := &pods{rt: rt, have: map[string]netip.Addr{}}

	d, _, _, err := startBuilt(t, srv.Endpoint(), state, "contract")
	require.NoError(t, err)
	p.add(t, d, "pod-a")
	p.add(t, d, "pod-b")
	require.NoError(t, d.exit())

	d, rep, _, err := startBuilt(t, srv.Endpoint(), state, "legacy")
	require.NoError(t, err)
	assert.Equal(t, "legacy", rep.Phase)
	p.del(t, d, "pod-a")
	p.add(t, d, "pod-c")
	require.Equal(t, p.have["pod-c"], netip.MustParseAddr("10.0.0.2"), "pod-c reuses pod-a's address")
	require.NoError(t, d.exit())

	d, rep, stderr, err := startBuilt(t, srv.Endpoint(), state, "contract")
	if err == nil {
		got, twice := served(t, d)
		require.NoError(t, d.exit())
		t.Fatalf("phase 3 started after the example's phase 0 (%s) and serves %v; addresses served twice: %v", rep.Line, got, twice)
	}
	t.Logf("phase 3 refused:\n%s", stderr)
	// Issue 41: phase 0 no longer marks the whole file at its start; before
	// each write it marks the keys it writes (here pod-a's DEL and pod-c's
	// ADD), and phase 3 refuses a file whose mark names keys.
	assert.Contains(t, stderr, "stale", "phase 3 says why it refuses")
	assert.Contains(t, stderr, "phase 0 (legacy) ran and wrote 2 entries", "and which run marked the checkpoint, and how much")
	assert.Contains(t, stderr, "run phase 1 (expand) or 2 (migrate) first", "and how to fix it")

	// The fix it names: phase 2 lets legacy decide the marked keys, and
	// the node then holds what the pods hold, each address once.
	d, rep, _, err = startBuilt(t, srv.Endpoint(), state, "migrate")
	require.NoError(t, err)
	assert.Empty(t, rep.Behind, rep.Line)
	got, twice := served(t, d)
	assert.Equal(t, p.have, got, rep.Line)
	assert.Empty(t, twice)
	require.NoError(t, d.exit())
	d, rep, _, err = startBuilt(t, srv.Endpoint(), state, "contract")
	require.NoError(t, err, "phase 3 after phase 2 starts")
	got, twice = served(t, d)
	assert.Equal(t, p.have, got, rep.Line)
	assert.Empty(t, twice)
	require.NoError(t, d.exit())
}

// TestOldBinaryLeavesTheCheckpointAlone: --old-binary, the release before
// phaseshift, neither creates nor marks the checkpoint, and exports no
// phaseshift metrics; this binary's phase 0 creates it, and marks the keys
// it writes (issue 41: a run that writes nothing marks nothing).
func TestOldBinaryLeavesTheCheckpointAlone(t *testing.T) {
	_, l := runtimeFor(t, critest.Sandbox{ID: "c1", Name: "p1", Namespace: "default", IPs: []string{"10.0.0.2"}})
	state := filepath.Join(t.TempDir(), "ipam.json")
	var out, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"--cri", l.Endpoint(), "--state", state, "--old-binary"}, nil, &out, &stderr), stderr.String())
	assert.Contains(t, out.String(), "phase 0 (legacy): read legacy, restored 1")
	assert.NoFileExists(t, state, "the old binary never opens the checkpoint")

	m, rep, err := Open(context.Background(), Options{Phase: migrate.PhaseLegacy, OldBinary: true, Lister: l, StatePath: state, Pool: netip.MustParsePrefix("10.0.0.0/24"), Logger: zap.NewNop()})
	require.NoError(t, err)
	assert.Empty(t, rep.Behind)
	assert.NotContains(t, scrape(t, m), "phaseshift_", "the release before phaseshift exported none of its metrics")
	require.NoError(t, m.Close())

	// This binary's phase 0 creates the checkpoint. Issue 41: a phase-0 run
	// that writes nothing marks nothing (there is nothing legacy could hold
	// that the file lacks), so phase 3 after it is not refused.
	out.Reset()
	require.Equal(t, 0, run(context.Background(), []string{"--cri", l.Endpoint(), "--state", state}, nil, &out, &stderr), stderr.String())
	assert.Contains(t, out.String(), "phase 0 (legacy): read legacy, restored 1")
	assert.NotContains(t, out.String(), "left behind legacy", "a phase-0 run that writes nothing marks nothing")
	assert.FileExists(t, state)

	// A phase-0 run that writes (an ADD) marks the key it writes before
	// the write reaches legacy, so phase 3 then refuses until a phase 1 or
	// 2 run lets legacy decide it; the old binary cannot do that.
	out.Reset()
	in := strings.NewReader(`{"op":"add","id":"c2"}` + "\n" + `{"op":"exit"}` + "\n")
	require.Equal(t, 0, run(context.Background(), []string{"--cri", l.Endpoint(), "--state", state, "--serve"}, in, &out, &stderr), stderr.String())
	assert.Contains(t, out.String(), `"ok":true,"ips":["10.0.0.3"]`)
	stderr.Reset()
	assert.NotEqual(t, 0, run(context.Background(), []string{"--cri", l.Endpoint(), "--state", state, "--phase", "contract"}, nil, &out, &stderr))
	assert.Contains(t, stderr.String(), "phase 0 (legacy) ran and wrote 1 entry", "this binary's phase 0 marks the keys it writes")
}

// TestNodePhaseOverride: the file STATE.phase, on the node, overrides the
// phase the DaemonSet gives every node, and says so in the log; a file
// that names no phase stops the start, naming the file.
func TestNodePhaseOverride(t *testing.T) {
	_, l := runtimeFor(t, critest.Sandbox{ID: "c1", Name: "p1", Namespace: "default", IPs: []string{"10.0.0.2"}})
	state := filepath.Join(t.TempDir(), "ipam.json")
	require.NoError(t, os.WriteFile(state+".phase", []byte("migrate\n"), 0o644))
	var out, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"--cri", l.Endpoint(), "--state", state, "--phase", "contract"}, nil, &out, &stderr), stderr.String())
	assert.Contains(t, out.String(), "phase 2 (migrate): ")
	assert.Contains(t, stderr.String(), "a node-local override sets the phase")
	assert.Contains(t, stderr.String(), state+".phase")

	require.NoError(t, os.WriteFile(state+".phase", []byte("sideways"), 0o644))
	stderr.Reset()
	assert.Equal(t, 1, run(context.Background(), []string{"--cri", l.Endpoint(), "--state", state}, nil, &out, &stderr))
	assert.Contains(t, stderr.String(), "the node-local phase override "+state+".phase")
	assert.Contains(t, stderr.String(), "remove the file")
}

// TestLogsTheRestoreAtInfo: the daemon logs at info level by default, and
// its restore's line gives the orphaned entries' keys as the JSON the
// phaseshift command takes.
func TestLogsTheRestoreAtInfo(t *testing.T) {
	rt, l := runtimeFor(t, critest.Sandbox{ID: "c1", Name: "p1", Namespace: "default", IPs: []string{"10.0.0.2"}},
		critest.Sandbox{ID: "c2", Name: "p2", Namespace: "default", IPs: []string{"10.0.0.3"}})
	state := filepath.Join(t.TempDir(), "ipam.json")
	var out, stderr bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"--cri", l.Endpoint(), "--state", state, "--phase", "expand"}, nil, &out, &stderr), stderr.String())
	rt.Remove("c2") // gone from the runtime while the daemon was down, without its DEL
	stderr.Reset()
	require.Equal(t, 0, run(context.Background(), []string{"--cri", l.Endpoint(), "--state", state, "--phase", "migrate"}, nil, &out, &stderr), stderr.String())
	assert.Contains(t, stderr.String(), "INFO\trestored\t")
	assert.Contains(t, stderr.String(), `"orphanedKeys": [{"network":"_migrated-from-cri","containerID":"c2","ifName":"unknown"}]`)
	stderr.Reset()
	require.Equal(t, 0, run(context.Background(), []string{"--cri", l.Endpoint(), "--state", state, "--phase", "migrate", "--log-level", "warn"}, nil, &out, &stderr), stderr.String())
	assert.NotContains(t, stderr.String(), "INFO")
}
