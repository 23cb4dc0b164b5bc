package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// batchLegacy is a legacy that is one file, as a source.BatchWriter: every
// Write replaces its whole content at once, or, when it fails, changes
// nothing. Its faults are injected: after Writes succeed, then fails fail
// (an undo is a Write too), panics panics in the next one after applying
// half of it, and hold blocks the next Write until released.
type batchLegacy struct {
	mu      sync.Mutex // guards every field
	m       map[string]int
	writes  int // Writes that succeeded
	changes []int
	single  int // Puts and Deletes
	after   int
	fails   int
	panics  bool
	hold    chan struct{}
	entered chan struct{}
}

var _ source.BatchWriter[string, int] = (*batchLegacy)(nil)

func newBatchLegacy(start map[string]int) *batchLegacy {
	return &batchLegacy{m: maps.Clone(start)}
}

// LegacyKind: it stands for a file.
func (b *batchLegacy) LegacyKind() source.Kind { return source.Durable }

func (b *batchLegacy) List(context.Context) (map[string]int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.m), nil
}

func (b *batchLegacy) Put(_ context.Context, k string, v int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.single++
	b.m[k] = v
	return nil
}

func (b *batchLegacy) Delete(_ context.Context, k string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.single++
	delete(b.m, k)
	return nil
}

func (b *batchLegacy) Write(_ context.Context, changes []source.Change[string, int]) error {
	b.mu.Lock()
	hold, entered := b.hold, b.entered
	b.hold = nil
	b.mu.Unlock()
	if hold != nil {
		entered <- struct{}{}
		<-hold
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.after > 0 {
		b.after--
	} else if b.fails > 0 {
		b.fails--
		return errors.New("injected: the file could not be replaced")
	}
	next := maps.Clone(b.m)
	for i, c := range changes {
		if b.panics && i == len(changes)/2 {
			b.panics = false
			b.m = next // half of it reached the file
			panic("injected: the legacy writer panicked")
		}
		if c.Delete {
			delete(next, c.Key)
		} else {
			next[c.Key] = c.Value
		}
	}
	b.m = next
	b.writes++
	b.changes = append(b.changes, len(changes))
	return nil
}

func (b *batchLegacy) snapshot() map[string]int {
	m, _ := b.List(context.Background())
	return m
}

func (b *batchLegacy) counts() (writes, single int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.writes, b.single
}

// batchStore is a Store in phase p over a batchLegacy holding start, with
// the checkpoint saved from start by phase 2.
func batchStore(t *testing.T, p migrate.Phase, start map[string]int) (*migrate.Store[string, int], *batchLegacy, *checkpoint.Memory[string, int]) {
	t.Helper()
	legacy := newBatchLegacy(start)
	cp := checkpoint.NewMemory[string, int]()
	require.NoError(t, cp.Save(context.Background(), checkpoint.Snapshot[string, int]{Meta: checkpoint.Meta{Phase: migrate.PhaseMigrate.String()}, Entries: maps.Clone(start)}))
	s, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: legacy, Checkpoint: checkpointtest.Reopen(t, cp)})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	_, err = s.Restore(context.Background())
	require.NoError(t, err)
	return s, legacy, cp
}

// TestBatchWriterTakesACommitInOneWrite: in the phases that write legacy,
// an Update of several keys (a re-key of a matching entry included, which
// is two legacy changes) reaches a source.BatchWriter as one Write and no
// Put or Delete; phase 3 writes it not at all.
func TestBatchWriterTakesACommitInOneWrite(t *testing.T) {
	ctx := context.Background()
	for _, p := range phases {
		t.Run(p.String(), func(t *testing.T) {
			s, legacy, _ := batchStore(t, p, map[string]int{"a": 1, "b": 2, "c": 3})
			before := s.Stats().LegacyWrites
			require.NoError(t, s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
				tx.Put("a", 10)
				tx.Delete("b")
				tx.Put("d", 4)
				return nil
			}))
			writes, single := legacy.counts()
			if !p.WritesLegacy() {
				assert.Zero(t, writes+single, "phase 3 does not write legacy")
				return
			}
			assert.Equal(t, 1, writes, "one Write for the commit")
			assert.Zero(t, single, "no Put or Delete")
			assert.Equal(t, uint64(1), s.Stats().LegacyWrites-before, "Stats counts the Write once")
			assert.Equal(t, map[string]int{"a": 10, "c": 3, "d": 4}, legacy.snapshot())
		})
	}
}

// TestBatchWriterReKey: with Match, a Put under a new key of a matching
// entry removes the old key from legacy in the same Write.
func TestBatchWriterReKey(t *testing.T) {
	ctx := context.Background()
	legacy := newBatchLegacy(map[string]int{"pod/unknown": 1})
	s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseExpand, Legacy: legacy, Checkpoint: checkpoint.NewMemory[string, int](),
		Match: func(k string) string { pod, _, _ := cutSlash(k); return pod }})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Restore(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "pod/eth0", 1))
	writes, single := legacy.counts()
	assert.Equal(t, 1, writes)
	assert.Zero(t, single)
	assert.Equal(t, []int{2}, legacy.changes, "the new key and the old key's removal")
	assert.Equal(t, map[string]int{"pod/eth0": 1}, legacy.snapshot())
}

func cutSlash(k string) (string, string, bool) {
	for i := range len(k) {
		if k[i] == '/' {
			return k[:i], k[i+1:], true
		}
	}
	return k, "", false
}

// TestBatchWriterGroupCommit: writes that queue while a commit's Write is
// held go, together, into the next commit's one Write; a Write that fails
// fails every write of its commit (ErrLegacyWrite, outcome known: it took
// none of them) and changes no side; the next commit goes through.
func TestBatchWriterGroupCommit(t *testing.T) {
	ctx := context.Background()
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			s, legacy, cp := batchStore(t, migrate.PhaseMigrate, map[string]int{"a": 1})
			hold := make(chan struct{})
			legacy.mu.Lock()
			legacy.hold, legacy.entered = hold, make(chan struct{}, 1)
			legacy.mu.Unlock()
			first := make(chan error, 1)
			go func() { first <- s.Put(ctx, "first", 0) }()
			select {
			case <-legacy.entered:
			case err := <-first:
				t.Fatalf("the Put returned (%v) without calling Write", err)
			}
			results := make(chan error, 3)
			for i := range 3 {
				go func() { results <- s.Put(ctx, fmt.Sprintf("k%d", i), i) }()
			}
			for migrate.QueuedWrites(s) < 3 {
				runtime.Gosched()
			}
			if fail {
				legacy.mu.Lock()
				legacy.fails = 2 // the held Write, and the next
				legacy.mu.Unlock()
			}
			seqBefore := seq(t, cp)
			close(hold)
			if err := <-first; fail {
				require.ErrorIs(t, err, migrate.ErrLegacyWrite)
			} else {
				require.NoError(t, err)
			}
			var errs []error
			for range 3 {
				errs = append(errs, <-results)
			}
			writes, single := legacy.counts()
			assert.Zero(t, single)
			if !fail {
				for _, err := range errs {
					assert.NoError(t, err)
				}
				assert.Equal(t, []int{1, 3}, legacy.changes, "the three queued writes share one Write")
				assert.Equal(t, map[string]int{"a": 1, "first": 0, "k0": 0, "k1": 1, "k2": 2}, legacy.snapshot())
				return
			}
			for _, err := range errs {
				require.ErrorIs(t, err, migrate.ErrLegacyWrite)
				assert.NotErrorIs(t, err, migrate.ErrOutcomeUnknown, "the Write took none of them")
			}
			assert.Zero(t, writes)
			assert.Equal(t, map[string]int{"a": 1}, legacy.snapshot(), "legacy unchanged")
			assert.Equal(t, map[string]int{"a": 1}, collect(s), "memory unchanged")
			assert.Equal(t, seqBefore, seq(t, cp), "the checkpoint was not saved")
			assert.Zero(t, s.Stats().OutcomeUnknown)
			require.NoError(t, s.Put(ctx, "after", 1))
			assert.Equal(t, map[string]int{"a": 1, "after": 1}, legacy.snapshot())
		})
	}
}

func seq(t *testing.T, cp *checkpoint.Memory[string, int]) uint64 {
	t.Helper()
	snap, err := checkpointtest.Reopen(t, cp).Load(context.Background())
	require.NoError(t, err)
	return snap.Meta.Seq
}

// TestBatchWriterUndo: a checkpoint save that fails is undone on legacy in
// one Write, which puts legacy back as it was (ErrCheckpointWrite, outcome
// known); when that Write fails too, the write's outcome is unknown
// (ErrOutcomeUnknown), and the next commit writes legacy back in line with
// memory before it goes on.
func TestBatchWriterUndo(t *testing.T) {
	ctx := context.Background()
	for _, undoFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("undoFails=%v", undoFails), func(t *testing.T) {
			start := map[string]int{"a": 1, "b": 2}
			s, legacy, cp := batchStore(t, migrate.PhaseExpand, start)
			checkpointtest.FailSaves(cp, 1, errors.New("injected: disk full"))
			if undoFails {
				legacy.mu.Lock()
				legacy.after, legacy.fails = 1, 1 // the write goes through, its undo fails
				legacy.mu.Unlock()
			}
			err := s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
				tx.Put("a", 10)
				tx.Delete("b")
				tx.Put("c", 3)
				return nil
			})
			require.ErrorIs(t, err, migrate.ErrCheckpointWrite)
			assert.Equal(t, start, collect(s), "memory unchanged")
			if !undoFails {
				assert.NotErrorIs(t, err, migrate.ErrOutcomeUnknown)
				assert.Equal(t, start, legacy.snapshot(), "the undo put legacy back")
				writes, single := legacy.counts()
				assert.Equal(t, 2, writes, "the write and its undo")
				assert.Zero(t, single)
				return
			}
			require.ErrorIs(t, err, migrate.ErrOutcomeUnknown)
			assert.Contains(t, err.Error(), "legacy may hold it")
			assert.Equal(t, map[string]int{"a": 10, "c": 3}, legacy.snapshot(), "legacy holds what the failed write made")
			require.NoError(t, s.Put(ctx, "d", 4), "the next commit writes legacy back in line first")
			assert.Equal(t, map[string]int{"a": 1, "b": 2, "d": 4}, legacy.snapshot())
			assert.Equal(t, map[string]int{"a": 1, "b": 2, "d": 4}, collect(s))
		})
	}
}

// TestBatchWriterPanics: a Write that panics (having applied part of the
// commit) fails every write of the commit with ErrLegacyWrite and
// ErrOutcomeUnknown, each caller panics with the value, the checkpoint is
// not saved, and the Store stays usable: the next commit writes legacy
// back in line with memory.
func TestBatchWriterPanics(t *testing.T) {
	ctx := context.Background()
	start := map[string]int{"a": 1, "b": 2}
	s, legacy, cp := batchStore(t, migrate.PhaseMigrate, start)
	seqBefore := seq(t, cp)
	legacy.mu.Lock()
	legacy.panics = true
	legacy.mu.Unlock()
	assert.PanicsWithValue(t, "injected: the legacy writer panicked", func() {
		_ = s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
			tx.Put("a", 10)
			tx.Delete("b")
			tx.Put("c", 3)
			tx.Put("d", 4)
			return nil
		})
	})
	assert.Equal(t, start, collect(s), "memory unchanged")
	assert.Equal(t, seqBefore, seq(t, cp), "the checkpoint was not saved")
	assert.NotEqual(t, start, legacy.snapshot(), "the writer applied part of it")
	require.NoError(t, s.Put(ctx, "e", 5))
	assert.Equal(t, map[string]int{"a": 1, "b": 2, "e": 5}, legacy.snapshot(), "legacy written back in line")
	assert.Equal(t, uint64(1), s.Stats().OutcomeUnknown)
}
