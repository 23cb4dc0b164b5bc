package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/promtest"
	"github.com/phaseshift/phaseshift/internal/testbin"
)

// nodes is the size of the fleet: enough targets that Prometheus's
// scrapes of them, spread across its 1s interval, leave no instant after
// an evaluation at which every target's last scrape is older (issue 42
// item 5: the gate waited for one, and never answered at 24).
const nodes = 24

// gateWithin is how long phaseshift gate may take to answer. It waits for
// a scrape of every node and two evaluations of the rules after its
// start, a few seconds at this 1s interval; the deadline is generous for
// a machine this test shares, not a measure of speed.
const gateWithin = 30 * time.Second

var binDir string // testbin.Run's

func TestMain(m *testing.M) { os.Exit(testbin.Run(m, "phaseshift-fleet", &binDir)) }

// fleet is the nodes, the Prometheus server that gates them, and the
// built phaseshift command.
type fleet struct {
	nodes      []*node
	prom       *promtest.Server
	phaseshift string
}

// readmeYAML returns the README's yaml block that starts with the line
// first.
func readmeYAML(t *testing.T, first string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)```yaml\n(" + regexp.QuoteMeta(first) + "\n.*?)```").FindSubmatch(b)
	require.NotNil(t, m, "the README has a yaml block that starts with %q", first)
	return string(m[1])
}

// build builds examples/ipam and the phaseshift command, at once.
func build(t *testing.T) (ipam, phaseshift string) {
	t.Helper()
	var wg sync.WaitGroup
	var errIPAM, errCmd error
	wg.Add(2)
	go func() {
		defer wg.Done()
		ipam, errIPAM = testbin.Build(binDir, "ipam", "github.com/phaseshift/phaseshift/examples/ipam", nil, nil)
	}()
	go func() {
		defer wg.Done()
		phaseshift, errCmd = testbin.Build(binDir, "phaseshift", "github.com/phaseshift/phaseshift/cmd/phaseshift", nil, nil)
	}()
	wg.Wait()
	require.NoError(t, errors.Join(errIPAM, errCmd))
	return ipam, phaseshift
}

// startFleet starts the nodes, each running the release before
// phaseshift with three pods, and the Prometheus server, which evaluates
// the shipped rules unchanged and the README's stated expected count.
func startFleet(t *testing.T) *fleet {
	t.Helper()
	promtest.Binary(t) // before the builds: skips (or fails) without the server
	ipam, phaseshift := build(t)
	f := &fleet{phaseshift: phaseshift}
	for i := 1; i <= nodes; i++ {
		n := newNode(t, i, ipam)
		n.mustStart(t, "old")
		for range 3 {
			n.add(t)
		}
		f.nodes = append(f.nodes, n)
	}
	stated := readmeYAML(t, "# phaseshift:expected_nodes, stated")
	require.Contains(t, stated, "vector(24)")
	expected := filepath.Join(t.TempDir(), "expected.rules.yml")
	require.NoError(t, os.WriteFile(expected, []byte(strings.Replace(stated, "vector(24)", fmt.Sprintf("vector(%d)", nodes), 1)), 0o644))
	f.prom = promtest.Start(t, promtest.Config{
		Rules: []string{"../../metrics/phaseshift.rules.yml", expected},
		Jobs:  map[string][]promtest.Target{"ipamd": f.targets()},
	})
	f.prom.WaitScraped(t, "ipamd", nodes)
	return f
}

// targets are the nodes Prometheus discovers: all but those left out.
func (f *fleet) targets(out ...*node) []promtest.Target {
	var ts []promtest.Target
	for _, n := range f.nodes {
		if !slices.Contains(out, n) {
			ts = append(ts, promtest.Target{Address: n.addr(), Labels: map[string]string{"instance": n.name}})
		}
	}
	return ts
}

// check checks every node's served state after step.
func (f *fleet) check(t *testing.T, step string) {
	t.Helper()
	for _, n := range f.nodes {
		if n.d == nil {
			continue
		}
		for _, p := range n.problems(t) {
			t.Errorf("after %s: %s (phase %s): %s", step, n.name, n.phase, p)
		}
	}
}

// roll restarts every node in phase, one at a time, as a DaemonSet's
// rolling update does, with pod traffic on each, and checks them.
func (f *fleet) roll(t *testing.T, phase string) {
	t.Helper()
	for _, n := range f.nodes {
		n.restart(t, phase)
		n.churn(t)
	}
	f.check(t, "the rollout to "+phase)
}

// cmd is one run of the built phaseshift command.
type cmd struct {
	stdout, stderr string
	code           int
}

func (f *fleet) run(t *testing.T, args ...string) cmd {
	t.Helper()
	r, err := f.runCtx(ctx(t), args...)
	require.NoError(t, err)
	return r
}

// runCtx is one run of the built phaseshift command, killed when c is
// done; it does not touch t, so that a test's goroutine may call it.
func (f *fleet) runCtx(c context.Context, args ...string) (cmd, error) {
	p := exec.CommandContext(c, f.phaseshift, args...)
	var stdout, stderr bytes.Buffer
	p.Stdout, p.Stderr = &stdout, &stderr
	err := p.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return cmd{}, err
	}
	return cmd{stdout.String(), stderr.String(), p.ProcessState.ExitCode()}, c.Err()
}

// gate runs phaseshift gate for phase as the README does (the default
// --poll and --timeout), and fails the test if it does not answer within
// gateWithin.
func (f *fleet) gate(t *testing.T, phase string) cmd {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), gateWithin)
	defer cancel()
	r, err := f.runCtx(c, "gate", "--prometheus", f.prom.URL, phase)
	require.NoError(t, err, "phaseshift gate --prometheus URL %s did not answer within %v: %s%s", phase, gateWithin, r.stdout, r.stderr)
	return r
}

// mayMove requires the gate to let the fleet move to phase. A refusal
// for nodes unreported only - a scrape that failed on a machine this test
// shares with others (the timeout is the 1s interval) makes a node down
// and missing for a second - is asked again, twice at most, and logged;
// any other refusal fails the test at once.
func (f *fleet) mayMove(t *testing.T, phase string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		r := f.gate(t, phase)
		if r.code == 0 {
			assert.Contains(t, r.stdout, fmt.Sprintf("no node blocks it (%d nodes report, %d expected)", nodes, nodes))
			return
		}
		unreported := r.code == 9 && regexp.MustCompile(`(?m)^  .*  unreported: (down|missing) \(`).MatchString(r.stdout) &&
			!regexp.MustCompile(`(?m)^  .*  ([a-z_]+: [0-9]|[a-z_ ]+ [a-z_]+: [0-9]|held down)`).MatchString(r.stdout)
		require.True(t, unreported && attempt < 3, "phaseshift gate %s (attempt %d): %s%s", phase, attempt, r.stdout, r.stderr)
		t.Logf("phaseshift gate %s refused for nodes unreported (a failed scrape?); asking again:\n%s", phase, r.stdout)
	}
}

// refused requires the gate to refuse phase, and returns what it said.
func (f *fleet) refused(t *testing.T, phase string) string {
	t.Helper()
	r := f.gate(t, phase)
	require.Equal(t, 9, r.code, "phaseshift gate %s: %s%s", phase, r.stdout, r.stderr)
	return r.stdout
}

// alert waits until Prometheus holds the alert name for instance in state
// ("firing", "pending", or "" for gone), and returns it.
func (f *fleet) alert(t *testing.T, name, instance, state string, within time.Duration) promtest.Alert {
	t.Helper()
	find := func(as []promtest.Alert) (promtest.Alert, bool) {
		for _, a := range as {
			if a.Labels["alertname"] == name && a.Labels["instance"] == instance {
				return a, true
			}
		}
		return promtest.Alert{}, false
	}
	as, ok, err := promtest.Eventually(f.prom, within, f.prom.Alerts, func(as []promtest.Alert) bool {
		a, found := find(as)
		if state == "" {
			return !found
		}
		return found && (a.State == state || state == "pending" && a.State == "firing")
	})
	require.True(t, ok, "alert %s{instance=%q} is not %q within %v: %v %v", name, instance, state, within, as, err)
	a, _ := find(as)
	return a
}

// cpInPlace copies src over dst as cp does: dst is truncated and written
// through its own inode.
func cpInPlace(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

// TestFleet rolls the fleet from the release before phaseshift to phase
// 3, gate by gate, through the faults of issues 32 and 33.
func TestFleet(t *testing.T) {
	f := startFleet(t)
	f.check(t, "the start on the release before phaseshift")

	t.Run("the release before phaseshift gates nothing", func(t *testing.T) {
		out := f.refused(t, "1")
		for _, n := range f.nodes {
			assert.Contains(t, out, n.name+"  unreported: no_metrics")
		}
	})

	// 0: the new binary, at phase 0. Then each phase, once the gate says.
	f.roll(t, "legacy")
	// Issue 41: phase 0 marks only the keys it writes, before each write;
	// its start writes nothing, so its restore leaves nothing marked (the
	// churn after it marks the keys it writes, which phase 1 lets the
	// runtime decide).
	for _, n := range f.nodes {
		assert.NotContains(t, n.report, "left behind legacy", "%s: phase 0's start marks nothing", n.name)
	}
	f.mayMove(t, "1")
	f.roll(t, "expand")
	f.mayMove(t, "2")
	f.roll(t, "migrate")
	f.mayMove(t, "3")

	t.Run("at phase 2", func(t *testing.T) { faultsAtPhase2(t, f) })
	f.check(t, "the faults at phase 2")
	f.mayMove(t, "3")
	f.roll(t, "contract")
	t.Run("at phase 3", func(t *testing.T) { faultsAtPhase3(t, f) })
	f.check(t, "the faults at phase 3")
	f.mayMove(t, "3")
}

// faultsAtPhase2 plays, on a fleet at phase 2, the faults whose node goes
// back to phase 2.
func faultsAtPhase2(t *testing.T, f *fleet) {
	t.Run("the example's phase 0, then back to phase 2", func(t *testing.T) {
		n := f.nodes[2]
		n.restart(t, "legacy")
		n.delAndReuse(t)
		f.check(t, "phase 0's DEL and ADD")
		n.restart(t, "migrate")
		f.check(t, "phase 2 after the example's phase 0")
	})

	t.Run("the release before phaseshift, then straight back to phase 2", func(t *testing.T) {
		n := f.nodes[3]
		n.restart(t, "old")
		ip := n.pods[n.oldest()]
		gone, reuser := n.delAndReuse(t)
		// Issue 41: the checkpoint alone holds the deleted pod, the runtime
		// alone lists the one given its address, and phase 2 cannot tell
		// which is stale: it serves both, the deleted one as an orphan its
		// report names with the shared address, which stays taken. No live
		// pod loses its address and none shares it with another live pod.
		n.orphans[gone] = ip
		n.restart(t, "migrate")
		assert.Contains(t, n.report, `orphaned 1 [{"network":"_migrated-from-cri","containerID":"`+gone+`","ifName":"unknown"}]`)
		assert.Contains(t, n.report, "share a part of their values", "the report names the address %s that %s and %s share", ip, gone, reuser)
		f.check(t, "phase 2 after the release before phaseshift (issue 32 item 4)")
		// The next restore finds the reuser listed and held: it drops the
		// deleted pod, and the node holds the pods and nothing else.
		n.restart(t, "migrate")
		delete(n.orphans, gone)
		assert.NotContains(t, n.served(t), gone)
		assert.Contains(t, n.report, "dropped 1", "the next phase-2 restore drops %s", gone)
		f.check(t, "the next phase 2 restart")
	})

	t.Run("a journal written by a newer build", func(t *testing.T) {
		n := f.nodes[5]
		n.stop(t)
		newerBuildWrites(t, n)
		n.mustStart(t, "migrate")
		f.check(t, "phase 2 over a newer build's journal (issue 32 item 5)")
	})

	t.Run("a node not scraped", func(t *testing.T) {
		n := f.nodes[6]
		require.NoError(t, f.prom.SetTargets("ipamd", f.targets(n)))
		t.Cleanup(func() { _ = f.prom.SetTargets("ipamd", f.targets()) })
		f.prom.WaitScraped(t, "ipamd", nodes-1) // discovery has dropped it
		out := f.refused(t, "3")
		assert.Contains(t, out, "(the job)  unreported: missing (1)")
		assert.Contains(t, out, fmt.Sprintf("(%d nodes report, %d expected)", nodes-1, nodes))
		a := f.alert(t, "PhaseshiftNodesMissing", "", "pending", 10*time.Second)
		assert.Equal(t, "missing", a.Labels["reason"])
		require.NoError(t, f.prom.SetTargets("ipamd", f.targets()))
		f.prom.WaitScraped(t, "ipamd", nodes)
		f.mayMove(t, "3")
	})

	t.Run("a restart into a blocking state right before the gate", func(t *testing.T) {
		n := f.nodes[1]
		n.stop(t)
		lost := n.oldest()
		n.lose(lost)
		n.mustStart(t, "migrate")
		holdsFromFirstAnswer(t, f, n)
		f.check(t, "a restart that found an orphan")
		out := f.refused(t, "3")
		assert.Contains(t, out, n.name+"  entries orphaned: 1")
		a := f.alert(t, "PhaseshiftRestoreLeftEntries", n.name, "firing", 10*time.Second)
		assert.Contains(t, a.Annotations["summary"], n.name+"'s last restore left 1 orphaned entries")
		pruneOrphans(t, f, n, lost)
		f.mayMove(t, "3")
	})
}

// holdsFromFirstAnswer checks, on n just restarted into a state that
// blocks phase 3, that no gate read from its first answer on says the
// fleet may move: one gate started at once, before Prometheus has scraped
// the new process (its series still say what the process before it
// said), and one started once Prometheus has seen the restart (held down,
// or already blocking). Both must name n's orphan.
func holdsFromFirstAnswer(t *testing.T, f *fleet, n *node) {
	t.Helper()
	type answer struct {
		r   cmd
		err error
	}
	gate := func(ch chan<- answer) {
		c, cancel := context.WithTimeout(context.Background(), gateWithin)
		defer cancel()
		r, err := f.runCtx(c, "gate", "--prometheus", f.prom.URL, "3")
		ch <- answer{r, err}
	}
	atOnce, seen := make(chan answer, 1), make(chan answer, 1)
	go gate(atOnce)
	expr := fmt.Sprintf(`phaseshift:node_held_down{instance=%[1]q} or phaseshift:node_blocks_phase{phase="3", instance=%[1]q}`, n.name)
	got, ok, err := promtest.Eventually(f.prom, gateWithin, func(c context.Context) ([]promtest.Sample, error) { return f.prom.Query(c, expr) },
		func(s []promtest.Sample) bool { return len(s) > 0 })
	require.True(t, ok, "Prometheus never saw %s's restart: %v %v", n.name, got, err)
	go gate(seen)
	for _, ch := range []chan answer{atOnce, seen} {
		a := <-ch
		require.NoError(t, a.err, "phaseshift gate 3 did not answer within %v: %s%s", gateWithin, a.r.stdout, a.r.stderr)
		assert.Equal(t, 9, a.r.code, "the gate said phase 3 is safe while %s blocks it: %s%s", n.name, a.r.stdout, a.r.stderr)
		assert.Contains(t, a.r.stdout, n.name+"  entries orphaned: 1")
	}
}

// faultsAtPhase3 plays, on a fleet at phase 3, the faults of phase 3 and
// their heals.
func faultsAtPhase3(t *testing.T, f *fleet) {
	t.Run("a cp of .prev over a running daemon's checkpoint", func(t *testing.T) {
		n := f.nodes[4]
		for i := 0; ; i++ {
			if _, err := os.Stat(n.state + ".prev"); err == nil {
				break
			}
			require.Less(t, i, 100, "no .prev after 100 writes")
			n.churn(t)
		}
		cpInPlace(t, n.state+".prev", n.state)
		n.churn(t)
		n.churn(t)
		f.check(t, "writes after the cp")
		n.restart(t, "contract")
		f.check(t, "phase 3 after a cp of .prev (issue 32 item 1)")
	})

	t.Run("restore-prev, then phase 3 and phase 2", func(t *testing.T) {
		n := f.nodes[4]
		n.churn(t)
		n.stop(t)
		// --accept-loss: restore verbs now refuse a replacement that lacks
		// entries without it (issue 41); phase 2 below brings them back
		// from the runtime.
		r := f.run(t, "restore-prev", "--replace-intact", "--accept-loss", n.state)
		require.Equal(t, 0, r.code, "%s%s", r.stdout, r.stderr)
		log := n.refuses(t, "contract")
		assert.Contains(t, log, "behind", "phase 3 refuses what restore-prev put back (issue 32 item 2)")
		// Issue 41: phase 2 keeps what only the put-back file holds (pods
		// deleted since), as orphans its report names, each with the
		// address it held, which a live pod may hold too: served to both,
		// so not free. Every live pod keeps its address.
		n.mustStart(t, "migrate")
		for _, id := range reportedOrphans(n.report) {
			ip, existed := n.gone[id]
			require.True(t, existed, "%s: the report names %s, which no ADD created: %s", n.name, id, n.report)
			n.orphans[id] = ip
		}
		f.check(t, "phase 2 after restore-prev")
		// The next restore drops each orphan whose address a pod listed
		// and held has; phaseshift prunes the rest, if any.
		n.restart(t, "migrate")
		still := reportedOrphans(n.report)
		for id, ip := range n.orphans {
			if !slices.Contains(still, id) {
				delete(n.orphans, id)
				continue
			}
			for live, lip := range n.pods {
				assert.NotEqual(t, ip, lip, "%s: orphan %s still served with %s, which %s holds, listed and held", n.name, id, ip, live)
			}
		}
		f.check(t, "the next phase 2 restart")
		if len(n.orphans) > 0 {
			r := f.run(t, "prune-orphans", "--yes", n.state)
			require.Equal(t, 0, r.code, r.stderr)
			clear(n.orphans)
			f.check(t, "the prune on "+n.name)
		}
		n.restart(t, "contract")
		f.check(t, "phase 3 after the phase-2 run")
	})

	t.Run("the example's phase 0, then straight to phase 3", func(t *testing.T) {
		n := f.nodes[2]
		n.restart(t, "legacy")
		n.delAndReuse(t)
		n.stop(t)
		// The phase-0 run wrote (a DEL and ADDs): its keyed mark names the
		// keys it wrote, and phase 3 refuses it (issue 41; one that wrote
		// nothing would not be refused).
		log := n.refuses(t, "contract")
		assert.Contains(t, log, "the checkpoint is stale")
		assert.Regexp(t, `phase 0 \(legacy\) ran and wrote [0-9]+ entr`, log)
		n.mustStart(t, "migrate")
		n.restart(t, "contract")
		f.check(t, "phase 3 after phase 0 and phase 2")
	})

	t.Run("an orphan taken to phase 3, healed on its node", func(t *testing.T) {
		n := f.nodes[0]
		n.stop(t)
		n.lose(n.oldest())
		n.mustStart(t, "contract")
		f.check(t, "phase 3 with an orphan")
		a := f.alert(t, "PhaseshiftUnsafeInPhase3", n.name, "firing", 5*time.Second)
		assert.Equal(t, "critical", a.Labels["severity"])
		assert.Equal(t, "legacy_differs", a.Labels["reason"])
		assert.Contains(t, a.Annotations["summary"], n.name+" runs phase 3 on a restore that found legacy differing")

		// The heal: this node alone in phase 2, through its override.
		require.NoError(t, os.WriteFile(n.state+".phase", []byte("migrate\n"), 0o644))
		n.restart(t, "contract")
		require.Contains(t, n.report, "phase 2 (migrate)", "the node-local override wins")
		assert.Contains(t, n.d.stderr.String(), "a node-local override sets the phase")
		for id := range n.orphans {
			pruneOrphans(t, f, n, id)
		}
		require.NoError(t, os.Remove(n.state+".phase"))
		f.mayMove(t, "3")
		n.restart(t, "contract")
		f.alert(t, "PhaseshiftUnsafeInPhase3", n.name, "", 10*time.Second)
	})
}

// reportedOrphans returns the container IDs a restore's report line
// names orphaned.
func reportedOrphans(report string) []string {
	m := regexp.MustCompile(`orphaned [0-9]+ \[([^\]]*)\]`).FindStringSubmatch(report)
	if m == nil {
		return nil
	}
	var ids []string
	for _, id := range regexp.MustCompile(`"containerID":"([^"]*)"`).FindAllStringSubmatch(m[1], -1) {
		ids = append(ids, id[1])
	}
	return ids
}

// pruneOrphans has n's daemon prune its orphans through phaseshift,
// after report named the one the test knows of, and checks the node.
func pruneOrphans(t *testing.T, f *fleet, n *node, id string) {
	t.Helper()
	r := f.run(t, "report", n.state)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `orphaned {"network":"_migrated-from-cri","containerID":"`+id+`","ifName":"unknown"}`)
	r = f.run(t, "prune-orphans", "--yes", n.state)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"containerID":"`+id+`"`)
	delete(n.orphans, id)
	f.check(t, "the prune on "+n.name)
}

// The value a newer build of examples/ipam stores: this build's, and a
// field this build lacks. Keys are this build's.
type (
	ipamKey struct {
		Network     string `json:"network"`
		ContainerID string `json:"containerID"`
		IfName      string `json:"ifName"`
	}
	newerAlloc struct {
		IPs       []netip.Addr `json:"ips"`
		Allocated time.Time    `json:"allocated"`
		Pod       struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"pod,omitzero"`
		Note string `json:"note,omitempty"`
	}
)

// newerBuildWrites writes n's journal as a newer build of the same schema
// would, with the daemon stopped: it sets its new field on a live pod's
// entry and then replaces the entry without it, and adds an entry with it
// that it then deletes. The state it leaves is this build's; its history
// is not.
func newerBuildWrites(t *testing.T, n *node) {
	t.Helper()
	c := context.Background()
	f, err := checkpoint.Open[ipamKey, newerAlloc](c, n.state, checkpoint.WithSchema(2), checkpoint.WithBootID(nil),
		checkpoint.WithUpgrade(1, func(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }))
	require.NoError(t, err)
	defer f.Close()
	snap, err := f.Load(c)
	require.NoError(t, err)
	var key ipamKey
	for k := range snap.Entries {
		if _, live := n.pods[k.ContainerID]; live && (key.ContainerID == "" || k.ContainerID < key.ContainerID) {
			key = k
		}
	}
	require.NotEmpty(t, key.ContainerID)
	v := snap.Entries[key]
	noted := v
	noted.Note = "written by a newer build"
	extra := ipamKey{Network: "aws-cni", ContainerID: n.name + "-newer", IfName: "eth0"}
	m := checkpoint.Meta{Phase: "migrate", Writer: "phaseshift-ipam-example (a newer build)", Behind: snap.Meta.Behind}
	for _, ch := range [][]checkpoint.Change[ipamKey, newerAlloc]{
		{{Key: key, Value: noted}, {Key: extra, Value: noted}},
		{{Key: key, Value: v}},
		{{Key: extra, Delete: true}},
	} {
		require.NoError(t, f.Commit(c, m, ch))
	}
}
