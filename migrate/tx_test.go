package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
)

// heldStore is a Store in phase 2 over an explicit legacy whose checkpoint
// blocks the first save until released, so that the writes made meanwhile
// queue up and go into one group commit.
type heldStore struct {
	w     *world
	s     *migrate.Store[string, int]
	slow  *slowCheckpoint
	queue int // writes started and queued behind the held leader
}

func newHeldStore(t *testing.T, start map[string]int) *heldStore {
	t.Helper()
	w := newWorld(true, start)
	w.saveCheckpoint(t, migrate.PhaseMigrate, start, "")
	slow := &slowCheckpoint{Memory: checkpointtest.Reopen(t, w.cp), release: make(chan struct{}), entered: make(chan struct{}, 1)}
	s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: w.exp, Checkpoint: slow})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	_, err = s.Restore(context.Background())
	require.NoError(t, err)
	return &heldStore{w: w, s: s, slow: slow}
}

// hold starts a write that holds the leader in its save, and returns a
// function that waits for it.
func (h *heldStore) hold(t *testing.T) func() {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- h.s.Put(context.Background(), "holder", 0) }()
	<-h.slow.entered
	return func() { require.NoError(t, <-done) }
}

// queued waits until the write the caller just started is queued behind
// the leader: until the Store's queue holds one more write than it did. It
// waits on that condition, not for a while.
func (h *heldStore) queued(t *testing.T) {
	t.Helper()
	h.queue++
	deadline := time.Now().Add(30 * time.Second)
	for migrate.QueuedWrites(h.s) < h.queue {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes never queued behind the leader (%d did)", h.queue, migrate.QueuedWrites(h.s))
		}
		runtime.Gosched()
	}
}

// TestUpdateIsGroupCommitted: concurrent allocations through Update share
// saves, and each sees those before it in its batch, so no address is
// handed out twice (issue 14: 64 Updates took 64 saves).
func TestUpdateIsGroupCommitted(t *testing.T) {
	ctx := context.Background()
	w := newWorld(false, nil)
	cp := checkpointtest.Reopen(t, w.cp)
	checkpointtest.SetSaveLatency(cp, 500*time.Microsecond)
	s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseContract, Checkpoint: cp})
	_, err := s.Restore(ctx)
	require.NoError(t, err)
	before := checkpointtest.Saves(w.cp)

	const writers = 64
	got := make([]int, writers)
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
				used := map[int]bool{}
				for _, v := range tx.All() {
					used[v] = true
				}
				ip := 0
				for used[ip] {
					ip++
				}
				got[g] = ip
				tx.Put(fmt.Sprintf("pod-%02d", g), ip)
				return nil
			})
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	saves := checkpointtest.Saves(w.cp) - before
	t.Logf("%d concurrent Updates took %d saves", writers, saves)
	assert.Less(t, saves, writers/4, "concurrent Updates must share saves")
	slices.Sort(got)
	for i, ip := range got {
		require.Equal(t, i, ip, "every address handed out once")
	}
	snap, err := w.checkpointEntries(t)
	require.NoError(t, err)
	assert.Len(t, snap.Entries, writers)
}

// TestGroupCommitRunsInOrder: in one batch, each write runs against the
// writes before it, as if alone after them; a failing function drops out
// alone; a panicking one panics again in its caller; Puts, Deletes and
// Updates commit together in one save.
func TestGroupCommitRunsInOrder(t *testing.T) {
	ctx := context.Background()
	h := newHeldStore(t, map[string]int{"a": 1, "b": 2})
	wait := h.hold(t)

	stop := errors.New("changed my mind")
	results := make(chan string, 8)
	write := func(name string, fn func() error) {
		go func() {
			err := fn()
			results <- fmt.Sprintf("%s: %v", name, err)
		}()
		h.queued(t)
	}
	write("put a=10", func() error { return h.s.Put(ctx, "a", 10) })
	write("update a+=1", func() error {
		return h.s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
			v, _ := tx.Get("a")
			tx.Put("a", v+1)
			return nil
		})
	})
	write("failing update", func() error {
		return h.s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
			tx.Put("a", -1)
			tx.Delete("b")
			return stop
		})
	})
	panicked := make(chan any, 1)
	write("panicking update", func() error {
		defer func() { panicked <- recover() }()
		return h.s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
			tx.Put("a", -2)
			panic("boom")
		})
	})
	write("delete b", func() error { return h.s.Delete(ctx, "b") })
	write("update sees all", func() error {
		return h.s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
			seen := map[string]int{}
			for k, v := range tx.All() {
				seen[k] = v
			}
			if want := map[string]int{"a": 11, "holder": 0}; fmt.Sprint(seen) != fmt.Sprint(want) {
				return fmt.Errorf("the Tx sees %v, want %v", seen, want)
			}
			tx.Put("c", seen["a"]*2)
			return nil
		})
	})
	saves := checkpointtest.Saves(h.w.cp)
	close(h.slow.release)
	wait()
	var out []string
	for range 6 {
		out = append(out, <-results)
	}
	slices.Sort(out)
	assert.Equal(t, []string{
		"delete b: <nil>",
		"failing update: changed my mind",
		"panicking update: <nil>",
		"put a=10: <nil>",
		"update a+=1: <nil>",
		"update sees all: <nil>",
	}, out)
	assert.Equal(t, "boom", <-panicked, "the panic reaches the caller")
	want := map[string]int{"a": 11, "c": 22, "holder": 0}
	assert.Equal(t, want, collect(h.s))
	assert.Equal(t, saves+2, checkpointtest.Saves(h.w.cp), "the holder's save, then one for the whole batch")
	snap, err := h.w.checkpointEntries(t)
	require.NoError(t, err)
	assert.Equal(t, want, snap.Entries)
	assert.Equal(t, want, h.w.exp.Snapshot(), "legacy holds the same")
}

// TestGroupCommitLegacyRefusalDropsOutAlone: legacy refuses one request of
// a batch; it fails alone and the later ones do not see it.
func TestGroupCommitLegacyRefusalDropsOutAlone(t *testing.T) {
	ctx := context.Background()
	h := newHeldStore(t, nil)
	wait := h.hold(t)
	// One channel each: the two are released together, in either order
	// (one channel for both failed under the race detector when the
	// Update's answer came first).
	xErr, yErr := make(chan error, 1), make(chan error, 1)
	h.w.exp.FailWrites(0, 1, errors.New("registry full")) // the holder wrote legacy already: the next write fails
	go func() { xErr <- h.s.Put(ctx, "x", 1) }()
	h.queued(t)
	var sawX bool
	go func() {
		yErr <- h.s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
			_, sawX = tx.Get("x")
			tx.Put("y", 2)
			return nil
		})
	}()
	h.queued(t)
	close(h.slow.release)
	wait()
	require.ErrorIs(t, <-xErr, migrate.ErrLegacyWrite)
	require.NoError(t, <-yErr)
	assert.False(t, sawX, "a write that dropped out is not seen by the ones after it")
	assert.Equal(t, map[string]int{"holder": 0, "y": 2}, collect(h.s))
}

// TestGroupCommitSaveFailureUndoesLegacyNewestFirst: the batch's one save
// fails; every request fails and legacy is back where it was, although two
// requests wrote the same key.
func TestGroupCommitSaveFailureUndoesLegacyNewestFirst(t *testing.T) {
	ctx := context.Background()
	h := newHeldStore(t, map[string]int{"k": 1})
	wait := h.hold(t)
	errs := make(chan error, 2)
	for _, v := range []int{2, 3} {
		go func() { errs <- h.s.Put(ctx, "k", v) }()
		h.queued(t)
	}
	h.slow.failNext = errors.New("disk full") // the batch's save, after the holder's
	close(h.slow.release)
	wait()
	for range 2 {
		require.ErrorIs(t, <-errs, migrate.ErrCheckpointWrite)
	}
	assert.Equal(t, map[string]int{"k": 1, "holder": 0}, h.w.exp.Snapshot(), "legacy is put back: k=3 undone to 2, then to 1")
	v, _ := h.s.Get("k")
	assert.Equal(t, 1, v)
}

func TestTxIsOnlyForItsFunction(t *testing.T) {
	_, s := restored(t, migrate.PhaseContract, false, nil)
	var kept *migrate.Tx[string, int]
	require.NoError(t, s.Update(context.Background(), func(tx *migrate.Tx[string, int]) error {
		kept = tx
		return nil
	}))
	assert.PanicsWithValue(t, "migrate: a Tx was used after its Update function returned", func() { kept.Put("late", 1) })
	assert.Panics(t, func() { kept.Get("late") })
	assert.Panics(t, func() { kept.All() })
	assert.Zero(t, s.Len())
	require.Error(t, s.Update(context.Background(), nil))
}

// TestTxAllSeesChangesAheadOfTheLoop attacks Tx.All's promise that "an
// entry it deletes or replaces that the loop has not reached yet is seen as
// changed": on its first entry, the loop deletes half of the others and
// replaces the rest; every entry it reaches afterwards must be a replaced
// one, with its new value, and none of the deleted ones; and a second All
// nested in the loop must not see the deleted ones either.
//
// How it failed before the fix: All settled what to skip before the loop
// began, so the loop reached deleted entries ("saw 7=7, which the loop
// deleted") and old values of replaced ones.
func TestTxAllSeesChangesAheadOfTheLoop(t *testing.T) {
	ctx := context.Background()
	start := map[string]int{}
	for i := range 50 {
		start[fmt.Sprint(i)] = i
	}
	_, s := restored(t, migrate.PhaseContract, false, start)
	require.NoError(t, s.Put(ctx, "0", 100), "a write before, so the Tx also sees a committed change")
	check := func(tx *migrate.Tx[string, int], nested bool) error {
		var first string
		changed := map[string]int{} // key -> new value, -1 if deleted
		for k, v := range tx.All() {
			if first == "" {
				first = k
				i := 0
				for other := range start {
					if other == first {
						continue
					}
					if i++; i%2 == 0 {
						tx.Delete(other)
						changed[other] = -1
					} else {
						tx.Put(other, 1000+i)
						changed[other] = 1000 + i
					}
				}
				if nested {
					for k2 := range tx.All() {
						if changed[k2] == -1 {
							return fmt.Errorf("the nested loop saw %s, which the loop deleted", k2)
						}
					}
				}
				continue
			}
			switch want, ok := changed[k]; {
			case !ok:
				return fmt.Errorf("saw %s=%d, which the loop neither replaced nor deleted", k, v)
			case want == -1:
				return fmt.Errorf("saw %s=%d, which the loop deleted", k, v)
			case v != want:
				return fmt.Errorf("saw %s=%d, which the loop replaced with %d", k, v, want)
			}
		}
		return errors.New("rolled back: the test changes nothing")
	}
	for _, nested := range []bool{false, true} {
		err := s.Update(ctx, func(tx *migrate.Tx[string, int]) error { return check(tx, nested) })
		require.EqualError(t, err, "rolled back: the test changes nothing", "nested: %v", nested)
	}
}

// TestTxAllInABatch: in one group commit, an Update's All does not see an
// entry an Update before it deleted, even after a failed Update between
// them put it again, and does see, as committed, an entry that the failed
// Update changed.
func TestTxAllInABatch(t *testing.T) {
	ctx := context.Background()
	h := newHeldStore(t, map[string]int{"a": 1, "b": 2, "c": 3})
	wait := h.hold(t)
	stop := errors.New("changed my mind")
	results := make(chan error, 3)
	write := func(fn func(tx *migrate.Tx[string, int]) error) {
		go func() {
			results <- h.s.Update(ctx, fn)
		}()
		h.queued(t)
	}
	write(func(tx *migrate.Tx[string, int]) error {
		for k := range tx.All() {
			if k == "c" {
				tx.Delete("a") // ahead of the loop, or behind it
			}
		}
		return nil
	})
	write(func(tx *migrate.Tx[string, int]) error {
		for range tx.All() {
			tx.Put("a", -1) // which the batch deleted
			tx.Put("b", -1)
		}
		return stop
	})
	write(func(tx *migrate.Tx[string, int]) error {
		seen := map[string]int{}
		for k, v := range tx.All() {
			seen[k] = v
		}
		if want := map[string]int{"b": 2, "c": 3, "holder": 0}; fmt.Sprint(seen) != fmt.Sprint(want) {
			return fmt.Errorf("the Tx sees %v, want %v", seen, want)
		}
		return nil
	})
	close(h.slow.release)
	wait()
	var errs []error
	for range 3 {
		errs = append(errs, <-results)
	}
	assert.ElementsMatch(t, []error{nil, stop, nil}, errs)
	assert.Equal(t, map[string]int{"b": 2, "c": 3, "holder": 0}, collect(h.s))
}

// TestDeleteFunc removes what the predicate selects, from every side the
// phase writes, in one commit, and returns the stored keys.
func TestDeleteFunc(t *testing.T) {
	ctx := context.Background()
	for _, p := range phases {
		t.Run(p.String(), func(t *testing.T) {
			start := map[string]int{"a": 1, "b": 2, "c": 3, "d": 4}
			w, s := restored(t, p, true, start)
			saves := checkpointtest.Saves(w.cp)
			removed, err := s.DeleteFunc(ctx, func(k string, v int) bool { return v%2 == 0 })
			require.NoError(t, err)
			slices.Sort(removed)
			assert.Equal(t, []string{"b", "d"}, removed)
			want := map[string]int{"a": 1, "c": 3}
			assert.Equal(t, want, collect(s))
			if p.WritesCheckpoint() {
				assert.Equal(t, saves+1, checkpointtest.Saves(w.cp), "one commit")
				snap, err := w.checkpointEntries(t)
				require.NoError(t, err)
				assert.Equal(t, want, snap.Entries)
			}
			if p.WritesLegacy() {
				assert.Equal(t, want, w.exp.Snapshot())
			}
			removed, err = s.DeleteFunc(ctx, func(string, int) bool { return false })
			require.NoError(t, err)
			assert.Empty(t, removed)
		})
	}
}

func TestDeleteFuncFailureRemovesNothing(t *testing.T) {
	ctx := context.Background()
	w, s := restored(t, migrate.PhaseMigrate, true, map[string]int{"a": 1, "b": 2})
	checkpointtest.FailSaves(w.cp, 1, errors.New("disk full"))
	removed, err := s.DeleteFunc(ctx, func(string, int) bool { return true })
	require.ErrorIs(t, err, migrate.ErrCheckpointWrite)
	assert.Nil(t, removed)
	assert.Equal(t, map[string]int{"a": 1, "b": 2}, collect(s))
	assert.Equal(t, map[string]int{"a": 1, "b": 2}, w.exp.Snapshot(), "legacy deletes are undone")
	_, err = s.DeleteFunc(ctx, nil)
	require.Error(t, err)
}

// TestWriteOutcomeOutlivesItsDeadline: a Put whose deadline passes while
// the save that carries it runs returns that save's outcome: nil, durable.
func TestWriteOutcomeOutlivesItsDeadline(t *testing.T) {
	w := newWorld(false, nil)
	cp := checkpointtest.Reopen(t, w.cp)
	checkpointtest.SetSaveLatency(cp, 50*time.Millisecond)
	s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseContract, Checkpoint: cp})
	_, err := s.Restore(context.Background())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	require.NoError(t, s.Put(ctx, "a", 1), "taken by a commit before the deadline: its outcome is the answer")
	require.Error(t, ctx.Err())
	snap, err := w.checkpointEntries(t)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"a": 1}, snap.Entries)

	_, err = s.DeleteFunc(ctx, func(string, int) bool { return true })
	require.ErrorIs(t, err, context.DeadlineExceeded, "a context already done writes nothing")
	assert.Equal(t, 1, s.Len())
}

// TestGroupCommitCarriesAtMost1024: a batch takes at most 1,024 queued
// writes, oldest first, so that one save's work stays bounded; the rest go
// in the next save, and every write is acknowledged.
func TestGroupCommitCarriesAtMost1024(t *testing.T) {
	ctx := context.Background()
	h := newHeldStore(t, nil)
	wait := h.hold(t)
	const writes = 1500
	errs := make(chan error, writes)
	for i := range writes {
		go func() { errs <- h.s.Put(ctx, fmt.Sprintf("k%04d", i), i) }()
	}
	h.queue = writes - 1
	h.queued(t) // all 1,500 wait behind the holder
	saves := checkpointtest.Saves(h.w.cp)
	close(h.slow.release)
	wait()
	for range writes {
		require.NoError(t, <-errs)
	}
	assert.Equal(t, saves+3, checkpointtest.Saves(h.w.cp), "the holder's save, then 1,024 writes, then 476")
	assert.Equal(t, writes+1, h.s.Len())
	snap, err := h.w.checkpointEntries(t)
	require.NoError(t, err)
	assert.Len(t, snap.Entries, writes+1)
}

// TestTxAllYieldsEachKeyAtMostOnce: as Go's range over a map does, All
// yields each key at most once, however the loop body changes the
// transaction: an entry it replaces after the loop reached it is not
// yielded again, whether it was committed (a), changed by a write before
// it in the batch (b), or changed by the transaction before the loop (c),
// and an entry a nested loop replaces is not yielded again by the outer
// one (d). An entry it replaces before the loop reaches it is yielded
// once, with its new value.
//
// How it failed before the fix: the loop yielded every entry it had
// replaced a second time, after the others ("a0 yielded 2 times").
func TestTxAllYieldsEachKeyAtMostOnce(t *testing.T) {
	ctx := context.Background()
	start := map[string]int{}
	for i := range 20 {
		start[fmt.Sprintf("a%d", i)] = i
	}
	h := newHeldStore(t, start)
	wait := h.hold(t)
	results := make(chan error, 2)
	go func() { results <- h.s.Put(ctx, "b0", 1) }() // (b): changed by the batch
	h.queued(t)
	var counts map[string]int
	check := func(tx *migrate.Tx[string, int]) error {
		counts = map[string]int{}
		tx.Put("c0", 2) // (c): the transaction's own, before the loop
		for k, v := range tx.All() {
			counts[k]++
			tx.Put(k, v+1000) // replace what the loop just reached
			if counts[k] == 1 && len(counts) == 1 {
				// (d): a nested loop replaces every entry it reaches,
				// including those the outer loop has not reached yet.
				for k2, v2 := range tx.All() {
					tx.Put(k2, v2+1)
				}
			}
		}
		return nil
	}
	go func() { results <- h.s.Update(ctx, check) }()
	h.queued(t)
	close(h.slow.release)
	wait()
	require.NoError(t, <-results)
	require.NoError(t, <-results)
	for _, k := range []string{"a0", "a19", "b0", "c0", "holder"} {
		assert.Contains(t, counts, k)
	}
	for k, n := range counts {
		assert.Equal(t, 1, n, "%s yielded %d times", k, n)
	}
	assert.Len(t, counts, len(start)+3, "every entry is yielded")
}
