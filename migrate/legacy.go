package migrate

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/source"
)

// The legacy side of a commit: an explicit legacy takes one write
// per change, each undone when the commit fails, or, when it is a
// source.BatchWriter, one Write per commit, undone by one Write; an undo that
// fails leaves strays, which the next commit writes back in line first.

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

// stillAstray refuses plans that touch an entry a failed undo left astray
// in legacy and that straighten could not write back in line: legacy may
// hold it under a key the plan does not name (a Put that moved the entry to
// a new key), so a Delete would miss it there and a Put would leave it
// beside. The write fails as legacy's (ErrLegacyWrite), changing nothing,
// and the next commit tries to straighten it again.
func (s *Store[K, V]) stillAstray(plans []plan[K, V]) error {
	if len(s.strays) == 0 || !s.writesLegacy() {
		return nil
	}
	for _, p := range plans {
		if _, astray := s.strays[p.op.id]; astray {
			return fmt.Errorf("migrate: %w: legacy may still hold an earlier write to %v whose undo failed, and writing legacy back in line failed again; retry", ErrLegacyWrite, p.op.key)
		}
	}
	return nil
}

func (s *Store[K, V]) straightenOne(ctx context.Context, id K, keys []K) error {
	return callLegacy(func() error { return s.straightenCall(ctx, id, keys) })
}

func (s *Store[K, V]) straightenCall(ctx context.Context, id K, keys []K) error {
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
	c, ok := legacyChange(p, step, undo)
	if !ok {
		return nil
	}
	return callLegacy(func() error {
		if c.Delete {
			return s.explicit.Delete(ctx, c.Key)
		}
		return s.explicit.Put(ctx, c.Key, c.Value)
	})
}

// writerPanic is the failure of a legacy writer's call that panicked. The
// write it was making fails with its outcome unknown (the writer may have
// written part of it), and its caller panics again with value.
type writerPanic struct{ value any }

func (e *writerPanic) Error() string {
	return fmt.Sprintf("the legacy writer panicked (a %T)", e.value)
}

// callLegacy makes one call of the explicit legacy's writer, turning a
// panic into a *writerPanic: it runs in whichever writer leads the commit,
// which must finish the batch and release the others.
func callLegacy(call func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &writerPanic{value: p}
		}
	}()
	return call()
}

// legacyChange is the change step of p makes to legacy or, with undo, the
// change that reverses it; ok is false when there is none to make.
func legacyChange[K comparable, V any](p plan[K, V], step int, undo bool) (c source.Change[K, V], ok bool) {
	o := p.op
	switch {
	case step == stepEntry && o.del:
		if !undo {
			return source.Change[K, V]{Key: p.oldKey, Delete: true}, true
		}
		if !p.existed {
			return c, false // what a blind Delete removed is not known
		}
		return source.Change[K, V]{Key: p.oldKey, Value: p.oldVal}, true
	case step == stepEntry:
		if !undo {
			return source.Change[K, V]{Key: o.key, Value: o.val}, true
		}
		if p.existed && p.oldKey == o.key {
			return source.Change[K, V]{Key: o.key, Value: p.oldVal}, true
		}
		return source.Change[K, V]{Key: o.key, Delete: true}, true
	default:
		if undo {
			return source.Change[K, V]{Key: p.oldKey, Value: p.oldVal}, true
		}
		return source.Change[K, V]{Key: p.oldKey, Delete: true}, true
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
				werr := fmt.Errorf("migrate: %w: %w", ErrLegacyWrite, err)
				var wp *writerPanic
				switch uerr := s.undoLegacy(ctx, plans, pi, step); {
				case uerr != nil:
					werr = outcomeUnknown(werr, "legacy may hold part of it", uerr)
					s.stray(plans)
				case errors.As(err, &wp):
					// A writer that panicked may have written part of the
					// write: legacy is written back in line before the next
					// commit touches it.
					werr = fmt.Errorf("%w; %w: legacy may hold part of it", werr, ErrOutcomeUnknown)
					s.stray(plans)
				}
				return werr
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

// writeLegacyBatch makes the legacy writes of every pending request of a
// commit in one Write of the BatchWriter, in the order they were planned.
// It reports whether they were made; when not, every request has failed
// with ErrLegacyWrite: the Write took none of them (BatchWriter's
// contract), or, when it panicked, it may have taken any part, which
// legacy is written back in line for before the next commit touches it,
// and every request's caller panics again.
func (s *Store[K, V]) writeLegacyBatch(ctx context.Context, done []*pending[K, V]) bool {
	changes := batchChanges(done, false)
	if len(changes) == 0 {
		return true
	}
	err := callLegacy(func() error { return s.batched.Write(ctx, changes) })
	if err == nil {
		return true
	}
	s.log.Warn("legacy write failed", zap.Int("writes", len(done)), zap.Int("changes", len(changes)), zap.Error(err))
	werr := fmt.Errorf("migrate: %w: %w", ErrLegacyWrite, err)
	var wp *writerPanic
	panicked := errors.As(err, &wp)
	if panicked {
		werr = fmt.Errorf("%w; %w: legacy may hold part of it", werr, ErrOutcomeUnknown)
	}
	for _, w := range done {
		w.req.err = werr
		if panicked {
			w.req.panicked = wp.value
			s.stray(w.plans)
		}
	}
	return false
}

// undoLegacyBatch reverses, in one Write, the legacy writes of every
// request of a commit whose checkpoint save failed, newest first, and
// returns the Write's error.
func (s *Store[K, V]) undoLegacyBatch(ctx context.Context, done []*pending[K, V]) error {
	changes := batchChanges(done, true)
	if len(changes) == 0 {
		return nil
	}
	err := callLegacy(func() error { return s.batched.Write(ctx, changes) })
	if err != nil {
		s.log.Error("compensating a legacy write failed; legacy may hold a write that was not acknowledged",
			zap.Int("writes", len(done)), zap.Int("changes", len(changes)), zap.Error(err))
	}
	return err
}

// batchChanges returns the legacy changes of the requests of a commit, in
// the order they were planned, or with undo the changes that reverse them,
// in the reverse order.
func batchChanges[K comparable, V any](done []*pending[K, V], undo bool) []source.Change[K, V] {
	var changes []source.Change[K, V]
	add := func(p plan[K, V], step int) {
		if !needed(p, step) {
			return
		}
		if c, ok := legacyChange(p, step, undo); ok {
			changes = append(changes, c)
		}
	}
	for i := range done {
		if !undo {
			for _, p := range done[i].plans {
				for step := range numSteps {
					add(p, step)
				}
			}
			continue
		}
		plans := done[len(done)-1-i].plans
		for pi := len(plans) - 1; pi >= 0; pi-- {
			for step := numSteps - 1; step >= 0; step-- {
				add(plans[pi], step)
			}
		}
	}
	return changes
}
