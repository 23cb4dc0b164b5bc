package migrate_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
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
