package migrate_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// panicky is an explicit legacy whose writer panics on one key while
// armed, as a buggy adapter would.
type panicky struct {
	source.Map[string, int]
	key   string
	armed atomic.Bool
}

func (p *panicky) Put(ctx context.Context, k string, v int) error {
	if p.armed.Load() && k == p.key {
		panic("legacy writer bug")
	}
	return p.Map.Put(ctx, k, v)
}

// caught runs f and returns what it panicked with, if anything.
func caught(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

// TestLegacyWriterPanic: a legacy writer that panics fails only the write
// it was making, which panics again in its own caller's goroutine (as an
// Update function's panic does), whichever writer led the commit; the
// others of the batch commit, the Store stays usable and Close returns.
func TestLegacyWriterPanic(t *testing.T) {
	ctx := context.Background()
	leg := &panicky{key: "p"}
	cp := checkpoint.NewMemory[string, int]()
	slow := &slowCheckpoint{Memory: checkpointtest.Reopen(t, cp), release: make(chan struct{}), entered: make(chan struct{}, 1)}
	s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: leg, Checkpoint: slow})
	require.NoError(t, err)
	_, err = s.Restore(ctx)
	require.NoError(t, err)
	leg.armed.Store(true)

	// Another writer leads the batch that carries the panicking write.
	holder := make(chan error, 1)
	go func() { holder <- s.Put(ctx, "holder", 0) }()
	<-slow.entered
	panicked := make(chan any, 1)
	go func() { panicked <- caught(func() { _ = s.Put(ctx, "p", 1) }) }()
	others := make(chan error, 1)
	waitQueued(t, s, 1)
	go func() { others <- s.Put(ctx, "b", 2) }()
	waitQueued(t, s, 2)
	close(slow.release)

	require.NoError(t, <-holder, "the leader goes on")
	assert.Equal(t, "legacy writer bug", <-panicked, "the panic reaches the write's own caller")
	require.NoError(t, <-others, "the rest of the batch commits")
	_, ok := s.Get("p")
	assert.False(t, ok, "the panicking write is not served")

	// The Store is usable: once the writer is fixed, a write to the same
	// key succeeds (legacy is written back in line first).
	leg.armed.Store(false)
	require.NoError(t, s.Put(ctx, "p", 3))
	require.NoError(t, s.Close())
	got, err := checkpointtest.Reopen(t, cp).Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"holder": 0, "b": 2, "p": 3}, got.Entries)
	v, _ := leg.Get("p")
	assert.Equal(t, 3, v)
}

// heldCheckpoint is a user's Checkpoint whose first Commit waits until
// released, and whose later ones panic while armed.
type heldCheckpoint[V any] struct {
	*checkpoint.Memory[string, V]
	entered, release chan struct{}
	held, armed      atomic.Bool
}

func newHeldCheckpoint[V any]() *heldCheckpoint[V] {
	return &heldCheckpoint[V]{Memory: checkpoint.NewMemory[string, V](), entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (c *heldCheckpoint[V]) Commit(ctx context.Context, m checkpoint.Meta, ch []checkpoint.Change[string, V]) error {
	if !c.held.Swap(true) {
		c.entered <- struct{}{}
		<-c.release // the held commit itself goes through
	} else if c.armed.Load() {
		panic("checkpoint bug")
	}
	return c.Memory.Commit(ctx, m, ch)
}

// TestCheckpointPanic: a user's Checkpoint that panics in a commit (code
// the commit does not turn into one write's failure) panics in the
// goroutine that led it; the other writes of the batch fail with their
// outcome unknown instead of waiting for ever, and the Store stays usable.
func TestCheckpointPanic(t *testing.T) {
	ctx := context.Background()
	cp := newHeldCheckpoint[int]()
	s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseContract, Checkpoint: cp})
	require.NoError(t, err)
	_, err = s.Restore(ctx)
	require.NoError(t, err)

	holder := make(chan error, 1)
	go func() { holder <- s.Put(ctx, "holder", 0) }()
	<-cp.entered
	type outcome struct {
		err      error
		panicked any
	}
	out := make(chan outcome, 2)
	for i, k := range []string{"a", "b"} {
		go func() {
			var o outcome
			o.panicked = caught(func() { o.err = s.Put(ctx, k, 1) })
			out <- o
		}()
		waitQueued(t, s, i+1)
	}
	cp.armed.Store(true)
	close(cp.release)
	require.NoError(t, <-holder)
	got := []outcome{<-out, <-out}
	if got[0].panicked == nil {
		got[0], got[1] = got[1], got[0]
	}
	assert.Equal(t, "checkpoint bug", got[0].panicked, "the leader panics")
	assert.Nil(t, got[1].panicked)
	assert.ErrorIs(t, got[1].err, migrate.ErrOutcomeUnknown, "the other write of the batch is released")

	cp.armed.Store(false)
	require.NoError(t, s.Put(ctx, "c", 1), "the write token was released")
	require.NoError(t, s.Close())
}

// waitQueued waits until n writes are queued behind the leader.
func waitQueued(t *testing.T, s *migrate.Store[string, int], n int) {
	t.Helper()
	waitQueued2(t, func() int { return migrate.QueuedWrites(s) }, n)
}

// touchy is a value whose MarshalJSON panics on 13.
type touchy int

func (v touchy) MarshalJSON() ([]byte, error) {
	if v == 13 {
		panic("marshal bug")
	}
	return []byte(strconv.Itoa(int(v))), nil
}

// TestMarshalPanic: a value whose MarshalJSON panics fails its own write,
// whose caller panics with the same value (as an Update function's panic
// does), whichever writer leads the batch; the others commit, nothing of
// it is written and the Store stays usable.
func TestMarshalPanic(t *testing.T) {
	ctx := context.Background()
	cp := newHeldCheckpoint[touchy]()
	s, err := migrate.New(migrate.Config[string, touchy]{Phase: migrate.PhaseContract, Checkpoint: cp})
	require.NoError(t, err)
	_, err = s.Restore(ctx)
	require.NoError(t, err)

	holder := make(chan error, 1)
	go func() { holder <- s.Put(ctx, "holder", 0) }()
	<-cp.entered
	other := make(chan any, 1)
	go func() {
		var err error
		p := caught(func() { err = s.Put(ctx, "b", 2) })
		other <- [2]any{p, err}
	}()
	waitQueued2(t, func() int { return migrate.QueuedWrites(s) }, 1)
	touched := make(chan any, 1)
	go func() { touched <- caught(func() { _ = s.Put(ctx, "k", 13) }) }()
	waitQueued2(t, func() int { return migrate.QueuedWrites(s) }, 2)
	close(cp.release)

	require.NoError(t, <-holder)
	assert.Equal(t, [2]any{nil, nil}, <-other, "the write that led the batch commits, and does not panic")
	assert.Equal(t, "marshal bug", <-touched, "the panic reaches the write's own caller")
	_, ok := s.Get("k")
	assert.False(t, ok)
	require.NoError(t, s.Put(ctx, "k", 1))
	require.NoError(t, s.Close())
	got, err := checkpointtest.Reopen(t, cp.Memory).Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]touchy{"holder": 0, "b": 2, "k": 1}, got.Entries)
}

// waitQueued2 waits until queued reports n writes.
func waitQueued2(t *testing.T, queued func() int, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes never queued (%d did)", n, queued())
		}
		runtime.Gosched()
	}
}
