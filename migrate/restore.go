package migrate

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/source"
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
		s.log.Error("restore failed", append(r.fields(), zap.Error(err))...)
		return r, err
	}
	r.Restored = len(st.vals)
	s.mu.Lock()
	s.state, s.restored = st, true
	s.mu.Unlock()
	s.log.Info("restored", r.fields()...)
	return r, nil
}

// ckptRead is what reading the checkpoint at restore found.
type ckptRead[K comparable, V any] struct {
	snap    checkpoint.Snapshot[K, V]
	usable  bool // snap.Entries may be served
	exists  bool // a readable checkpoint is on disk
	partial bool // some entries could not be read (they are not in snap)
}

func restoreErr(format string, args ...any) error {
	return fmt.Errorf("migrate: restore: "+format, args...)
}

// readCheckpoint loads the checkpoint and deals with what cannot be used:
// quarantined when the phase can go on without it, left in place (and an
// error) when it cannot.
func (s *Store[K, V]) readCheckpoint(ctx context.Context, r *Report[K]) (ckptRead[K, V], error) {
	p := s.cfg.Phase
	var c ckptRead[K, V]
	snap, err := s.cfg.Checkpoint.Load(ctx)
	switch {
	case err == nil:
		c.snap, c.usable, c.exists = snap, true, true
		return c, nil
	case errors.Is(err, checkpoint.ErrNotExist):
		return c, nil
	case errors.Is(err, checkpoint.ErrBadEntry):
		// Served in phases 2 and 3: Strict wants every entry.
		if s.cfg.Strict && p.RestoresFromCheckpoint() {
			return c, restoreErr("strict: %w; the file was left in place for inspection: restore without Config.Strict to move it aside and serve the other entries", err)
		}
		r.Errors = append(r.Errors, err)
		c.snap, c.usable, c.partial = snap, true, true
	case errors.Is(err, checkpoint.ErrCorrupt), errors.Is(err, checkpoint.ErrNewerSchema), errors.Is(err, checkpoint.ErrOlderSchema):
		// A newer binary's checkpoint that says legacy is stale: this
		// binary can neither read the checkpoint nor trust legacy.
		if errors.Is(err, checkpoint.ErrNewerSchema) && s.explicit != nil && p != PhaseContract && snap.Meta.Phase == PhaseContract.String() {
			return c, restoreErr("%w: %w; it was written by phase 3 (contract), so legacy is stale too: roll forward to the binary that wrote it", ErrUnsafeRestore, err)
		}
		if p == PhaseContract && s.cfg.Strict {
			return c, restoreErr("strict: %w; phase 3 has nothing else to restore from, so the file was left in place for inspection: move it aside, or restore without Strict to quarantine it and start empty", err)
		}
		r.Errors = append(r.Errors, err)
	default:
		// Not a verdict on the content (EIO, a permission): retrying may
		// work, and the file must not be replaced meanwhile.
		return c, restoreErr("reading the checkpoint: %w", err)
	}
	where, qerr := s.cfg.Checkpoint.Quarantine(ctx)
	if qerr != nil && !errors.Is(qerr, checkpoint.ErrNotExist) {
		return c, restoreErr("the checkpoint cannot be read and could not be moved aside: %w (read: %v)", qerr, err)
	}
	r.Quarantined = where
	s.log.Warn("checkpoint quarantined", zap.String("to", where), zap.Error(err))
	return c, nil
}

// restore computes the state to serve and repairs both sides.
func (s *Store[K, V]) restore(ctx context.Context, r *Report[K]) (state[K, V], error) {
	p := s.cfg.Phase
	var ck ckptRead[K, V]
	if s.cfg.Checkpoint != nil {
		var err error
		if ck, err = s.readCheckpoint(ctx, r); err != nil {
			return state[K, V]{}, err
		}
	}

	s.dedupe(ck.snap.Entries, "checkpoint", r)

	// Decide which side is stale, from what the checkpoint records.
	meta := ck.snap.Meta
	if ck.usable && s.bootID != "" && meta.BootID != "" && meta.BootID != s.bootID {
		r.Stale = fmt.Sprintf("written in boot %s, this is boot %s: its state died with the reboot", meta.BootID, s.bootID)
		ck.usable = false
	}
	legacyStale := ""
	if ck.usable && s.explicit != nil && p != PhaseContract && meta.Phase == PhaseContract.String() {
		legacyStale = fmt.Sprintf("the checkpoint (seq %d) was written by phase 3 (contract), which does not write legacy", meta.Seq)
		if ck.partial {
			return state[K, V]{}, restoreErr("%w: legacy is stale (%s) and the checkpoint has unreadable entries: neither side holds them all", ErrUnsafeRestore, legacyStale)
		}
	}
	if ck.usable && p >= PhaseMigrate && meta.Phase == PhaseLegacy.String() {
		r.Stale = fmt.Sprintf("a phase-0 run since seq %d wrote only legacy and marked the checkpoint superseded", meta.Seq)
		if p == PhaseContract {
			return state[K, V]{}, restoreErr("%w: the checkpoint is stale: %s; phase 3 must not follow phase 0: run phase 1 (expand) or 2 (migrate) first", ErrStale, r.Stale)
		}
		ck.usable = false
	}

	// Read legacy.
	var leg map[K]V
	legOK, legPartial := false, false
	if s.cfg.Legacy != nil {
		m, err := s.cfg.Legacy.List(ctx)
		served := legacyStale == "" && (p.RestoresFromLegacy() || (p == PhaseMigrate && !ck.usable))
		switch {
		case err == nil:
			leg, legOK = m, true
		case source.Partial(err):
			if s.cfg.Strict && p != PhaseContract {
				return state[K, V]{}, restoreErr("strict: reading legacy: %w", err)
			}
			r.Errors = append(r.Errors, fmt.Errorf("reading legacy: %w", err))
			leg, legOK, legPartial = m, true, true
		case served:
			return state[K, V]{}, restoreErr("reading legacy, which phase %d (%s) restores from: %w", int(p), p, err)
		case legacyStale != "":
			return state[K, V]{}, restoreErr("%w: legacy is stale (%s) and cannot be read to bring it current: %w", ErrUnsafeRestore, legacyStale, err)
		case s.cfg.Strict && p == PhaseMigrate:
			return state[K, V]{}, restoreErr("strict: reading legacy to reconcile against: %w", err)
		default:
			r.Errors = append(r.Errors, fmt.Errorf("reading legacy: %w", err))
		}
		if leg == nil {
			leg = map[K]V{}
		}
		s.dedupe(leg, "legacy", r)
	}

	var served map[K]V
	st := state[K, V]{}
	rewrite := false
	legacyInLine := false // legacy was written to hold exactly served
	switch {
	case legacyStale != "":
		served, st.def = ck.snap.Entries, OriginCheckpoint
		r.ReadFrom, r.FromCheckpoint = ReadCheckpoint, len(served)
		r.StaleLegacy = legacyStale
		n, err := s.healLegacy(ctx, served, leg)
		r.LegacyHealed = n
		if err != nil {
			return state[K, V]{}, restoreErr("%w: legacy is stale (%s) and bringing it current failed after %d writes: %w", ErrUnsafeRestore, legacyStale, n, err)
		}
		rewrite = true // record a phase that keeps legacy current
	case p.RestoresFromLegacy():
		served, st.def = leg, OriginLegacy
		r.ReadFrom, r.FromLegacy = ReadLegacy, len(served)
		if ck.usable && !ck.partial && (p == PhaseExpand || s.cfg.Verify) {
			s.shadow(r, ReadCheckpoint, served, ck.snap.Entries)
			if p == PhaseExpand && r.Stale == "" && (len(r.ShadowOnly)+len(r.ServedOnly)+len(r.Diverged) > 0) {
				r.Stale = fmt.Sprintf("it differs from legacy (%s only in it, %s only in legacy, %s with other values): a phase-0 run or a crash since seq %d",
					entries(len(r.ShadowOnly)), entries(len(r.ServedOnly)), entries(len(r.Diverged)), meta.Seq)
			}
			if p == PhaseExpand && meta.Phase == PhaseLegacy.String() && r.Stale == "" {
				r.Stale = fmt.Sprintf("a phase-0 run since seq %d marked it superseded", meta.Seq)
			}
		}
		// Phase 1 rewrites at every start: that is what heals a file left
		// stale by a downgrade. Phase 0 marks the file superseded, so a
		// later phase 3 cannot trust it.
		// The mark must carry this boot's ID: one from an earlier boot is
		// discarded as stale, and would no longer stop phase 3.
		rewrite = p == PhaseExpand || (s.cfg.Checkpoint != nil && !(ck.usable && meta.Phase == PhaseLegacy.String()))
	case p == PhaseMigrate:
		if !ck.usable {
			ck.snap.Entries = nil
		}
		var changed bool
		served, changed = s.reconcile(r, &st, ck.snap.Entries, leg, legOK)
		if legOK {
			r.ReadFrom = ReadCheckpointAndLegacy
		} else {
			r.ReadFrom = ReadCheckpoint
		}
		rewrite = changed || !ck.exists || !ck.usable || ck.partial
		// Phase 2 writes the checkpoint first: a crash before the legacy
		// write leaves legacy behind what is now served. Bring an
		// explicit legacy in line, so that a downgrade serves what this
		// start served. A partial listing cannot tell what to delete.
		if s.explicit != nil && legOK && !legPartial {
			n, err := s.healLegacy(ctx, served, leg)
			r.LegacyHealed = n
			if err != nil {
				r.Errors = append(r.Errors, fmt.Errorf("bringing legacy in line with what is served: %w", err))
			} else if n > 0 {
				legacyInLine = true
			}
		}
	default: // phase 3
		served, st.def = ck.snap.Entries, OriginCheckpoint
		if !ck.usable {
			served = map[K]V{}
		}
		r.ReadFrom, r.FromCheckpoint = ReadCheckpoint, len(served)
		if !ck.usable {
			r.ReadFrom = ReadNothing
		}
		if legOK {
			s.shadow(r, ReadLegacy, served, leg)
		}
		rewrite = r.Quarantined != "" || (ck.exists && !ck.usable)
	}
	if served == nil {
		served = map[K]V{}
	}

	if rewrite {
		m := s.meta
		if p == PhaseLegacy {
			m.Phase = PhaseLegacy.String()
		}
		if err := s.cfg.Checkpoint.Save(ctx, checkpoint.Snapshot[K, V]{Meta: m, Entries: served}); err != nil {
			// The next phase relies on this save; going on would leave it a
			// stale file to trust.
			return state[K, V]{}, restoreErr("saving the restored state to the checkpoint: %w", err)
		}
		r.CheckpointRewritten = true
	}
	s.fullSave = false

	st.vals = served
	if s.match != nil {
		st.ids = make(map[K]K, len(served))
		for k := range served {
			st.ids[s.match(k)] = k
		}
	}
	if s.explicit != nil && legOK && legacyStale == "" && !legacyInLine && s.match != nil {
		// Remember where legacy keeps entries under another key, so that
		// writing legacy also removes the placeholder.
		for lk := range leg {
			id := s.match(lk)
			if k, ok := st.ids[id]; ok && k != lk {
				if st.lkeys == nil {
					st.lkeys = make(map[K]K)
				}
				st.lkeys[id] = lk
			}
		}
	}
	return st, nil
}

// entries says "1 entry" or "n entries".
func entries(n int) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}

// dedupe removes from m every key whose identity an earlier key already
// has, and reports it: Match says they are one entry, so only one can be
// served.
func (s *Store[K, V]) dedupe(m map[K]V, side string, r *Report[K]) {
	if s.match == nil || len(m) == 0 {
		return
	}
	idx := make(map[K]K, len(m))
	for k := range m {
		id := s.match(k)
		if other, dup := idx[id]; dup {
			r.Errors = append(r.Errors, fmt.Errorf("%s: keys %v and %v match the same entry; keeping %v", side, other, k, other))
			delete(m, k)
			continue
		}
		idx[id] = k
	}
}

// index maps identity to key for m, or returns nil when Match is nil and
// the identity is the key itself.
func (s *Store[K, V]) index(m map[K]V) map[K]K {
	if s.match == nil {
		return nil
	}
	idx := make(map[K]K, len(m))
	for k := range m {
		idx[s.match(k)] = k
	}
	return idx
}

// find returns the key of the entry of m with identity id; idx is
// s.index(m).
func find[K comparable, V any](idx map[K]K, m map[K]V, id K) (K, bool) {
	if idx != nil {
		k, ok := idx[id]
		return k, ok
	}
	_, ok := m[id]
	return id, ok
}

// reconcile is phase 2: the checkpoint's entries, legacy's backfilled, and
// checkpoint-only ones kept or pruned. changed reports whether the result
// differs from the checkpoint. Both maps have unique identities (dedupe).
func (s *Store[K, V]) reconcile(r *Report[K], st *state[K, V], ckpt, leg map[K]V, legOK bool) (map[K]V, bool) {
	st.def = OriginCheckpoint
	if ckpt == nil {
		ckpt = map[K]V{}
	}
	if !legOK {
		r.FromCheckpoint = len(ckpt)
		return ckpt, false
	}
	lidx := s.index(leg)
	served := ckpt // the checkpoint's map is adopted, not copied
	changed := false
	matched := make(map[K]struct{}, len(leg))
	for k, cv := range ckpt {
		lk, ok := find(lidx, leg, s.id(k))
		if !ok {
			if s.cfg.PruneOrphans {
				r.Pruned = append(r.Pruned, k)
				delete(served, k)
				changed = true
			} else {
				r.Orphaned = append(r.Orphaned, k)
			}
			continue
		}
		matched[lk] = struct{}{}
		if lv := leg[lk]; !s.equal(cv, lv) {
			r.Diverged = append(r.Diverged, k)
			if mv := s.merge(k, cv, lv); !s.equal(mv, cv) {
				served[k] = mv
				changed = true
			}
		}
	}
	for lk, lv := range leg {
		if _, ok := matched[lk]; ok {
			continue
		}
		r.Backfilled = append(r.Backfilled, lk)
		served[lk] = lv
		if st.origin == nil {
			st.origin = make(map[K]Origin)
		}
		st.origin[lk] = OriginBackfill
		changed = true
	}
	r.FromLegacy = len(r.Backfilled)
	r.FromCheckpoint = len(served) - r.FromLegacy
	return served, changed
}

// shadow compares the served entries with the side a phase does not serve
// from and records the differences in r.
func (s *Store[K, V]) shadow(r *Report[K], side string, served, other map[K]V) {
	r.Shadow = side
	oidx := s.index(other)
	matched := make(map[K]struct{}, len(other))
	for k, v := range served {
		okey, ok := find(oidx, other, s.id(k))
		if !ok {
			r.ServedOnly = append(r.ServedOnly, k)
			continue
		}
		matched[okey] = struct{}{}
		if !s.equal(v, other[okey]) {
			r.Diverged = append(r.Diverged, k)
		}
	}
	for k := range other {
		if _, ok := matched[k]; !ok {
			r.ShadowOnly = append(r.ShadowOnly, k)
		}
	}
}

// healLegacy writes legacy until it holds exactly served, and returns how
// many writes it made.
func (s *Store[K, V]) healLegacy(ctx context.Context, served, leg map[K]V) (int, error) {
	lidx := map[K]K{}
	for k := range leg {
		lidx[s.id(k)] = k
	}
	n := 0
	for k, v := range served {
		id := s.id(k)
		lk, ok := lidx[id]
		delete(lidx, id)
		if ok && lk == k && s.equal(leg[lk], v) {
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
	for _, lk := range lidx {
		if err := s.explicit.Delete(ctx, lk); err != nil {
			return n, fmt.Errorf("legacy delete %v: %w", lk, err)
		}
		n++
	}
	return n, nil
}
