package main

import (
	"flag"
	"fmt"
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
	afterPhase0    bool // this plugin's phase 0 ran since then, in this boot
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

// refused says phase 3 must refuse the checkpoint phase 0 marked.
func (ro *rollout) refused(r runner) bool { return r.phase == "contract" && ro.afterPhase0 }

func (ro *rollout) ran(r runner) {
	switch {
	case r == hl:
		ro.afterOldBinary = true
	case r.phase == "legacy":
		ro.afterPhase0, ro.legacyStale = true, false
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
	rng := rand.New(rand.NewPCG(seed, 0))
	w := newWalk(t)
	var ro rollout
	runners := []runner{hl, ps("legacy"), ps("expand"), ps("migrate"), ps("contract")}
	next, boot := 0, 1
	for step := 0; step < *walkSteps; step++ {
		r := runners[rng.IntN(len(runners))]
		if !ro.allowed(r) {
			continue
		}
		live := slices.Sorted(func(yield func(string) bool) {
			for id := range w.m.live {
				if !yield(id) {
					return
				}
			}
		})
		switch op := rng.IntN(20); {
		case op < 9 && len(live) < 120:
			id := fmt.Sprintf("r%04d", next)
			next++
			w.t.Logf("step %d: ADD %s by %s", step, id, r)
			a, err := w.n.add(r, id)
			if w.expectRefusal(&ro, r, err) {
				continue
			}
			require.NoError(t, err)
			w.added(id, a)
		case op < 16 && len(live) > 0:
			id := live[rng.IntN(len(live))]
			w.t.Logf("step %d: DEL %s by %s", step, id, r)
			if w.expectRefusal(&ro, r, w.n.del(r, id)) {
				continue
			}
			w.m.deleted(id)
		case op < 18 && len(live) > 0:
			id := live[rng.IntN(len(live))]
			w.t.Logf("step %d: CHECK %s by %s", step, id, r)
			if w.expectRefusal(&ro, r, w.n.check(r, id)) {
				continue
			}
		case op < 19 && r != hl:
			// A runtime's GC after it lost track of some pods.
			var valid []string
			for _, id := range live {
				if rng.IntN(4) > 0 {
					valid = append(valid, id)
				}
			}
			w.t.Logf("step %d: GC by %s keeping %d of %d", step, r, len(valid), len(live))
			if w.expectRefusal(&ro, r, w.n.gc(r, valid...)) {
				continue
			}
			for _, id := range live {
				if !slices.Contains(valid, id) {
					w.m.deleted(id)
				}
			}
		case op == 19:
			// A reboot kills every container; the runtime's first GC
			// after it, with no valid attachment, releases what they held
			// (in phase 3 by dropping the earlier boot's checkpoint).
			boot++
			w.t.Logf("step %d: reboot, then GC by %s", step, r)
			w.reboot(fmt.Sprintf("boot-%d", boot), false)
			ro.rebooted()
			if r == hl {
				r = ps("migrate")
			}
			if ro.refused(r) || !ro.allowed(r) {
				r = ps("migrate")
			}
			require.NoError(t, w.n.gc(r))
			clear(w.leaked)
		default:
			continue
		}
		ro.ran(r)
		w.sides(r.plugin == hostLocal || r.phase != "contract", r.plugin == ourPlugin && r.phase != "legacy")
	}
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
