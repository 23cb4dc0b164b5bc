package robustness_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// TestNodeWorldRapid explores the node world (node_world_test.go) as a
// property-based state machine: rapid chooses the events, and shrinks a
// sequence that breaks an invariant of the node to its shortest. Each
// kind of legacy runs in the variants of nodeVariants (the forward ones
// restart in phases 2 and 3 only, after the first run in phase 1), so that
// the short failures of one kind of event do not hide the longer ones of
// another. PHASESHIFT_LONG_TESTS=1 runs ten times the checks.
func TestNodeWorldRapid(t *testing.T) {
	setRapidFlag(t, "rapid.nofailfile", "true") // no testdata/rapid files in the tree
	setRapidFlag(t, "rapid.shrinktime", "10s")
	if os.Getenv("PHASESHIFT_LONG_TESTS") == "1" {
		// Fresh seeds: the long run explores.
		setRapidFlag(t, "rapid.checks", "1000")
		setRapidFlag(t, "rapid.shrinktime", "60s")
	} else {
		// The default run is the same every time (CI must not turn red
		// on a new seed's find: the long run and the exhaustive test look
		// for those); -rapid.seed on the command line overrides it.
		setRapidFlag(t, "rapid.seed", "1")
	}
	for kind := kindObserving; kind <= kindRegistryVolatile; kind++ {
		for _, v := range nodeVariants {
			t.Run(strings.ReplaceAll(kind.String(), " ", "_")+"/"+v.name, func(t *testing.T) {
				rapid.Check(t, func(rt *rapid.T) { nodeMachine(rt, kind, v) })
			})
		}
	}
}

// nodeVariant limits the events a run may choose, so that a short failure
// of one kind of event does not hide the longer ones of another: rapid
// shrinks each run to its one shortest failure.
type nodeVariant struct {
	name           string
	phases         []migrate.Phase // the phases a restart may choose
	rollback, hide bool            // schema rollbacks; partial listings
	lossesOnly     bool            // a silent leak does not fail the run
}

var (
	allPhases    = []migrate.Phase{migrate.PhaseLegacy, migrate.PhaseExpand, migrate.PhaseMigrate, migrate.PhaseContract}
	nodeVariants = []nodeVariant{
		{name: "all", phases: allPhases, rollback: true, hide: true},
		{name: "forward", phases: allPhases[2:]},
		{name: "forward+partial", phases: allPhases[2:], hide: true},
		{name: "forward+rollback", phases: allPhases[2:], rollback: true},
		{name: "back-and-forth", phases: allPhases},
		{name: "forward+partial/losses", phases: allPhases[2:], hide: true, lossesOnly: true},
	}
)

// setRapidFlag sets one of rapid's flags for this test, unless the
// command line set it.
func setRapidFlag(t *testing.T, name, value string) {
	t.Helper()
	f := flag.Lookup(name)
	if f == nil {
		t.Fatalf("rapid has no flag %s", name)
	}
	set := false
	flag.Visit(func(g *flag.Flag) { set = set || g.Name == name })
	if set {
		return
	}
	old := f.Value.String()
	if err := f.Value.Set(value); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Value.Set(old) })
}

// nodeMachine is one run of the state machine.
func nodeMachine(rt *rapid.T, kind legacyKind, v nodeVariant) {
	w := newNodeWorld(kind)
	phases := v.phases
	key := rapid.IntRange(0, len(nodeKeys)-1)
	play := func(t *rapid.T, e nodeEvent) {
		if !w.apply(e) {
			t.Skip("cannot happen now")
		}
	}
	actions := map[string]func(*rapid.T){
		"start": func(t *rapid.T) {
			play(t, nodeEvent{op: opStart, phase: rapid.SampledFrom(phases).Draw(t, "phase")})
		},
		"add": func(t *rapid.T) {
			play(t, nodeEvent{op: opAdd, key: key.Draw(t, "key"), n: rapid.IntRange(1, 2).Draw(t, "addresses")})
		},
		"del": func(t *rapid.T) { play(t, nodeEvent{op: opDel, key: key.Draw(t, "key")}) },
		"kill": func(t *rapid.T) {
			play(t, nodeEvent{op: opKill, n: rapid.IntRange(0, 4).Draw(t, "write")})
		},
		"reboot": func(t *rapid.T) { play(t, nodeEvent{op: opReboot}) },
		"": func(t *rapid.T) {
			for _, f := range w.findings {
				if v.lossesOnly && f.v.Invariant == migratetest.SilentLeak {
					continue
				}
				if gapOf(kind, f) != "" {
					continue // a known gap (node_gaps_test.go)
				}
				t.Fatalf("%s: %s\n    after: %s\n%s", kind, f.v, nodeSeqString(f.events), strings.Join(f.trace, "\n"))
			}
		},
	}
	if v.rollback {
		actions["rollback"] = func(t *rapid.T) {
			play(t, nodeEvent{op: opRollback, phase: rapid.SampledFrom([]migrate.Phase{migrate.PhaseExpand, migrate.PhaseMigrate}).Draw(t, "phase")})
		}
	}
	if !kind.registry() {
		actions["old"] = func(t *rapid.T) { play(t, nodeEvent{op: opOld}) }
	}
	if !kind.registry() && v.hide {
		actions["hide"] = func(t *rapid.T) { play(t, nodeEvent{op: opHide, key: key.Draw(t, "key")}) }
	}
	if kind == kindObserving {
		actions["catchup"] = func(t *rapid.T) { play(t, nodeEvent{op: opCatchUp}) }
	}
	rt.Repeat(actions)
}
