package migrate

import (
	"context"
	"fmt"

	"go.uber.org/zap"
)

// Restore runs once, at start: it reads the sides the phase reads, decides
// what to serve, repairs what it found stale, saves the checkpoint when what
// it should hold changed, and returns (and logs) a Report of what it did.
// The rules are in the package documentation. Writes fail with
// ErrNotRestored until Restore has succeeded; after a failed Restore the
// Store serves nothing and Restore may be called again.
func (s *Store[K, V]) Restore(ctx context.Context) (Report[K], error) {
	r := Report[K]{Phase: s.cfg.Phase}
	if err := s.acquire(ctx); err != nil {
		return r, fmt.Errorf("migrate: restore: %w", err)
	}
	defer s.release()
	s.mu.RLock()
	closed, restored := s.closed, s.restored
	s.mu.RUnlock()
	if closed {
		return r, fmt.Errorf("migrate: restore: %w", ErrClosed)
	}
	if restored {
		return r, fmt.Errorf("migrate: restore: %w", ErrAlreadyRestored)
	}

	st, err := s.restore(ctx, &r)
	if err != nil {
		r.ReadFrom = ""
		s.log.Error("restore failed", zap.Object("report", r), zap.Error(err))
		return r, err
	}
	s.mu.Lock()
	s.state, s.restored = st, true
	s.mu.Unlock()
	s.stats.lastRestore.Store(restoreStats(&r))
	s.log.Info("restored", zap.Object("report", r))
	return r, nil
}

// restore reads and judges both sides (read.go: rules 1 to 8), picks the
// basis (basis.go: rules 9 to 17), builds the state entry by entry
// (build.go and build_duplicates.go: rules 18 to 22), and then, only then,
// repairs the sides (repair.go: rules 23 to 26): quarantine, legacy,
// checkpoint.
func (s *Store[K, V]) restore(ctx context.Context, r *Report[K]) (state[K, V], error) {
	var in sides[K, V]
	var err error
	if in.ck, err = s.readCheckpoint(ctx, r); err != nil {
		return state[K, V]{}, err
	}
	if in.lg, err = s.readLegacy(ctx); err != nil {
		return state[K, V]{}, err
	}
	b, err := s.chooseBasis(&in)
	if err != nil {
		return state[K, V]{}, err
	}
	s.dedupe(in.ck.entries, nil, "checkpoint", r)
	in.lg.dupes = s.dedupe(in.lg.entries, in.ck.entries, "legacy", r)
	held := s.heldIDs(&in) // before build, which may adopt the checkpoint's map
	out := s.build(b, &in, r)
	s.reportMarked(&in.ck, &out, r)
	if err := s.resolveUnique(&in, held, &out, r); err != nil {
		return state[K, V]{}, err
	}
	if err := s.repair(ctx, b, &in, &out, r); err != nil {
		return state[K, V]{}, err
	}
	return s.newState(out), nil
}

// newState is what the Store serves from now on.
func (s *Store[K, V]) newState(out built[K, V]) state[K, V] {
	st := state[K, V]{vals: out.vals, origin: out.origin, def: out.def}
	if s.match != nil {
		st.ids = make(map[K]K, len(out.vals))
		for k := range out.vals {
			st.ids[s.match(k)] = k
		}
	}
	return st
}

func restoreErr(format string, args ...any) error {
	return fmt.Errorf("migrate: restore: "+format, args...)
}
