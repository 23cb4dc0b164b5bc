package robustness_test

// The model TestRollout judges a rollout against, written from the
// documentation of packages migrate and checkpoint (go doc -all), the
// README's "Rolling it out", DESIGN.md's "Behaviour that must hold", and
// the "what must be true" of issues 21 and 22 where they change the
// documented behaviour - not from migrate's code, and not from
// migratetest's oracle. Each rule quotes the sentence it encodes.
//
// The model keeps, for every entry (a container: Match's identity), the
// states a restore may serve: exactly one once a write to it was
// acknowledged; more after a write whose outcome is unknown.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
)

// violation is a broken rule: Rule names it (failures are grouped and
// shrunk by it), Msg says what happened.
type violation struct {
	Rule string
	Msg  string
}

// entryState is a state an entry may be in: absent, or stored under Key
// with Val.
type entryState struct {
	Present bool
	Key     podKey
	Val     podAddr
}

func (s entryState) String() string {
	if !s.Present {
		return "absent"
	}
	return fmt.Sprintf("%v=%v", s.Key, s.Val)
}

func present(k podKey, v podAddr) entryState { return entryState{Present: true, Key: k, Val: v} }

// entryChange is what a write does to one entry if it takes effect.
type entryChange struct {
	C     string
	After entryState
}

// entryModel is what the model knows of one entry.
type entryModel struct {
	// States are what a restore may serve. A write that was cut by a crash
	// or failed with ErrOutcomeUnknown adds its state: "a later Restore may
	// serve it or not, and a later write to the same key settles it"
	// (ErrOutcomeUnknown). An acknowledged write leaves its state alone:
	// "A later acknowledged write always wins".
	States []entryState
	// Why says which write (or event) left States as they are.
	Why string
	// LegacyView: an observing legacy's view is all that is known to be
	// kept of the entry: it was acknowledged by a phase-0 run, which does
	// not write the checkpoint, or the checkpoint that held more was moved
	// aside. "For an observing legacy, an entry the checkpoint never held
	// (one the old binary wrote) is served as legacy records it,
	// placeholders included" (migrate, What holds).
	LegacyView bool
	// History is every state the entry was ever written in or served as.
	History []entryState
}

func (e *entryModel) has(s entryState) bool { return slices.Contains(e.States, s) }

// rolloutModel is the acknowledged state, and what the running Store
// serves.
type rolloutModel struct {
	world   worldKind
	entries map[string]*entryModel
	// live is the running Store's committed state, exactly: "reads (Get,
	// All, Len) see committed state only" and, after a failed write,
	// "memory is unchanged" (migrate, Writes).
	live map[podKey]podAddr
}

func newRolloutModel(w worldKind) *rolloutModel {
	return &rolloutModel{world: w, entries: map[string]*entryModel{}, live: map[podKey]podAddr{}}
}

func (m *rolloutModel) entry(c string) *entryModel {
	e := m.entries[c]
	if e == nil {
		e = &entryModel{States: []entryState{{}}, Why: "never written"}
		m.entries[c] = e
	}
	return e
}

// acknowledge records writes that returned nil: "A write returns nil only
// once every side its phase writes has it durably" (migrate, Writes), so a
// restore serves exactly them from now on.
func (m *rolloutModel) acknowledge(changes []entryChange, why string, phase0 bool) {
	for _, ch := range changes {
		e := m.entry(ch.C)
		e.States, e.Why = []entryState{ch.After}, why
		e.LegacyView = m.world == observingWorld && phase0
		e.History = append(e.History, ch.After)
		m.applyLive(ch)
	}
}

// unknown records writes whose outcome is unknown: cut by a crash, or
// failed with ErrOutcomeUnknown. "An Update is atomic on the checkpoint
// (one save) but not on an explicit legacy source ...: a crash between
// those writes leaves part of the Update in legacy" (migrate, Caveats): so
// each entry of the write is in its before or after state on its own.
func (m *rolloutModel) unknown(changes []entryChange, why string) {
	for _, ch := range changes {
		e := m.entry(ch.C)
		if !e.has(ch.After) {
			e.States = append(e.States, ch.After)
		}
		e.Why = why
		e.History = append(e.History, ch.After)
	}
}

func (m *rolloutModel) applyLive(ch entryChange) {
	maps.DeleteFunc(m.live, func(k podKey, _ podAddr) bool { return k.C == ch.C })
	if ch.After.Present {
		m.live[ch.After.Key] = ch.After.Val
	}
}

// dieAll records that every entry's state died: at a reboot ("With a boot
// epoch, a checkpoint from an earlier boot is stale and discarded ...: its
// state died with the reboot"), or with the run of phase 0 over a volatile
// legacy ("its state dies with it, so the next start lets legacy (empty)
// decide which entries exist", Config.VolatileLegacy).
func (m *rolloutModel) dieAll(why string) {
	for _, e := range m.entries {
		e.States, e.Why, e.LegacyView = []entryState{{}}, why, false
	}
}

// die records that one entry's state died: phase 0 named it in its keyed
// mark before writing it to a volatile legacy, which died with the run;
// "a later phase 1 or 2 lets legacy decide the marked entries (... a
// marked entry legacy lacks is dropped)" (issue 41, rule 5).
func (m *rolloutModel) die(c, why string) {
	e := m.entry(c)
	e.States, e.Why, e.LegacyView = []entryState{{}}, why, false
}

// liveKey is the key the running Store serves c's entry under.
func (m *rolloutModel) liveKey(c string) (podKey, bool) {
	for k := range m.live {
		if k.C == c {
			return k, true
		}
	}
	return podKey{}, false
}

// allowance is what a restore may serve besides the acknowledged state.
type allowance struct {
	// view: an observing legacy's record of any entry may be served.
	// Phase 0 "serves legacy, as the old binary did" (rule 4); and "a
	// checkpoint moved aside no longer enriches legacy's entries, which
	// are then served as legacy records them" (What holds).
	view bool
	// lenient: an explicit legacy behind phase 3 was served because the
	// checkpoint was moved aside: "A checkpoint that cannot be read at all
	// cannot tell whether it was written by phase 3; a lower phase then
	// restores from legacy" (Caveats), and "a checkpoint reported moved
	// aside loses what only it held". Any earlier state, or none.
	lenient bool
	// orphaned is Report.Orphaned, for an observing legacy: "an orphan may
	// be served until its DEL comes" (What holds).
	orphaned map[podKey]bool
}

type allowedBy int

const (
	notAllowed allowedBy = iota
	byState
	byView
	byLenience
	byOrphan
)

// allows says how a served state (absent included) of the entry is
// allowed.
func (m *rolloutModel) allows(e *entryModel, got entryState, a allowance) allowedBy {
	if e.has(got) {
		return byState
	}
	// A write cut by a crash (or failed with ErrOutcomeUnknown) may have
	// reached the checkpoint and not the outside world: then legacy's view
	// is all that is left of the state before it, and restore cannot serve
	// more than legacy records ("served as legacy records it").
	uncertain := len(e.States) > 1
	if got.Present && m.world == observingWorld && (a.view || e.LegacyView || uncertain) {
		// What legacy records of the entry agrees (Config.Equal: "compare
		// what legacy records") with a state the entry may be in.
		for _, s := range e.States {
			if s.Present && sameIP(s.Val, got.Val) {
				return byView
			}
		}
	}
	if a.lenient && (!got.Present || slices.Contains(e.History, got)) {
		return byLenience
	}
	if got.Present && m.world == observingWorld && a.orphaned[got.Key] {
		return byOrphan
	}
	return notAllowed
}

// judgeServed is the promise: "Any sequence of these steps ... restores
// exactly what was acknowledged, keys and values included, or refuses
// with a clear error" (README, Rolling it out), with the allowances above.
// It returns the served state by entry.
func (m *rolloutModel) judgeServed(got map[podKey]podAddr, a allowance) (map[string]entryState, *violation) {
	byC := map[string]entryState{}
	for k, v := range got {
		if prev, dup := byC[k.C]; dup {
			// "keys equal after Match are one entry" (Config.Match).
			return nil, &violation{"duplicate-entry", fmt.Sprintf("%s is served twice: %v and %v=%v", k.C, prev, k, v)}
		}
		byC[k.C] = present(k, v)
	}
	for _, c := range unionContainers(m.entries, byC) {
		e, g := m.entry(c), byC[c]
		if m.allows(e, g, a) == notAllowed {
			return nil, m.servedWrong(c, e, g)
		}
	}
	return byC, nil
}

// servedWrong names the rule a wrongly served entry breaks.
func (m *rolloutModel) servedWrong(c string, e *entryModel, got entryState) *violation {
	want := fmt.Sprintf("%s: served %v, but the model allows %v (%s)", c, got, e.States, e.Why)
	allAbsent := !slices.ContainsFunc(e.States, func(s entryState) bool { return s.Present })
	switch {
	case got.Present && allAbsent && strings.Contains(e.Why, "Delete"):
		// "An acknowledged Delete must never come back" (issue 22.1; an
		// acknowledged delete must survive every rollback).
		return &violation{"acknowledged-delete-came-back", want}
	case got.Present && len(e.History) == 0:
		return &violation{"served-never-written", want}
	case got.Present && allAbsent:
		return &violation{"dead-state-came-back", want}
	case !got.Present:
		return &violation{"acknowledged-write-lost", want}
	}
	// "a later acknowledged write must always win" (issue 22.2).
	return &violation{"later-write-lost", want}
}

// resync makes the model follow what a judged restore served: a served
// state the allowances let through is what the entry holds from now on.
func (m *rolloutModel) resync(byC map[string]entryState, a allowance, keepView bool) {
	for _, c := range unionContainers(m.entries, byC) {
		e, g := m.entry(c), byC[c]
		switch m.allows(e, g, a) {
		case byView:
			// Only legacy's view is left of it once the checkpoint that
			// enriched it is gone.
			e.LegacyView = e.LegacyView || keepView
		case byLenience:
			e.States, e.Why = []entryState{g}, "served after the checkpoint was moved aside"
		case byOrphan:
			e.States, e.Why = append(e.States, g), "served as an orphan"
		}
		if g.Present {
			e.History = append(e.History, g)
		}
	}
	m.live = map[podKey]podAddr{}
	for _, g := range byC {
		m.live[g.Key] = g.Val
	}
}

func unionContainers[A, B any](a map[string]A, b map[string]B) []string {
	s := slices.Collect(maps.Keys(a))
	for c := range b {
		if _, ok := a[c]; !ok {
			s = append(s, c)
		}
	}
	slices.Sort(s)
	return s
}

// restoreFacts is what the judge of one successful restore needs.
type restoreFacts struct {
	bin                 binary
	world               worldKind
	rep                 migrate.Report[podKey]
	got                 map[podKey]podAddr
	store               *migrate.Store[podKey, podAddr]
	before              peeked
	fileBefore, fileNow []byte
	quarantined         int // files moved aside during the restore
	torn                bool
}

// judgeReport checks that the Report says what was served: "Report says
// what Restore did: where the served state came from, what it reconciled,
// what it found stale or unreadable and what it repaired".
func judgeReport(f restoreFacts) *violation {
	bad := func(format string, args ...any) *violation {
		return &violation{"report-inconsistent", fmt.Sprintf(format, args...)}
	}
	rep := f.rep
	switch {
	case rep.Phase != f.bin.Phase:
		return bad("Report.Phase is %v in phase %v", rep.Phase, f.bin.Phase)
	case rep.Restored != len(f.got) || f.store.Len() != len(f.got):
		// "Restored int // entries served"
		return bad("Report.Restored is %d, Len %d, but %d entries are served", rep.Restored, f.store.Len(), len(f.got))
	case rep.FromCheckpoint+rep.FromLegacy != rep.Restored:
		// "FromCheckpoint // of those, served with the checkpoint's key and
		// value; FromLegacy // of those, served with legacy's"
		return bad("FromCheckpoint %d + FromLegacy %d != Restored %d", rep.FromCheckpoint, rep.FromLegacy, rep.Restored)
	case (rep.Quarantined != "") != (f.quarantined > 0):
		// "Quarantined string // where an unreadable checkpoint was moved"
		return bad("Report.Quarantined is %q, but %d file(s) were moved aside", rep.Quarantined, f.quarantined)
	case rep.Restored > 0 && rep.ReadFrom == migrate.ReadNothing:
		return bad("ReadFrom is %q with %d entries served", rep.ReadFrom, rep.Restored)
	}
	if v := judgeReportKeys(f); v != nil {
		return v
	}
	return judgeReportSides(f)
}

// judgeReportKeys: the key lists are "by the key served (or, for the
// entries not served, the key the checkpoint had)".
func judgeReportKeys(f restoreFacts) *violation {
	lists := map[string][]podKey{"Backfilled": f.rep.Backfilled, "Orphaned": f.rep.Orphaned, "Diverged": f.rep.Diverged}
	for _, name := range slices.Sorted(maps.Keys(lists)) {
		for _, k := range lists[name] {
			if _, ok := f.got[k]; !ok {
				return &violation{"report-inconsistent", fmt.Sprintf("Report.%s names %v, which is not served", name, k)}
			}
		}
	}
	for name, keys := range map[string][]podKey{"Dropped": f.rep.Dropped, "Pruned": f.rep.Pruned} {
		for _, k := range keys {
			for g := range f.got {
				if g.C == k.C {
					return &violation{"report-inconsistent", fmt.Sprintf("Report.%s names %v, but its entry is served as %v", name, k, g)}
				}
			}
		}
	}
	st := f.store.Stats().LastRestore
	if st.Restored != f.rep.Restored || st.Orphaned != len(f.rep.Orphaned) || st.Quarantined != (f.rep.Quarantined != "") {
		return &violation{"report-inconsistent", fmt.Sprintf("Stats.LastRestore %+v does not match the Report", st)}
	}
	return nil
}

// judgeReportSides checks what the Report says of the sides.
func judgeReportSides(f restoreFacts) *violation {
	bad := func(format string, args ...any) *violation {
		return &violation{"report-inconsistent", fmt.Sprintf(format, args...)}
	}
	rep := f.rep
	if f.bin.Phase == migrate.PhaseContract {
		// "the checkpoint in phase 3", and legacy too when phase 3 served
		// what a legacy still configured holds and the checkpoint lacks
		// (Report.Backfilled); "A side read only to compare is in Shadow";
		// with VolatileLegacy phase 3 "neither takes legacy as evidence nor
		// compares with it".
		fromLegacy := len(rep.Backfilled) > 0
		switch {
		case !fromLegacy && rep.ReadFrom != migrate.ReadCheckpoint && rep.ReadFrom != migrate.ReadNothing:
			return bad("phase 3 read from %q and backfilled nothing", rep.ReadFrom)
		case fromLegacy && rep.ReadFrom != migrate.ReadCheckpointAndLegacy && rep.ReadFrom != migrate.ReadLegacy:
			return bad("phase 3 backfilled %d entries and read from %q", len(rep.Backfilled), rep.ReadFrom)
		case fromLegacy && f.world == volatileWorld:
			return bad("phase 3 backfilled %d entries from a volatile legacy", len(rep.Backfilled))
		}
		if wantShadow := f.world != volatileWorld; (rep.Shadow != nil) != wantShadow {
			return bad("phase 3 with %v: Report.Shadow is %v", f.world, rep.Shadow)
		}
	}
	if f.before.unreadableFor(f.bin) && rep.Quarantined == "" && !slicesEqual(f.fileBefore, f.fileNow) {
		// "is never used silently and never overwritten: it is moved aside"
		return bad("the checkpoint could not be read by this build (%v), and was overwritten without being moved aside", f.before.err)
	}
	if f.torn && !f.bin.Old && !f.before.unreadableFor(f.bin) && !slices.ContainsFunc(rep.Errors, func(err error) bool { return errors.Is(err, checkpoint.ErrTornJournal) }) {
		// "Errors ... includes a torn last record of the checkpoint's
		// journal that Load discarded".
		return bad("the journal's last record was torn, and Report.Errors does not say so: %v", rep.Errors)
	}
	return nil
}

func slicesEqual(a, b []byte) bool { return string(a) == string(b) }

// steadyRecord is the last restore, for the steady-state rule.
type steadyRecord struct {
	bin     binary
	got     map[podKey]podAddr
	orphans bool
}

// judgeSteady: "a restore right after a restore, with no write between,
// reports nothing diverged, backfilled, dropped, orphaned or stale" (issue
// 21.4, which Matrix gains), and serves what the first one served.
func judgeSteady(prev *steadyRecord, rep migrate.Report[podKey], got map[podKey]podAddr) *violation {
	var what []string
	for name, n := range map[string]int{"diverged": len(rep.Diverged), "backfilled": len(rep.Backfilled), "dropped": len(rep.Dropped), "orphaned": len(rep.Orphaned)} {
		if n > 0 {
			what = append(what, fmt.Sprintf("%d %s", n, name))
		}
	}
	if rep.Stale != "" || rep.LegacyStale != "" {
		what = append(what, fmt.Sprintf("stale (%q, legacy %q)", rep.Stale, rep.LegacyStale))
	}
	if !maps.Equal(prev.got, got) {
		what = append(what, fmt.Sprintf("serves %s instead of %s", describeEntries(got), describeEntries(prev.got)))
	}
	if len(what) == 0 {
		return nil
	}
	slices.Sort(what)
	return &violation{"restore-not-steady", "a restore right after a restore with no write between: " + strings.Join(what, ", ")}
}

// refusalFacts is what the judge of a refused restore needs.
type refusalFacts struct {
	bin          binary
	world        worldKind
	err          error
	before       peeked
	boot         string
	legacyBehind bool // explicit legacy: phase 3 wrote the checkpoint since this library's last phase 0-2 restore
	legacyDiffer bool // legacy holds an entry, or a value, the checkpoint lacks
}

// judgeRefusal: "A Restore that refuses must match a documented reason and
// change neither side" - the documented reasons, and issue 21.1's.
func judgeRefusal(f refusalFacts) *violation {
	if ok := refusalDocumented(f); !ok {
		return &violation{"refusal-undocumented", fmt.Sprintf("%v refused: %v (checkpoint: %s)", f.bin, f.err, describePeek(f.before))}
	}
	return nil
}

func refusalDocumented(f refusalFacts) bool {
	b, v := f.bin, f.before
	// Where the checkpoint is the only copy of the state: "phase 3; every
	// phase with VolatileLegacy, phase 0 included" (issue 21.1).
	soleCopy := b.Phase == migrate.PhaseContract || f.world == volatileWorld
	unreadable := v.unreadableFor(b)
	behind := f.world == explicitWorld && f.legacyBehind
	switch {
	case b.Old:
		return false
	case errors.Is(f.err, migrate.ErrStale):
		// "ErrStale (phase 3 on a checkpoint behind legacy)": phase 0's
		// mark, of the whole file or of the keys it wrote, not the mere
		// run of phase 0 ("a phase-0 run that wrote nothing leaves
		// nothing to distrust", issue 41 rule 5); issue 21.2:
		// what a configured legacy holds and the checkpoint lacks, phase 3
		// "serves ... or refuses".
		return b.Phase == migrate.PhaseContract && (v.markedBehind(f.boot) || f.legacyDiffer)
	case errors.Is(f.err, migrate.ErrUnsafeRestore):
		// "ErrUnsafeRestore (legacy is stale and cannot be read or healed
		// in full, or the checkpoint that says so cannot be read in full)".
		return behind || (soleCopy && unreadable) || (b.Phase == migrate.PhaseContract && f.legacyDiffer)
	case errors.Is(f.err, checkpoint.ErrNewerSchema):
		// "checkpoint.ErrNewerSchema where the checkpoint is the only copy".
		return v.exists && v.meta.Schema > b.Schema && (soleCopy || behind)
	case errors.Is(f.err, checkpoint.ErrCorrupt), errors.Is(f.err, checkpoint.ErrOlderSchema), errors.Is(f.err, checkpoint.ErrBadEntry):
		// Issue 21.1: "a checkpoint that cannot be read in full ... fails
		// Restore by default" where it is the only copy.
		return unreadable && (soleCopy || behind)
	}
	return false
}

func describePeek(v peeked) string {
	switch {
	case !v.exists:
		return "none"
	case v.err != nil:
		return "unreadable: " + v.err.Error()
	}
	return fmt.Sprintf("seq %d, phase %s, schema %d, boot %s, %d entries", v.meta.Seq, v.meta.Phase, v.meta.Schema, v.meta.BootID, len(v.snap))
}

// legacyDiffers says whether legacy holds an entry the checkpoint lacks, or
// one with a value it does not agree with (what phase 3's cross-check
// reports as "only in legacy" or diverged).
func legacyDiffers(w worldKind, legacy, ckpt map[podKey]podAddr) bool {
	byC := map[string]podAddr{}
	for k, v := range ckpt {
		byC[k.C] = v
	}
	for k, v := range legacy {
		c, ok := byC[k.C]
		if !ok || (w == observingWorld && !sameIP(c, v)) || (w != observingWorld && c != v) {
			return true
		}
	}
	return false
}
