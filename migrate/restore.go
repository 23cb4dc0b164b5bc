package migrate

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/checkpoint"
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

// restore reads and judges both sides (sides.go), picks the basis by the
// rules (rules.go), builds the state entry by entry (combine.go), and then,
// only then, repairs the sides: quarantine, legacy, checkpoint.
func (s *Store[K, V]) restore(ctx context.Context, r *Report[K]) (state[K, V], error) {
	var in sides[K, V]
	var err error
	if in.ck, err = s.readCheckpoint(ctx, r); err != nil {
		return state[K, V]{}, err
	}
	if in.lg, err = s.readLegacy(ctx); err != nil {
		return state[K, V]{}, err
	}
	s.dedupe(in.ck.entries, nil, "checkpoint", r)
	in.lg.dupes = s.dedupe(in.lg.entries, in.ck.entries, "legacy", r)
	b, err := s.chooseBasis(&in)
	if err != nil {
		return state[K, V]{}, err
	}
	out := s.build(b, &in, r)
	if err := s.repair(ctx, b, &in, &out, r); err != nil {
		return state[K, V]{}, err
	}
	return s.newState(out), nil
}

// build makes the state to serve on basis b and fills in the report.
func (s *Store[K, V]) build(b basis, in *sides[K, V], r *Report[K]) built[K, V] {
	var out built[K, V]
	switch b {
	case basisLegacy:
		out = fromOneSide(in.lg.entries, OriginLegacy)
		if s.cfg.Verify && in.ck.usable {
			s.shadow(r, ReadCheckpoint, out.vals, in.ck.entries)
		}
	case basisHeal, basisCheckpoint:
		out = fromOneSide(in.ck.entries, OriginCheckpoint)
		if s.cfg.Phase == PhaseContract && in.lg.read && !s.cfg.VolatileLegacy {
			// Phase 3 serves what a legacy still configured holds and the
			// checkpoint lacks, and cross-checks the rest.
			s.backfillContract(&out, in, r)
			s.shadow(r, ReadLegacy, out.vals, in.lg.entries)
		}
	default:
		ck := in.ck
		if s.cfg.Phase == PhaseLegacy {
			// Phase 0's mark-save keeps the checkpoint's own entries, and
			// combine adopts the map it is given.
			ck.entries = maps.Clone(ck.entries)
		}
		out = s.combine(b, &ck, &in.lg, r)
	}
	if in.lg.err != nil {
		r.Errors = append(r.Errors, in.lg.err)
	}
	s.count(&out, r)
	r.ReadFrom = readFrom(b, in, &out)
	if b == basisLegacyDecides && s.cfg.Phase == PhaseExpand && in.ck.usable && r.Stale == "" && out.changed {
		r.Stale = fmt.Sprintf("it differs from legacy (%s dropped, %s with other values, %s only in legacy): a phase-0 run or a crash since seq %d",
			entries(len(r.Dropped)), entries(len(r.Diverged)), entries(out.onlyLegacy), in.ck.meta.Seq)
	}
	return out
}

// readFrom says which sides restore built the served state from (see
// Report.ReadFrom).
func readFrom[K comparable, V any](b basis, in *sides[K, V], out *built[K, V]) Sides {
	ck, lg := in.ck.usable, len(in.lg.entries) > 0
	switch b {
	case basisLegacy:
		return ReadLegacy
	case basisReconcile:
		return ReadCheckpointAndLegacy
	case basisLegacyDecides:
		lg = true
	case basisHeal, basisCheckpoint:
		lg = out.onlyLegacy > 0 // phase 3's backfill
	}
	switch {
	case ck && lg:
		return ReadCheckpointAndLegacy
	case ck:
		return ReadCheckpoint
	case lg:
		return ReadLegacy
	}
	return ReadNothing
}

// count sets the report's counts of what is served: by the record served,
// the checkpoint's or legacy's (a backfill included).
func (s *Store[K, V]) count(out *built[K, V], r *Report[K]) {
	r.Restored = len(out.vals)
	fromCkpt := 0
	if out.def == OriginCheckpoint {
		fromCkpt = r.Restored
	}
	for k, o := range out.origin {
		if _, ok := out.vals[k]; !ok || o == out.def {
			continue
		}
		switch {
		case o == OriginCheckpoint:
			fromCkpt++
		case out.def == OriginCheckpoint:
			fromCkpt--
		}
	}
	r.FromCheckpoint, r.FromLegacy = fromCkpt, r.Restored-fromCkpt
}

// backfillContract serves, in phase 3, what a legacy still configured holds
// and the checkpoint lacks: it is in use (an observing legacy is never
// stale: the runtime still has the sandbox; a legacy the Store writes holds
// every write acknowledged until phase 3 ran), so handing it out as free
// would hand it out twice. Not for a volatile legacy, which holds nothing
// after a restart, nor for a legacy the Store writes that phase 3 may have
// left behind: the checkpoint says phase 3 wrote it, or was moved aside
// and cannot say (what only legacy holds, phase 3 may have deleted).
func (s *Store[K, V]) backfillContract(out *built[K, V], in *sides[K, V], r *Report[K]) {
	if s.explicit != nil && (in.ck.aside != nil || (in.ck.exists && in.ck.meta.Phase == PhaseContract.String())) {
		return
	}
	idx := s.index(out.vals)
	var add []K
	for kl := range in.lg.entries {
		if _, ok := find(idx, out.vals, s.id(kl)); !ok {
			add = append(add, kl)
		}
	}
	for _, kl := range add {
		out.vals[kl] = in.lg.entries[kl]
		out.setOrigin(kl, OriginBackfill)
		r.Backfilled = append(r.Backfilled, kl)
	}
	out.onlyLegacy += len(add)
	out.changed = out.changed || len(add) > 0
}

// entries says "1 entry" or "n entries".
func entries(n int) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}

// repair changes the sides, in this order: the unreadable checkpoint moved
// aside, legacy brought in line with what is served, the checkpoint saved.
// A failure stops restore; what was done stays done and a retry finds it.
func (s *Store[K, V]) repair(ctx context.Context, b basis, in *sides[K, V], out *built[K, V], r *Report[K]) error {
	if in.ck.aside != nil {
		where, err := s.cfg.Checkpoint.Quarantine(ctx)
		if err != nil && !errors.Is(err, checkpoint.ErrNotExist) {
			return restoreErr("the checkpoint cannot be read and could not be moved aside: %w (read: %w)", err, in.ck.aside)
		}
		r.Quarantined = where
		s.log.Warn("checkpoint quarantined", zap.String("to", where), zap.Error(in.ck.aside))
	}
	if err := s.removeDupes(ctx, in, r); err != nil {
		return err
	}
	if err := s.alignLegacy(ctx, b, in, out, r); err != nil {
		return err
	}
	s.meta.Behind = s.recordedMark(b, in)
	if s.cfg.Checkpoint != nil {
		r.Behind = s.meta.Behind
	}
	if !s.needSave(b, in, out) {
		return nil
	}
	entries := out.vals
	if s.cfg.Phase == PhaseLegacy && b != basisHeal && in.ck.usable {
		// Phase 0 only adds its mark: the checkpoint keeps its own records,
		// richer than legacy's, for the next phase to use where legacy
		// agrees.
		entries = in.ck.entries
	}
	err := s.timed(func() error {
		return s.cfg.Checkpoint.Save(ctx, checkpoint.Snapshot[K, V]{Meta: s.meta, Entries: entries})
	})
	if err != nil {
		// The next phase relies on this save; going on would leave it a
		// stale file to trust.
		return restoreErr("saving the restored state to the checkpoint: %w", err)
	}
	r.CheckpointRewritten = true
	return nil
}

// recordedMark is the mark every save of this run leaves in Meta.Behind
// ("" for none), beside the Store's phase. The checkpoint may lack what only
// legacy holds after phase 0, which writes legacy only, and after a phase 1
// or 2 run that could not read legacy in full, which may have missed an
// entry only legacy has (and has not dropped anything on that evidence).
// Both leave a mark that says which, so that phase 3 refuses the file until
// a run has read legacy in full. A volatile legacy holds nothing the
// checkpoint lacks, and a run that healed legacy wrote all of it.
func (s *Store[K, V]) recordedMark(b basis, in *sides[K, V]) string {
	p := s.cfg.Phase
	switch {
	case p == PhaseLegacy:
		return markPhase0
	case p == PhaseContract, b == basisHeal, s.cfg.VolatileLegacy:
		return ""
	case !in.lg.complete:
		return markIncomplete(p)
	}
	return ""
}

// needSave reports whether restore must save the checkpoint before it
// returns, so that the next phase finds it current.
func (s *Store[K, V]) needSave(b basis, in *sides[K, V], out *built[K, V]) bool {
	if s.cfg.Checkpoint == nil {
		return false
	}
	found := ""
	if in.ck.usable {
		found = behindMark(in.ck.meta)
	}
	switch {
	// A file moved aside is replaced by what is served.
	case in.ck.aside != nil:
		return true
	// Phase 0 leaves its mark once per boot (a mark from an earlier boot
	// is discarded with the file).
	case s.cfg.Phase == PhaseLegacy:
		return b == basisHeal || found != s.meta.Behind
	// Legacy was healed: record that a phase that writes it ran.
	case b == basisHeal:
		return true
	// The mark changes, either way.
	case found != s.meta.Behind:
		return true
	// The state of an earlier boot is replaced.
	case in.ck.bootOld:
		return true
	// Phases 1 and 2 create a missing checkpoint, so that the next start
	// finds which phase ran last even when there is nothing to serve.
	case !in.ck.usable && s.cfg.Phase.WritesLegacy():
		return true
	// Phase 3 records that it ran before it serves a write, so that a
	// rollback knows that legacy no longer holds every acknowledged write
	// (a Delete phase 3 acknowledged of an entry only legacy held writes
	// nothing else).
	case s.cfg.Phase == PhaseContract && in.ck.meta.Phase != PhaseContract.String():
		return true
	}
	// Otherwise what is served decides: phase 1 rewrites the file whenever
	// legacy says it is stale (the heal of a file a downgrade left behind),
	// and leaves a current one alone, which saves an exec'd plugin an fsync
	// per call.
	return out.changed
}

// removeDupes deletes from a legacy the Store writes the keys that dedupe
// set aside: a Match re-key cut between its two legacy writes leaves two
// keys for one entry, and the one not served would otherwise outlive every
// later write to the entry.
func (s *Store[K, V]) removeDupes(ctx context.Context, in *sides[K, V], r *Report[K]) error {
	if s.explicit == nil || !s.cfg.Phase.WritesLegacy() {
		return nil
	}
	for _, k := range in.lg.dupes {
		if err := s.explicit.Delete(ctx, k); err != nil {
			return restoreErr("removing legacy's second key %v for one entry failed: %w", k, err)
		}
		r.LegacyWrites++
	}
	return nil
}

// alignLegacy writes a legacy the Store writes until it agrees with what is
// served: all of it when it is stale or volatile, and otherwise the entries
// it listed whose record was not served (a Merge that chose the
// checkpoint's value). An entry kept only because a listing was partial is
// not written.
func (s *Store[K, V]) alignLegacy(ctx context.Context, b basis, in *sides[K, V], out *built[K, V], r *Report[K]) error {
	if s.explicit == nil || !s.cfg.Phase.WritesLegacy() {
		return nil
	}
	switch b {
	case basisHeal:
		r.LegacyStale = fmt.Sprintf("the checkpoint (seq %d) was written by phase 3 (contract), which does not write legacy", in.ck.meta.Seq)
		n, err := s.writeLegacyLike(ctx, out.vals, in.lg.entries, true)
		r.LegacyWrites = n
		if err != nil {
			return restoreErr("%w: legacy is stale (%s) and bringing it current failed after %d writes: %w", ErrUnsafeRestore, r.LegacyStale, n, err)
		}
	case basisVolatile, basisReconcile, basisLegacyDecides:
		n, err := s.writeLegacyLike(ctx, out.vals, in.lg.entries, b == basisVolatile)
		r.LegacyWrites = n
		if err != nil {
			return restoreErr("bringing legacy in line with what is served failed after %d writes: %w", n, err)
		}
	}
	return nil
}

// writeLegacyLike writes legacy, which listed leg, until it holds served:
// entries whose record differs, and with all, also what legacy lacks and
// what it holds that is not served. It returns how many writes it made.
func (s *Store[K, V]) writeLegacyLike(ctx context.Context, served, leg map[K]V, all bool) (int, error) {
	lidx := make(map[K]K, len(leg))
	for k := range leg {
		lidx[s.id(k)] = k
	}
	n := 0
	for k, v := range served {
		id := s.id(k)
		lk, ok := lidx[id]
		delete(lidx, id)
		if (!ok && !all) || (ok && lk == k && s.equal(leg[lk], v)) {
			continue
		}
		if err := s.explicit.Put(ctx, k, v); err != nil {
			return n, fmt.Errorf("legacy put %v: %w", k, err)
		}
		n++
		if ok && lk != k {
			if err := s.explicit.Delete(ctx, lk); err != nil {
				return n, fmt.Errorf("legacy delete %v: %w", lk, err)
			}
			n++
		}
	}
	if !all {
		return n, nil
	}
	for _, lk := range lidx {
		if err := s.explicit.Delete(ctx, lk); err != nil {
			return n, fmt.Errorf("legacy delete %v: %w", lk, err)
		}
		n++
	}
	return n, nil
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
