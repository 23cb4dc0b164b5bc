package migratetest

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
)

// The oracle: after every restore, the served state equals the
// acknowledged state, keys and values included, or Restore refused where
// the promise says it must. The few exceptions are each an entry whose
// outcome the promise leaves open, tracked here by identity.

// entry is an acknowledged entry: the key it was written under and its
// value.
type entry[K comparable, V any] struct {
	key K
	val V
}

// maybeVal is what an entry may be after writes whose outcome is not known
// (a crash cut them short, or they failed with ErrOutcomeUnknown): any of
// its states before and after each of them.
type maybeVal[K comparable, V any] struct {
	states []maybeState[K, V]
}

// maybeState is one state an uncertain entry may be in.
type maybeState[K comparable, V any] struct {
	e        entry[K, V]
	present  bool
	optional bool // an orphan's state: it may be gone too
}

// allows reports whether the entry served as got (ok: served at all) is
// one of m's states.
func (r *run[K, V]) allows(m maybeVal[K, V], got entry[K, V], ok bool, p migrate.Phase) bool {
	for _, st := range m.states {
		switch {
		case ok && st.present && r.either(got, st.e, p):
			return true
		case !ok && (!st.present || st.optional):
			return true
		}
	}
	return false
}

// acked is what the node's clients were told, by identity.
type acked[K comparable, V any] struct {
	truth     map[K]entry[K, V]    // must be served, exactly
	orphans   map[K]entry[K, V]    // kept and reported by the Store: may be served, as they were
	uncertain map[K]maybeVal[K, V] // a write a crash cut short (or of unknown outcome)
	hidden    map[K]entry[K, V]    // acknowledged, but a partial listing kept them from a restore
	// behind is the world's own account of whether the checkpoint may
	// lack what only legacy holds: this package's phase 0 ran, or a phase
	// 1 or 2 run could not read legacy in full, since a run that read it in
	// full. It is a mark of the whole file: this package's phase 0 marks
	// only the entries it writes (marked), unless it started over a file
	// it could not use.
	behind bool
	// marked is the world's account of the entries this package's phase 0
	// recorded in the checkpoint's keyed mark before writing them to
	// legacy, by identity: true where a write the caller was told of
	// proves it, false where a write failed or was cut short, which may
	// or may not have got its mark in first.
	marked map[K]bool
	// beforePhase0 is what an entry may be in the checkpoint, by
	// identity, as this package's phase 0 last started (it writes no
	// value there): what is left of an entry phase 0 may have marked
	// without writing it, once a volatile legacy's state died.
	beforePhase0 map[K]maybeVal[K, V]
}

func newAcked[K comparable, V any]() acked[K, V] {
	return acked[K, V]{truth: map[K]entry[K, V]{}, orphans: map[K]entry[K, V]{}, uncertain: map[K]maybeVal[K, V]{}, hidden: map[K]entry[K, V]{}, marked: map[K]bool{}}
}

// forget is a reboot, or the death of state that lived only in memory.
func (a *acked[K, V]) forget() {
	clear(a.truth)
	clear(a.orphans)
	clear(a.uncertain)
	clear(a.hidden)
}

// unmark clears the world's account of the checkpoint's marks: a restore
// that read legacy in full settled them, or the file went.
func (a *acked[K, V]) unmark() {
	a.behind = false
	clear(a.marked)
	a.beforePhase0 = nil
}

// checkpointLost is a checkpoint moved aside (by Restore, reported, or by
// the operator): what it alone held is gone, loudly. What legacy holds
// remains: it must be served where the phase about to run serves legacy,
// and may come back later where it does not.
func (a *acked[K, V]) checkpointLost(r *run[K, V], p migrate.Phase) {
	a.forget()
	a.unmark() // the mark went with the file
	into := a.truth
	if p == migrate.PhaseContract || (r.a.volatile && p != migrate.PhaseLegacy) {
		into = a.orphans
	}
	for k, v := range r.w.legacySnapshot() {
		into[r.a.match(k)] = entry[K, V]{k, v}
	}
}

// same reports whether got is exactly e.
func same[K comparable, V any](got, e entry[K, V]) bool {
	return got.key == e.key && reflect.DeepEqual(got.val, e.val)
}

func sameMap[K comparable, V any](a, b map[K]V) bool {
	return maps.EqualFunc(a, b, func(x, y V) bool { return reflect.DeepEqual(x, y) })
}

// expected is how e must be served in phase p: in phase 0, a legacy that
// observes serves its own record of an entry.
func (r *run[K, V]) expected(e entry[K, V], p migrate.Phase) entry[K, V] {
	if p != migrate.PhaseLegacy || r.w.exp != nil {
		return e
	}
	k, v := r.cfg.View(e.key, e.val)
	return entry[K, V]{k, v}
}

// verify compares what s serves with what was acknowledged, and adopts
// what a crash left undecided.
func (r *run[K, V]) verify(s *migrate.Store[K, V], rep migrate.Report[K], p migrate.Phase, x expectation) []string {
	var problems []string
	if x.unreadable {
		if rep.Quarantined == "" {
			problems = append(problems, "the checkpoint this binary cannot read was not moved aside")
		}
		r.acks.checkpointLost(r, p)
	}
	served := map[K]entry[K, V]{}
	for k, v := range s.All() {
		served[r.a.match(k)] = entry[K, V]{k, v}
	}
	problems = append(problems, r.checkReport(rep, served)...)
	problems = append(problems, r.checkTruth(served, p)...)
	problems = append(problems, r.checkHidden(served, p)...)
	problems = append(problems, r.checkUncertain(served, orphaned(r, rep), p)...)
	problems = append(problems, r.checkRest(served, rep, p)...)
	r.shared = undecided(rep)
	if r.orphans == nil {
		r.orphans = map[K]bool{}
	}
	for _, k := range rep.Orphaned { // reported once, excused until it goes
		r.orphans[r.a.match(k)] = true
	}
	problems = append(problems, r.checkUnique(served)...)
	r.updateBehind(p)
	slices.Sort(problems)
	for _, pr := range problems {
		r.logf("  %s", pr)
	}
	return problems
}

// checkReport checks what the report says against what is served.
func (r *run[K, V]) checkReport(rep migrate.Report[K], served map[K]entry[K, V]) []string {
	var problems []string
	if rep.Restored != len(served) {
		problems = append(problems, fmt.Sprintf("REPORT: Restored is %d, %d entries are served", rep.Restored, len(served)))
	}
	if len(r.w.hiddenIDs) == 0 {
		return problems
	}
	if len(rep.Errors) == 0 {
		problems = append(problems, "REPORT: the listing was partial, and Report.Errors is empty")
	}
	for _, k := range slices.Concat(rep.Pruned, rep.Dropped) {
		if r.w.hiddenIDs[r.a.match(k)] {
			problems = append(problems, fmt.Sprintf("DROPPED ON A PARTIAL LISTING: %v, which the listing could not read", k))
		}
	}
	return problems
}

// checkTruth: every acknowledged entry is served, exactly; an entry a
// partial listing kept from this restore may be missing, or served as the
// checkpoint had it.
func (r *run[K, V]) checkTruth(served map[K]entry[K, V], p migrate.Phase) []string {
	var problems []string
	for id, e := range r.acks.truth {
		want := r.expected(e, p)
		got, ok := served[id]
		switch {
		case r.w.hiddenIDs[id] && (!ok || !same(got, want)):
			// Not served, or served as the checkpoint last had it: the
			// listing could not read legacy's record, which may be newer
			// (rule 21 keeps what the checkpoint holds).
			r.acks.hidden[id] = e
			delete(r.acks.truth, id)
		case !ok:
			problems = append(problems, fmt.Sprintf("LOST: %v (acknowledged %v = %v) is not served", id, want.key, want.val))
		case r.richerThan(got, want):
			// An implicit legacy's record of the write (the old binary's),
			// served as the checkpoint's richer record of the same thing
			// (rule 18).
		case got.key != want.key:
			problems = append(problems, fmt.Sprintf("KEY: %v is served under %v, acknowledged under %v", id, got.key, want.key))
		case !reflect.DeepEqual(got.val, want.val):
			problems = append(problems, fmt.Sprintf("STALE: %v is served as %v, acknowledged %v", id, got.val, want.val))
		}
	}
	return problems
}

// richerThan reports whether got is what an implicit legacy would show as
// want: want is that legacy's record of an entry (its View), which the
// old binary's write left, and got the checkpoint's richer record of it.
func (r *run[K, V]) richerThan(got, want entry[K, V]) bool {
	if r.w.exp != nil || same(got, want) {
		return false
	}
	k, v := r.cfg.View(got.key, got.val)
	return same(entry[K, V]{k, v}, want)
}

// checkHidden: an entry a partial listing kept from an earlier restore must
// be back once a restore reads legacy in full.
func (r *run[K, V]) checkHidden(served map[K]entry[K, V], p migrate.Phase) []string {
	var problems []string
	for id, e := range r.acks.hidden {
		want := r.expected(e, p)
		got, ok := served[id]
		switch {
		case ok && same(got, want):
			r.acks.truth[id] = e
			delete(r.acks.hidden, id)
		case len(r.w.hiddenIDs) > 0 && r.w.hiddenIDs[id]:
			// Still hidden: not served, or served as the checkpoint had it.
		case ok:
			problems = append(problems, fmt.Sprintf("STALE: %v is served as %v = %v, acknowledged %v = %v before a partial listing hid it", id, got.key, got.val, want.key, want.val))
		case len(r.w.hiddenIDs) == 0:
			problems = append(problems, fmt.Sprintf("LOST: %v (acknowledged %v = %v) was hidden by a partial listing and is still not served after a full one", id, want.key, want.val))
		}
	}
	return problems
}

// checkUncertain: a write a crash cut short leaves its entry as it was
// before or after; whatever survived becomes the node's state.
func (r *run[K, V]) checkUncertain(served map[K]entry[K, V], reported map[K]bool, p migrate.Phase) []string {
	var problems []string
	for id, m := range r.acks.uncertain {
		got, ok := served[id]
		switch {
		case r.w.hiddenIDs[id]:
			// A partial listing hid legacy's record: what is served is
			// the checkpoint's, or nothing, and a later restore decides.
			continue
		case ok && reported[id]:
			// Kept and reported as an orphan: checkRest takes it.
			delete(r.acks.uncertain, id)
			continue
		}
		if !r.allows(m, got, ok, p) {
			var states []string
			for _, st := range m.states {
				states = append(states, fmt.Sprintf("%v (present: %v)", st.e.val, st.present))
			}
			problems = append(problems, fmt.Sprintf("CUT WRITE: %v is served as %v (present: %v), but the writes whose outcome is unknown leave only %s",
				id, got.val, ok, strings.Join(states, " or ")))
			continue
		}
		if p == migrate.PhaseLegacy && r.w.exp == nil {
			// Phase 0 serves what legacy shows, which cannot tell whether
			// the checkpoint still holds the richer record: a later
			// restore decides.
			continue
		}
		delete(r.acks.uncertain, id)
		r.settle(id, got, ok, m)
	}
	return problems
}

// either reports whether got is e, or, for a legacy that observes, e as
// legacy shows it (a write whose outcome is unknown may have taken the
// checkpoint's record of e away and left legacy's), or the checkpoint's
// richer record of e where e is legacy's (rule 18).
func (r *run[K, V]) either(got, e entry[K, V], p migrate.Phase) bool {
	if same(got, r.expected(e, p)) {
		return true
	}
	if r.w.exp != nil {
		return false
	}
	k, v := r.cfg.View(e.key, e.val)
	return same(got, entry[K, V]{k, v}) || r.richerThan(got, e)
}

// settle records what survived of writes whose outcome was unknown. If
// legacy and the checkpoint disagree about it (an ADD that reached only the
// checkpoint, a DEL the runtime will retry), the entry may be served or not
// until the next acknowledged write to it.
func (r *run[K, V]) settle(id K, got entry[K, V], ok bool, m maybeVal[K, V]) {
	_, inLegacy := r.legacyHas(id)
	switch {
	case ok && inLegacy:
		r.acks.truth[id] = got
	case ok:
		r.acks.orphans[id] = got
	case inLegacy:
		for _, st := range m.states {
			if st.present {
				r.acks.orphans[id] = st.e
			}
		}
	}
}

// checkRest: nothing else is served but the orphans the Store kept and
// reported.
func (r *run[K, V]) checkRest(served map[K]entry[K, V], rep migrate.Report[K], p migrate.Phase) []string {
	reported := orphaned(r, rep)
	var problems []string
	for id, got := range served {
		if _, ok := r.acks.truth[id]; ok {
			continue
		}
		if _, ok := r.acks.hidden[id]; ok {
			continue // checkHidden takes it
		}
		if o, known := r.acks.orphans[id]; known || reported[id] {
			if known && !r.either(got, o, p) && !reported[id] {
				problems = append(problems, fmt.Sprintf("STALE: %v is served as %v = %v, kept as %v = %v", id, got.key, got.val, o.key, o.val))
			}
			// Served and in legacy: the node's state again.
			if _, inLegacy := r.legacyHas(id); inLegacy {
				r.acks.truth[id] = got
				delete(r.acks.orphans, id)
			} else {
				r.acks.orphans[id] = got
			}
			continue
		}
		if _, ok := r.acks.uncertain[id]; ok {
			continue
		}
		problems = append(problems, fmt.Sprintf("INVENTED: %v is served as %v = %v, but was never acknowledged (or was deleted)", id, got.key, got.val))
	}
	for id := range r.acks.orphans {
		if _, ok := served[id]; !ok {
			if _, inLegacy := r.legacyHas(id); !inLegacy {
				delete(r.acks.orphans, id) // dropped: fine, and gone for good
			}
		}
	}
	return problems
}

// orphaned is the identities the report calls orphans.
func orphaned[K comparable, V any](r *run[K, V], rep migrate.Report[K]) map[K]bool {
	reported := map[K]bool{}
	for _, k := range rep.Orphaned {
		reported[r.a.match(k)] = true
	}
	return reported
}

// updateBehind keeps the world's account of the mark after a restore that
// succeeded: phase 0 of this package sets it; phases 1 and 2 clear it when
// they read legacy in full (or legacy is volatile) and set it when they
// could not.
func (r *run[K, V]) updateBehind(p migrate.Phase) {
	switch {
	case p == migrate.PhaseLegacy && r.cfg.NewBinaryInPhase0:
		// Phase 0 marks what it writes, as it writes it (step). Over a
		// file it could not use, it saves legacy's entries in its place,
		// level with legacy, and marks keys from then on too. Over a
		// durable legacy that differs from the file (the old binary's
		// writes, or a write a crash cut between legacy and the file), it
		// marks the whole file, which the file then says.
		if f := r.fileState(); f.readable && f.meta.Behind == phase0WholeText {
			r.acks.behind = true
		}
		r.acks.startPhase0()
	case p == migrate.PhaseExpand || p == migrate.PhaseMigrate:
		r.acks.unmark()
		r.acks.behind = len(r.w.hiddenIDs) > 0 && !r.a.volatile
	}
}

func (r *run[K, V]) legacyHas(id K) (K, bool) {
	for k := range r.w.imp.Snapshot() {
		if r.a.match(k) == id {
			return k, true
		}
	}
	var zero K
	return zero, false
}

// remedyKind is what an operator does after a refusal.
type remedyKind int

const (
	retry          remedyKind = iota // start again: the listing recovers
	rollForward                      // start the newer build
	moveAside                        // move the unreadable checkpoint aside by hand
	runPhase2First                   // run phase 2 once, then the phase again
)

// expectation is what the promise says a start must do.
type expectation struct {
	refusal    string // why Restore must refuse; "" when it must not
	sentinel   error  // what the refusal's error must match; nil: any
	remedy     remedyKind
	unreadable bool // the checkpoint cannot be read by this build: it must be moved aside
}

// fileState is what the world can tell of the checkpoint before a start.
type fileState struct {
	readable, corrupt bool
	meta              checkpoint.Meta
}
