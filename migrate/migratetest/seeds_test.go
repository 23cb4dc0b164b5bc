package migratetest_test

import (
	"flag"
	"testing"

	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

var seeds = flag.Int("migratetest.seeds", 0, "run TestMatrixSeeds over this many more seeds of every world (200 take about 3 minutes)")

// TestMatrixSeeds runs the worlds with every feature on over many seeds, at
// length 4: go test ./migrate/migratetest -run TestMatrixSeeds
// -migratetest.seeds 200. It is how the harness and the rules were brought
// to agree; by default it runs 2 seeds.
func TestMatrixSeeds(t *testing.T) {
	n := max(*seeds, 2)
	for seed := uint64(100); seed < uint64(100+n); seed++ {
		ipam := ipamConfig()
		ipam.Seed, ipam.MaxLen = seed, 4
		ipam.PartialListings, ipam.SchemaBumps, ipam.Corruption = true, true, true
		ipam.NewBinaryInPhase0 = seed%2 == 0
		if seed%3 == 0 {
			wrap(&ipam, func(_ migrate.Phase, mc *migrate.Config[ipamKey, alloc]) { mc.PruneOrphans = true })
		}
		if _, err := migratetest.Check(ipam); err != nil {
			t.Fatalf("ipam seed %d: %v", seed, err)
		}
		reg := registryConfig()
		reg.Seed, reg.MaxLen = seed, 4
		reg.PartialListings, reg.SchemaBumps, reg.Corruption = true, true, true
		reg.NewBinaryInPhase0 = seed%2 == 1
		if seed%3 == 1 {
			wrap(&reg, func(_ migrate.Phase, mc *migrate.Config[string, int]) { mc.Strict = true })
		}
		if _, err := migratetest.Check(reg); err != nil {
			t.Fatalf("registry seed %d: %v", seed, err)
		}
		vol := volatileConfig()
		vol.Seed, vol.MaxLen = seed, 4
		vol.PartialListings, vol.SchemaBumps, vol.Corruption = true, true, true
		vol.NewBinaryInPhase0 = seed%2 == 0
		if _, err := migratetest.Check(vol); err != nil {
			t.Fatalf("volatile seed %d: %v", seed, err)
		}
	}
}
