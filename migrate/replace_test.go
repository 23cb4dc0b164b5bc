package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// committing is a checkpoint that records the changes of every Commit.
type committing[V any] struct {
	*checkpoint.Memory[string, V]
	mu      sync.Mutex // guards commits
	commits [][]checkpoint.Change[string, V]
}

func (c *committing[V]) Commit(ctx context.Context, m checkpoint.Meta, ch []checkpoint.Change[string, V]) error {
	c.mu.Lock()
	c.commits = append(c.commits, append([]checkpoint.Change[string, V](nil), ch...))
	c.mu.Unlock()
	return c.Memory.Commit(ctx, m, ch)
}

// changedKeys returns the keys of the last commit's changes, a deleted
// key as "-key".
func (c *committing[V]) changedKeys(t *testing.T) []string {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.NotEmpty(t, c.commits)
	var keys []string
	for _, ch := range c.commits[len(c.commits)-1] {
		if ch.Delete {
			keys = append(keys, "-"+ch.Key)
		} else {
			keys = append(keys, ch.Key)
		}
	}
	return keys
}

func (c *committing[V]) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.commits)
}

// TestReplace: in every phase, with either kind of legacy, Replace makes
// the served state the snapshot in one commit, which carries only what
// changed (the checkpoint's changes and legacy's writes), and every side
// the phase writes holds it.
func TestReplace(t *testing.T) {
	ctx := context.Background()
	start := map[string]int{"a": 1, "b": 2, "c": 3}
	want := map[string]int{"a": 1, "b": 20, "d": 4}
	for _, p := range phases {
		for _, explicit := range []bool{false, true} {
			t.Run(fmt.Sprintf("phase%d/explicit=%v", p, explicit), func(t *testing.T) {
				w := newWorld(explicit, start)
				w.saveCheckpoint(t, migrate.PhaseMigrate, start, "")
				cp := &committing[int]{Memory: checkpointtest.Reopen(t, w.cp)}
				s := w.open(t, migrate.Config[string, int]{Phase: p, Checkpoint: cp})
				_, err := s.Restore(ctx)
				require.NoError(t, err)
				commits, legacyWrites := cp.count(), s.Stats().LegacyWrites

				require.NoError(t, s.Replace(ctx, maps.Clone(want)))
				assert.Equal(t, want, collect(s))
				assert.Equal(t, uint64(1), s.Stats().Updates, "counted as an Update")
				if p.WritesCheckpoint() {
					require.Equal(t, commits+1, cp.count(), "one commit")
					assert.ElementsMatch(t, []string{"b", "-c", "d"}, cp.changedKeys(t), "only what changed")
				}
				if explicit && p.WritesLegacy() {
					assert.Equal(t, want, w.impl.Snapshot())
					assert.Equal(t, uint64(3), s.Stats().LegacyWrites-legacyWrites, "a Put of b and d, a Delete of c")
				} else {
					assert.Equal(t, legacyWrites, s.Stats().LegacyWrites, "legacy is not written")
				}
			})
		}
	}
}

// TestReplaceWithWhatIsServedWritesNothing: a Replace with the served
// state makes no checkpoint save and no legacy write, for a value == can
// compare, for one it cannot (a slice: reflect.DeepEqual), and for an
// interface holding a slice, which == would panic on.
func TestReplaceWithWhatIsServedWritesNothing(t *testing.T) {
	t.Run("int", func(t *testing.T) {
		replaceSame(t, map[string]int{"a": 1, "b": 2}, func(m map[string]int) map[string]int { return maps.Clone(m) })
	})
	t.Run("struct", func(t *testing.T) {
		type alloc struct {
			IP    string
			Ifc   string
			Stamp int64
		}
		replaceSame(t, map[string]alloc{"a": {"10.0.0.1", "eth0", 1}}, func(m map[string]alloc) map[string]alloc {
			out := map[string]alloc{}
			for k, v := range m {
				out[k] = alloc{IP: strings.Clone(v.IP), Ifc: strings.Clone(v.Ifc), Stamp: v.Stamp}
			}
			return out
		})
	})
	t.Run("slice", func(t *testing.T) {
		replaceSame(t, map[string][]int{"a": {1, 2}}, func(m map[string][]int) map[string][]int {
			out := map[string][]int{}
			for k, v := range m {
				out[k] = append([]int(nil), v...)
			}
			return out
		})
	})
	t.Run("interface", func(t *testing.T) {
		replaceSame(t, map[string]any{"a": []any{"x"}}, func(m map[string]any) map[string]any {
			return map[string]any{"a": []any{"x"}}
		})
	})
}

func replaceSame[V any](t *testing.T, start map[string]V, copyOf func(map[string]V) map[string]V) {
	t.Helper()
	ctx := context.Background()
	legacy := newTypedLegacy(start)
	mem := checkpoint.NewMemory[string, V]()
	require.NoError(t, mem.Save(ctx, checkpoint.Snapshot[string, V]{Meta: checkpoint.Meta{Phase: migrate.PhaseMigrate.String()}, Entries: start}))
	cp := &committing[V]{Memory: checkpointtest.Reopen(t, mem)}
	s, err := migrate.New(migrate.Config[string, V]{Phase: migrate.PhaseMigrate, Legacy: legacy, Checkpoint: cp})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Restore(ctx)
	require.NoError(t, err)
	saves, legacyWrites := checkpointtest.Saves(mem), s.Stats().LegacyWrites
	require.NoError(t, s.Replace(ctx, copyOf(start)))
	assert.Zero(t, cp.count(), "no commit")
	assert.Equal(t, saves, checkpointtest.Saves(mem), "no save")
	assert.Equal(t, legacyWrites, s.Stats().LegacyWrites, "no legacy write")
	got := map[string]V{}
	for k, v := range s.All() {
		got[k] = v
	}
	assert.Equal(t, start, got)
}

// typedLegacy is an explicit legacy of any value type.
type typedLegacy[V any] struct {
	mu sync.Mutex // guards m
	m  map[string]V
}

// LegacyKind: it stands for a file.
func (l *typedLegacy[V]) LegacyKind() source.Kind { return source.Durable }

func newTypedLegacy[V any](start map[string]V) *typedLegacy[V] {
	return &typedLegacy[V]{m: maps.Clone(start)}
}

func (l *typedLegacy[V]) List(context.Context) (map[string]V, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.m), nil
}

func (l *typedLegacy[V]) Put(_ context.Context, k string, v V) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[k] = v
	return nil
}

func (l *typedLegacy[V]) Delete(_ context.Context, k string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, k)
	return nil
}

// TestReplaceEmpties: a Replace with nil or an empty map deletes every
// entry, from every side.
func TestReplaceEmpties(t *testing.T) {
	ctx := context.Background()
	for _, entries := range []map[string]int{nil, {}} {
		w, s := restored(t, migrate.PhaseMigrate, true, map[string]int{"a": 1, "b": 2})
		require.NoError(t, s.Replace(ctx, entries))
		assert.Empty(t, collect(s))
		assert.Empty(t, w.impl.Snapshot())
		snap, err := w.checkpointEntries(t)
		require.NoError(t, err)
		assert.Empty(t, snap.Entries)
	}
}

// TestReplaceWithMatch: with Match, an entry of the snapshot under another
// key of a served entry re-keys it (legacy loses the old key), a served
// entry whose identity the snapshot lacks is deleted, and two keys of one
// entry in the snapshot fail the Replace before anything is written.
func TestReplaceWithMatch(t *testing.T) {
	ctx := context.Background()
	start := map[string]int{"pod1/unknown": 1, "pod2/eth0": 2}
	w := newWorld(true, start)
	w.saveCheckpoint(t, migrate.PhaseMigrate, start, "")
	match := func(k string) string { pod, _, _ := cutSlash(k); return pod }
	s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Match: match})
	_, err := s.Restore(ctx)
	require.NoError(t, err)

	err = s.Replace(ctx, map[string]int{"pod1/eth0": 1, "pod1/eth1": 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "match the same entry")
	assert.Equal(t, start, collect(s), "nothing written")
	assert.Equal(t, start, w.impl.Snapshot())

	require.NoError(t, s.Replace(ctx, map[string]int{"pod1/eth0": 1, "pod3/eth0": 3}))
	want := map[string]int{"pod1/eth0": 1, "pod3/eth0": 3}
	assert.Equal(t, want, collect(s))
	assert.Equal(t, want, w.impl.Snapshot())
}

// TestReplaceInAGroupCommit: a Replace queued behind other writes of its
// group commit runs against the state with their changes, as an Update
// does: an entry a Put before it added and the snapshot lacks is deleted,
// one a Delete before it removed and the snapshot holds is put back.
func TestReplaceInAGroupCommit(t *testing.T) {
	ctx := context.Background()
	h := newHeldStore(t, map[string]int{"a": 1, "b": 2})
	wait := h.hold(t)
	results := make(chan error, 3)
	go func() { results <- h.s.Put(ctx, "x", 9) }()
	h.queued(t)
	go func() { results <- h.s.Delete(ctx, "b") }()
	h.queued(t)
	go func() { results <- h.s.Replace(ctx, map[string]int{"a": 1, "b": 2, "holder": 0}) }()
	h.queued(t)
	close(h.slow.release)
	wait()
	for range 3 {
		require.NoError(t, <-results)
	}
	want := map[string]int{"a": 1, "b": 2, "holder": 0}
	assert.Equal(t, want, collect(h.s))
	assert.Equal(t, want, h.w.impl.Snapshot())
	snap, err := h.w.checkpointEntries(t)
	require.NoError(t, err)
	assert.Equal(t, want, snap.Entries)
}

// TestReplaceFails: a Replace whose checkpoint save fails changes nothing
// on any side, and says which side failed; one whose context is done
// writes nothing.
func TestReplaceFails(t *testing.T) {
	ctx := context.Background()
	start := map[string]int{"a": 1, "b": 2}
	w, s := restored(t, migrate.PhaseMigrate, true, start)
	checkpointtest.FailSaves(w.cp, 1, errors.New("injected: disk full"))
	err := s.Replace(ctx, map[string]int{"a": 10, "c": 3})
	require.ErrorIs(t, err, migrate.ErrCheckpointWrite)
	assert.NotErrorIs(t, err, migrate.ErrOutcomeUnknown)
	assert.Equal(t, start, collect(s))
	assert.Equal(t, start, w.impl.Snapshot(), "legacy's writes undone")
	snap, err := w.checkpointEntries(t)
	require.NoError(t, err)
	assert.Equal(t, start, snap.Entries)

	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, s.Replace(done, map[string]int{}), context.Canceled)
	assert.Equal(t, start, collect(s))
}
