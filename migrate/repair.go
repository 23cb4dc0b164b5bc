package migrate

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// The last step of Restore repairs the sides, once the served state is
// built (rules 23 to 26 of the package documentation): the unreadable
// checkpoint moved aside, an explicit legacy brought in line with what is
// served, and the checkpoint saved when what it should hold changed.

// repair changes the sides (rules 23 to 26), in this order: the unreadable checkpoint moved
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
		r.Behind = markText(s.meta.Behind)
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

// recordedMark is rule 26: the mark every save of this run leaves in
// Meta.Behind ("" for none), beside the Store's phase. The checkpoint may lack what only
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
		return s.startMarks(in)
	case p == PhaseContract, b == basisHeal, s.cfg.VolatileLegacy:
		return ""
	case !in.lg.complete:
		return markIncomplete(p)
	}
	return ""
}

// needSave is rule 25: it reports whether restore must save the checkpoint
// before it returns, so that the next phase finds it current.
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
	// Phase 0 marks the keys it writes as it writes them (marks.go), and
	// saves only to heal; a whole-file mark it leaves once per boot (a
	// mark from an earlier boot is discarded with the file).
	case s.cfg.Phase == PhaseLegacy:
		return b == basisHeal || !in.ck.usable || (s.marked == nil && found != s.meta.Behind)
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

// removeDupes deletes from an explicit legacy the keys that dedupe set
// aside (rules 22 and 23): a Match re-key cut between its two legacy writes leaves two
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

// alignLegacy is rule 23: it writes an explicit legacy until it agrees with
// what is served: all of it when it is stale or volatile, and otherwise the entries
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
//
// With all (legacy is stale or volatile, and the checkpoint, whose header
// says so until this restore saves, is the copy), it removes first what
// legacy holds that is not served, or holds under another key: a legacy
// that holds a value for one key at a time (host-local's address files)
// refuses a value an entry deleted since still holds there. Otherwise it
// writes an entry under its new key before it removes the old one, so that
// a crash between the two leaves legacy with the entry.
func (s *Store[K, V]) writeLegacyLike(ctx context.Context, served, leg map[K]V, all bool) (int, error) {
	lidx := make(map[K]K, len(leg))
	for k := range leg {
		lidx[s.id(k)] = k
	}
	n := 0
	if all {
		sidx := s.index(served)
		for id, lk := range lidx {
			if k, ok := find(sidx, served, id); ok && k == lk {
				continue
			}
			if err := s.explicit.Delete(ctx, lk); err != nil {
				return n, fmt.Errorf("legacy delete %v: %w", lk, err)
			}
			delete(lidx, id)
			n++
		}
	}
	for k, v := range served {
		id := s.id(k)
		lk, ok := lidx[id]
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
	return n, nil
}
