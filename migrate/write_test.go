package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// restored opens and restores a Store for phase over a fresh world whose
// legacy and checkpoint both hold start, as on a node in phase 2.
func restored(t *testing.T, p migrate.Phase, explicit bool, start map[string]int) (*world, *migrate.Store[string, int]) {
	t.Helper()
	w := newWorld(explicit, start)
	w.saveCheckpoint(t, migrate.PhaseMigrate, start, "")
	s := w.open(t, migrate.Config[string, int]{Phase: p})
	_, err := s.Restore(context.Background())
	require.NoError(t, err)
	return w, s
}

func TestWritesReachEverySideOfThePhase(t *testing.T) {
	ctx := context.Background()
	for _, p := range phases {
		for _, explicit := range []bool{false, true} {
			t.Run(fmt.Sprintf("phase%d/explicit=%v", p, explicit), func(t *testing.T) {
				w, s := restored(t, p, explicit, map[string]int{"a": 1})
				savesBefore := checkpointtest.Saves(w.cp)
				require.NoError(t, s.Put(ctx, "b", 2))
				require.NoError(t, s.Put(ctx, "a", 10))
				require.NoError(t, s.Delete(ctx, "b"))
				require.NoError(t, s.Delete(ctx, "never-there"))
				want := map[string]int{"a": 10}
				assert.Equal(t, want, collect(s))

				snap, err := w.checkpointEntries(t)
				if p.WritesCheckpoint() {
					require.NoError(t, err)
					assert.Equal(t, want, snap.Entries, "the checkpoint has every write")
					assert.Equal(t, p.String(), snap.Meta.Phase)
					assert.Equal(t, savesBefore+3, checkpointtest.Saves(w.cp), "one save per write; none for deleting what is not there")
				} else {
					assert.Equal(t, savesBefore, checkpointtest.Saves(w.cp), "phase 0 never writes the checkpoint")
				}
				if explicit && p.WritesLegacy() {
					assert.Equal(t, want, w.impl.Snapshot(), "explicit legacy has every write")
				} else {
					assert.Equal(t, map[string]int{"a": 1}, w.impl.Snapshot(), "legacy is not written")
				}
			})
		}
	}
}

// TestWriteFailures injects a failure on each side in each phase: the
// write fails naming the side, memory is unchanged, both sides hold the
// previous commit, and the next write succeeds.
func TestWriteFailures(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("injected")
	for _, p := range phases {
		for _, side := range []string{"checkpoint", "legacy", "legacy-undo"} {
			if side == "legacy" && !p.WritesLegacy() || side == "checkpoint" && !p.WritesCheckpoint() ||
				side == "legacy-undo" && !(p.WritesLegacy() && p.WritesCheckpoint()) {
				continue
			}
			for _, del := range []bool{false, true} {
				t.Run(fmt.Sprintf("phase%d/%s/delete=%v", p, side, del), func(t *testing.T) {
					start := map[string]int{"a": 1, "b": 2}
					w, s := restored(t, p, true, start)
					ckBefore := w.cp.Bytes()
					switch side {
					case "checkpoint":
						checkpointtest.FailSaves(w.cp, 1, boom)
					case "legacy":
						w.exp.FailWrites(0, 1, boom)
					case "legacy-undo":
						// The checkpoint fails after legacy took the write,
						// which is undone: legacy is written first in every
						// phase that writes both.
						checkpointtest.FailSaves(w.cp, 1, boom)
					}
					var err error
					if del {
						err = s.Delete(ctx, "a")
					} else {
						err = s.Put(ctx, "a", 100)
					}
					require.ErrorIs(t, err, boom)
					if side == "checkpoint" || side == "legacy-undo" {
						require.ErrorIs(t, err, migrate.ErrCheckpointWrite)
					} else {
						require.ErrorIs(t, err, migrate.ErrLegacyWrite)
					}
					assert.Equal(t, start, collect(s), "memory is unchanged")
					v, ok := s.Get("a")
					assert.True(t, ok)
					assert.Equal(t, 1, v)
					if p.WritesCheckpoint() {
						snap, err := w.checkpointEntries(t)
						require.NoError(t, err)
						assert.Equal(t, start, snap.Entries, "the checkpoint holds the previous commit")
						assert.Equal(t, ckBefore, w.cp.Bytes(), "the checkpoint was never replaced")
					}
					assert.Equal(t, start, w.impl.Snapshot(), "legacy holds the previous commit (compensated if it took the write)")

					require.NoError(t, s.Put(ctx, "a", 7), "the next write after the fault succeeds")
					v, _ = s.Get("a")
					assert.Equal(t, 7, v)
				})
			}
		}
	}
}

func TestWritesBeforeRestoreAndAfterClose(t *testing.T) {
	ctx := context.Background()
	w := newWorld(true, nil)
	s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate})
	require.ErrorIs(t, s.Put(ctx, "a", 1), migrate.ErrNotRestored)
	require.ErrorIs(t, s.Delete(ctx, "a"), migrate.ErrNotRestored)
	require.ErrorIs(t, s.Update(ctx, func(*migrate.Tx[string, int]) error { return nil }), migrate.ErrNotRestored)
	_, ok := s.Get("a")
	assert.False(t, ok)

	_, err := s.Restore(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "a", 1))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	require.ErrorIs(t, s.Put(ctx, "b", 2), migrate.ErrClosed)
	require.ErrorIs(t, s.Delete(ctx, "a"), migrate.ErrClosed)
	require.ErrorIs(t, s.Update(ctx, func(*migrate.Tx[string, int]) error { return nil }), migrate.ErrClosed)
	_, err = s.Restore(ctx)
	require.ErrorIs(t, err, migrate.ErrClosed)
	assert.Equal(t, 0, s.Len())
	_, ok = s.Get("a")
	assert.False(t, ok, "reads return nothing after Close")
	assert.Equal(t, migrate.PhaseMigrate, s.Phase(), "Phase still answers")
	assert.NotZero(t, s.Stats().LastRestore.At, "Stats still answers")
	_, err = checkpointtest.Reopen(t, w.cp).Load(ctx)
	require.NoError(t, err, "the data is on disk")
}

func TestCloseClosesTheCheckpoint(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/state.json"
	f, err := checkpoint.Open[string, int](ctx, path)
	require.NoError(t, err)
	s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseContract, Checkpoint: f})
	require.NoError(t, err)
	_, err = s.Restore(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "a", 1))
	require.NoError(t, s.Close())
	// The lock is free: the next owner opens at once.
	g, err := checkpoint.Open[string, int](ctx, path, checkpoint.WithLockWait(0))
	require.NoError(t, err)
	defer g.Close()
	snap, err := g.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"a": 1}, snap.Entries)
}

// TestGroupCommit: 64 writers × 100 Puts on a real file complete with far
// fewer checkpoint saves than Puts, and every acknowledged Put is in the
// reloaded file.
func TestGroupCommit(t *testing.T) {
	ctx := context.Background()
	const writers, perWriter = 64, 100
	w := newWorld(false, nil)
	cp := checkpointtest.Reopen(t, w.cp)
	checkpointtest.SetSaveLatency(cp, 200*time.Microsecond) // what an fsync costs, roughly
	s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseContract, Checkpoint: cp})
	_, err := s.Restore(ctx)
	require.NoError(t, err)
	before := checkpointtest.Saves(w.cp)

	var wg sync.WaitGroup
	acked := make([][]string, writers)
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				k := fmt.Sprintf("w%02d-%03d", g, i)
				if err := s.Put(ctx, k, i); err != nil {
					t.Error(err)
					return
				}
				acked[g] = append(acked[g], k)
			}
		}()
	}
	wg.Wait()
	saves := checkpointtest.Saves(w.cp) - before
	t.Logf("%d Puts took %d checkpoint saves", writers*perWriter, saves)
	assert.Less(t, saves, writers*perWriter/8, "concurrent Puts must share saves")

	snap, err := w.checkpointEntries(t)
	require.NoError(t, err)
	for g := range acked {
		for i, k := range acked[g] {
			v, ok := snap.Entries[k]
			require.True(t, ok, "acknowledged Put %s is not in the checkpoint", k)
			require.Equal(t, i, v)
		}
	}
	assert.Len(t, snap.Entries, writers*perWriter)
}

// TestGroupCommitSameKey: concurrent writes to one key are never in the same
// batch, so each is undoable on its own and the last acknowledged wins.
func TestGroupCommitSameKey(t *testing.T) {
	ctx := context.Background()
	_, s := restored(t, migrate.PhaseMigrate, true, nil)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if err := s.Put(ctx, "hot", g*100+i); err != nil {
					t.Error(err)
				}
				if err := s.Put(ctx, fmt.Sprintf("cold-%d-%d", g, i), i); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 16*20+1, s.Len())
}

// TestGroupCommitIsolatesFailures: a value that cannot be encoded fails its
// own write only, even when it shares a batch.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	ctx := context.Background()
	for _, p := range []migrate.Phase{migrate.PhaseExpand, migrate.PhaseContract} {
		t.Run(p.String(), func(t *testing.T) {
			legacy := newFloatWorld()
			s, err := migrate.New(migrate.Config[string, float64]{Phase: p, Legacy: legacy.exp, Checkpoint: legacy.cp})
			require.NoError(t, err)
			defer s.Close()
			_, err = s.Restore(ctx)
			require.NoError(t, err)

			var wg sync.WaitGroup
			errs := make([]error, 32)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v := float64(i)
					if i%8 == 3 {
						v = math.Inf(1)
					}
					errs[i] = s.Put(ctx, fmt.Sprint("k", i), v)
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if i%8 == 3 {
					require.ErrorIs(t, err, checkpoint.ErrEncode, "write %d", i)
					require.ErrorIs(t, err, migrate.ErrCheckpointWrite)
					_, ok := s.Get(fmt.Sprint("k", i))
					assert.False(t, ok)
					_, ok = legacy.exp.Get(fmt.Sprint("k", i))
					assert.False(t, ok, "the legacy write of a failed Put is compensated")
				} else {
					require.NoError(t, err, "write %d shares a batch with a bad one and must not fail", i)
				}
			}
			assert.Equal(t, 28, s.Len())
		})
	}
}

type floatWorld struct {
	exp *migratetest.Explicit[string, float64]
	cp  *checkpoint.Memory[string, float64]
}

func newFloatWorld() floatWorld {
	return floatWorld{exp: &migratetest.Explicit[string, float64]{}, cp: checkpoint.NewMemory[string, float64]()}
}

func TestUpdate(t *testing.T) {
	ctx := context.Background()
	w, s := restored(t, migrate.PhaseMigrate, true, map[string]int{"a": 1, "b": 2})

	err := s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
		v, ok := tx.Get("a")
		require.True(t, ok)
		tx.Put("a", v+10)
		v, _ = tx.Get("a")
		assert.Equal(t, 11, v, "the transaction sees its own changes")
		tx.Delete("b")
		_, ok = tx.Get("b")
		assert.False(t, ok)
		tx.Put("c", 3)
		tx.Delete("c")
		tx.Put("c", 33)
		return nil
	})
	require.NoError(t, err)
	want := map[string]int{"a": 11, "c": 33}
	assert.Equal(t, want, collect(s))
	snap, err := w.checkpointEntries(t)
	require.NoError(t, err)
	assert.Equal(t, want, snap.Entries)
	assert.Equal(t, want, w.impl.Snapshot())

	saves := checkpointtest.Saves(w.cp)
	stop := errors.New("changed my mind")
	err = s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
		tx.Put("a", 0)
		tx.Delete("c")
		return stop
	})
	require.ErrorIs(t, err, stop)
	assert.Equal(t, want, collect(s), "an Update whose function fails changes nothing")
	assert.Equal(t, saves, checkpointtest.Saves(w.cp))

	// An Update is all or nothing on every side: legacy refuses the
	// second of its three writes.
	w.exp.FailWrites(1, 1, errors.New("legacy full"))
	err = s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
		tx.Put("x", 1)
		tx.Put("y", 2)
		tx.Put("z", 3)
		return nil
	})
	require.ErrorIs(t, err, migrate.ErrLegacyWrite)
	assert.Equal(t, want, collect(s))
	assert.Equal(t, want, w.impl.Snapshot(), "legacy writes of a failed Update are undone")
	snap, err = w.checkpointEntries(t)
	require.NoError(t, err)
	assert.Equal(t, want, snap.Entries, "the checkpoint is put back")
}

// TestUpdateIsSerializable runs concurrent read-modify-write Updates on one
// counter: none may be lost.
func TestUpdateIsSerializable(t *testing.T) {
	ctx := context.Background()
	_, s := restored(t, migrate.PhaseContract, false, nil)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				err := s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
					v, _ := tx.Get("n")
					tx.Put("n", v+1)
					return nil
				})
				if err != nil {
					t.Error(err)
				}
				if err := s.Put(ctx, fmt.Sprintf("side-%d-%d", g, i), i); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	v, _ := s.Get("n")
	assert.Equal(t, 200, v)
}

func TestAllIsASnapshot(t *testing.T) {
	ctx := context.Background()
	_, s := restored(t, migrate.PhaseExpand, true, map[string]int{"a": 1, "b": 2, "c": 3})
	seen := map[string]int{}
	for k, v := range s.All() {
		seen[k] = v
		// Writing from the loop body neither deadlocks nor changes the
		// iteration.
		require.NoError(t, s.Put(ctx, k+"'", v*10))
		require.NoError(t, s.Delete(ctx, "c"))
	}
	assert.Len(t, seen, 3)
	assert.Equal(t, 5, s.Len())
	n := 0
	for range s.All() {
		n++
		break
	}
	assert.Equal(t, 1, n, "All stops when the loop breaks")
}

func TestWriteContext(t *testing.T) {
	_, s := restored(t, migrate.PhaseContract, false, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Put(ctx, "a", 1)
	require.ErrorIs(t, err, context.Canceled)
	_, ok := s.Get("a")
	assert.False(t, ok)
	err = s.Update(ctx, func(tx *migrate.Tx[string, int]) error { tx.Put("b", 2); return nil })
	require.ErrorIs(t, err, context.Canceled)
}

// TestWriterWaitingBehindASlowSaveHonoursItsContext: a writer that cannot
// become leader gives up when its context ends and leaves no trace.
func TestWriterWaitingBehindASlowSaveHonoursItsContext(t *testing.T) {
	w := newWorld(false, nil)
	slow := &slowCheckpoint{Memory: checkpointtest.Reopen(t, w.cp), release: make(chan struct{}), entered: make(chan struct{}, 1)}
	s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseContract, Checkpoint: slow})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Restore(context.Background())
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { done <- s.Put(context.Background(), "first", 1) }()
	<-slow.entered
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err = s.Put(ctx, "second", 2)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(slow.release)
	require.NoError(t, <-done)
	_, ok := s.Get("second")
	assert.False(t, ok, "a write that gave up is not committed later")
	require.NoError(t, s.Put(context.Background(), "third", 3))
	_, ok = s.Get("second")
	assert.False(t, ok)
}

// slowCheckpoint holds every Commit until release is closed; after the
// first Commit, failNext (if set) fails the next one.
type slowCheckpoint struct {
	*checkpoint.Memory[string, int]
	release  chan struct{}
	entered  chan struct{}
	commits  int
	failNext error
}

func (c *slowCheckpoint) Commit(ctx context.Context, m checkpoint.Meta, ch []checkpoint.Change[string, int]) error {
	select {
	case c.entered <- struct{}{}:
	default:
	}
	<-c.release
	c.commits++
	if c.commits > 1 && c.failNext != nil {
		err := c.failNext
		c.failNext = nil
		return err
	}
	return c.Memory.Commit(ctx, m, ch)
}

// TestCheckpointWithoutCommit: a user's Checkpoint with only the methods
// the interface requires gets whole snapshots.
func TestCheckpointWithoutCommit(t *testing.T) {
	ctx := context.Background()
	w := newWorld(false, map[string]int{"a": 1})
	plain := &plainCheckpoint{m: checkpointtest.Reopen(t, w.cp)}
	s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseExpand, Legacy: w.impl, Checkpoint: plain, Equal: sameInt})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Restore(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "b", 2))
	require.NoError(t, s.Delete(ctx, "a"))
	snap, err := w.checkpointEntries(t)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"b": 2}, snap.Entries)
	assert.Equal(t, 3, plain.saves)
}

type plainCheckpoint struct {
	m     *checkpoint.Memory[string, int]
	saves int
}

func (p *plainCheckpoint) Load(ctx context.Context) (checkpoint.Snapshot[string, int], error) {
	return p.m.Load(ctx)
}

func (p *plainCheckpoint) Save(ctx context.Context, s checkpoint.Snapshot[string, int]) error {
	p.saves++
	return p.m.Save(ctx, s)
}

func (p *plainCheckpoint) Quarantine(ctx context.Context) (string, error) { return p.m.Quarantine(ctx) }

func (p *plainCheckpoint) BootID() string { return "" }

func (p *plainCheckpoint) Journal() checkpoint.JournalStatus { return checkpoint.JournalStatus{} }
