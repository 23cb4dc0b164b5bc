package migrate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

// Safe with its defaults: each test below builds the Store with
// Config{Phase, Legacy, Checkpoint} and only what the kind of legacy needs
// (Match, Equal, VolatileLegacy), and attacks one case of issue 21 that
// failed on the code before it.

// sameInt is Config.Equal for int values that legacy records in full.
func sameInt(a, b int) bool { return a == b }

// TestSoleCopyUnreadableFailsRestore: where the checkpoint is the only copy
// of the state (phase 3; every phase with VolatileLegacy, phase 0
// included), a checkpoint that cannot be read in full fails Restore by
// default, leaves every file as it was and says how to recover.
// DiscardUnreadableCheckpoint is the opt-in that serves less.
func TestSoleCopyUnreadableFailsRestore(t *testing.T) {
	t.Run("rule4", func(t *testing.T) {
		ctx := context.Background()
		type damage struct {
			name  string
			apply func(t *testing.T, cp *checkpoint.Memory[string, int])
			is    error
		}
		damages := []damage{
			{"one byte flipped", func(_ *testing.T, cp *checkpoint.Memory[string, int]) { checkpointtest.Corrupt(cp) }, checkpoint.ErrCorrupt},
			{"an entry that does not decode", func(t *testing.T, cp *checkpoint.Memory[string, int]) {
				checkpointtest.SetBytes(cp, badEntryFile(t, migrate.PhaseMigrate, map[string]int{"a": 1}, "b"))
				checkpointtest.SetJournal(cp, nil)
			}, checkpoint.ErrBadEntry},
			{"a newer schema", func(t *testing.T, cp *checkpoint.Memory[string, int]) {
				checkpointtest.SetJournal(cp, nil)
				require.NoError(t, checkpointtest.SetSchema(cp, 2))
			}, checkpoint.ErrNewerSchema},
			{"a damaged journal", func(t *testing.T, cp *checkpoint.Memory[string, int]) {
				j := checkpointtest.Journal(cp)
				require.NotEmpty(t, j, "the setup wrote journal records")
				j[len(j)/3] ^= 0x20 // a record before the last one
				checkpointtest.SetJournal(cp, j)
			}, checkpoint.ErrCorrupt},
		}
		type world struct {
			name     string
			phase    migrate.Phase
			volatile bool
			explicit bool
		}
		worlds := []world{
			{"phase 3, CRI configured", migrate.PhaseContract, false, false},
			{"phase 3, no legacy", migrate.PhaseContract, false, false},
			{"phase 0, volatile registry", migrate.PhaseLegacy, true, true},
			{"phase 1, volatile registry", migrate.PhaseExpand, true, true},
			{"phase 2, volatile registry", migrate.PhaseMigrate, true, true},
			{"phase 3, volatile registry", migrate.PhaseContract, true, true},
		}
		for _, w := range worlds {
			for _, d := range damages {
				t.Run(w.name+"/"+d.name, func(t *testing.T) {
					cp := checkpoint.NewMemory[string, int]()
					journaled, err := cp.Reopen(checkpoint.WithJournal())
					require.NoError(t, err)
					// The last run was phase 2, which leaves nothing behind.
					require.NoError(t, journaled.Save(ctx, checkpoint.Snapshot[string, int]{Meta: checkpoint.Meta{Phase: "migrate"}, Entries: map[string]int{"a": 1}}))
					for i, k := range []string{"b", "c", "d"} {
						require.NoError(t, journaled.Commit(ctx, checkpoint.Meta{Phase: "migrate"}, []checkpoint.Change[string, int]{{Key: k, Value: i + 2}}))
					}
					d.apply(t, cp)
					before, beforeJournal := cp.Bytes(), checkpointtest.Journal(cp)

					cfg := migrate.Config[string, int]{Phase: w.phase, Checkpoint: checkpointtest.Reopen(t, cp, checkpoint.WithJournal()), VolatileLegacy: w.volatile}
					cri := &migratetest.Implicit[string, int]{}
					for k, v := range map[string]int{"a": 1, "b": 2, "c": 3, "d": 4} {
						cri.Set(k, v) // four live pods
					}
					switch {
					case w.explicit:
						cfg.Legacy = &migratetest.Explicit[string, int]{}
					case w.name != "phase 3, no legacy":
						cfg.Legacy, cfg.Equal = cri, sameInt
					}
					s, err := migrate.New(cfg)
					require.NoError(t, err)
					defer s.Close()
					_, err = s.Restore(ctx)
					require.ErrorIs(t, err, d.is)
					if d.is == checkpoint.ErrNewerSchema {
						assert.Contains(t, err.Error(), "roll forward", "says how to recover")
					} else {
						assert.Contains(t, err.Error(), "restore-prev", "says how to recover")
						assert.Contains(t, err.Error(), "DiscardUnreadableCheckpoint", "names the opt-in")
					}
					assert.Equal(t, 0, s.Len(), "serves nothing")
					assert.ErrorIs(t, s.Put(ctx, "e", 5), migrate.ErrNotRestored, "hands nothing out")
					assert.Equal(t, before, cp.Bytes(), "the file is left as it was")
					assert.Equal(t, beforeJournal, checkpointtest.Journal(cp), "the journal is left as it was")
					assert.Empty(t, checkpointtest.Quarantined(cp), "nothing is moved aside")
				})
			}
		}
		t.Run("DiscardUnreadableCheckpoint serves what it can", func(t *testing.T) {
			cp := checkpoint.NewMemory[string, int]()
			checkpointtest.SetBytes(cp, badEntryFile(t, migrate.PhaseContract, map[string]int{"a": 1}, "b"))
			s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseContract, Checkpoint: checkpointtest.Reopen(t, cp), DiscardUnreadableCheckpoint: true})
			require.NoError(t, err)
			defer s.Close()
			r, err := s.Restore(ctx)
			require.NoError(t, err)
			assert.NotEmpty(t, r.Quarantined)
			assert.Equal(t, map[string]int{"a": 1}, collect(s))
		})
		t.Run("a file from an earlier boot is discarded whatever it holds", func(t *testing.T) {
			cp := checkpoint.NewMemory[string, int]()
			old, err := cp.Reopen(checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, sameEntry), checkpoint.WithBootID(func() (string, error) { return "boot-1", nil }))
			require.NoError(t, err)
			require.NoError(t, old.Save(ctx, checkpoint.Snapshot[string, int]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: map[string]int{"a": 1}}))
			now := checkpointtest.Reopen(t, cp, checkpoint.WithBootID(func() (string, error) { return "boot-2", nil }))
			s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseContract, Checkpoint: now})
			require.NoError(t, err)
			defer s.Close()
			r, err := s.Restore(ctx)
			require.NoError(t, err, "its state died with the reboot: there is nothing to protect")
			assert.NotEmpty(t, r.Stale)
			assert.Equal(t, 0, s.Len())
		})
	})
}

func sameEntry(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }

// TestPhase3ServesWhatLegacyHolds: with a legacy still configured, what it
// holds and the checkpoint lacks is in use, so phase 3 serves it, records
// it in the checkpoint and reports it; it never hands it out as free.
func TestPhase3ServesWhatLegacyHolds(t *testing.T) {
	t.Run("rule17", func(t *testing.T) {
		ctx := context.Background()
		t.Run("an observing legacy", func(t *testing.T) {
			cri := &migratetest.Implicit[string, int]{}
			for k, v := range map[string]int{"a": 1, "b": 2, "c": 3} {
				cri.Set(k, v)
			}
			cp := checkpoint.NewMemory[string, int]()
			require.NoError(t, cp.Save(ctx, checkpoint.Snapshot[string, int]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: map[string]int{"a": 1}}))
			s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseContract, Legacy: cri, Checkpoint: checkpointtest.Reopen(t, cp), Equal: sameInt})
			require.NoError(t, err)
			defer s.Close()
			r, err := s.Restore(ctx)
			require.NoError(t, err)
			assert.Equal(t, map[string]int{"a": 1, "b": 2, "c": 3}, collect(s), "b and c are in use")
			assert.ElementsMatch(t, []string{"b", "c"}, r.Backfilled)
			snap, err := checkpointtest.Reopen(t, cp).Load(ctx)
			require.NoError(t, err)
			assert.Equal(t, map[string]int{"a": 1, "b": 2, "c": 3}, snap.Entries, "and recorded")
		})
		t.Run("a legacy the Store wrote until phase 2", func(t *testing.T) {
			reg := &migratetest.Explicit[string, int]{}
			reg.Replace(map[string]int{"a": 1, "b": 2})
			cp := checkpoint.NewMemory[string, int]()
			require.NoError(t, cp.Save(ctx, checkpoint.Snapshot[string, int]{Meta: checkpoint.Meta{Phase: "migrate"}, Entries: map[string]int{"a": 1}}))
			s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseContract, Legacy: reg, Checkpoint: checkpointtest.Reopen(t, cp)})
			require.NoError(t, err)
			defer s.Close()
			r, err := s.Restore(ctx)
			require.NoError(t, err)
			assert.Equal(t, map[string]int{"a": 1, "b": 2}, collect(s))
			assert.Equal(t, []string{"b"}, r.Backfilled)
		})
		t.Run("a legacy phase 3 has left behind is not evidence", func(t *testing.T) {
			reg := &migratetest.Explicit[string, int]{}
			reg.Replace(map[string]int{"a": 1, "b": 2}) // phase 3 deleted b; legacy never heard
			cp := checkpoint.NewMemory[string, int]()
			require.NoError(t, cp.Save(ctx, checkpoint.Snapshot[string, int]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: map[string]int{"a": 1}}))
			s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseContract, Legacy: reg, Checkpoint: checkpointtest.Reopen(t, cp)})
			require.NoError(t, err)
			defer s.Close()
			r, err := s.Restore(ctx)
			require.NoError(t, err)
			assert.Equal(t, map[string]int{"a": 1}, collect(s))
			assert.Empty(t, r.Backfilled)
			require.NotNil(t, r.Shadow)
			assert.Equal(t, []string{"b"}, r.Shadow.OnlyShadow, "reported, as a difference with a legacy known to be stale")
		})
	})
}

// TestCheckpointBehindLosesOnValues: where the checkpoint is marked behind
// legacy, legacy's value wins wherever the two differ in what legacy can
// see, for every kind of legacy and whatever Merge says.
func TestCheckpointBehindLosesOnValues(t *testing.T) {
	t.Run("rule7,rule19", func(t *testing.T) {
		ctx := context.Background()
		for _, kind := range []string{"observing", "explicit with PreferCheckpoint"} {
			for _, p := range []migrate.Phase{migrate.PhaseExpand, migrate.PhaseMigrate} {
				t.Run(fmt.Sprintf("%s/phase %d", kind, p), func(t *testing.T) {
					cp := checkpoint.NewMemory[string, int]()
					var legacy source.Reader[string, int]
					var set func(k string, v int)
					var merge func(string, int, int) int
					if kind == "observing" {
						cri := &migratetest.Implicit[string, int]{}
						legacy, set = cri, cri.Set
					} else {
						reg := &migratetest.Explicit[string, int]{}
						legacy, set, merge = reg, func(k string, v int) { require.NoError(t, reg.Put(ctx, k, v)) }, migrate.PreferCheckpoint[string, int]
					}
					start := func(p migrate.Phase) *migrate.Store[string, int] {
						s, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: legacy, Checkpoint: checkpointtest.Reopen(t, cp), Equal: sameInt, Merge: merge})
						require.NoError(t, err)
						_, err = s.Restore(ctx)
						require.NoError(t, err)
						return s
					}
					s := start(migrate.PhaseExpand)
					require.NoError(t, s.Put(ctx, "k", 1))
					set("k", 1) // the outside world (for an observing legacy)
					require.NoError(t, s.Close())
					s = start(migrate.PhaseLegacy) // this library's phase 0: it marks the checkpoint
					require.NoError(t, s.Put(ctx, "k", 2))
					set("k", 2)
					require.NoError(t, s.Close())
					s = start(p)
					defer s.Close()
					v, _ := s.Get("k")
					assert.Equal(t, 2, v, "the value phase 0 acknowledged")
				})
			}
		}
	})
}

// TestObservingLegacyNeedsEqual: a legacy that only observes records less
// than the checkpoint, so the Store must be told what it can see; the
// default, DeepEqual, would report every entry diverged on every restore.
func TestObservingLegacyNeedsEqual(t *testing.T) {
	t.Run("rule18", func(t *testing.T) {
		for _, p := range phases {
			_, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: &migratetest.Implicit[string, int]{}, Checkpoint: checkpoint.NewMemory[string, int]()})
			require.ErrorIs(t, err, migrate.ErrInvalidConfig, "phase %d", p)
			assert.Contains(t, err.Error(), "Config.Equal")
		}
		// Without a checkpoint nothing is compared (the old binary's phase 0).
		_, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseLegacy, Legacy: &migratetest.Implicit[string, int]{}})
		require.NoError(t, err)
		// A legacy the Store writes holds whole values: DeepEqual is right.
		_, err = migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: &migratetest.Explicit[string, int]{}, Checkpoint: checkpoint.NewMemory[string, int]()})
		require.NoError(t, err)
	})
}

// TestOutageIsNotAPhase0Run: a phase-2 run that could not list legacy
// marks the checkpoint behind legacy, and the mark says why; phase 3's
// refusal says so too; one healing restart clears it, and its report says
// the state after healing.
func TestOutageIsNotAPhase0Run(t *testing.T) {
	t.Run("rule7,rule26", func(t *testing.T) {
		ctx := context.Background()
		cri := &migratetest.Implicit[string, int]{}
		cri.Set("a", 1)
		path := filepath.Join(t.TempDir(), "ipam.json")
		start := func(p migrate.Phase) (*migrate.Store[string, int], migrate.Report[string], error) {
			f, err := checkpoint.Open[string, int](ctx, path)
			require.NoError(t, err)
			s, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: cri, Checkpoint: f, Equal: sameInt})
			require.NoError(t, err)
			r, err := s.Restore(ctx)
			if err != nil {
				s.Close()
				return nil, r, err
			}
			return s, r, nil
		}
		s, _, err := start(migrate.PhaseMigrate)
		require.NoError(t, err)
		require.NoError(t, s.Put(ctx, "a", 1))
		require.NoError(t, s.Close())

		cri.FailList(1, errors.New("connection refused"))
		s, r, err := start(migrate.PhaseMigrate)
		require.NoError(t, err, "phase 2 serves the checkpoint through an outage")
		assert.Contains(t, r.Behind, "could not read legacy")
		assert.NotContains(t, r.Behind, "phase 0")
		require.NoError(t, s.Close())

		f, err := checkpoint.Open[string, int](ctx, path)
		require.NoError(t, err)
		snap, err := f.Load(ctx)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		assert.Equal(t, "migrate", snap.Meta.Phase, "the file records the phase that ran")
		assert.Contains(t, snap.Meta.Behind, "could not read legacy")

		_, _, err = start(migrate.PhaseContract)
		require.ErrorIs(t, err, migrate.ErrStale)
		assert.NotContains(t, err.Error(), "phase 0", "no phase-0 run happened")
		assert.Contains(t, err.Error(), "could not read legacy")

		s, r, err = start(migrate.PhaseMigrate) // the runtime is back
		require.NoError(t, err)
		assert.NotEmpty(t, r.Stale, "what it found")
		assert.Empty(t, r.Behind, "the state after healing: the gate clears with this restart")
		require.NoError(t, s.Close())
		s, _, err = start(migrate.PhaseContract)
		require.NoError(t, err)
		require.NoError(t, s.Close())
	})
}

// TestPhase0MarkSaysPhase0: this library's phase 0 marks the checkpoint as
// a phase-0 run, and phase 3's refusal says that.
func TestPhase0MarkSaysPhase0(t *testing.T) {
	t.Run("rule26", func(t *testing.T) {
		ctx := context.Background()
		n := newRegistryNode(t)
		n.newPhase0 = true
		n.mustStart(migrate.PhaseMigrate)
		n.put("a", 1)
		r := n.mustStart(migrate.PhaseLegacy)
		assert.Empty(t, r.Behind, "a phase-0 run that has written nothing leaves nothing to distrust")
		n.put("b", 2) // marks b, before legacy has it
		snap, err := checkpointtest.Reopen(t, n.cp).Load(ctx)
		require.NoError(t, err)
		assert.Equal(t, "legacy", snap.Meta.Phase)
		assert.Contains(t, snap.Meta.Behind, "phase 0")
		assert.Contains(t, snap.Meta.Behind, `"b"`, "the mark names what phase 0 wrote")
		assert.NotContains(t, snap.Meta.Behind, `"a"`, "and only that")
		_, err = n.start(migrate.PhaseContract)
		require.ErrorIs(t, err, migrate.ErrStale)
		assert.Contains(t, err.Error(), "phase 0")
	})
}

// unencodableKey has a field JSON cannot read back.
type unencodableKey struct {
	ID    string
	inner int //nolint:unused // the unexported field is the point
}

type pointerKey struct{ ID *string }

type interfaceKey struct{ ID any }

// TestKeyMistakesAtStart: a key type that cannot read back from JSON is
// refused when the checkpoint is opened or the Store is built, not at the
// first write (the first CNI ADD).
func TestKeyMistakesAtStart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	_, err := checkpoint.Open[unencodableKey, int](ctx, filepath.Join(dir, "a.json"))
	require.ErrorIs(t, err, checkpoint.ErrInvalidKeyType)
	assert.Contains(t, err.Error(), "unexported")
	_, err = checkpoint.Open[pointerKey, int](ctx, filepath.Join(dir, "b.json"))
	require.ErrorIs(t, err, checkpoint.ErrInvalidKeyType)
	assert.Contains(t, err.Error(), "pointer")
	_, err = checkpoint.Open[interfaceKey, int](ctx, filepath.Join(dir, "c.json"))
	require.ErrorIs(t, err, checkpoint.ErrInvalidKeyType)
	assert.Contains(t, err.Error(), "interface")

	_, err = migrate.New(migrate.Config[pointerKey, int]{Phase: migrate.PhaseContract, Checkpoint: checkpoint.NewMemory[pointerKey, int]()})
	require.ErrorIs(t, err, migrate.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "pointer")
}

// TestPhase3BackfillFromAnExplicitLegacy: phase 3 serves what an explicit
// legacy holds and the checkpoint lacks exactly when legacy is known to
// hold every acknowledged write (rule 17): a file moved aside whose header
// says phase 2 wrote it can say so; one from an earlier boot cannot vouch
// for legacy's state of then, which died with it.
func TestPhase3BackfillFromAnExplicitLegacy(t *testing.T) {
	t.Run("rule17", func(t *testing.T) {
		ctx := context.Background()
		reg := map[string]int{"a": 1, "b": 2, "c": 3}
		t.Run("moved aside, its header says phase 2", func(t *testing.T) {
			w := newWorld(true, reg)
			checkpointtest.SetBytes(w.cp, badEntryFile(t, migrate.PhaseMigrate, map[string]int{"a": 1}, "b"))
			s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseContract, DiscardUnreadableCheckpoint: true})
			r, err := s.Restore(ctx)
			require.NoError(t, err)
			assert.NotEmpty(t, r.Quarantined)
			assert.Equal(t, reg, collect(s), "b, whose record was lost, is in use: legacy still holds it")
			assert.ElementsMatch(t, []string{"b", "c"}, r.Backfilled)
		})
		t.Run("from an earlier boot", func(t *testing.T) {
			for _, by := range []migrate.Phase{migrate.PhaseExpand, migrate.PhaseContract} {
				w := newWorld(true, reg)
				w.saveCheckpoint(t, by, map[string]int{"a": 1}, "boot-0")
				s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseContract, Checkpoint: checkpointtest.Reopen(t, w.cp, checkpoint.WithBootID(func() (string, error) { return "boot-1", nil }))})
				r, err := s.Restore(ctx)
				require.NoError(t, err)
				assert.Empty(t, collect(s), "written by phase %d: the state of that boot died, legacy's too", by)
				assert.Empty(t, r.Backfilled)
				require.NoError(t, s.Close())
			}
		})
	})
}
