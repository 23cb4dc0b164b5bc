package migrate

import "fmt"

// The second step of Restore picks, from what the sides hold, the basis of
// the state to serve: rules 9 to 17 of the package documentation, one
// function each, in that order; the first rule that matches decides.

// basis is how the served state is built.
type basis int

const (
	// basisLegacy serves legacy as it is (phase 0, as the old binary did).
	basisLegacy basis = iota + 1
	// basisHeal serves the checkpoint and rewrites legacy to match it.
	basisHeal
	// basisLegacyDecides serves the entries legacy has, each with the
	// checkpoint's record where the two agree.
	basisLegacyDecides
	// basisReconcile serves the checkpoint's entries and what only legacy
	// has, dropping or keeping what only the checkpoint has by the kind of
	// legacy.
	basisReconcile
	// basisVolatile serves the checkpoint and whatever legacy holds, and
	// refills legacy: legacy is no evidence of what was deleted.
	basisVolatile
	// basisCheckpoint serves the checkpoint as it is.
	basisCheckpoint
)

var basisNames = map[basis]string{
	basisLegacy: "legacy", basisHeal: "checkpoint, healing legacy", basisLegacyDecides: "legacy decides",
	basisReconcile: "reconcile", basisVolatile: "checkpoint, refilling legacy", basisCheckpoint: "checkpoint",
}

func (b basis) String() string { return basisNames[b] }

// sides is what a rule sees.
type sides[K comparable, V any] struct {
	ck ckptView[K, V]
	lg legacyView[K, V]
}

// rule returns the basis it decides on and true, an error if it decides
// that Restore must refuse, or false to let the next rule decide.
type rule[K comparable, V any] func(s *Store[K, V], in *sides[K, V]) (basis, bool, error)

// restoreRules returns the rules in the order they apply.
func restoreRules[K comparable, V any]() []rule[K, V] {
	return []rule[K, V]{
		ruleLegacyStale[K, V],
		rulePhase3AfterPhase0[K, V],
		ruleVolatile[K, V],
		rulePhase0[K, V],
		rulePhase1[K, V],
		rulePhase2Behind[K, V],
		rulePhase2LegacyUnreadable[K, V],
		rulePhase2[K, V],
		rulePhase3[K, V],
	}
}

// chooseBasis applies the rules.
func (s *Store[K, V]) chooseBasis(in *sides[K, V]) (basis, error) {
	for _, r := range restoreRules[K, V]() {
		if b, ok, err := r(s, in); err != nil || ok {
			return b, err
		}
	}
	// Unreachable: rulePhase3 matches whatever the others leave.
	return 0, restoreErr("no restore rule for phase %d", int(s.cfg.Phase))
}

// ruleLegacyStale is rule 9: a checkpoint written by phase 3, which does not write
// legacy, makes an explicit legacy stale. A phase that writes legacy
// serves the checkpoint and rewrites legacy to match, which needs all of
// both sides: with either one incomplete, Restore refuses.
func ruleLegacyStale[K comparable, V any](s *Store[K, V], in *sides[K, V]) (basis, bool, error) {
	if !in.ck.usable || !s.legacyIsStale(in.ck.meta) {
		return 0, false, nil
	}
	why := fmt.Sprintf("the checkpoint (seq %d) was written by phase 3 (contract), which does not write legacy", in.ck.meta.Seq)
	if in.ck.behind {
		// A file put back that lacks commits (phaseshift restore-prev):
		// neither side holds every acknowledged write.
		return 0, false, restoreErr("%w: legacy is stale (%s), and the checkpoint is behind too (%s): neither side is known to hold every acknowledged write; `phaseshift clear-mark PATH` says how to go on: --legacy-current if this node did not run phase 3 since the file's last good save (phase 1 or 2 then rebuilds it from legacy), --accept-loss otherwise (the checkpoint is served as it is, what it lacks is lost, and legacy is rewritten from it)", ErrUnsafeRestore, why, staleWhy(in))
	}
	if !in.lg.complete {
		return 0, false, restoreErr("%w: legacy is stale (%s) and cannot be read in full to bring it current: %w", ErrUnsafeRestore, why, in.lg.err)
	}
	return basisHeal, true, nil
}

// rulePhase3AfterPhase0 is rule 10: phase 3 reads only the checkpoint, so it refuses
// one that is behind legacy: a phase-0 run (or a run that could not read
// legacy in full) came after it, and only legacy has what it did.
func rulePhase3AfterPhase0[K comparable, V any](s *Store[K, V], in *sides[K, V]) (basis, bool, error) {
	if s.cfg.Phase != PhaseContract || (!in.ck.behind && len(in.ck.marked) == 0) {
		return 0, false, nil
	}
	how := "run phase 1 (expand) or 2 (migrate) first, with legacy readable"
	if !storesOwnMark(behindMark(in.ck.meta)) {
		how += "; where legacy cannot hold what the file lacks (one phase 3 left stale), `phaseshift clear-mark PATH` says how to go on"
	}
	return 0, false, restoreErr("%w: the checkpoint is stale: %s; phase 3 needs a checkpoint level with legacy: %s", ErrStale, staleWhy(in), how)
}

// ruleVolatile is rule 11: a legacy that does not survive a restart is never evidence:
// phases 1 to 3 serve the checkpoint (with whatever legacy holds) and
// refill legacy, and so does phase 0 when it has a checkpoint. A checkpoint
// behind legacy is the exception: a phase-0 run came after it and kept its
// state in legacy only, where it died; serving the checkpoint would bring
// back what that run deleted. Any other mark (a repair's) says the file may
// lack commits, which a registry that died holds no more of: the file is
// served, and the report says it is behind.
func ruleVolatile[K comparable, V any](s *Store[K, V], in *sides[K, V]) (basis, bool, error) {
	p := s.cfg.Phase
	switch {
	case !s.cfg.VolatileLegacy:
		return 0, false, nil
	case p == PhaseContract:
		return basisCheckpoint, true, nil
	case p == PhaseLegacy && (!in.ck.usable || volatileBehind(in.ck.meta)):
		return 0, false, nil // rulePhase0
	case in.ck.usable && volatileBehind(in.ck.meta):
		return needsLegacy(s, in, basisLegacyDecides)
	}
	return basisVolatile, true, nil
}

// rulePhase0 is rule 12: phase 0 serves legacy, as the old binary did.
func rulePhase0[K comparable, V any](s *Store[K, V], in *sides[K, V]) (basis, bool, error) {
	if s.cfg.Phase != PhaseLegacy {
		return 0, false, nil
	}
	return needsLegacy(s, in, basisLegacy)
}

// rulePhase1 is rule 13: phase 1 takes legacy's word on which entries exist
// as far as its kind can know (rule 21: an observing legacy's silence, or
// a partial listing's, drops nothing), and keeps the checkpoint's key and
// value for an entry legacy agrees on (legacy may record less: CRI has no
// interface name).
func rulePhase1[K comparable, V any](s *Store[K, V], in *sides[K, V]) (basis, bool, error) {
	if s.cfg.Phase != PhaseExpand {
		return 0, false, nil
	}
	return needsLegacy(s, in, basisLegacyDecides)
}

// rulePhase2Behind is rule 14: phase 2 over a checkpoint it cannot trust to hold every
// entry (missing, moved aside, from an earlier boot, or marked behind
// legacy as a whole) restores as phase 1 does.
func rulePhase2Behind[K comparable, V any](s *Store[K, V], in *sides[K, V]) (basis, bool, error) {
	trusted := in.ck.usable && !in.ck.behind && in.ck.aside == nil
	if s.cfg.Phase != PhaseMigrate || trusted {
		return 0, false, nil
	}
	return needsLegacy(s, in, basisLegacyDecides)
}

// rulePhase2LegacyUnreadable is rule 15: phase 2 whose legacy listing failed serves
// the checkpoint as it is, and reports the failure (Strict refused
// already).
func rulePhase2LegacyUnreadable[K comparable, V any](s *Store[K, V], in *sides[K, V]) (basis, bool, error) {
	if s.cfg.Phase != PhaseMigrate || in.lg.read {
		return 0, false, nil
	}
	return basisCheckpoint, true, nil
}

// rulePhase2 is rule 16: phase 2 serves the checkpoint reconciled with legacy.
func rulePhase2[K comparable, V any](s *Store[K, V], _ *sides[K, V]) (basis, bool, error) {
	if s.cfg.Phase != PhaseMigrate {
		return 0, false, nil
	}
	return basisReconcile, true, nil
}

// rulePhase3 is rule 17: phase 3 serves the checkpoint (and what a legacy
// still configured holds that it lacks: see backfillContract).
func rulePhase3[K comparable, V any](*Store[K, V], *sides[K, V]) (basis, bool, error) {
	return basisCheckpoint, true, nil
}

// needsLegacy returns b if legacy could be listed, and otherwise refuses:
// b serves legacy's entries, in every mode (rule 6).
func needsLegacy[K comparable, V any](s *Store[K, V], in *sides[K, V], b basis) (basis, bool, error) {
	if in.lg.read {
		return b, true, nil
	}
	if in.lg.err == nil {
		// Unreachable: every phase that serves legacy requires Config.Legacy.
		return 0, false, restoreErr("phase %d (%s) restores from legacy, and Config.Legacy is not set", int(s.cfg.Phase), s.cfg.Phase)
	}
	why := fmt.Sprintf("phase %d (%s) restores from legacy", int(s.cfg.Phase), s.cfg.Phase)
	if s.cfg.Phase == PhaseMigrate || s.cfg.VolatileLegacy {
		why = "the checkpoint cannot be trusted on its own (" + staleWhy(in) + ")"
	}
	return 0, false, restoreErr("%w, which is needed: %s", in.lg.err, why)
}

// staleWhy says why the checkpoint cannot be served on its own.
func staleWhy[K comparable, V any](in *sides[K, V]) string {
	switch {
	case in.ck.behind:
		return fmt.Sprintf("seq %d is marked behind legacy: %s", in.ck.meta.Seq, behindMark(in.ck.meta))
	case len(in.ck.marked) > 0:
		return markedWhy(&in.ck)
	case in.ck.bootOld:
		return "it was written in an earlier boot"
	case in.ck.aside != nil:
		return "it cannot be read"
	}
	return "there is none"
}
