package migrate_test

import (
	"context"
	"errors"
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

// TestQuickStartKeepsEveryVM is issue 41's path 5: the README's Quick
// start, pasted as written (a source.Map registry, nothing said of its
// kind), restarted from phase 1 into phase 2 with the fresh, empty registry
// a restarted proxy has. The node: the VMs registered before the restart
// still run, so every one must be served.
func TestQuickStartKeepsEveryVM(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	start := func(p migrate.Phase, registry *source.Map[string, string]) *migrate.Store[string, string] {
		file, err := checkpoint.Open[string, string](ctx, path)
		require.NoError(t, err)
		store, err := migrate.New(migrate.Config[string, string]{Phase: p, Legacy: registry, Checkpoint: file})
		require.NoError(t, err)
		_, err = store.Restore(ctx)
		require.NoError(t, err)
		return store
	}
	var registry source.Map[string, string]
	registry.Set("vm-1", "/run/vm-1.sock")
	s := start(migrate.PhaseExpand, &registry)
	require.NoError(t, s.Put(ctx, "vm-2", "/run/vm-2.sock"))
	require.NoError(t, s.Close())

	var fresh source.Map[string, string] // the registry after the restart: empty
	s = start(migrate.PhaseMigrate, &fresh)
	defer s.Close()
	for _, vm := range []string{"vm-1", "vm-2"} {
		_, ok := s.Get(vm)
		assert.True(t, ok, "%s still runs on the node and must be served", vm)
	}
	assert.Equal(t, 2, fresh.Len(), "the registry is refilled")
}

// writerOfUnknownKind takes writes and cannot say whether it survives a
// restart.
type writerOfUnknownKind struct{ m map[string]int }

func (w *writerOfUnknownKind) List(context.Context) (map[string]int, error) { return w.m, nil }
func (w *writerOfUnknownKind) Put(_ context.Context, k string, v int) error { w.m[k] = v; return nil }
func (w *writerOfUnknownKind) Delete(_ context.Context, k string) error     { delete(w.m, k); return nil }

// TestNewRefusesALegacyOfUnknownKind: the kind of a legacy comes from the
// source, and New does not guess one it cannot tell; the error names the
// choice. Stating it makes the same legacy acceptable.
func TestNewRefusesALegacyOfUnknownKind(t *testing.T) {
	legacy := &writerOfUnknownKind{m: map[string]int{}}
	for p := migrate.PhaseLegacy; p <= migrate.PhaseContract; p++ {
		_, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: legacy, Checkpoint: checkpoint.NewMemory[string, int]()})
		require.ErrorIs(t, err, migrate.ErrInvalidConfig, "phase %d", p)
		assert.Contains(t, err.Error(), "source.Durable")
		assert.Contains(t, err.Error(), "source.Volatile")
		for _, k := range []source.Kind{source.Durable, source.Volatile} {
			_, err = migrate.New(migrate.Config[string, int]{Phase: p, Legacy: legacy, LegacyKind: k, Checkpoint: checkpoint.NewMemory[string, int]()})
			if k == source.Volatile && p == migrate.PhaseLegacy {
				continue // phase 0 over a volatile legacy is allowed; checked elsewhere
			}
			assert.NoError(t, err, "phase %d, %s", p, k)
		}
	}
	_, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: legacy, LegacyKind: source.Observing, Checkpoint: checkpoint.NewMemory[string, int]()})
	assert.ErrorIs(t, err, migrate.ErrInvalidConfig, "a legacy the Store writes cannot be observing")
	_, err = migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: legacy, LegacyKind: source.Durable, VolatileLegacy: true, Checkpoint: checkpoint.NewMemory[string, int]()})
	assert.ErrorIs(t, err, migrate.ErrInvalidConfig, "two kinds stated")
}

// TestKindOf: a source says what it is.
func TestKindOf(t *testing.T) {
	assert.Equal(t, source.Volatile, source.KindOf[string, int](&source.Map[string, int]{}))
	assert.Equal(t, source.Observing, source.KindOf[string, int](source.Func[string, int](nil)))
	assert.Equal(t, source.Unknown, source.KindOf[string, int](&writerOfUnknownKind{}))
	assert.Equal(t, "volatile", source.Volatile.String())
}

// TestRepairedFileOverAVolatileRegistry is issue 41's path 2: phase 2 over
// a registry in memory, six Puts, a journal record damaged, and the
// operator runs repair-journal --drop-damaged-records, which marks what it
// writes. The restart with a fresh registry must serve what the repaired
// file holds, not the registry's emptiness, which is never evidence, and
// must not save an empty state over it.
func TestRepairedFileOverAVolatileRegistry(t *testing.T) {
	ctx := context.Background()
	cp := checkpoint.NewMemory[string, int]()
	kept := map[string]int{"vm-1": 1, "vm-2": 2} // what the repair kept: the records before the damage
	require.NoError(t, cp.Save(ctx, checkpoint.Snapshot[string, int]{
		Meta:    checkpoint.Meta{Phase: migrate.PhaseMigrate.String(), Behind: "repaired by phaseshift repair-journal, which dropped the damaged record (bytes 310-402) and 3 records after it"},
		Entries: kept,
	}))
	for _, p := range []migrate.Phase{migrate.PhaseExpand, migrate.PhaseMigrate} {
		var fresh source.Map[string, int]
		s, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: &fresh, Checkpoint: checkpointtest.Reopen(t, cp)})
		require.NoError(t, err)
		rep, err := s.Restore(ctx)
		require.NoError(t, err, "phase %d", p)
		for k, v := range kept {
			got, ok := s.Get(k)
			assert.True(t, ok && got == v, "phase %d: %s, which the repaired file holds, must be served: %s", p, k, rep)
		}
		if p == migrate.PhaseExpand {
			assert.NotEmpty(t, rep.Stale, "the first restart reports that the file may lack commits")
		}
		require.NoError(t, s.Close())
		snap, err := checkpointtest.Reopen(t, cp).Load(ctx)
		require.NoError(t, err)
		assert.Len(t, snap.Entries, len(kept), "phase %d: nothing emptier is saved over the repaired file", p)
	}
}

// TestRollbackToPhase0ByKind holds each sentence of the README's "What a
// rollback to phase 0 costs, by the kind of legacy".
func TestRollbackToPhase0ByKind(t *testing.T) {
	ctx := context.Background()
	start := func(t *testing.T, cfg migrate.Config[string, int]) (*migrate.Store[string, int], migrate.Report[string], error) {
		t.Helper()
		s, err := migrate.New(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		r, err := s.Restore(ctx)
		return s, r, err
	}
	t.Run("durable", func(t *testing.T) {
		var reg source.Map[string, int] // kept by the test across restarts: a file
		cp := checkpoint.NewMemory[string, int]()
		cfg := func(p migrate.Phase) migrate.Config[string, int] {
			return migrate.Config[string, int]{Phase: p, Legacy: &reg, LegacyKind: source.Durable, Checkpoint: checkpointtest.Reopen(t, cp)}
		}
		s, _, err := start(t, cfg(migrate.PhaseMigrate))
		require.NoError(t, err)
		require.NoError(t, s.Put(ctx, "a", 1))
		require.NoError(t, s.Put(ctx, "b", 2))
		require.NoError(t, s.Close())
		s, _, err = start(t, cfg(migrate.PhaseLegacy))
		require.NoError(t, err)
		require.NoError(t, s.Put(ctx, "c", 3)) // legacy decides c, and holds it
		require.NoError(t, s.Delete(ctx, "a")) // never comes back
		require.NoError(t, s.Close())
		s, _, err = start(t, cfg(migrate.PhaseMigrate))
		require.NoError(t, err)
		assert.Equal(t, map[string]int{"b": 2, "c": 3}, collect(s), "every entry; a, which phase 0 deleted, never comes back")
		require.NoError(t, s.Close())

		// The old binary writes legacy; phase 0 after it finds legacy
		// differing and marks the whole file: phase 3 refuses.
		reg.Set("d", 4)
		s, r, err := start(t, cfg(migrate.PhaseLegacy))
		require.NoError(t, err)
		assert.Contains(t, r.Behind, "phase 0")
		require.NoError(t, s.Close())
		_, _, err = start(t, cfg(migrate.PhaseContract))
		require.ErrorIs(t, err, migrate.ErrStale)
	})
	t.Run("volatile", func(t *testing.T) {
		cp := checkpoint.NewMemory[string, int]()
		cfg := func(p migrate.Phase) migrate.Config[string, int] {
			return migrate.Config[string, int]{Phase: p, Legacy: &source.Map[string, int]{}, Checkpoint: checkpointtest.Reopen(t, cp)} // a fresh registry: it died with the process
		}
		s, _, err := start(t, cfg(migrate.PhaseMigrate))
		require.NoError(t, err)
		for k, v := range map[string]int{"a": 1, "b": 2, "c": 3} {
			require.NoError(t, s.Put(ctx, k, v))
		}
		require.NoError(t, s.Close())
		s, _, err = start(t, cfg(migrate.PhaseLegacy))
		require.NoError(t, err)
		require.NoError(t, s.Put(ctx, "b", 20)) // written to the registry that dies
		require.NoError(t, s.Delete(ctx, "c"))
		require.NoError(t, s.Close())
		s, r, err := start(t, cfg(migrate.PhaseMigrate))
		require.NoError(t, err)
		assert.Equal(t, map[string]int{"a": 1}, collect(s), "every entry phase 0 did not write; c never comes back; b is not guessed")
		var lost []string
		for _, e := range r.Errors {
			var le *migrate.LostError[string]
			if errors.As(e, &le) {
				lost = append(lost, le.Key)
			}
		}
		assert.ElementsMatch(t, []string{"b", "c"}, lost, "what phase 0 wrote to the registry is named")
	})
	t.Run("observing", func(t *testing.T) {
		cri := &migratetest.Implicit[string, int]{}
		cp := checkpoint.NewMemory[string, int]()
		cfg := func(p migrate.Phase) migrate.Config[string, int] {
			return migrate.Config[string, int]{Phase: p, Legacy: cri, Equal: sameInt, Checkpoint: checkpointtest.Reopen(t, cp)}
		}
		s, _, err := start(t, cfg(migrate.PhaseMigrate))
		require.NoError(t, err)
		for k, v := range map[string]int{"a": 1, "b": 2} {
			require.NoError(t, s.Put(ctx, k, v))
			cri.Set(k, v)
		}
		require.NoError(t, s.Put(ctx, "m", 5)) // an ADD the runtime has not listed yet
		require.NoError(t, s.Close())
		s, _, err = start(t, cfg(migrate.PhaseLegacy))
		require.NoError(t, err)
		require.NoError(t, s.Delete(ctx, "a")) // the runtime removes it
		cri.Remove("a")
		require.NoError(t, s.Put(ctx, "n", 6)) // the runtime lists it
		cri.Set("n", 6)
		require.NoError(t, s.Close())
		s, r, err := start(t, cfg(migrate.PhaseMigrate))
		require.NoError(t, err)
		assert.Equal(t, map[string]int{"b": 2, "m": 5, "n": 6}, collect(s), "what the checkpoint holds and the runtime lists, the runtime's word on what phase 0 wrote, and m kept")
		assert.Equal(t, []string{"m"}, r.Orphaned, "m, which the runtime does not list yet, is kept as an orphan")
	})
}
