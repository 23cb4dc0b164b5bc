package migrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// maxBatch bounds how many writes one group commit carries, so that a
// writer that joins a long queue is not held for an unbounded save.
const maxBatch = 1024

// op is one change a write asks for.
type op[K comparable, V any] struct {
	key K
	val V
	del bool
	id  K // s.id(key)
}

// request is one write waiting to be committed: a Put or a Delete (ops), an
// Update (fn) or a Replace (snapshot, with entries), whose changes commit
// together or not at all.
type request[K comparable, V any] struct {
	ops      []op[K, V]
	fn       func(tx *Tx[K, V]) error
	snapshot bool
	entries  map[K]V
	done     chan struct{}
	err      error // set before done is closed
	// panicked holds what fn panicked with, to panic with again in the
	// caller's goroutine.
	panicked any
}

func (r *request[K, V]) finish(err error) {
	r.err = err
	close(r.done)
}

func (r *request[K, V]) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// plan is an op resolved against the state it changes: what the entry was,
// and so what every side must do, and undo.
type plan[K comparable, V any] struct {
	op      op[K, V]
	oldKey  K
	oldVal  V
	existed bool
	// enc is the op as the checkpoint writes it, encoded when it was
	// checked (see encodable), for a checkpoint.EncodedCommitter.
	enc checkpoint.EncodedChange[K, V]
}

// batchScratch is reused by every group commit; token guards it.
type batchScratch[K comparable, V any] struct {
	changes []checkpoint.Change[K, V]
	encoded []checkpoint.EncodedChange[K, V]
}

// Put stores value under key and returns once every side its phase writes
// has it durably. With Match, it replaces the entry of any matching key
// (and the stored key becomes key).
//
// The context is honoured while the write waits for its turn: if it is done
// before a group commit takes the write, Put returns its error and nothing
// was written (an already done context writes nothing). Once a commit has
// taken it, the write runs to its end whatever the context says, and Put
// returns its outcome: nil means durable, even if the deadline passed
// meanwhile. An error other than the context's says what failed (see
// ErrCheckpointWrite, ErrLegacyWrite, ErrOutcomeUnknown).
func (s *Store[K, V]) Put(ctx context.Context, key K, value V) error {
	return s.write(ctx, &request[K, V]{ops: []op[K, V]{{key: key, val: value, id: s.id(key)}}})
}

// Delete removes key's entry (with Match, the entry of any matching key)
// from every side its phase writes, and returns once that is durable.
// Deleting an entry that is not there is not an error; in the phases that
// write an explicit legacy, the Delete still reaches legacy, which
// may hold the key (an entry a partial listing could not read). The context
// is honoured as Put says.
func (s *Store[K, V]) Delete(ctx context.Context, key K) error {
	return s.write(ctx, &request[K, V]{ops: []op[K, V]{{key: key, del: true, id: s.id(key)}}})
}

func (s *Store[K, V]) usable() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("migrate: %w", ErrClosed)
	}
	if !s.restored {
		return fmt.Errorf("migrate: %w", ErrNotRestored)
	}
	return nil
}

// write queues r and waits for a group commit to carry it. The first
// writer to find no commit in progress leads: it commits everything queued
// (up to maxBatch) in one save, and again until its own write is done. The
// others wait for their own write, or for the lead if the leader left
// before reaching them. A lone writer leads at once: there is no timer.
func (s *Store[K, V]) write(ctx context.Context, r *request[K, V]) error {
	if err := s.usable(); err != nil {
		s.countWrite(r, err)
		return err
	}
	if err := ctx.Err(); err != nil {
		err = fmt.Errorf("migrate: %w", err)
		s.countWrite(r, err)
		return err
	}
	r.done = make(chan struct{})
	s.qmu.Lock()
	s.queue = append(s.queue, r)
	s.qmu.Unlock()
	err := s.await(ctx, r)
	s.countWrite(r, err)
	if r.panicked != nil {
		panic(r.panicked)
	}
	return err
}

// countWrite counts a write that returned, for Stats.
func (s *Store[K, V]) countWrite(r *request[K, V], err error) {
	c := &s.stats
	switch {
	case err != nil:
		c.writeErrors.Add(1)
		if errors.Is(err, ErrOutcomeUnknown) {
			c.outcomeUnknown.Add(1)
		}
	case r.fn != nil || r.snapshot:
		c.updates.Add(1)
	case r.ops[0].del:
		c.deletes.Add(1)
	default:
		c.puts.Add(1)
	}
}

// await leads or waits until r is done, or withdraws it if ctx is done
// first.
func (s *Store[K, V]) await(ctx context.Context, r *request[K, V]) error {
	for {
		select {
		case <-r.done:
			return r.err
		case s.token <- struct{}{}:
			// select picks at random among ready cases: a context done
			// already withdraws the write rather than lead it.
			if ctx.Err() != nil && s.withdraw(r) {
				s.release()
				return fmt.Errorf("migrate: %w", ctx.Err())
			}
			s.lead(ctx, r)
		case <-ctx.Done():
			if s.withdraw(r) {
				return fmt.Errorf("migrate: %w", ctx.Err())
			}
			<-r.done // a leader is committing it: its outcome is the answer
			return r.err
		}
	}
}

// lead commits batches, holding the write token, until r is done.
func (s *Store[K, V]) lead(ctx context.Context, r *request[K, V]) {
	defer s.release()
	for !r.finished() {
		batch := s.take()
		if len(batch) == 0 {
			break
		}
		s.commitGuarded(ctx, batch)
	}
}

// commitGuarded commits batch. A panic the commit does not turn into a
// write's failure (a user's Checkpoint whose Commit or Save panics) fails
// the writes of the batch not yet finished, whose outcome is then unknown,
// and panics again in the leader's goroutine, after the write token is
// released.
func (s *Store[K, V]) commitGuarded(ctx context.Context, batch []*request[K, V]) {
	defer func() {
		if p := recover(); p != nil {
			for _, q := range batch {
				if !q.finished() {
					q.finish(fmt.Errorf("migrate: %w: the commit that carried it panicked (a %T): legacy and the checkpoint may hold part of it", ErrOutcomeUnknown, p))
				}
			}
			panic(p)
		}
	}()
	s.commitBatch(ctx, batch)
}

// withdraw removes r from the queue if no leader has taken it.
func (s *Store[K, V]) withdraw(r *request[K, V]) bool {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	for i, q := range s.queue {
		if q == r {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			return true
		}
	}
	return false
}

// take removes up to maxBatch requests from the queue, oldest first.
func (s *Store[K, V]) take() []*request[K, V] {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	n := min(len(s.queue), maxBatch)
	batch := make([]*request[K, V], n)
	copy(batch, s.queue)
	clear(s.queue[:n])
	s.queue = s.queue[n:]
	return batch
}
