package migrate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

// The crash edges a random rollout model found (issue 22), each through
// the public API: a write killed between its sides is modelled by making
// the durable writes it made before the kill by hand.

// TestAcknowledgedDeleteSurvivesRollback: a phase-2 Put killed after its
// legacy write (never acknowledged), then an acknowledged phase-3 Delete
// of that key, then a rollback: the entry must stay deleted.
func TestAcknowledgedDeleteSurvivesRollback(t *testing.T) {
	t.Run("rule25", func(t *testing.T) {
		ctx := context.Background()
		for _, back := range []migrate.Phase{migrate.PhaseLegacy, migrate.PhaseExpand, migrate.PhaseMigrate} {
			for _, how := range []string{"killed after the legacy write", "failed with ErrOutcomeUnknown", "killed, and phase 3 runs without legacy"} {
				t.Run(fmt.Sprintf("%s/back to phase %d", how, back), func(t *testing.T) {
					n := newRegistryNode(t)
					n.newPhase0 = true
					if how == "killed, and phase 3 runs without legacy" {
						// Phase 3 does not see c at all: its Delete writes
						// nothing, yet must survive the rollback.
						n.cfg = func(c *migrate.Config[string, int]) {
							if c.Phase == migrate.PhaseContract {
								c.Legacy = nil
							}
						}
					}
					n.mustStart(migrate.PhaseMigrate)
					n.put("a", 1)
					if how == "failed with ErrOutcomeUnknown" {
						outcomeUnknownPut(t, n, "c", 7)
					} else {
						require.NoError(t, n.reg.Put(ctx, "c", 7)) // the durable part of Put(c, 7)
					}
					n.s = nil // killed: no Close
					n.mustStart(migrate.PhaseContract)
					require.NoError(t, n.s.Delete(ctx, "c"), "acknowledged")
					n.mustStart(back)
					n.serves(map[string]int{"a": 1})
					_, inLegacy := n.reg.Get("c")
					assert.False(t, inLegacy, "legacy is healed too")
				})
			}
		}
	})
}

// outcomeUnknownPut makes n's Store fail Put(k, v) with ErrOutcomeUnknown:
// the checkpoint refuses the save and undoing the legacy write fails, so
// legacy keeps it.
func outcomeUnknownPut(t *testing.T, n *registryNode, k string, v int) {
	t.Helper()
	failing := &failingRegistry{Map: n.reg}
	require.NoError(t, n.s.Close())
	cp := &flakySaves{Memory: checkpointtest.Reopen(t, n.cp), okLeft: -1}
	s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: failing, Checkpoint: cp})
	require.NoError(t, err)
	_, err = s.Restore(context.Background())
	require.NoError(t, err)
	cp.okLeft, failing.failAfter = 0, 1 // the save fails; the undo (the second legacy write) fails
	err = s.Put(context.Background(), k, v)
	require.ErrorIs(t, err, migrate.ErrOutcomeUnknown)
	n.s = s
}

// failingRegistry fails every write after failAfter successful ones (0:
// none fail).
type failingRegistry struct {
	*source.Map[string, int]
	failAfter int
	writes    int
}

func (f *failingRegistry) fail() error {
	if f.failAfter == 0 {
		return nil
	}
	f.writes++
	if f.writes > f.failAfter {
		return errors.New("registry refused")
	}
	return nil
}

func (f *failingRegistry) Put(ctx context.Context, k string, v int) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.Map.Put(ctx, k, v)
}

func (f *failingRegistry) Delete(ctx context.Context, k string) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.Map.Delete(ctx, k)
}

// TestRekeyCutBetweenLegacyWrites: a Put that moves an entry to a new key
// (Match) is killed between its two legacy writes, leaving legacy with two
// keys for one entry. Restore resolves them deterministically to what was
// acknowledged, heals legacy, and a later acknowledged write always wins.
func TestRekeyCutBetweenLegacyWrites(t *testing.T) {
	t.Run("rule22,rule23", func(t *testing.T) {
		ctx := context.Background()
		reg := &source.Map[ipamKey, int]{}
		cp := checkpoint.NewMemory[ipamKey, int]()
		var s *migrate.Store[ipamKey, int]
		start := func(p migrate.Phase) migrate.Report[ipamKey] {
			s = nil
			var err error
			s, err = migrate.New(migrate.Config[ipamKey, int]{Phase: p, Legacy: reg, Checkpoint: checkpointtest.Reopen(t, cp), Match: byContainer})
			require.NoError(t, err)
			r, err := s.Restore(ctx)
			require.NoError(t, err)
			return r
		}
		defer func() { s.Close() }()
		eth := func(i string) ipamKey { k := real("c"); k.IfName = i; return k }

		start(migrate.PhaseMigrate)
		require.NoError(t, s.Put(ctx, eth("eth0"), 1))
		require.NoError(t, reg.Put(ctx, eth("eth1"), 2)) // Put(eth1, 2) killed before legacy.Delete(eth0)
		require.NoError(t, s.Close())

		r := start(migrate.PhaseMigrate)
		v, _ := s.Get(eth("eth9"))
		assert.Equal(t, 1, v, "the acknowledged value: the checkpoint's record of the entry")
		assert.NotEmpty(t, r.Errors, "the duplicate is reported")
		assert.Len(t, reg.Snapshot(), 1, "legacy is healed: one key for one entry")
		require.NoError(t, s.Put(ctx, eth("eth2"), 3))
		require.NoError(t, s.Close())

		for i := 0; i < 20; i++ { // map order must not matter
			for _, p := range []migrate.Phase{migrate.PhaseLegacy, migrate.PhaseExpand, migrate.PhaseMigrate} {
				start(p)
				k, _ := s.Key(eth("eth9"))
				v, _ := s.Get(eth("eth9"))
				require.Equal(t, 3, v, "the last acknowledged write wins, phase %d", p)
				require.Equal(t, eth("eth2"), k)
				require.NoError(t, s.Close())
			}
		}
		assert.Equal(t, map[ipamKey]int{eth("eth2"): 3}, reg.Snapshot())
	})
}

// TestRekeyCutWithoutACheckpoint: the same cut in this library's phase 0,
// whose checkpoint cannot tell which key was acknowledged: either state is
// allowed, but the choice is the same at every restore, legacy is healed,
// and the next write wins.
func TestRekeyCutWithoutACheckpoint(t *testing.T) {
	t.Run("rule22", func(t *testing.T) {
		ctx := context.Background()
		eth := func(i string) ipamKey { k := real("c"); k.IfName = i; return k }
		var first ipamKey
		for i := 0; i < 20; i++ {
			reg := &source.Map[ipamKey, int]{}
			require.NoError(t, reg.Put(ctx, eth("eth0"), 1))
			require.NoError(t, reg.Put(ctx, eth("eth1"), 2))
			s, err := migrate.New(migrate.Config[ipamKey, int]{Phase: migrate.PhaseLegacy, Legacy: reg, Match: byContainer})
			require.NoError(t, err)
			_, err = s.Restore(ctx)
			require.NoError(t, err)
			k, ok := s.Key(eth("eth9"))
			require.True(t, ok)
			if i == 0 {
				first = k
			}
			require.Equal(t, first, k, "deterministic")
			assert.Len(t, reg.Snapshot(), 1, "legacy is healed")
			require.NoError(t, s.Put(ctx, eth("eth3"), 3))
			assert.Equal(t, map[ipamKey]int{eth("eth3"): 3}, reg.Snapshot())
			require.NoError(t, s.Close())
		}
	})
}

// TestTxAllSeesTheLoopsOwnChanges: an entry the loop deletes or replaces
// before reaching it is seen as changed: deleted entries are not yielded,
// replaced ones are yielded once, with their new value.
func TestTxAllSeesTheLoopsOwnChanges(t *testing.T) {
	ctx := context.Background()
	committed := map[string]int{}
	for i := range 6 {
		committed[fmt.Sprintf("k%d", i)] = i
	}
	for _, mode := range []string{"delete", "replace"} {
		t.Run(mode, func(t *testing.T) {
			w := newWorld(true, committed)
			w.saveCheckpoint(t, migrate.PhaseMigrate, committed, "")
			s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate})
			_, err := s.Restore(ctx)
			require.NoError(t, err)
			seen := map[string][]int{}
			require.NoError(t, s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
				first := true
				for k, v := range tx.All() {
					seen[k] = append(seen[k], v)
					if !first {
						continue
					}
					first = false
					for o := range committed {
						if o == k {
							continue
						}
						if mode == "delete" {
							tx.Delete(o)
						} else {
							tx.Put(o, 100+committed[o])
						}
					}
				}
				return nil
			}))
			if mode == "delete" {
				assert.Len(t, seen, 1, "the deleted entries are not yielded: %v", seen)
				return
			}
			require.Len(t, seen, 6)
			for k, vs := range seen {
				require.Len(t, vs, 1, "%s is yielded once: %v", k, vs)
			}
		})
	}
}

// TestVolatilePhase0OverANewerSchema: phase 2 of a newer build writes the
// checkpoint; this library's phase 0, built with the older schema, must
// not move the only copy aside (the registry died with the last process).
func TestVolatilePhase0OverANewerSchema(t *testing.T) {
	t.Run("rule4,rule11", func(t *testing.T) {
		ctx := context.Background()
		reg := &migratetest.Explicit[string, int]{}
		cp := checkpoint.NewMemory[string, int]()
		v2 := checkpointtest.Reopen(t, cp, checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, sameEntry))
		s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: reg, Checkpoint: v2, VolatileLegacy: true})
		require.NoError(t, err)
		_, err = s.Restore(ctx)
		require.NoError(t, err)
		require.NoError(t, s.Put(ctx, "vm-1", 1))
		require.NoError(t, s.Close())
		reg.Replace(nil) // the registry dies with the process
		before := cp.Bytes()

		s, err = migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseLegacy, Legacy: reg, Checkpoint: checkpointtest.Reopen(t, cp), VolatileLegacy: true})
		require.NoError(t, err)
		_, err = s.Restore(ctx)
		require.ErrorIs(t, err, checkpoint.ErrNewerSchema)
		assert.Contains(t, err.Error(), "roll forward")
		require.NoError(t, s.Close())
		assert.Equal(t, before, cp.Bytes())
		assert.Empty(t, checkpointtest.Quarantined(cp))

		s, err = migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: reg, Checkpoint: checkpointtest.Reopen(t, cp, checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, sameEntry)), VolatileLegacy: true})
		require.NoError(t, err)
		defer s.Close()
		_, err = s.Restore(ctx)
		require.NoError(t, err)
		assert.Equal(t, map[string]int{"vm-1": 1}, collect(s), "rolling forward finds vm-1")
	})
}

// TestJournalHistoryIsNotValidated: a value the rolled-back build's
// WithValidate rejects, which a later write replaced, lives on only in the
// journal's history; a rollback from phase 3 must start (issue 22, item 3:
// it failed with ErrUnsafeRestore, the file that says legacy is stale
// having "unreadable entries").
func TestJournalHistoryIsNotValidated(t *testing.T) {
	t.Run("rule4", func(t *testing.T) {
		ctx := context.Background()
		reg := &migratetest.Explicit[string, int]{}
		cp := checkpoint.NewMemory[string, int]()
		s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseContract, Legacy: reg, Checkpoint: checkpointtest.Reopen(t, cp, checkpoint.WithJournal())})
		require.NoError(t, err)
		_, err = s.Restore(ctx)
		require.NoError(t, err)
		require.NoError(t, s.Put(ctx, "k", -666))
		require.NoError(t, s.Put(ctx, "k", 1))
		require.NoError(t, s.Close())
		require.NotEmpty(t, checkpointtest.Journal(cp), "the history is in the journal")

		nonNegative := checkpoint.WithValidate(func(_ string, v int) error {
			if v < 0 {
				return errors.New("negative")
			}
			return nil
		})
		s, err = migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: reg, Checkpoint: checkpointtest.Reopen(t, cp, checkpoint.WithJournal(), nonNegative)})
		require.NoError(t, err)
		defer s.Close()
		r, err := s.Restore(ctx)
		require.NoError(t, err)
		assert.NotEmpty(t, r.LegacyStale, "legacy is healed from the checkpoint phase 3 wrote")
		assert.Equal(t, map[string]int{"k": 1}, collect(s))
		assert.Equal(t, map[string]int{"k": 1}, reg.Snapshot())
	})
}

// TestJournalHistoryIsNotUpgraded: the same for a value the next build's
// upgrade rejects, which a later write deleted: the next build starts, in
// phase 3 as in phase 2 (issue 22, item 3: a delete carried the value to
// the upgrade, and Load failed with two bad entries in a state of one).
func TestJournalHistoryIsNotUpgraded(t *testing.T) {
	t.Run("rule4", func(t *testing.T) {
		ctx := context.Background()
		rejects := checkpoint.WithUpgrade(1, func(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) {
			if string(v) == "-666" {
				return nil, nil, errors.New("no -666")
			}
			return k, v, nil
		})
		for _, p := range []migrate.Phase{migrate.PhaseMigrate, migrate.PhaseContract} {
			t.Run(p.String(), func(t *testing.T) {
				reg := &migratetest.Explicit[string, int]{}
				cp := checkpoint.NewMemory[string, int]()
				s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseContract, Legacy: reg, Checkpoint: checkpointtest.Reopen(t, cp)})
				require.NoError(t, err)
				_, err = s.Restore(ctx)
				require.NoError(t, err)
				require.NoError(t, s.Put(ctx, "a", 1))
				require.NoError(t, s.Put(ctx, "k", -666))
				require.NoError(t, s.Delete(ctx, "k"))
				require.NoError(t, s.Close())
				require.NotEmpty(t, checkpointtest.Journal(cp), "the history is in the journal")

				s, err = migrate.New(migrate.Config[string, int]{Phase: p, Legacy: reg, Checkpoint: checkpointtest.Reopen(t, cp, checkpoint.WithSchema(2), rejects)})
				require.NoError(t, err)
				defer s.Close()
				_, err = s.Restore(ctx)
				require.NoError(t, err)
				assert.Equal(t, map[string]int{"a": 1}, collect(s))
			})
		}
	})
}
