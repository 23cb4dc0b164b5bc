package migrate

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
)

// The legacy side of a commit: an explicit legacy takes one write
// per change, each undone when the commit fails; an undo that fails leaves
// strays, which the next commit writes back in line first.

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
	return callLegacy(func() error { return s.legacyCall(ctx, p, step, undo) })
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

func (s *Store[K, V]) legacyCall(ctx context.Context, p plan[K, V], step int, undo bool) error {
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
