package main

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	walkSteps = flag.Int("walk.steps", 40, "steps of TestRandomWalk (skipped under -short); a few thousand for a soak")
	walkSeed  = flag.Uint64("walk.seed", 0, "seed of TestRandomWalk; 0 picks one and logs it")
)

// rollout tracks what the deployment rules allow next (package migrate's
// "What holds"): the old binary never directly after phase 3, and phase 3
// never directly after a run of the old binary (which leaves no trace in
// the checkpoint) nor after this plugin's phase 0 (which marks it, so
// phase 3 refuses).
type rollout struct {
	afterOldBinary bool // host-local ran since the last phase-1 or phase-2 run, in this boot
	afterPhase0    bool // this plugin's phase 0 wrote since then, in this boot
	legacyStale    bool // phase 3 ran since the last run of phases 0 to 2
}

func (ro *rollout) allowed(r runner) bool {
	switch {
	case r == hl:
		return !ro.legacyStale
	case r.phase == "contract":
		return !ro.afterOldBinary
	}
	return true
}

// refused says phase 3 must refuse the checkpoint phase 0 marked: a
// phase-0 run marks the keys it writes, and one that wrote nothing leaves
// nothing to distrust (issue 41).
func (ro *rollout) refused(r runner) bool { return r.phase == "contract" && ro.afterPhase0 }

// ran records a run of r; wrote says whether it wrote anything (a phase-0
// run keeps the marks it finds and adds those of what it writes).
func (ro *rollout) ran(r runner, wrote bool) {
	switch {
	case r == hl:
		ro.afterOldBinary = true
	case r.phase == "legacy":
		ro.afterPhase0, ro.legacyStale = ro.afterPhase0 || wrote, false
	case r.phase == "contract":
		ro.legacyStale = true
	default:
		ro.afterOldBinary, ro.afterPhase0, ro.legacyStale = false, false, false
	}
}

// rebooted: the earlier boot's containers are dead and the checkpoint of
// that boot is discarded, so what ran before the reboot no longer matters
// to phase 3.
func (ro *rollout) rebooted() { ro.afterOldBinary, ro.afterPhase0 = false, false }

// TestRandomWalk drives a node through random ADDs, DELs, CHECKs, GCs and
// reboots served by host-local and by this plugin in random phases, within
// the deployment rules, and checks after every exec that the sides the
// phase keeps current hold exactly what the runtime was told, that no
// address is given twice, and that phase 3 refuses where the rules say it
// must. Run a soak with
//
//	go test ./examples/hostlocal -run TestRandomWalk -walk.steps 2000
func TestRandomWalk(t *testing.T) {
	if testing.Short() {
		t.Skip("exec'd random walk skipped under -short; TestWalkThrough covers the rollout")
	}
	seed := *walkSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -walk.seed %d)", seed, seed)
	rw := &randomWalk{walk: newWalk(t), rng: rand.New(rand.NewPCG(seed, 0)), boot: 1}
	runners := []runner{hl, ps("legacy"), ps("expand"), ps("migrate"), ps("contract")}
	for step := 0; step < *walkSteps; step++ {
		r := runners[rw.rng.IntN(len(runners))]
		if !rw.ro.allowed(r) {
			continue
		}
		r, ran := rw.step(step, r)
		if !ran {
			continue
		}
		rw.ro.ran(r, rw.wrote)
		rw.sides(r.plugin == hostLocal || r.phase != "contract", r.plugin == ourPlugin && r.phase != "legacy")
	}
}

// randomWalk is a walk that picks its commands at random.
type randomWalk struct {
	*walk
	rng        *rand.Rand
	ro         rollout
	next, boot int  // the next container's number, the boot's
	wrote      bool // the last step released or reserved an address
}

// step runs one random command with r, or with the runner it chose
// instead, and says whether it ran (it did not when phase 3 refused, as it
// must, or there was nothing to do).
func (rw *randomWalk) step(step int, r runner) (runner, bool) {
	t := rw.t
	live := slices.Sorted(maps.Keys(rw.m.live))
	rw.wrote = false
	switch op := rw.rng.IntN(20); {
	case op < 9 && len(live) < 120:
		id := fmt.Sprintf("r%04d", rw.next)
		rw.next++
		t.Logf("step %d: ADD %s by %s", step, id, r)
		a, err := rw.n.add(r, id)
		if rw.expectRefusal(&rw.ro, r, err) {
			return r, false
		}
		require.NoError(t, err)
		rw.added(id, a)
		rw.wrote = true
	case op < 16 && len(live) > 0:
		id := live[rw.rng.IntN(len(live))]
		t.Logf("step %d: DEL %s by %s", step, id, r)
		if rw.expectRefusal(&rw.ro, r, rw.n.del(r, id)) {
			return r, false
		}
		rw.m.deleted(id)
		rw.wrote = true
	case op < 18 && len(live) > 0:
		id := live[rw.rng.IntN(len(live))]
		t.Logf("step %d: CHECK %s by %s", step, id, r)
		if rw.expectRefusal(&rw.ro, r, rw.n.check(r, id)) {
			return r, false
		}
	case op < 19 && r != hl:
		return r, rw.gc(step, r, live)
	case op == 19:
		return rw.reboot(step, r), true
	default:
		return r, false
	}
	return r, true
}

// gc is a runtime's GC after it lost track of some pods.
func (rw *randomWalk) gc(step int, r runner, live []string) bool {
	var valid []string
	for _, id := range live {
		if rw.rng.IntN(4) > 0 {
			valid = append(valid, id)
		}
	}
	rw.t.Logf("step %d: GC by %s keeping %d of %d", step, r, len(valid), len(live))
	if rw.expectRefusal(&rw.ro, r, rw.n.gc(r, valid...)) {
		return false
	}
	for _, id := range live {
		if !slices.Contains(valid, id) {
			rw.m.deleted(id)
		}
	}
	rw.wrote = len(valid) < len(live)
	return true
}

// reboot kills every container; the runtime's first GC after it, with no
// valid attachment, releases what they held (in phase 3 by dropping the
// earlier boot's checkpoint). It returns the runner of that GC.
func (rw *randomWalk) reboot(step int, r runner) runner {
	rw.boot++
	rw.t.Logf("step %d: reboot, then GC by %s", step, r)
	rw.walk.reboot(fmt.Sprintf("boot-%d", rw.boot), false)
	rw.ro.rebooted()
	if r == hl || rw.ro.refused(r) || !rw.ro.allowed(r) {
		r = ps("migrate")
	}
	require.NoError(rw.t, rw.n.gc(r))
	rw.wrote = len(rw.leaked) > 0 // the GC released what the dead containers held
	clear(rw.leaked)
	return r
}

// expectRefusal checks an exec phase 3 must refuse, which changes nothing.
func (w *walk) expectRefusal(ro *rollout, r runner, err error) bool {
	w.t.Helper()
	if !ro.refused(r) {
		return false
	}
	if assert.Error(w.t, err, "phase 3 right after phase 0 must refuse the checkpoint phase 0 marked") {
		assert.Contains(w.t, err.Error(), "restore")
	}
	return true
}
