package vpccni_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/amazon-vpc-cni-k8s/pkg/ipamd/datastore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/examples/vpccni"
	"github.com/phaseshift/phaseshift/migrate"
)

// The kill test re-executes this test binary as ipamd: an allocator child
// that restores the node's state, then ADDs and DELs pods until it is
// killed, saying on stdout what it does.
const (
	envRole  = "VPCCNI_TEST_ROLE" // "allocator"
	envDir   = "VPCCNI_TEST_DIR"
	envPhase = "VPCCNI_TEST_PHASE"
	envRun   = "VPCCNI_TEST_RUN"
)

// childCapacity is the addresses the child's node has room for.
const childCapacity = 400

// allocatorChild is the child's main. It prints "> +c" or "> -c" before
// each ADD or DEL of pod c, and "ok ADDRESS" once it was acknowledged; it
// stops by itself after a few hundred, if nothing killed it.
func allocatorChild() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "allocator:", err); return 3 }
	p, err := migrate.ParsePhase(os.Getenv(envPhase))
	if err != nil {
		return fail(err)
	}
	n := nodeAt(os.Getenv(envDir))
	cp, err := vpccni.Open(context.Background(), vpccni.Config{Phase: p, LegacyPath: n.legacy, CheckpointPath: n.ckpt})
	if err != nil {
		return fail(err)
	}
	defer cp.Close()
	ds, err := n.newDataStore(cp, childCapacity)
	if err != nil {
		return fail(err)
	}
	if err := ds.ReadBackingStore(false); err != nil {
		return fail(err)
	}
	live := sortedKeys(allocated(ds))
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...); out.Flush() }
	say("ready")
	run := os.Getenv(envRun)
	for i := range 300 {
		if len(live) > 0 && i%3 == 2 {
			c := live[0]
			live = live[1:]
			say("> -%s", c)
			_, ip, _, _, _, err := ds.UnassignPodIPAddress(key(c))
			if err != nil {
				return fail(err)
			}
			say("ok %s", ip)
			continue
		}
		c := fmt.Sprintf("r%s-%d", run, i)
		say("> +%s", c)
		ip, _, _, err := ds.AssignPodIPv4Address(key(c), datastore.IPAMMetadata{})
		if err != nil {
			return fail(err)
		}
		live = append(live, c)
		say("ok %s", ip)
	}
	return 0
}

// TestKillMidAllocation kills ipamd with -9 in the middle of its
// allocations, in phases 1, 2 and 3 and back, and restarts it: every
// acknowledged ADD and DEL must be what the next start restores (the one
// in flight may have gone either way), each address held once.
func TestKillMidAllocation(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs and kills child processes")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	n := newNode(t)
	rng := rand.New(rand.NewPCG(36, 1))
	want := map[string]string{}
	phases := []migrate.Phase{1, 2, 3, 2, 1, 0, 1, 2, 3, 3, 2}
	for run, p := range phases {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), envRole+"=allocator", envDir+"="+n.dir, envPhase+"="+p.String(), envRun+"="+strconv.Itoa(run))
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		lines := bufio.NewScanner(stdout)
		require.True(t, lines.Scan(), "run %d: the child did not start: %s", run, &stderr)
		require.Equal(t, "ready", lines.Text(), "run %d: %s", run, &stderr)
		kill := 5 + rng.IntN(30) // acknowledged writes before the kill
		var inflight string
		for acked := 0; acked < kill && lines.Scan(); {
			line := lines.Text()
			switch {
			case strings.HasPrefix(line, "> "):
				inflight = line[2:]
			case strings.HasPrefix(line, "ok "):
				if c := inflight[1:]; inflight[0] == '+' {
					want[c] = line[3:]
				} else {
					delete(want, c)
				}
				inflight = ""
				acked++
			}
		}
		// Kill it while it allocates: the next line it starts is in flight.
		if inflight == "" && lines.Scan() {
			inflight = strings.TrimPrefix(lines.Text(), "> ")
		}
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		require.NotEmpty(t, inflight, "run %d: the child stopped before it was killed: %s", run, &stderr)

		// The next start, in the next phase (or this one at the end).
		next := p
		if run+1 < len(phases) {
			next = phases[run+1]
		}
		cp := n.open(t, next)
		ds, err := n.start(t, cp, childCapacity)
		require.NoError(t, err, "run %d: restart in phase %d after the kill in phase %d", run, next, p)
		got := allocated(ds)
		require.NoError(t, cp.Close())
		c := inflight[1:]
		if ip, ok := got[c]; ok != (want[c] != "") {
			// The write in flight went the other way: take what the node says.
			if ok {
				want[c] = ip
			} else {
				delete(want, c)
			}
		}
		assert.Equal(t, want, got, "run %d: phase %d, killed with %s in flight, restored in phase %d", run, p, inflight, next)
		seen := map[string]string{}
		for c, ip := range got {
			require.Empty(t, seen[ip], "run %d: %s and %s hold %s", run, seen[ip], c, ip)
			seen[ip] = c
		}
	}
}
