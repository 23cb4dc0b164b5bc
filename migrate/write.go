package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"go.uber.org/zap"

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

// request is one write waiting to be committed: a Put, a Delete, or an
// Update's changes, which commit together or not at all. Its ops have
// distinct identities.
type request[K comparable, V any] struct {
	ops  []op[K, V]
	done chan struct{}
	err  error // set before done is closed
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

// plan is an op resolved against the committed state: what the entry was,
// and so what every side must do, and undo.
type plan[K comparable, V any] struct {
	op      op[K, V]
	oldKey  K
	oldVal  V
	existed bool
}

// batchScratch is reused by every group commit; token guards it.
type batchScratch[K comparable, V any] struct {
	ids     map[K]struct{}
	changes []checkpoint.Change[K, V]
}

// Put stores value under key and returns once every side its phase writes
// has it durably. With Match, it replaces the entry of any matching key
// (and the stored key becomes key).
func (s *Store[K, V]) Put(ctx context.Context, key K, value V) error {
	return s.write(ctx, []op[K, V]{{key: key, val: value, id: s.id(key)}})
}

// Delete removes key's entry (with Match, the entry of any matching key)
// from every side its phase writes, and returns once that is durable.
// Deleting an entry that is not there is not an error.
func (s *Store[K, V]) Delete(ctx context.Context, key K) error {
	return s.write(ctx, []op[K, V]{{key: key, del: true, id: s.id(key)}})
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

// write queues a request and waits for a group commit to carry it. The
// first writer to find no commit in progress leads: it commits everything
// queued (up to maxBatch) in one save, and again until its own write is
// done. The others wait for their own write, or for the lead if the leader
// left before reaching them. A lone writer leads at once: there is no
// timer.
func (s *Store[K, V]) write(ctx context.Context, ops []op[K, V]) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	r := &request[K, V]{ops: ops, done: make(chan struct{})}
	s.qmu.Lock()
	s.queue = append(s.queue, r)
	s.qmu.Unlock()
	for {
		select {
		case <-r.done:
			return r.err
		case s.token <- struct{}{}:
			for !r.finished() {
				batch := s.take(nil)
				if len(batch) == 0 {
					break
				}
				s.commitBatch(ctx, batch)
			}
			s.release()
		case <-ctx.Done():
			if s.withdraw(r) {
				return fmt.Errorf("migrate: %w", ctx.Err())
			}
			<-r.done // a leader is committing it: its outcome is the answer
			return r.err
		}
	}
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

// take removes from the queue, oldest first, the requests that touch no
// entry that first (if any) or an earlier taken request touches, up to
// maxBatch. A request that does stays queued for the next batch, so that
// every change in a batch can be undone on its own.
func (s *Store[K, V]) take(first *request[K, V]) []*request[K, V] {
	ids := s.batch.ids
	if ids == nil {
		ids = make(map[K]struct{})
		s.batch.ids = ids
	}
	clear(ids)
	var batch []*request[K, V]
	if first != nil {
		batch = append(batch, first)
		for _, o := range first.ops {
			ids[o.id] = struct{}{}
		}
	}
	s.qmu.Lock()
	defer s.qmu.Unlock()
	kept := s.queue[:0]
	for _, q := range s.queue {
		if len(batch) >= maxBatch || touches(q, ids) {
			kept = append(kept, q)
			continue
		}
		for _, o := range q.ops {
			ids[o.id] = struct{}{}
		}
		batch = append(batch, q)
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	return batch
}

func touches[K comparable, V any](r *request[K, V], ids map[K]struct{}) bool {
	for _, o := range r.ops {
		if _, ok := ids[o.id]; ok {
			return true
		}
	}
	return false
}

// resolve turns a request's ops into plans against the committed state.
// Deletes of absent entries drop out.
func (s *Store[K, V]) resolve(r *request[K, V]) []plan[K, V] {
	plans := make([]plan[K, V], 0, len(r.ops))
	for _, o := range r.ops {
		p := plan[K, V]{op: o}
		p.oldKey, p.existed = s.state.lookup(o.id)
		if p.existed {
			p.oldVal = s.state.vals[p.oldKey]
		}
		if o.del && !p.existed {
			// Nothing in memory, but a legacy the Store writes may still
			// hold the key (an entry a partial listing could not read, a
			// write whose undo failed): a Delete reaches it there.
			if !s.writesLegacy() {
				continue
			}
			p.oldKey = o.key
		}
		plans = append(plans, p)
	}
	return plans
}

// pending is a request in a batch with its plans.
type pending[K comparable, V any] struct {
	req   *request[K, V]
	plans []plan[K, V]
	err   error
}

// commitBatch writes a batch to the sides the phase writes, in the order
// that keeps the side Restore reads from never behind, applies what
// succeeded to memory and releases every caller.
func (s *Store[K, V]) commitBatch(ctx context.Context, batch []*request[K, V]) {
	// The batch carries other callers' writes: the leader's cancellation
	// must not cut them short.
	ctx = context.WithoutCancel(ctx)
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		for _, r := range batch {
			r.finish(fmt.Errorf("migrate: %w", ErrClosed))
		}
		return
	}

	work := make([]*pending[K, V], 0, len(batch))
	for _, r := range batch {
		work = append(work, &pending[K, V]{req: r, plans: s.resolve(r)})
	}
	s.straighten(ctx)
	if s.cfg.Phase.primaryIsLegacy() {
		s.commitLegacyFirst(ctx, work)
	} else {
		s.commitCheckpointFirst(ctx, work)
	}

	s.mu.Lock()
	for _, w := range work {
		if w.err == nil {
			s.apply(w.plans)
		}
	}
	s.mu.Unlock()
	for _, w := range work {
		w.req.finish(w.err)
	}
}

func (s *Store[K, V]) writesLegacy() bool { return s.explicit != nil && s.cfg.Phase.WritesLegacy() }

func (s *Store[K, V]) writesCheckpoint() bool {
	return s.cfg.Checkpoint != nil && s.cfg.Phase.WritesCheckpoint()
}

// commitLegacyFirst is phases 0 and 1: legacy, then the checkpoint. A
// failed save undoes the legacy writes of the requests it carried.
func (s *Store[K, V]) commitLegacyFirst(ctx context.Context, work []*pending[K, V]) {
	if s.writesLegacy() {
		for _, w := range work {
			w.err = s.writeLegacy(ctx, w.plans)
		}
	}
	if !s.writesCheckpoint() {
		return
	}
	s.saveCheckpoint(ctx, work, func(w *pending[K, V]) {
		if !s.writesLegacy() {
			return
		}
		if err := s.undoLegacy(ctx, w.plans, len(w.plans), 0); err != nil {
			w.err = outcomeUnknown(w.err, "legacy may hold it", err)
			s.stray(w.plans)
		}
	})
}

// commitCheckpointFirst is phases 2 and 3: the checkpoint, then legacy. A
// legacy failure takes its request back out of the checkpoint with another
// save.
func (s *Store[K, V]) commitCheckpointFirst(ctx context.Context, work []*pending[K, V]) {
	if s.writesCheckpoint() {
		s.saveCheckpoint(ctx, work, nil)
	}
	if !s.writesLegacy() {
		return
	}
	var refused []*pending[K, V]
	for _, w := range work {
		if w.err == nil {
			if w.err = s.writeLegacy(ctx, w.plans); w.err != nil {
				refused = append(refused, w)
			}
		}
	}
	if len(refused) == 0 || !s.writesCheckpoint() {
		return
	}
	if err := s.restoreCheckpoint(ctx, work); err != nil {
		for _, w := range refused {
			w.err = outcomeUnknown(w.err, "the checkpoint may hold it until the next successful save", err)
		}
	}
}

// stray records that legacy may hold what plans wrote, against memory.
func (s *Store[K, V]) stray(plans []plan[K, V]) {
	if s.strays == nil {
		s.strays = make(map[K][]K)
	}
	for _, p := range plans {
		s.strays[p.op.id] = append(s.strays[p.op.id], p.op.key, p.oldKey)
	}
}

// straighten writes legacy back in line with memory for the entries a
// failed undo left astray, before a commit builds on them: a later Delete
// of such an entry finds nothing in memory and would write nothing. What
// cannot be written stays astray for the next commit.
func (s *Store[K, V]) straighten(ctx context.Context) {
	if len(s.strays) == 0 || !s.writesLegacy() {
		return
	}
	for id, keys := range s.strays {
		if err := s.straightenOne(ctx, id, keys); err != nil {
			s.log.Warn("writing legacy back in line after a failed undo failed again", zap.Any("key", id), zap.Error(err))
			continue
		}
		delete(s.strays, id)
	}
}

func (s *Store[K, V]) straightenOne(ctx context.Context, id K, keys []K) error {
	s.mu.RLock()
	k, ok := s.state.lookup(id)
	v := s.state.vals[k]
	s.mu.RUnlock()
	if ok {
		if err := s.explicit.Put(ctx, k, v); err != nil {
			return err
		}
	}
	for _, sk := range keys {
		if ok && sk == k {
			continue
		}
		if err := s.explicit.Delete(ctx, sk); err != nil {
			return err
		}
	}
	return nil
}

// outcomeUnknown says that a write failed and undoing what it already
// wrote on another side failed too: which way it went is not known.
func outcomeUnknown(err error, where string, undo error) error {
	return fmt.Errorf("%w; %w: %s (undoing it failed: %w)", err, ErrOutcomeUnknown, where, undo)
}

// A plan makes up to two legacy writes, in this order: the entry itself
// (put or delete), and the removal of the key it was stored under before (a
// Put with a new key for a matching entry).
const (
	stepEntry = iota
	stepOldKey
	numSteps
)

// needed reports whether plan p makes legacy write step.
func needed[K comparable, V any](p plan[K, V], step int) bool {
	o := p.op
	if step == stepEntry {
		return true
	}
	return !o.del && p.existed && p.oldKey != o.key
}

// legacyStep performs, or with undo reverses, one legacy write of p.
func (s *Store[K, V]) legacyStep(ctx context.Context, p plan[K, V], step int, undo bool) error {
	o := p.op
	switch {
	case step == stepEntry && o.del:
		if !undo {
			return s.explicit.Delete(ctx, p.oldKey)
		}
		if !p.existed {
			return nil // what a blind Delete removed is not known
		}
		return s.explicit.Put(ctx, p.oldKey, p.oldVal)
	case step == stepEntry:
		if !undo {
			return s.explicit.Put(ctx, o.key, o.val)
		}
		if p.existed && p.oldKey == o.key {
			return s.explicit.Put(ctx, o.key, p.oldVal)
		}
		return s.explicit.Delete(ctx, o.key)
	default:
		if undo {
			return s.explicit.Put(ctx, p.oldKey, p.oldVal)
		}
		return s.explicit.Delete(ctx, p.oldKey)
	}
}

// writeLegacy makes the legacy writes of plans, in order; on a failure it
// undoes the ones made and returns an error wrapping ErrLegacyWrite (and
// ErrOutcomeUnknown if undoing failed too).
func (s *Store[K, V]) writeLegacy(ctx context.Context, plans []plan[K, V]) error {
	for pi, p := range plans {
		for step := range numSteps {
			if !needed(p, step) {
				continue
			}
			if err := s.legacyStep(ctx, p, step, false); err != nil {
				s.log.Warn("legacy write failed", zap.Any("key", p.op.key), zap.Error(err))
				err = fmt.Errorf("migrate: %w: %w", ErrLegacyWrite, err)
				if uerr := s.undoLegacy(ctx, plans, pi, step); uerr != nil {
					err = outcomeUnknown(err, "legacy may hold part of it", uerr)
					s.stray(plans)
				}
				return err
			}
		}
	}
	return nil
}

// undoLegacy reverses, newest first, the legacy writes of plans made before
// step of plans[upTo] (upTo == len(plans) undoes them all). It tries every
// one and returns the first failure.
func (s *Store[K, V]) undoLegacy(ctx context.Context, plans []plan[K, V], upTo, step int) error {
	var first error
	for pi := min(upTo, len(plans)-1); pi >= 0; pi-- {
		last := numSteps - 1
		if pi == upTo {
			last = step - 1
		}
		for st := last; st >= 0; st-- {
			if !needed(plans[pi], st) {
				continue
			}
			if err := s.legacyStep(ctx, plans[pi], st, true); err != nil {
				s.log.Error("compensating a legacy write failed; legacy may hold a write that was not acknowledged",
					zap.Any("key", plans[pi].op.key), zap.Error(err))
				if first == nil {
					first = err
				}
			}
		}
	}
	return first
}

// changes returns the checkpoint changes of plans, appended to dst.
func changes[K comparable, V any](dst []checkpoint.Change[K, V], plans []plan[K, V]) []checkpoint.Change[K, V] {
	for _, p := range plans {
		o := p.op
		if o.del {
			if p.existed {
				dst = append(dst, checkpoint.Change[K, V]{Key: p.oldKey, Delete: true})
			}
			continue
		}
		if p.existed && p.oldKey != o.key {
			dst = append(dst, checkpoint.Change[K, V]{Key: p.oldKey, Delete: true})
		}
		dst = append(dst, checkpoint.Change[K, V]{Key: o.key, Value: o.val})
	}
	return dst
}

// saveCheckpoint saves the changes of every request in work that has not
// failed, in one save. A key or value that cannot be encoded fails only its
// own request (found by encoding each, on that rare path). When the save
// fails, every request in it fails with ErrCheckpointWrite, after undo.
func (s *Store[K, V]) saveCheckpoint(ctx context.Context, work []*pending[K, V], undo func(*pending[K, V])) {
	for attempt := 0; ; attempt++ {
		err := s.saveLive(ctx, work, false)
		if err == nil {
			return
		}
		if errors.Is(err, checkpoint.ErrEncode) && attempt == 0 {
			for _, w := range work {
				if w.err == nil {
					if eerr := encodable(w.plans); eerr != nil {
						s.log.Warn("a write cannot be encoded for the checkpoint", zap.Error(eerr))
						w.err = fmt.Errorf("migrate: %w: %w", ErrCheckpointWrite, eerr)
						if undo != nil {
							undo(w)
						}
					}
				}
			}
			continue
		}
		s.log.Warn("checkpoint write failed", zap.Error(err))
		for _, w := range work {
			if w.err == nil {
				w.err = fmt.Errorf("migrate: %w: %w", ErrCheckpointWrite, err)
				if undo != nil {
					undo(w)
				}
			}
		}
		return
	}
}

func encodable[K comparable, V any](plans []plan[K, V]) error {
	for _, p := range plans {
		if _, err := json.Marshal(p.op.key); err != nil {
			return fmt.Errorf("%w: key %v: %v", checkpoint.ErrEncode, p.op.key, err)
		}
		if !p.op.del {
			if _, err := json.Marshal(p.op.val); err != nil {
				return fmt.Errorf("%w: value of key %v: %v", checkpoint.ErrEncode, p.op.key, err)
			}
		}
	}
	return nil
}

// saveLive saves the changes of the requests in work that have not failed.
// Unless force, it saves nothing when there is nothing to change.
func (s *Store[K, V]) saveLive(ctx context.Context, work []*pending[K, V], force bool) error {
	chs := s.batch.changes[:0]
	for _, w := range work {
		if w.err == nil {
			chs = changes(chs, w.plans)
		}
	}
	defer func() { clear(chs); s.batch.changes = chs[:0] }()
	if len(chs) == 0 && !force && !s.fullSave {
		return nil
	}
	if s.commit != nil && !s.fullSave {
		return s.commit.Commit(ctx, s.meta, chs)
	}
	// Without an incremental Commit (or when the checkpoint may have
	// drifted from memory), save memory with the changes applied.
	snap := make(map[K]V, len(s.state.vals)+len(chs))
	maps.Copy(snap, s.state.vals)
	for _, c := range chs {
		if c.Delete {
			delete(snap, c.Key)
		} else {
			snap[c.Key] = c.Value
		}
	}
	if err := s.cfg.Checkpoint.Save(ctx, checkpoint.Snapshot[K, V]{Meta: s.meta, Entries: snap}); err != nil {
		return err
	}
	s.fullSave = false
	return nil
}

// restoreCheckpoint runs after legacy refused some writes that the
// checkpoint already has: it saves the checkpoint again without them. If
// that fails too, the next commit saves the whole state.
func (s *Store[K, V]) restoreCheckpoint(ctx context.Context, work []*pending[K, V]) error {
	s.fullSave = true
	if err := s.saveLive(ctx, work, true); err != nil {
		s.log.Error("undoing a checkpoint write after a legacy failure failed; the next write saves the whole state", zap.Error(err))
		s.fullSave = true
		return err
	}
	return nil
}

// apply makes plans the committed state. The caller holds mu and token.
func (s *Store[K, V]) apply(plans []plan[K, V]) {
	st := &s.state
	for _, p := range plans {
		o := p.op
		if p.existed {
			delete(st.vals, p.oldKey)
			delete(st.origin, p.oldKey)
		}
		if o.del {
			if st.ids != nil {
				delete(st.ids, o.id)
			}
			continue
		}
		st.vals[o.key] = o.val
		if st.ids != nil {
			st.ids[o.id] = o.key
		}
		if st.origin == nil {
			st.origin = make(map[K]Origin)
		}
		st.origin[o.key] = OriginWrite
	}
}

// Tx is the set of changes an Update makes. Its methods must only be
// called from the Update function that received it.
type Tx[K comparable, V any] struct {
	s   *Store[K, V]
	ops []op[K, V]
	at  map[K]int // identity -> index in ops
}

// Get returns key's value as the transaction sees it: the committed value,
// or the transaction's own change.
func (tx *Tx[K, V]) Get(key K) (V, bool) {
	id := tx.s.id(key)
	if i, ok := tx.at[id]; ok {
		if tx.ops[i].del {
			var zero V
			return zero, false
		}
		return tx.ops[i].val, true
	}
	return tx.s.Get(key)
}

// Put stores value under key when the transaction commits.
func (tx *Tx[K, V]) Put(key K, value V) { tx.set(op[K, V]{key: key, val: value}) }

// Delete removes key's entry when the transaction commits.
func (tx *Tx[K, V]) Delete(key K) { tx.set(op[K, V]{key: key, del: true}) }

func (tx *Tx[K, V]) set(o op[K, V]) {
	o.id = tx.s.id(o.key)
	if i, ok := tx.at[o.id]; ok {
		tx.ops[i] = o
		return
	}
	if tx.at == nil {
		tx.at = make(map[K]int)
	}
	tx.at[o.id] = len(tx.ops)
	tx.ops = append(tx.ops, o)
}

// Update runs fn on a transaction and commits its changes as one: every
// side sees all of them or none. If fn returns an error, nothing is
// written and Update returns that error. The checkpoint takes the changes
// in one save, so a crash leaves all of them or none there; an explicit
// legacy source takes one write per key, so a crash between those writes
// can leave part of the Update in legacy (a failure, unlike a crash, is
// compensated). fn runs once, against the
// committed state, while no other write commits, so what it reads stays
// true until its changes are durable; fn must not call the Store's write
// methods (Put, Delete, Update), which would wait for it forever.
func (s *Store[K, V]) Update(ctx context.Context, fn func(tx *Tx[K, V]) error) error {
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.acquire(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer s.release()
	if err := s.usable(); err != nil {
		return err
	}
	tx := &Tx[K, V]{s: s}
	if err := fn(tx); err != nil {
		return err
	}
	if len(tx.ops) == 0 {
		return nil
	}
	r := &request[K, V]{ops: tx.ops, done: make(chan struct{})}
	// Writes queued meanwhile ride along if they touch other entries.
	s.commitBatch(ctx, s.take(r))
	return r.err
}
