package migrate

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// A group commit takes the queued requests in order. Each runs against the
// committed state with the changes of the requests before it in the batch
// (an overlay), as if it ran alone after them: a Put or a Delete resolves
// against it, an Update's function reads it through its Tx. A request that
// fails on its own (its function returns an error or panics, a value cannot
// be encoded, legacy refuses it) drops out before the next one runs, so
// nothing later builds on it. A legacy that is a source.BatchWriter instead
// takes the changes of every request left in one Write; if it fails, they
// all fail. Then one checkpoint save carries every request that is left; if
// it fails, they all fail, and their legacy writes are undone newest first.

// pending is a request of a batch that has passed its own checks, with its
// plans.
type pending[K comparable, V any] struct {
	req   *request[K, V]
	plans []plan[K, V]
}

// slot is what an overlay says of one entry.
type slot[K comparable, V any] struct {
	key     K
	val     V
	present bool
	pos     int                            // the entry's index in overlay.order
	enc     checkpoint.EncodedChange[K, V] // the put of key and val, encoded (see plan.enc)
}

// overlay is the committed state with a batch's changes on top, by
// identity. The token holder alone uses it.
type overlay[K comparable, V any] struct {
	st      *state[K, V]
	changed map[K]slot[K, V]
	// order is the identities in changed, in the order they entered it:
	// Tx.All walks them by index, so that it can tell which it has passed.
	order []K
	// mark is the batch's mark in the state's entry list once a Tx.All
	// has run in it (0 before): every committed entry in changed carries
	// it, for Tx.All to skip (see tx.go).
	mark uint64
}

// lookup finds the entry of identity id.
func (ov *overlay[K, V]) lookup(id K) (K, V, bool) {
	if sl, ok := ov.changed[id]; ok {
		return sl.key, sl.val, sl.present
	}
	if ov.st.ids == nil {
		v, ok := ov.st.vals[id] // one lookup: Replace makes one per entry
		return id, v, ok
	}
	k, ok := ov.st.lookup(id)
	return k, ov.st.vals[k], ok
}

// resolve turns ops into plans against the overlay. A Delete of an absent
// entry stays only where it reaches an explicit legacy.
func (s *Store[K, V]) resolve(ov *overlay[K, V], ops []op[K, V]) []plan[K, V] {
	plans := make([]plan[K, V], 0, len(ops))
	for _, o := range ops {
		p := plan[K, V]{op: o}
		p.oldKey, p.oldVal, p.existed = ov.lookup(o.id)
		if o.del && !p.existed {
			// Nothing in memory, but an explicit legacy may still
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

// put records plans in the overlay.
func (ov *overlay[K, V]) put(plans []plan[K, V]) {
	for _, p := range plans {
		if ov.mark != 0 {
			ov.markEntry(p.op.id, ov.mark)
		}
		prev, ok := ov.changed[p.op.id]
		if !ok {
			prev.pos = len(ov.order)
			ov.order = append(ov.order, p.op.id)
		}
		sl := slot[K, V]{pos: prev.pos}
		if !p.op.del {
			sl.key, sl.val, sl.present, sl.enc = p.op.key, p.op.val, true, p.enc
		}
		ov.changed[p.op.id] = sl
	}
}

// markEntry puts mark m on the committed entry of identity id in the
// state's entry list, if there is one.
func (ov *overlay[K, V]) markEntry(id K, m uint64) {
	if k, ok := ov.st.lookup(id); ok {
		ov.st.list.mark(k, m)
	}
}

// changes returns the checkpoint changes that take the committed state to
// the overlay's, appended to dst.
func (ov *overlay[K, V]) changes(dst []checkpoint.Change[K, V]) []checkpoint.Change[K, V] {
	for id, sl := range ov.changed {
		old, had := ov.st.lookup(id)
		if had && (!sl.present || old != sl.key) {
			dst = append(dst, checkpoint.Change[K, V]{Key: old, Delete: true})
		}
		if sl.present {
			dst = append(dst, checkpoint.Change[K, V]{Key: sl.key, Value: sl.val})
		}
	}
	return dst
}

// encoded returns the changes of changes, as the puts were encoded when
// they were checked, appended to dst.
func (ov *overlay[K, V]) encoded(dst []checkpoint.EncodedChange[K, V]) []checkpoint.EncodedChange[K, V] {
	for id, sl := range ov.changed {
		old, had := ov.st.lookup(id)
		if had && (!sl.present || old != sl.key) {
			del, _ := checkpoint.EncodeChange(checkpoint.Change[K, V]{Key: old, Delete: true}) // a delete never fails
			dst = append(dst, del)
		}
		if sl.present {
			dst = append(dst, sl.enc)
		}
	}
	return dst
}

func (s *Store[K, V]) writesLegacy() bool { return s.explicit != nil && s.cfg.Phase.WritesLegacy() }

// batchesLegacy reports whether a commit writes legacy in one Write of a
// source.BatchWriter, after every request is staged, rather than request
// by request.
func (s *Store[K, V]) batchesLegacy() bool { return s.batched != nil && s.writesLegacy() }

func (s *Store[K, V]) writesCheckpoint() bool {
	return s.cfg.Checkpoint != nil && s.cfg.Phase.WritesCheckpoint()
}

// commitBatch commits batch: each request against the overlay and to
// legacy in turn, then one checkpoint save, then memory; and releases every
// caller.
func (s *Store[K, V]) commitBatch(ctx context.Context, batch []*request[K, V]) {
	// The batch carries other callers' writes: the leader's cancellation
	// must not cut them short.
	ctx = context.WithoutCancel(ctx)
	if err := s.usable(); err != nil {
		for _, r := range batch {
			r.finish(err)
		}
		return
	}
	s.straighten(ctx)
	ov := &overlay[K, V]{st: &s.state, changed: make(map[K]slot[K, V])}
	done := make([]*pending[K, V], 0, len(batch))
	for _, r := range batch {
		if p := s.stage(ctx, ov, r); p != nil {
			done = append(done, p)
		}
	}
	if len(done) > 0 && s.batchesLegacy() && !s.writeLegacyBatch(ctx, done) {
		done = nil // the overlay is dropped with them
	}
	if len(done) > 0 {
		if err := s.save(ctx, ov); err != nil {
			s.fail(ctx, done, err)
			done = nil
		}
	}
	if len(done) > 0 {
		s.stats.commits.Add(1)
		s.stats.committed.Add(uint64(len(done)))
		s.mu.Lock()
		s.apply(ov)
		s.mu.Unlock()
	}
	for _, r := range batch {
		r.finish(r.err)
	}
}

// stage runs r against the overlay and writes legacy for it (unless a
// BatchWriter takes the whole commit afterwards). It returns r's plans, now
// in the overlay, or nil with r.err set (or nothing to write).
func (s *Store[K, V]) stage(ctx context.Context, ov *overlay[K, V], r *request[K, V]) *pending[K, V] {
	ops := r.ops
	switch {
	case r.fn != nil:
		if ops, r.err = s.runTx(ov, r); r.err != nil {
			return nil
		}
	case r.snapshot:
		if ops, r.err = s.replaceOps(ov, r.entries); r.err != nil {
			return nil
		}
	}
	plans := s.resolve(ov, ops)
	if r.err = s.markWrites(ctx, ops, plans); r.err != nil {
		return nil
	}
	if len(plans) == 0 {
		return nil
	}
	if err := s.stillAstray(plans); err != nil {
		r.err = err
		return nil
	}
	if s.writesCheckpoint() {
		if err := encodableOrPanicked(plans, r); err != nil {
			s.log.Warn("a write cannot be encoded for the checkpoint", zap.Error(err))
			r.err = fmt.Errorf("migrate: %w: %w", ErrCheckpointWrite, err)
			return nil
		}
	}
	if s.writesLegacy() && !s.batchesLegacy() {
		if r.err = s.writeLegacy(ctx, plans); r.err != nil {
			if wp := (*writerPanic)(nil); errors.As(r.err, &wp) {
				r.panicked = wp.value
			}
			return nil
		}
	}
	ov.put(plans)
	return &pending[K, V]{req: r, plans: plans}
}

// fail marks every request of a batch whose save failed, and undoes their
// legacy writes, newest first: each was planned on top of those before it.
// A BatchWriter takes the undo of all of them in one Write.
func (s *Store[K, V]) fail(ctx context.Context, done []*pending[K, V], err error) {
	s.log.Warn("checkpoint write failed", zap.Int("writes", len(done)), zap.Error(err))
	if s.batchesLegacy() {
		uerr := s.undoLegacyBatch(ctx, done)
		for _, w := range done {
			w.req.err = fmt.Errorf("migrate: %w: %w", ErrCheckpointWrite, err)
			if uerr != nil {
				w.req.err = outcomeUnknown(w.req.err, "legacy may hold it", uerr)
				s.stray(w.plans)
			}
		}
		return
	}
	for i := len(done) - 1; i >= 0; i-- {
		w := done[i]
		w.req.err = fmt.Errorf("migrate: %w: %w", ErrCheckpointWrite, err)
		if !s.writesLegacy() {
			continue
		}
		if uerr := s.undoLegacy(ctx, w.plans, len(w.plans), 0); uerr != nil {
			w.req.err = outcomeUnknown(w.req.err, "legacy may hold it", uerr)
			s.stray(w.plans)
		}
	}
}

// encodable returns the error the checkpoint would refuse a key or value
// of plans with, before anything is written for them: a
// *checkpoint.EncodeError (checkpoint.ErrEncode), for a value JSON cannot
// encode or a key that would not read back as itself, whose text names the
// key and never the value. Deletes store no key and are not checked. Each
// put's encoding is kept in its plan, for the commit to write as it is.
func encodable[K comparable, V any](plans []plan[K, V]) error {
	for i, p := range plans {
		if p.op.del {
			continue
		}
		enc, err := checkpoint.EncodeChange(checkpoint.Change[K, V]{Key: p.op.key, Value: p.op.val})
		if err != nil {
			return err
		}
		plans[i].enc = enc
	}
	return nil
}

// encodableOrPanicked is encodable for r's plans; a MarshalJSON that
// panics fails r alone, whose caller panics again, as with a panicking
// Update function.
func encodableOrPanicked[K comparable, V any](plans []plan[K, V], r *request[K, V]) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.panicked = p
			err = fmt.Errorf("migrate: %w: encoding it panicked (a %T)", ErrCheckpointWrite, p)
		}
	}()
	return encodable(plans)
}

// save saves what the overlay changes, in one save, when the phase writes
// the checkpoint. A save that fails leaves the checkpoint as it was (the
// checkpoint's contract), so memory and the checkpoint never part.
func (s *Store[K, V]) save(ctx context.Context, ov *overlay[K, V]) error {
	if !s.writesCheckpoint() {
		return nil
	}
	if s.encoded != nil {
		encs := ov.encoded(s.batch.encoded[:0])
		defer func() { s.batch.encoded = scratch(encs) }()
		if len(encs) == 0 {
			return nil
		}
		return s.timed(func() error { return s.encoded(ctx, s.meta, encs) })
	}
	chs := ov.changes(s.batch.changes[:0])
	defer func() { s.batch.changes = scratch(chs) }()
	if len(chs) == 0 {
		return nil
	}
	if s.commit != nil {
		return s.timed(func() error { return s.commit.Commit(ctx, s.meta, chs) })
	}
	snap := make(map[K]V, len(s.state.vals)+len(chs))
	maps.Copy(snap, s.state.vals)
	for _, c := range chs {
		if c.Delete {
			delete(snap, c.Key)
		} else {
			snap[c.Key] = c.Value
		}
	}
	return s.timed(func() error {
		return s.cfg.Checkpoint.Save(ctx, checkpoint.Snapshot[K, V]{Meta: s.meta, Entries: snap})
	})
}

// scratch empties a batch's scratch slice for the next batch: it clears
// what this batch used (values, which must not be pinned), and only that,
// and lets the slice go when it grew far beyond it (a bulk Update's), so
// that later batches neither pay nor pin the biggest one's size.
func scratch[T any](s []T) []T {
	clear(s)
	if cap(s) > 1024 && cap(s) > 8*len(s) {
		return nil
	}
	return s[:0]
}

// apply makes the overlay the committed state. The caller holds mu and
// token.
func (s *Store[K, V]) apply(ov *overlay[K, V]) {
	st := &s.state
	for id, sl := range ov.changed {
		if old, had := st.lookup(id); had {
			delete(st.vals, old)
			delete(st.origin, old)
			st.list.remove(old)
		}
		if !sl.present {
			if st.ids != nil {
				delete(st.ids, id)
			}
			continue
		}
		st.vals[sl.key] = sl.val
		st.list.put(sl.key, sl.val)
		if st.ids != nil {
			st.ids[id] = sl.key
		}
		if st.origin == nil {
			st.origin = make(map[K]Origin)
		}
		st.origin[sl.key] = OriginWrite
	}
}
