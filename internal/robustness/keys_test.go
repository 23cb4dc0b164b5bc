package robustness_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// stampKey holds a time; from time.Now() it carries a monotonic reading.
type stampKey struct {
	Name string    `json:"name"`
	At   time.Time `json:"at"`
}

// slotKey has an unexported field, which JSON does not store.
type slotKey struct {
	Name string `json:"name"`
	slot int
}

// TestStoreRefusesKeysThatDoNotReadBack replays the three
// observations through a Store on a real file, in each phase that writes
// the checkpoint: Put v1, Put v2, Delete and Put of another key, then a
// restart. What the restart serves must be exactly what the acknowledged
// writes left; a key that does not read back as itself must be refused
// with checkpoint.ErrEncode at its first Put, with memory, the file and
// legacy unchanged.
//
// How it failed before the fix, in phases 2 and 3 (phase 1 restores from
// legacy, a Go map here, and only the acknowledgement was wrong): every
// write was acknowledged; after the restart the string key "pod-\xff" was
// back as "pod-\ufffd" with v1 although it had been deleted; the deleted
// time key was back with v1; slotKey{"a", slot: 1}, deleted, was back as
// slotKey{"a"} with v1, over the acknowledged "x".
func TestStoreRefusesKeysThatDoNotReadBack(t *testing.T) {
	for _, p := range []migrate.Phase{migrate.PhaseExpand, migrate.PhaseMigrate, migrate.PhaseContract} {
		t.Run(p.String(), func(t *testing.T) {
			t.Run("invalid UTF-8", func(t *testing.T) {
				replay(t, p, "pod-\xff", "other", "pod-1")
			})
			t.Run("monotonic time", func(t *testing.T) {
				replay(t, p, stampKey{"a", time.Now()}, stampKey{"b", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, stampKey{"c", time.Now().UTC()})
			})
			t.Run("unexported field", func(t *testing.T) {
				// Refused when the Store is built now, before any write
				// (checkpoint.CheckKeyType): the first ADD can no longer be
				// the first to hear of it.
				_, err := checkpoint.Open[slotKey, string](context.Background(), filepath.Join(t.TempDir(), "state.json"))
				require.ErrorIs(t, err, checkpoint.ErrInvalidKeyType)
				_, err = migrate.New(migrate.Config[slotKey, string]{Phase: p, Legacy: &migratetest.Explicit[slotKey, string]{}, Checkpoint: checkpoint.NewMemory[slotKey, string]()})
				require.ErrorIs(t, err, migrate.ErrInvalidConfig)
				_ = slotKey{slot: 1}.slot
			})
		})
	}
}

// replay runs Put(bad, v1), Put(bad, v2), Put(good, x), Delete(bad),
// Put(other, y) through a Store in phase p, keeping a model of what was
// acknowledged, then restarts and compares. good is a key that collides
// with bad if bad is ever stored.
func replay[K comparable](t *testing.T, p migrate.Phase, bad, good, other K) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	legacy := &migratetest.Explicit[K, string]{}
	open := func() *migrate.Store[K, string] {
		cp, err := checkpoint.Open[K, string](ctx, path)
		require.NoError(t, err)
		s, err := migrate.New(migrate.Config[K, string]{Phase: p, Legacy: legacy, Checkpoint: cp})
		require.NoError(t, err)
		_, err = s.Restore(ctx)
		require.NoError(t, err)
		return s
	}
	s := open()
	model := map[K]string{}
	badAcked := false
	ack := func(err error, k K, v string, del bool) {
		t.Helper()
		badAcked = badAcked || (err == nil && k == bad && !del)
		if err != nil {
			assert.ErrorIs(t, err, checkpoint.ErrEncode)
			assert.ErrorIs(t, err, migrate.ErrCheckpointWrite)
			return
		}
		if del {
			delete(model, k)
		} else {
			model[k] = v
		}
	}
	ack(s.Put(ctx, bad, "v1"), bad, "v1", false)
	ack(s.Put(ctx, bad, "v2"), bad, "v2", false)
	ack(s.Put(ctx, good, "x"), good, "x", false)
	ack(s.Delete(ctx, bad), bad, "", true)
	ack(s.Put(ctx, other, "y"), other, "y", false)
	assert.False(t, badAcked, "a write of a key that does not read back as itself was acknowledged")
	assert.Equal(t, model, collect(s), "memory holds exactly the acknowledged writes")
	require.NoError(t, s.Close())

	s = open()
	defer s.Close()
	assert.Equal(t, model, collect(s), "the restart serves exactly what was acknowledged")
	if p.WritesLegacy() {
		assert.Equal(t, model, legacy.Snapshot(), "legacy holds exactly what was acknowledged")
	}
}

// saveOnly is a checkpoint without Commit, so that the Store saves whole
// snapshots with Save.
type saveOnly[K comparable, V any] struct{ f *checkpoint.File[K, V] }

func (s saveOnly[K, V]) Load(ctx context.Context) (checkpoint.Snapshot[K, V], error) {
	return s.f.Load(ctx)
}

func (s saveOnly[K, V]) Save(ctx context.Context, snap checkpoint.Snapshot[K, V]) error {
	return s.f.Save(ctx, snap)
}

func (s saveOnly[K, V]) Quarantine(ctx context.Context) (string, error) { return s.f.Quarantine(ctx) }

func (s saveOnly[K, V]) BootID() string { return s.f.BootID() }

func (s saveOnly[K, V]) Journal() checkpoint.JournalStatus { return s.f.Journal() }

// TestStoreRefusesBadKeysWithSaveOnly runs concurrent good writes and
// writes of a key that does not read back through a Store whose checkpoint
// has no Commit: the Store finds the bad write from the key the
// *checkpoint.EncodeError carries (a Save has no change positions), fails
// it alone, and saves the others.
func TestStoreRefusesBadKeysWithSaveOnly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	f, err := checkpoint.Open[string, string](ctx, path)
	require.NoError(t, err)
	s, err := migrate.New(migrate.Config[string, string]{Phase: migrate.PhaseContract, Checkpoint: saveOnly[string, string]{f}})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Restore(ctx)
	require.NoError(t, err)

	const n = 40
	errs := make(chan error, n)
	for i := range n {
		go func() {
			if i%4 == 3 {
				errs <- s.Put(ctx, "bad-\xff"+string(rune('a'+i)), "x")
			} else {
				errs <- s.Put(ctx, "good-"+string(rune('a'+i)), "x")
			}
		}()
	}
	failed := 0
	for range n {
		if err := <-errs; err != nil {
			require.ErrorIs(t, err, checkpoint.ErrEncode)
			failed++
		}
	}
	assert.Equal(t, n/4, failed, "exactly the bad writes fail")
	assert.Len(t, collect(s), n-n/4)
	assert.Equal(t, collect(s), loadFile(t, path))
}
