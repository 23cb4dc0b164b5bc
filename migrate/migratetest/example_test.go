package migratetest_test

import (
	"fmt"
	"math/rand/v2"

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
		// The daemon's own configuration of its Store, per phase.
		New: func(p migrate.Phase, legacy source.Reader[string, vm], cp migrate.Checkpoint[string, vm]) (migrate.Config[string, vm], error) {
			return migrate.Config[string, vm]{Legacy: legacy, Checkpoint: cp}, nil
		},
		Key: func(i int) string { return fmt.Sprintf("vm-%d", i) },
		Value: func(rng *rand.Rand, id string) vm {
			return vm{Console: "/run/" + id + ".sock", Tokens: rng.IntN(4)}
		},
		Explicit:        true, // the Store writes the legacy registry
		PartialListings: true,
		SchemaBumps:     true,
		MaxLen:          4,
		Seed:            7,
	}
	res, err := migratetest.Check(cfg)
	fmt.Println(err)
	fmt.Println(res.Sequences, "sequences,", len(res.Violations), "violations")
	fmt.Println(res.Unjudged > 0, "(3 → 0 with the old binary is outside the promise: counted, not judged)")
	// Output:
	// <nil>
	// 340 sequences, 0 violations
	// true (3 → 0 with the old binary is outside the promise: counted, not judged)
}
