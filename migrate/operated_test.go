package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// The promise as operators meet it (issue 32): what a person does on a
// node - a rollback to the old binary and straight back - restores
// exactly, or refuses.

// TestPhase2AfterTheOldBinary: fleet at 1, then 2; a node goes back to the
// old binary (which knows nothing of the checkpoint), which DELs pod-3 and
// ADDs pod-9 with pod-3's address, then straight back to phase 2. CRI lists
// pod-9, which the checkpoint never held: a write the checkpoint never saw
// happened since its last save (CRI lists a sandbox only once its ADD was
// acknowledged, and phases 1 to 3 acknowledge only what the checkpoint
// has). The checkpoint is behind legacy (rule 7), and legacy decides which
// entries exist (rule 14): pod-3 is dropped, not kept as an orphan holding
// pod-9's address (found on main: pod-3 and pod-9 served with one address,
// at every restart in phase 2).
func TestPhase2AfterTheOldBinary(t *testing.T) {
	t.Run("rule21", func(t *testing.T) {
		ctx := context.Background()
		w := newWorld(false, map[string]int{"pod-1": 1, "pod-2": 2, "pod-3": 3})

		s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseExpand})
		_, err := s.Restore(ctx)
		require.NoError(t, err)
		require.NoError(t, s.Put(ctx, "pod-4", 4))
		w.impl.Set("pod-4", 4) // the runtime makes the sandbox ready once the ADD returned
		require.NoError(t, s.Close())

		// The old binary: CRI only. It deletes pod-3 and adds pod-9.
		w.impl.Remove("pod-3")
		w.impl.Set("pod-9", 9)
		node := pods{"pod-1": 1, "pod-2": 2, "pod-4": 4, "pod-9": 9}

		s = w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate})
		rep, err := s.Restore(ctx)
		require.NoError(t, err)
		assertServesNode(t, s, node)
		// Nothing shows pod-3 gone but its absence from a listing that
		// lags: it is kept, and reported, an address leaked at worst.
		assert.Equal(t, []string{"pod-3"}, rep.Orphaned)
		assert.Equal(t, []string{"pod-9"}, rep.Backfilled)
		require.NoError(t, s.Close())

		// The next restart in phase 2 finds nothing new to reconcile, and
		// PruneOrphans frees pod-3's address.
		s = w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate, PruneOrphans: true})
		rep, err = s.Restore(ctx)
		require.NoError(t, err)
		assertServesNode(t, s, node)
		assert.Equal(t, []string{"pod-3"}, rep.Pruned)
		assert.Empty(t, rep.Backfilled)
	})
}

// uniqueVal is Config.Unique for int values that are addresses.
func uniqueVal(v int) []string { return []string{fmt.Sprint(v)} }

// TestUniqueResolvesAnAddressHeldTwice: with Config.Unique, a restore that
// finds one part of a value held by two entries drops those that share it
// with an entry both sides show live (rule 22), and serves and reports the
// rest.
func TestUniqueResolvesAnAddressHeldTwice(t *testing.T) {
	t.Run("rule22", func(t *testing.T) {
		ctx := context.Background()
		t.Run("a partial listing keeps what the old binary deleted", func(t *testing.T) {
			// pod-3 is in the checkpoint; the old binary deleted it and gave
			// its address to pod-9, which the checkpoint also holds (phase 2
			// ran after the old binary once, say), and the listing cannot
			// read pod-2.
			w := newWorld(false, map[string]int{"pod-1": 1, "pod-9": 3})
			w.saveCheckpoint(t, migrate.PhaseMigrate, map[string]int{"pod-1": 1, "pod-2": 2, "pod-3": 3, "pod-9": 3}, "")
			for _, unique := range []bool{false, true} {
				cfg := migrate.Config[string, int]{Phase: migrate.PhaseMigrate}
				if unique {
					cfg.Unique = uniqueVal
				}
				w.impl.FailListPartly(errors.New("pod-2 could not be read"))
				s := w.open(t, cfg)
				rep, err := s.Restore(ctx)
				require.NoError(t, err)
				if !unique {
					assert.Equal(t, map[string]int{"pod-1": 1, "pod-2": 2, "pod-3": 3, "pod-9": 3}, collect(s), "without Unique, both are kept: a partial listing is no evidence")
					require.NoError(t, s.Close())
					continue
				}
				assert.Equal(t, map[string]int{"pod-1": 1, "pod-2": 2, "pod-9": 3}, collect(s), "pod-9, which CRI lists, holds 3; pod-3 does not")
				assert.Equal(t, []string{"pod-3"}, rep.Dropped)
				assert.ElementsMatch(t, []string{"pod-2"}, rep.Orphaned, "pod-2, which the listing could not read, is kept")
				assert.NotEmpty(t, rep.Stale)
			}
		})
		t.Run("a DEL the runtime has not finished", func(t *testing.T) {
			// pod-3 was deleted (acknowledged) and its address given to
			// pod-4; the runtime still lists pod-3 at the restart.
			for _, p := range []migrate.Phase{migrate.PhaseMigrate, migrate.PhaseContract} {
				w := newWorld(false, map[string]int{"pod-1": 1, "pod-3": 3, "pod-4": 3})
				w.saveCheckpoint(t, migrate.PhaseMigrate, map[string]int{"pod-1": 1, "pod-4": 3}, "")
				s := w.open(t, migrate.Config[string, int]{Phase: p, Unique: uniqueVal})
				rep, err := s.Restore(ctx)
				require.NoError(t, err, "phase %d", p)
				assert.Equal(t, map[string]int{"pod-1": 1, "pod-4": 3}, collect(s), "phase %d: pod-4 holds 3, as the checkpoint says", p)
				assert.Equal(t, []string{"pod-3"}, rep.Dropped, "phase %d", p)
				assert.Empty(t, rep.Backfilled, "phase %d", p)
				require.NoError(t, s.Close())
			}
		})
		t.Run("phase 3 after the old binary", func(t *testing.T) {
			// Outside the promise (phase 3 right after the old binary), and
			// the sides cannot tell pod-3 (only the checkpoint holds it:
			// an ADD the runtime has not listed yet, or deleted by the old
			// binary) from pod-9 (only the runtime lists it: a DEL not
			// finished, or the old binary's ADD). Both are served, so that
			// address 3 stays taken, and the report says so.
			w := newWorld(false, map[string]int{"pod-1": 1, "pod-9": 3})
			w.saveCheckpoint(t, migrate.PhaseContract, map[string]int{"pod-1": 1, "pod-3": 3}, "")
			s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseContract, Unique: uniqueVal})
			rep, err := s.Restore(ctx)
			require.NoError(t, err)
			assertServesNode(t, s, pods{"pod-1": 1, "pod-9": 3})
			assert.True(t, slices.ContainsFunc(rep.Errors, func(err error) bool { return errors.Is(err, migrate.ErrValueShared) }), "%s", rep)
			require.NoError(t, s.Close())
		})
		t.Run("neither side can tell", func(t *testing.T) {
			w := newWorld(false, map[string]int{"pod-1": 1})
			w.saveCheckpoint(t, migrate.PhaseMigrate, map[string]int{"pod-1": 1, "pod-2": 2, "pod-3": 2}, "")
			s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Unique: uniqueVal})
			rep, err := s.Restore(ctx)
			require.NoError(t, err)
			assert.Equal(t, map[string]int{"pod-1": 1, "pod-2": 2, "pod-3": 2}, collect(s))
			require.NotEmpty(t, rep.Errors)
			assert.Contains(t, rep.Errors[0].Error(), `"pod-2", "pod-3"`, "the keys, as the JSON phaseshift takes")
			assert.NotContains(t, rep.Errors[0].Error(), `"2"`, "the part is not quoted")
		})
		t.Run("an explicit legacy holding an address twice", func(t *testing.T) {
			// The old binary wrote pod-9 with pod-4's address into a
			// registry that still holds pod-4.
			w := newWorld(true, map[string]int{"pod-4": 3, "pod-9": 3})
			w.saveCheckpoint(t, migrate.PhaseMigrate, map[string]int{"pod-4": 3}, "")
			s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Unique: uniqueVal})
			rep, err := s.Restore(ctx)
			require.NoError(t, err)
			assert.Equal(t, map[string]int{"pod-4": 3}, collect(s))
			assert.Equal(t, []string{"pod-9"}, rep.Dropped)
			assert.Equal(t, map[string]int{"pod-4": 3}, w.exp.Snapshot(), "the stale holder is deleted from legacy, so that the next restore does not find it again")
		})
	})
}

// TestRestoredPrevOverAStaleLegacy: a file phase 3 wrote, put back by
// phaseshift restore-prev (so marked: it lacks every commit after it),
// over an explicit legacy, which phase 3 does not write: neither side holds
// every acknowledged write, and a phase that writes legacy refuses rather
// than heal legacy from the file put back (rule 9).
func TestRestoredPrevOverAStaleLegacy(t *testing.T) {
	t.Run("rule7,rule9,rule10", func(t *testing.T) {
		ctx := context.Background()
		w := newWorld(true, map[string]int{"a": 1})
		require.NoError(t, w.cp.Save(ctx, checkpoint.Snapshot[string, int]{
			Meta:    checkpoint.Meta{Phase: "contract", Behind: "restored by phaseshift restore-prev from state.json.prev (seq 4), which lacks every commit after it"},
			Entries: map[string]int{"a": 1, "b": 2},
		}))
		before := w.cp.Bytes()
		for _, p := range []migrate.Phase{migrate.PhaseLegacy, migrate.PhaseExpand, migrate.PhaseMigrate, migrate.PhaseContract} {
			s := w.open(t, migrate.Config[string, int]{Phase: p, Checkpoint: checkpointtest.Reopen(t, w.cp)})
			_, err := s.Restore(ctx)
			if p == migrate.PhaseContract {
				require.ErrorIs(t, err, migrate.ErrStale, "phase 3 refuses a marked file")
			} else {
				require.ErrorIs(t, err, migrate.ErrUnsafeRestore, "phase %d", p)
				assert.Contains(t, err.Error(), "neither side is known to hold every acknowledged write")
				assert.Contains(t, err.Error(), "phaseshift clear-mark PATH")
			}
			assert.Equal(t, before, w.cp.Bytes(), "phase %d changed nothing", p)
			assert.Equal(t, map[string]int{"a": 1}, w.exp.Snapshot(), "phase %d left legacy alone", p)
			require.NoError(t, s.Close())
		}
	})
}

// TestCopyOfPrevUnderARunningStore: a phase-3 Store over a real journaled
// file; an operator copies .prev over the checkpoint in place (cp keeps
// the inode) while the Store runs. Every write acknowledged before and
// after is served by the next start (found on main: the next start
// refused, ErrCorrupt, and the advice it printed would have lost all 14).
func TestCopyOfPrevUnderARunningStore(t *testing.T) {
	cpBin, err := exec.LookPath("cp")
	if err != nil {
		t.Skip("no cp on this machine:", err)
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	var registry source.Map[string, int]
	open := func(p migrate.Phase) *migrate.Store[string, int] {
		f, err := checkpoint.Open[string, int](ctx, path)
		require.NoError(t, err)
		cfg := migrate.Config[string, int]{Phase: p, Checkpoint: f}
		if p != migrate.PhaseContract {
			cfg.Legacy = &registry
		}
		s, err := migrate.New(cfg)
		require.NoError(t, err)
		_, err = s.Restore(ctx)
		require.NoError(t, err)
		return s
	}
	require.NoError(t, open(migrate.PhaseMigrate).Close())
	s := open(migrate.PhaseContract)
	want := map[string]int{}
	for i := range 7 {
		k := fmt.Sprintf("vm-%d", i)
		require.NoError(t, s.Put(ctx, k, i))
		want[k] = i
	}
	require.FileExists(t, path+".prev", "phase 3's first restore saved over the file")
	out, err := exec.Command(cpBin, path+".prev", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for i := 7; i < 14; i++ {
		k := fmt.Sprintf("vm-%d", i)
		require.NoError(t, s.Put(ctx, k, i))
		want[k] = i
	}
	require.NoError(t, s.Close())

	s = open(migrate.PhaseContract)
	defer s.Close()
	assert.Equal(t, want, collect(s), "all 14 acknowledged writes")
}
