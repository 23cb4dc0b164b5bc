package migrate_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// The quick start: a daemon whose old version kept its registry in a map
// now keeps it in a checkpoint file as well, with the phase as a flag.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "phaseshift")
	defer os.RemoveAll(dir)

	var registry source.Map[string, string] // the old source of truth: VM -> console
	registry.Set("vm-1", "/run/vm-1.sock")

	phase, _ := migrate.ParsePhase("expand") // from --phase or PHASESHIFT_PHASE
	file, err := checkpoint.Open[string, string](ctx, filepath.Join(dir, "state.json"))
	if err != nil {
		fmt.Println(err)
		return
	}
	store, err := migrate.New(migrate.Config[string, string]{
		Phase:      phase,
		Legacy:     &registry,
		Checkpoint: file,
		Version:    "vmproxy v2.0.0",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close() // also closes the file and releases its lock

	report, err := store.Restore(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(report.ReadFrom, report.Restored, report.CheckpointRewritten)

	// Every mutation is durable on both sides before Put returns.
	if err := store.Put(ctx, "vm-2", "/run/vm-2.sock"); err != nil {
		fmt.Println(err)
	}
	console, _ := store.Get("vm-2")
	legacyConsole, _ := registry.Get("vm-2")
	fmt.Println(console, legacyConsole)
	// Output:
	// legacy 1 true
	// /run/vm-2.sock /run/vm-2.sock
}

// A node rolled forward phase by phase, with a downgrade in the middle,
// keeps exactly what was acknowledged.
func Example_rollout() {
	ctx := context.Background()
	var registry source.Map[string, int] // legacy, written explicitly; it stands for the old version's file here
	disk := checkpoint.NewMemory[string, int]()

	run := func(p migrate.Phase, work func(s *migrate.Store[string, int])) {
		cfg := migrate.Config[string, int]{Phase: p, Legacy: &registry, LegacyKind: source.Durable, Merge: migrate.PreferLegacy[string, int]}
		if p != migrate.PhaseLegacy {
			// A restart: the same in-memory file, opened afresh. (The old
			// binary, in phase 0, does not know the file.)
			cfg.Checkpoint, _ = disk.Reopen()
		}
		s, _ := migrate.New(cfg)
		r, err := s.Restore(ctx)
		if err != nil {
			fmt.Println(p, err)
			return
		}
		work(s)
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range s.All() {
				if !yield(k) {
					return
				}
			}
		})
		fmt.Printf("%-8s read %-17s serves %v\n", p, r.ReadFrom, keys)
		s.Close()
	}

	run(migrate.PhaseLegacy, func(s *migrate.Store[string, int]) { s.Put(ctx, "a", 1) })
	run(migrate.PhaseExpand, func(s *migrate.Store[string, int]) { s.Put(ctx, "b", 2) })
	run(migrate.PhaseMigrate, func(s *migrate.Store[string, int]) { s.Put(ctx, "c", 3) })
	run(migrate.PhaseLegacy, func(s *migrate.Store[string, int]) { s.Delete(ctx, "a") }) // downgrade
	run(migrate.PhaseExpand, func(s *migrate.Store[string, int]) {})                     // heals the file
	run(migrate.PhaseMigrate, func(s *migrate.Store[string, int]) {})
	run(migrate.PhaseContract, func(s *migrate.Store[string, int]) { s.Put(ctx, "d", 4) })
	run(migrate.PhaseMigrate, func(s *migrate.Store[string, int]) {}) // legacy missed d: healed
	// Output:
	// legacy   read legacy            serves [a]
	// expand   read legacy            serves [a b]
	// migrate  read checkpoint+legacy serves [a b c]
	// legacy   read legacy            serves [b c]
	// expand   read checkpoint+legacy serves [b c]
	// migrate  read checkpoint+legacy serves [b c]
	// contract read checkpoint        serves [b c d]
	// migrate  read checkpoint        serves [b c d]
}

// Update reads and writes several entries as one durable commit.
func ExampleStore_Update() {
	ctx := context.Background()
	s, _ := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseContract, Checkpoint: checkpoint.NewMemory[string, int]()})
	defer s.Close()
	s.Restore(ctx)
	s.Put(ctx, "free", 3)

	err := s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
		free, _ := tx.Get("free")
		if free == 0 {
			return fmt.Errorf("pool exhausted")
		}
		tx.Put("free", free-1)
		tx.Put("pod-1", 1)
		return nil
	})
	free, _ := s.Get("free")
	fmt.Println(err, free, s.Len())
	// Output: <nil> 2 2
}
