package migrate

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/source"
)

// The first step of Restore reads each side and judges it (rules 1 to 8):
// what it holds, whether it can be used, and what its header, and legacy's
// listing, say about the other side. Nothing is changed on either side
// until the rules have decided (see repair in repair.go).

// ckptView is what restore learned of the checkpoint.
type ckptView[K comparable, V any] struct {
	entries map[K]V         // what may be served or used; nil when nothing
	meta    checkpoint.Meta // the header read (also of a newer file)
	exists  bool            // a file was there, readable or not
	usable  bool            // entries may be used
	partial bool            // some entries could not be read; entries lacks them
	aside   error           // why the file must be quarantined before anything is saved; nil if it need not be
	behind  bool            // it carries the mark of a run that did not keep it level with legacy
	marked  map[K]bool      // the identities a phase-0 run wrote (a keyed mark), which legacy decides; nil when none
	bootOld bool            // written in an earlier boot: discarded
}

// legacyView is what restore learned of legacy.
type legacyView[K comparable, V any] struct {
	entries  map[K]V
	read     bool  // a listing came back, complete or partial
	complete bool  // it holds every entry
	err      error // why it is not complete; nil if it is
	dupes    []K   // keys dedupe set aside: another key of the same entry is served
}

// soleCopy reports whether the checkpoint whose header is m is the only
// side that can hold the state (rule 4): in phase 3, which writes nothing else, and
// in every phase with a legacy that does not survive a restart - unless m
// says a phase-0 run left it behind legacy, whose state then died with
// that run. (Any other mark - a repair's, a run that could not read legacy
// in full - says the file may lack commits, not that a registry held them:
// a volatile legacy's emptiness is never evidence.) A checkpoint that is
// the sole copy is never moved aside or replaced without the user's word
// (Config.DiscardUnreadableCheckpoint).
func (s *Store[K, V]) soleCopy(m checkpoint.Meta) bool {
	return s.cfg.Phase == PhaseContract || (s.cfg.VolatileLegacy && !volatileBehind(m))
}

// volatileBehind reports whether the checkpoint whose header is m is
// behind a volatile legacy: a phase-0 run, which kept its writes in the
// registry only, came after it.
func volatileBehind(m checkpoint.Meta) bool {
	return behindMark(m) == markPhase0
}

// legacyIsStale reports whether a checkpoint whose header says phase 3
// wrote it makes legacy stale for this Store: legacy is one the Store
// writes, and this phase writes it.
func (s *Store[K, V]) legacyIsStale(meta checkpoint.Meta) bool {
	return s.explicit != nil && s.cfg.Phase.WritesLegacy() && meta.Phase == PhaseContract.String()
}

// readCheckpoint loads the checkpoint and judges what it found. It returns
// an error when restore must not go on: Strict and anything unreadable, a
// newer file that is the sole copy, a read that failed for a reason other
// than the content.
func (s *Store[K, V]) readCheckpoint(ctx context.Context, r *Report[K]) (ckptView[K, V], error) {
	var c ckptView[K, V]
	if s.cfg.Checkpoint == nil {
		return c, nil
	}
	snap, err := s.cfg.Checkpoint.Load(ctx)
	c.meta = snap.Meta
	switch {
	case err == nil:
		c.entries, c.exists, c.usable = snap.Entries, true, true
	case errors.Is(err, checkpoint.ErrNotExist):
		return c, nil // rule 1: a missing checkpoint is an empty one
	case errors.Is(err, checkpoint.ErrBadEntry):
		c.entries, c.exists, c.usable, c.partial = snap.Entries, true, true, true
		if err := s.refuseUnreadable(c.meta, err, true); err != nil {
			return c, err
		}
		c.aside = err
	case unreadable(err):
		c.exists = true
		if err := s.refuseUnreadable(c.meta, err, false); err != nil {
			return c, err
		}
		c.aside = err
	default:
		// Not a verdict on the content (EIO, a permission): retrying may
		// work, and the file must not be replaced meanwhile.
		return c, restoreErr("reading the checkpoint: %w", err)
	}
	if c.aside != nil {
		r.Errors = append(r.Errors, c.aside)
	}
	// A torn last journal record was a commit that was never acknowledged:
	// nothing served is missing, but what a crash cut short is reported.
	if torn := s.cfg.Checkpoint.Journal().Torn; torn != nil && c.usable {
		r.Errors = append(r.Errors, torn)
	}
	s.judgeCheckpoint(&c, r)
	return c, nil
}

// unreadable reports whether err is a verdict on the checkpoint's content
// that no retry changes.
func unreadable(err error) bool {
	return errors.Is(err, checkpoint.ErrCorrupt) || errors.Is(err, checkpoint.ErrNewerSchema) ||
		errors.Is(err, checkpoint.ErrOlderSchema) || errors.Is(err, checkpoint.ErrTypeMismatch)
}

// refuseUnreadable applies rules 2 to 5 to a checkpoint that cannot be
// read in full; partial says some entries could be. A nil result means: move it
// aside and go on.
func (s *Store[K, V]) refuseUnreadable(meta checkpoint.Meta, err error, partial bool) error {
	const left = "the file was left in place for inspection"
	switch {
	// Strict: anything unreadable fails Restore, and nothing is moved.
	case s.cfg.Strict:
		return restoreErr("strict: %w; %s: fix or move it aside, or restore without Config.Strict to quarantine it", err, left)
	// A file from an earlier boot holds state that died with the reboot,
	// whatever else it says.
	case s.earlierBoot(meta):
		return nil
	// A newer binary's file is never replaced where nothing else holds the
	// state: rolling forward must find it intact.
	case errors.Is(err, checkpoint.ErrNewerSchema) && s.soleCopy(meta):
		return restoreErr("%w; phase %d (%s) has nothing else to restore from, so %s: roll forward to the binary that wrote it", err, int(s.cfg.Phase), s.cfg.Phase, left)
	// Nor is a file this binary's types cannot decode: the file is whole,
	// and a fix of the types (the error names it) reads it again.
	case errors.Is(err, checkpoint.ErrTypeMismatch) && !partial && s.soleCopy(meta):
		return restoreErr("%w; phase %d (%s) has nothing else to restore from, so %s: the file is whole, fix this binary's types as the error says", err, int(s.cfg.Phase), s.cfg.Phase, left)
	// Nor is any other file that holds the only copy of the state, unless
	// the user chose to serve less.
	case s.soleCopy(meta) && !s.cfg.DiscardUnreadableCheckpoint:
		return restoreErr("%w; the checkpoint is the only copy of the state (%s), so nothing was changed: %s", err, s.soleCopyWhy(), s.recovery(meta))
	// A file that says legacy is stale, which this binary cannot read in
	// full: neither side holds everything.
	case s.legacyIsStale(meta):
		what := "cannot be read"
		if partial {
			what = "has unreadable entries"
		}
		return restoreErr("%w: the checkpoint was written by phase 3 (contract), so legacy is stale, and the checkpoint %s (%w); %s: %s", ErrUnsafeRestore, what, err, left, unsafeRecovery(err))
	}
	return nil
}

// unsafeRecovery says how an operator gets past a checkpoint that says
// legacy is stale and cannot be read in full: a newer binary's file is
// read by that binary, any other is repaired.
func unsafeRecovery(err error) string {
	if errors.Is(err, checkpoint.ErrNewerSchema) {
		return "roll forward to the binary that wrote it"
	}
	return "`phaseshift inspect PATH` shows what is damaged; `phaseshift repair-journal --drop-damaged-records PATH` keeps every commit before a journal's damage, and `phaseshift restore-prev PATH` puts back the file before the last compaction"
}

// soleCopyWhy says why the checkpoint is the only copy of the state.
func (s *Store[K, V]) soleCopyWhy() string {
	if s.cfg.Phase == PhaseContract {
		return "phase 3 (contract) writes nothing else"
	}
	return "legacy does not survive a restart (Config.VolatileLegacy)"
}

// recovery says how an operator gets an unreadable sole copy, whose header
// (if it could be read) is meta, served again: first the recovery that
// loses nothing for this configuration, where there is one.
func (s *Store[K, V]) recovery(meta checkpoint.Meta) string {
	repair := "`phaseshift inspect PATH` shows what is damaged; `phaseshift repair-journal --drop-damaged-records PATH` keeps every commit before a journal's damage, and `phaseshift restore-prev PATH` puts back the file before the last compaction, which lacks every commit since (both mark what they write so: phase 3 refuses it, and phases 1 and 2 rebuild it from a legacy that holds every write, or refuse it over one phase 3 left stale, where `phaseshift clear-mark PATH` says how to go on)"
	const discard = "; to serve what can be read and lose the rest, set Config.DiscardUnreadableCheckpoint"
	if !s.legacyIsCurrent(meta) {
		return repair + discard
	}
	from := "legacy, which holds every acknowledged write"
	if s.explicit == nil {
		// An observing legacy lists what the runtime has set up: an ADD it
		// has not listed yet is in the checkpoint only.
		from = "what legacy lists now (an ADD the runtime has not listed yet is not in it: run it once the node is quiet)"
	}
	return "run phase 2 (migrate) once: it rebuilds the checkpoint from " + from + "; or " + repair + discard
}

// legacyIsCurrent reports whether legacy holds every acknowledged write,
// for a checkpoint whose header is meta, so that phase 2 rebuilds from it
// without a loss: an implicit legacy is never stale, and an explicit one
// is current unless phase 3, which does not write it, wrote the checkpoint
// (or its header cannot say). A volatile legacy holds nothing after a
// restart.
func (s *Store[K, V]) legacyIsCurrent(meta checkpoint.Meta) bool {
	switch {
	case s.cfg.Legacy == nil, s.cfg.VolatileLegacy:
		return false
	case s.explicit == nil:
		return true
	}
	return meta.Phase == PhaseExpand.String() || meta.Phase == PhaseMigrate.String()
}

// judgeCheckpoint decides, from the header of the checkpoint, whether it
// is stale (rules 3 and 7).
func (s *Store[K, V]) judgeCheckpoint(c *ckptView[K, V], r *Report[K]) {
	m := c.meta
	// With a boot epoch, a checkpoint from an earlier boot is stale: its
	// state died with the reboot, whatever else it says (a file this
	// binary cannot read tells its boot too).
	if c.exists && s.earlierBoot(m) {
		r.Stale = fmt.Sprintf("written in boot %s, this is boot %s: its state died with the reboot", m.BootID, s.bootID)
		c.usable, c.bootOld, c.entries = false, true, nil
		return
	}
	if !c.usable {
		return
	}
	// The mark of a run that did not keep the checkpoint level with legacy
	// (a phase-0 run, or one that could not read legacy in full): legacy
	// may hold what the checkpoint lacks.
	if km, ok := parseKeyed(m.Behind); ok {
		if ids, err := markedIDs[K](km); err == nil {
			c.marked = ids
			if s.cfg.Phase != PhaseLegacy && len(ids) > 0 {
				r.Stale = markedWhy(c)
			}
			return
		}
	}
	if mark := behindMark(m); mark != "" {
		c.behind = true
		if s.cfg.Phase != PhaseLegacy {
			r.Stale = fmt.Sprintf("seq %d is marked behind legacy: %s", m.Seq, mark)
		}
	}
}

// The marks a save leaves in Meta.Behind: why the checkpoint may lack what
// legacy holds.
const markPhase0 = "phase 0 (legacy) ran, which writes legacy only"

// markIncomplete is the mark of a run in phase p that could not read legacy
// in full.
func markIncomplete(p Phase) string {
	return fmt.Sprintf("phase %d (%s) could not read legacy in full", int(p), p)
}

// storesOwnMark reports whether mark is one a Store's save leaves (rule
// 26), not a repair's (phaseshift restore-prev, restore-kept,
// repair-journal).
func storesOwnMark(mark string) bool {
	return strings.HasPrefix(mark, markPhase0) || strings.HasSuffix(mark, " could not read legacy in full")
}

// behindMark returns the mark of the checkpoint whose header is m, or "".
// A file written before Meta.Behind existed records phase 0's mark as its
// phase alone.
func behindMark(m checkpoint.Meta) string {
	if m.Behind == "" && m.Phase == PhaseLegacy.String() {
		return markPhase0
	}
	if km, ok := parseKeyed(m.Behind); ok {
		return km.Text
	}
	return m.Behind
}

// earlierBoot reports whether, with a boot epoch, the checkpoint whose
// header is m was written in an earlier boot.
func (s *Store[K, V]) earlierBoot(m checkpoint.Meta) bool {
	return s.bootID != "" && m.BootID != "" && m.BootID != s.bootID
}

// readLegacy lists legacy. Strict fails on any listing that is not
// complete (rule 2); otherwise the rules decide whether restore can go on without
// it.
func (s *Store[K, V]) readLegacy(ctx context.Context) (legacyView[K, V], error) {
	var l legacyView[K, V]
	if s.cfg.Legacy == nil {
		return l, nil
	}
	m, err := s.cfg.Legacy.List(ctx)
	switch {
	case err == nil:
		l.entries, l.read, l.complete = m, true, true
	case source.Partial(err):
		l.entries, l.read, l.err = m, true, fmt.Errorf("reading legacy: %w", err)
	default:
		l.err = fmt.Errorf("reading legacy: %w", err)
	}
	if l.err != nil && s.cfg.Strict {
		return l, restoreErr("strict: %w", l.err)
	}
	if l.entries == nil {
		l.entries = map[K]V{}
	}
	return l, nil
}
