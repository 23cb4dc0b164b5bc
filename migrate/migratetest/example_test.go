package migratetest_test

import (
	"fmt"
	"math/rand"

	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

// A downstream daemon proves its rollout safe with its own adapters: copy
// this into a test, with Matrix(t, cfg) instead of Check.
func ExampleCheck() {
	type vm struct {
		Console string
		Tokens  int
	}
	cfg := migratetest.Config[string, vm]{
		// The daemon's own construction of its Store, per phase.
		New: func(p migrate.Phase, legacy source.Reader[string, vm], cp migrate.Checkpoint[string, vm]) (*migrate.Store[string, vm], error) {
			return migrate.New(migrate.Config[string, vm]{
				Phase: p, Legacy: legacy, Checkpoint: cp,
				// The registry is written explicitly and holds whole values:
				// after a downgrade, its values are the newer ones.
				Merge: migrate.PreferLegacy[string, vm],
			})
		},
		Key: func(i int) string { return fmt.Sprintf("vm-%d", i) },
		Value: func(rng *rand.Rand, id string) vm {
			return vm{Console: "/run/" + id + ".sock", Tokens: rng.Intn(4)}
		},
		Explicit: true, // the Store writes the legacy registry
		MaxLen:   4,
		Seed:     7,
	}
	res, err := migratetest.Check(cfg)
	fmt.Println(err)
	fmt.Println(res.Sequences, "sequences,", len(res.Violations), "violations")
	fmt.Println(res.Unsupported > 0, "(3 → 0 with the old binary is reported as unsupported, never silent)")
	// Output:
	// <nil>
	// 340 sequences, 0 violations
	// true (3 → 0 with the old binary is reported as unsupported, never silent)
}
