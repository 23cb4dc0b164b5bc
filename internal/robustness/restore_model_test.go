package robustness_test

// The model FuzzRestore checks Restore against. It is written from package
// migrate's documentation (doc.go "# Two kinds of legacy", "# Restore
// rules" and "# What holds", the fields of Config and Report), not from its
// code: each function below encodes one documented sentence, quoted in its
// comment, so that a disagreement with the implementation points at either
// a code bug or a sentence to fix.

import (
	"errors"
	"maps"
	"slices"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
)

// Sentinels the fuzzed legacy fails with.
var (
	errListFailed      = errors.New("fuzz: legacy listing failed")
	errEntryUnreadable = errors.New("fuzz: legacy entry could not be read")
)

// bootNow is the boot the fuzzed Store runs in when the epoch is on; seed
// files are stamped with it, with bootOld, or with nothing.
const (
	bootNow = "boot-now"
	bootOld = "boot-old"
)

// listing is how the fuzzed legacy answers List.
type listing int

const (
	listComplete listing = iota
	listPartial          // without the hidden entries, with a *source.ListError
	listFailed           // no entries, errListFailed
)

// epochMode is where the fuzzed Store gets its boot ID from.
type epochMode int

const (
	epochOff    epochMode = iota
	epochConfig           // Config.BootID
	epochFile             // the checkpoint's BootID method (checkpoint.WithBootID)
	epochBoth
)

// restoreCase is one fuzzed Restore.
type restoreCase struct {
	phase                   migrate.Phase
	strict, explicit        bool
	prune, volatile, verify bool
	list                    listing
	epoch                   epochMode
	legacy                  map[string]int  // everything legacy holds
	hidden                  map[string]bool // what a partial listing cannot read
	file                    []byte          // the checkpoint's bytes; nil: no file
}

// listed is what a List returns: legacy's readable entries.
func (c restoreCase) listed() map[string]int {
	switch c.list {
	case listFailed:
		return map[string]int{}
	case listPartial:
		l := maps.Clone(c.legacy)
		maps.DeleteFunc(l, func(k string, _ int) bool { return c.hidden[k] })
		return l
	}
	return maps.Clone(c.legacy)
}

// fileKind is what an independent Load makes of the checkpoint's bytes.
type fileKind int

const (
	fileMissing    fileKind = iota
	fileClean               // loads
	fileBadEntries          // intact, some entries do not decode
	fileNewer               // newer schema: Meta describes it, no entries
	fileUnreadable          // corrupt (or too old): nothing known
)

// fileView is an independent Load of the checkpoint's bytes.
type fileView struct {
	kind    fileKind
	err     error
	meta    checkpoint.Meta
	entries map[string]int // the entries that decode
}

// metaKnown: the file says who wrote it ("With ErrNewerSchema, the
// Snapshot's Meta still describes the file", checkpoint.File.Load).
func (v fileView) metaKnown() bool {
	return v.kind == fileClean || v.kind == fileBadEntries || v.kind == fileNewer
}

// unreadable: "A corrupt checkpoint, one with a newer schema than the
// binary knows ..., or entries that do not decode, is never used silently
// and never overwritten: it is moved aside."
func (v fileView) unreadable() bool {
	return v.kind == fileBadEntries || v.kind == fileNewer || v.kind == fileUnreadable
}

// The rules of "Building the state", in the order the docs apply them.
type rule int

const (
	ruleLegacyStale     rule = 1 // checkpoint by phase 3 over a legacy the Store writes
	ruleRefuseBehind    rule = 2 // phase 3 over a checkpoint behind legacy
	ruleVolatile        rule = 3
	rulePhase0          rule = 4
	rulePhase1          rule = 5
	rulePhase2Untrusted rule = 6
	rulePhase2NoListing rule = 7
	rulePhase2          rule = 8
	rulePhase3          rule = 9
)

// judged is the checkpoint as "Judging the checkpoint" leaves it.
type judged struct {
	view      fileView
	usable    map[string]int // the entries restore may use
	discarded bool           // from an earlier boot
	behind    bool           // carries phase 0's mark
	byPhase3  bool           // written by phase 3, and not discarded
}

// trusted: phase 2 "cannot trust [a checkpoint] to hold every entry" when
// it is "missing, moved aside, from an earlier boot, or behind legacy".
func (j judged) trusted() bool {
	return j.view.kind == fileClean && !j.discarded && !j.behind
}

// judge applies "Judging the checkpoint".
func judge(c restoreCase, v fileView) judged {
	j := judged{view: v, usable: map[string]int{}}
	j.discarded = fromEarlierBoot(c, v)
	if v.kind == fileClean || v.kind == fileBadEntries {
		// "its readable entries (if any) still used"
		j.usable = maps.Clone(v.entries)
	}
	if j.discarded {
		j.usable = map[string]int{}
		return j
	}
	// The mark is judged on a file restore can use; one moved aside
	// unread is not trusted in any case (Report.Quarantined says why).
	j.behind = (v.kind == fileClean || v.kind == fileBadEntries) && v.meta.Phase == migrate.PhaseLegacy.String()
	j.byPhase3 = v.metaKnown() && v.meta.Phase == migrate.PhaseContract.String()
	return j
}

// fromEarlierBoot: "With a boot epoch, a checkpoint from an earlier boot is
// stale and discarded (Report.Stale): its state died with the reboot."
// Config.BootID: "a checkpoint written in another boot is stale".
//
// The docs do not say what a file that records no boot is (one written
// before the epoch was turned on): it is trusted, as the code does, since
// discarding it would throw away the state of every node that turns the
// epoch on without a reboot (reported as a doc gap). A newer file is judged
// by its schema first: it is moved aside or refused whatever its boot.
func fromEarlierBoot(c restoreCase, v fileView) bool {
	readable := v.kind == fileClean || v.kind == fileBadEntries
	return c.epoch != epochOff && readable && v.meta.BootID != "" && v.meta.BootID != bootNow
}

// expectation is what the model says Restore must do.
type expectation struct {
	refusals []error // non-empty: Restore fails with an error matching one
	rule     rule
	j        judged

	served                   map[string]int
	fromCheckpoint           [2]int // bounds on Report.FromCheckpoint
	readFrom                 []migrate.Sides
	backfilled, dropped      []string
	orphaned, pruned         []string
	diverged                 []string
	legacyAfter              map[string]int // everything legacy holds afterwards
	mustSave                 bool
	recorded                 string // the phase a save records
	stale, legacyStale       tri
	shadow                   *migrate.Shadow[string] // nil: Report.Shadow must be nil
	shadowExact, shadowLoose bool                    // compare the key lists / only the side
	unreadable               bool                    // something could not be read: Report.Errors says what
}

// tri is what a report text must be.
type tri int

const (
	anyText tri = iota
	someText
	noText
)

// expect runs the model.
func expect(c restoreCase, v fileView) expectation {
	j := judge(c, v)
	e := expectation{j: j}
	if e.refusals = refusals(c, j); len(e.refusals) > 0 {
		return e
	}
	e.rule = pickRule(c, j)
	b := build(c, j, e.rule)
	e.served, e.fromCheckpoint = b.served, [2]int{b.fromCkMin, b.fromCkMax}
	e.backfilled, e.dropped, e.orphaned, e.pruned, e.diverged = b.backfilled, b.dropped, b.orphaned, b.pruned, b.diverged
	e.readFrom = readFrom(e.rule, b)
	e.legacyAfter = legacyAfter(c, e.rule, j.behind, e.served)
	e.recorded = recordedPhase(c)
	e.mustSave = mustSave(c, j, e.rule, e.served, e.recorded)
	e.stale, e.legacyStale = staleText(c, j), legacyStaleText(c, e.rule)
	expectShadow(c, j, &e)
	e.unreadable = v.unreadable() || c.list != listComplete
	return e
}

// refusals lists every documented refusal that applies; Restore may name
// any of them.
func refusals(c restoreCase, j judged) []error {
	var errs []error
	errs = append(errs, strictRefusals(c, j.view)...)
	errs = append(errs, newerSoleCopy(c, j.view)...)
	errs = append(errs, unsafeLegacyStale(c, j)...)
	errs = append(errs, refuseBehind(c, j)...)
	errs = append(errs, servedSideUnreadable(c, j)...)
	return errs
}

// strictRefusals: "With Config.Strict, anything that cannot be read (a
// corrupt or newer file, an entry that does not decode, a legacy listing
// that failed or is partial) fails Restore in every phase, and nothing is
// changed."
func strictRefusals(c restoreCase, v fileView) []error {
	if !c.strict {
		return nil
	}
	var errs []error
	if v.unreadable() {
		errs = append(errs, loadSentinel(v.err))
	}
	switch c.list {
	case listPartial:
		errs = append(errs, errEntryUnreadable)
	case listFailed:
		errs = append(errs, errListFailed)
	}
	return errs
}

// loadSentinel is the documented sentinel a Load error matches.
func loadSentinel(err error) error {
	for _, s := range []error{checkpoint.ErrCorrupt, checkpoint.ErrNewerSchema, checkpoint.ErrOlderSchema, checkpoint.ErrBadEntry} {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

// newerSoleCopy: "where the checkpoint is the sole copy of the state
// (phase 3, or phases 1 and 2 with VolatileLegacy), a newer file fails
// Restore whatever Strict says (a binary rollback must not replace good
// data it cannot read)".
func newerSoleCopy(c restoreCase, v fileView) []error {
	sole := c.phase == migrate.PhaseContract || (c.volatile && c.phase != migrate.PhaseLegacy)
	if v.kind == fileNewer && sole {
		return []error{checkpoint.ErrNewerSchema}
	}
	return nil
}

// unsafeLegacyStale, rule 1: "A checkpoint written by phase 3 ... makes a
// legacy the Store writes stale ...: a phase that writes legacy serves the
// checkpoint and rewrites legacy to match it. If either side cannot be read
// in full, Restore fails (ErrUnsafeRestore)." And in judging: "a file that
// says legacy is stale ... and cannot be read in full fails with
// ErrUnsafeRestore."
//
// A file that cannot be read in full says so in its header, which is read
// before its boot is judged.
func unsafeLegacyStale(c restoreCase, j judged) []error {
	header := c.explicit && c.phase.WritesLegacy() && j.view.metaKnown() && j.view.meta.Phase == migrate.PhaseContract.String()
	switch {
	case header && j.view.kind != fileClean:
		return []error{migrate.ErrUnsafeRestore}
	case legacyIsStale(c, j) && c.list != listComplete:
		return []error{migrate.ErrUnsafeRestore}
	}
	return nil
}

// legacyIsStale: rule 1 applies.
func legacyIsStale(c restoreCase, j judged) bool {
	return c.explicit && c.phase.WritesLegacy() && j.byPhase3
}

// refuseBehind, rule 2: "Phase 3 refuses a checkpoint behind legacy
// (ErrStale)."
func refuseBehind(c restoreCase, j judged) []error {
	if c.phase == migrate.PhaseContract && j.behind {
		return []error{migrate.ErrStale}
	}
	return nil
}

// servedSideUnreadable: "a legacy listing that fails in phases 0 and 1
// (and in phase 2 over a checkpoint it cannot trust) ... fails Restore in
// every mode." Config.Strict names these "a side the phase must serve from
// that cannot be read at all (legacy in phases 0 and 1 ...)": with
// VolatileLegacy, phases 1 and 2 serve the checkpoint (rule 3), and legacy
// is the side they serve from only over a checkpoint behind it (reported
// as a doc gap: doc.go's sentence has no VolatileLegacy exception).
func servedSideUnreadable(c restoreCase, j judged) []error {
	servesLegacy := c.phase == migrate.PhaseLegacy ||
		(c.volatile && c.phase != migrate.PhaseContract && j.behind) ||
		(!c.volatile && c.phase == migrate.PhaseExpand) ||
		(!c.volatile && c.phase == migrate.PhaseMigrate && !j.trusted())
	if c.list == listFailed && servesLegacy {
		return []error{errListFailed}
	}
	return nil
}

// pickRule: "Building the state (the first rule that applies decides)".
func pickRule(c restoreCase, j judged) rule {
	switch {
	case legacyIsStale(c, j):
		return ruleLegacyStale
	case c.phase == migrate.PhaseContract && j.behind:
		return ruleRefuseBehind // refused before
	case c.volatile && (c.phase == migrate.PhaseExpand || c.phase == migrate.PhaseMigrate):
		// "phases 1 to 3": phase 3 reads the checkpoint only (see
		// volatile), so rule 9 decides there.
		return ruleVolatile
	case c.phase == migrate.PhaseLegacy:
		return rulePhase0
	case c.phase == migrate.PhaseExpand:
		return rulePhase1
	case c.phase == migrate.PhaseMigrate && !j.trusted():
		return rulePhase2Untrusted
	case c.phase == migrate.PhaseMigrate && c.list == listFailed:
		return rulePhase2NoListing
	case c.phase == migrate.PhaseMigrate:
		return rulePhase2
	}
	return rulePhase3
}

// builder builds the served state entry by entry and records what the
// report must say about each.
type builder struct {
	c                    restoreCase
	behind               bool // the checkpoint carries phase 0's mark
	served               map[string]int
	fromCkMin, fromCkMax int
	backfilled, dropped  []string
	orphaned, pruned     []string
	diverged             []string
}

// build applies the rule picked.
func build(c restoreCase, j judged, r rule) *builder {
	b := &builder{c: c, behind: j.behind, served: map[string]int{}}
	switch r {
	case ruleLegacyStale, rulePhase2NoListing, rulePhase3:
		b.serveCheckpoint(j.usable)
	case rulePhase0:
		b.serveLegacy(c.listed())
	case ruleVolatile:
		b.volatile(j)
	case rulePhase1, rulePhase2Untrusted:
		b.legacyDecides(j.usable)
	case rulePhase2:
		b.reconcile(j.usable)
	}
	return b
}

// serveCheckpoint, rules 1, 7 and 9: the checkpoint is served as it is.
func (b *builder) serveCheckpoint(ck map[string]int) {
	for k, v := range ck {
		b.fromCheckpoint(k, v)
	}
}

// serveLegacy, rule 4: "Phase 0 serves legacy, as the old binary did."
func (b *builder) serveLegacy(l map[string]int) {
	for k, v := range l {
		b.fromLegacy(k, v)
	}
}

// volatile, rule 3: "With VolatileLegacy, phases 1 to 3 serve the
// checkpoint with whatever legacy holds, and refill legacy; over a
// checkpoint behind legacy they serve what legacy holds, because the
// phase-0 run's state died with it." Config.VolatileLegacy: "nothing is
// reported as orphaned"; doc.go: "With VolatileLegacy it is kept without a
// word."
//
// Two readings, both reported as doc gaps: phase 3, whose restore "reads
// checkpoint" (the phase table), serves the checkpoint only, as rule 9
// says, and does not take legacy's entries in; and "serve what legacy
// holds" over a checkpoint behind it is read as rules 5 and 6 do it
// (legacy decides which entries exist, the merge rule decides each
// entry's record), which for a legacy the Store writes serves exactly what
// legacy holds.
func (b *builder) volatile(j judged) {
	if j.behind {
		b.legacyDecides(j.usable)
		return
	}
	l := b.c.listed()
	b.both(j.usable, l)
	b.onlyLegacy(j.usable, l)
	for k, v := range j.usable {
		if _, ok := l[k]; !ok {
			b.fromCheckpoint(k, v)
		}
	}
}

// legacyDecides, rules 5 and 6: "Phase 1 takes legacy's word on which
// entries exist." "Phase 2 does the same over a checkpoint it cannot trust
// to hold every entry".
func (b *builder) legacyDecides(ck map[string]int) {
	l := b.c.listed()
	b.both(ck, l)
	b.onlyLegacy(ck, l)
	for k, v := range ck {
		if _, ok := l[k]; ok {
			continue
		}
		if !b.keptOnPartialListing(k, v) {
			b.dropped = append(b.dropped, k)
		}
	}
}

// reconcile, rule 8: "Phase 2 otherwise serves the checkpoint reconciled
// with legacy."
func (b *builder) reconcile(ck map[string]int) {
	l := b.c.listed()
	b.both(ck, l)
	b.onlyLegacy(ck, l)
	for k, v := range ck {
		if _, ok := l[k]; ok || b.keptOnPartialListing(k, v) {
			continue
		}
		b.onlyCheckpoint(k, v)
	}
}

// onlyCheckpoint: "An entry only the checkpoint has is dropped ..., in
// phase 2, for a legacy the Store writes (Report.Dropped). For a legacy
// that observes it is kept as an orphan (Report.Orphaned), or dropped with
// Config.PruneOrphans (Report.Pruned)."
func (b *builder) onlyCheckpoint(k string, v int) {
	switch {
	case b.c.explicit:
		b.dropped = append(b.dropped, k)
	case b.c.prune:
		b.pruned = append(b.pruned, k)
	default:
		b.orphaned = append(b.orphaned, k)
		b.fromCheckpoint(k, v)
	}
}

// keptOnPartialListing: "Nothing is dropped, pruned or deleted on the
// evidence of a partial listing: an entry it lacks is kept and reported as
// an orphan."
func (b *builder) keptOnPartialListing(k string, v int) bool {
	if b.c.list != listPartial {
		return false
	}
	b.orphaned = append(b.orphaned, k)
	b.fromCheckpoint(k, v)
	return true
}

// both: "An entry both sides hold with values Config.Equal calls the same
// is served with the checkpoint's key and value; for a legacy the Store
// writes, with legacy's key if it differs. With values that differ
// (Report.Diverged), Config.Merge picks the value and the key comes with
// it; by default legacy's value for a legacy the Store writes, the
// checkpoint's for one that observes."
func (b *builder) both(ck, l map[string]int) {
	for k, cv := range ck {
		lv, ok := l[k]
		switch {
		case !ok:
		case cv == lv && b.c.explicit:
			// The keys are the same (no Match): "the checkpoint's key and
			// value" and "legacy's key" describe the same record, and
			// Config.Merge's doc says "with legacy's key": either count.
			b.served[k] = cv
			b.fromCkMax++
		case cv == lv:
			b.fromCheckpoint(k, cv)
		case b.c.explicit:
			b.diverged = append(b.diverged, k)
			b.fromLegacy(k, lv)
		default:
			b.diverged = append(b.diverged, k)
			b.fromCheckpoint(k, cv)
		}
	}
}

// onlyLegacy: "An entry only legacy has is served (Report.Backfilled in
// phase 2)." With VolatileLegacy phase 1 also builds on the checkpoint, and
// what it adds from legacy is a backfill too (a doc gap: the sentence says
// phase 2 only).
func (b *builder) onlyLegacy(ck, l map[string]int) {
	for k, v := range l {
		if _, ok := ck[k]; ok {
			continue
		}
		if b.c.phase == migrate.PhaseMigrate || (b.c.volatile && !b.behind) {
			b.backfilled = append(b.backfilled, k)
		}
		b.fromLegacy(k, v)
	}
}

func (b *builder) fromCheckpoint(k string, v int) {
	b.served[k] = v
	b.fromCkMin++
	b.fromCkMax++
}

func (b *builder) fromLegacy(k string, v int) { b.served[k] = v }

// readFrom: Report.ReadFrom is "the sides the served state was built
// from"; ReadNothing is "a fresh start: neither side had anything to
// serve". So it names every side an entry was served from (by the counts
// the model predicts), no side the rule does not build from, and nothing
// only when nothing is served. Which sides a rule names when the sides it
// read held nothing is not said: any it reads is accepted.
func readFrom(r rule, b *builder) []migrate.Sides {
	ckRead := r != rulePhase0
	legRead := r == rulePhase0 || r == ruleVolatile || r == rulePhase1 || r == rulePhase2Untrusted || r == rulePhase2
	ckUsed := b.fromCkMin > 0              // some entry surely from the checkpoint
	legUsed := len(b.served) > b.fromCkMax // some entry surely from legacy
	var ok []migrate.Sides
	for _, s := range []struct {
		sides   migrate.Sides
		ck, leg bool
	}{
		{migrate.ReadCheckpointAndLegacy, true, true},
		{migrate.ReadCheckpoint, true, false},
		{migrate.ReadLegacy, false, true},
	} {
		readsIt := (!s.ck || ckRead) && (!s.leg || legRead)
		coversUse := (s.ck || !ckUsed) && (s.leg || !legUsed)
		if readsIt && coversUse {
			ok = append(ok, s.sides)
		}
	}
	if len(b.served) == 0 {
		ok = append(ok, migrate.ReadNothing)
	}
	return ok
}

// legacyAfter is what legacy holds after Restore (for a legacy that
// observes, what it held: "[it] is never written").
//
// "A legacy the Store writes is brought in line with what is served, in
// the phases that write it (Report.LegacyWrites): all of it when it is
// stale or volatile, otherwise the entries whose served record is not
// legacy's (a Merge that chose the checkpoint's value). An entry kept only
// because a listing was partial is not written." With the default Merge
// (legacy's value) no served record differs from legacy's, so only rules 1
// (stale) and 3 (volatile, over a checkpoint not behind legacy: behind it,
// legacy decides and is not refilled) write; what a partial listing hid
// stays, since nothing is "deleted on the evidence of a partial listing"
// (nor of a failed one, which shows restore nothing of legacy at all).
func legacyAfter(c restoreCase, r rule, behind bool, served map[string]int) map[string]int {
	after := maps.Clone(c.legacy)
	if !c.explicit || !c.phase.WritesLegacy() {
		return after
	}
	switch r {
	case ruleLegacyStale:
		return maps.Clone(served)
	case ruleVolatile:
		if behind {
			return after
		}
		listed := c.listed()
		maps.Copy(after, served)
		maps.DeleteFunc(after, func(k string, _ int) bool {
			_, isServed := served[k]
			_, seen := listed[k]
			return !isServed && seen
		})
	}
	return after
}

// recordedPhase: "Every save records the Store's phase, with two
// exceptions that record phase 0's mark: phase 0 itself (when it has a
// Checkpoint, once per boot), and a phase 1 or 2 run that could not read
// legacy in full, which may have missed an entry only legacy holds."
//
// Not with VolatileLegacy (a doc gap): rule 3 treats a checkpoint behind
// legacy as dead, so a volatile run that marked its checkpoint would make
// the next restart, whose legacy is empty, serve nothing.
func recordedPhase(c restoreCase) string {
	incomplete := c.list != listComplete && !c.volatile && (c.phase == migrate.PhaseExpand || c.phase == migrate.PhaseMigrate)
	if c.phase == migrate.PhaseLegacy || incomplete {
		return migrate.PhaseLegacy.String()
	}
	return c.phase.String()
}

// mustSave: "Whenever restore changed what the checkpoint should hold
// (phase 1 rewrites at every start; a backfill, a drop, a prune, a merged
// value, a file moved aside, a mark set or cleared), the checkpoint is
// saved before Restore returns, so that the next phase finds it current."
//
// Rule 1 also must save: legacy was healed, and a file that still said
// phase 3 wrote last would make the next run heal legacy again, over the
// writes an old binary made to it in between.
func mustSave(c restoreCase, j judged, r rule, served map[string]int, recorded string) bool {
	if c.phase == migrate.PhaseLegacy {
		// phase 0 sets its mark once per boot: unless the file already
		// carries it (and is of this boot).
		return !(j.view.kind == fileClean && j.behind)
	}
	held := map[string]int{}
	if j.view.kind == fileClean {
		held = j.view.entries
	}
	markChanged := (recorded == migrate.PhaseLegacy.String()) != (j.view.kind == fileClean && j.view.meta.Phase == migrate.PhaseLegacy.String())
	return c.phase == migrate.PhaseExpand || j.view.unreadable() || !maps.Equal(held, served) ||
		(markChanged && j.view.kind != fileMissing) || (recorded == migrate.PhaseLegacy.String() && j.view.kind == fileMissing) ||
		r == ruleLegacyStale
}

// staleText: Report.Stale is "why the checkpoint was not trusted as it is;
// "" if it was". Judging: "a checkpoint from an earlier boot is stale and
// discarded (Report.Stale)"; "A checkpoint that carries the mark of phase
// 0 is behind legacy (Report.Stale)". Phases 0 and 1, which do not trust
// the checkpoint as it is in any case, are left free.
func staleText(c restoreCase, j judged) tri {
	switch {
	case j.discarded || (j.behind && c.phase != migrate.PhaseLegacy):
		return someText
	case c.phase == migrate.PhaseLegacy || c.phase == migrate.PhaseExpand || j.view.unreadable():
		return anyText
	}
	return noText // missing, or clean and current
}

// legacyStaleText: rule 1 "(Report.LegacyStale)"; a legacy that observes
// "is never stale". Volatile legacy and incomplete listings are left free
// (the docs do not say whether they count as "not trusted").
func legacyStaleText(c restoreCase, r rule) tri {
	switch {
	case r == ruleLegacyStale:
		return someText
	case c.volatile || c.list != listComplete || (c.phase == migrate.PhaseContract && c.explicit):
		return anyText
	}
	return noText
}

// expectShadow: Report.Shadow is "the comparison with a side that was read
// only to compare (the checkpoint in phase 0 with Config.Verify, legacy in
// phase 3); nil when none was". Config.Verify: "phase 0 ... report how it
// differs from legacy (Report.Shadow), without changing what is served".
// Config.Legacy: in phase 3 "when set, Restore cross-checks the checkpoint
// against it and reports differences".
func expectShadow(c restoreCase, j judged, e *expectation) {
	switch {
	case c.phase == migrate.PhaseLegacy && c.verify:
		e.shadow = shadowOf(migrate.ReadCheckpoint, j.usable, e.served)
		e.shadowExact = j.view.kind == fileClean && !j.discarded && e.rule == rulePhase0
		e.shadowLoose = !e.shadowExact
	case c.phase == migrate.PhaseContract && !c.volatile:
		e.shadow = shadowOf(migrate.ReadLegacy, c.listed(), e.served)
		e.shadowExact = c.list == listComplete
		e.shadowLoose = !e.shadowExact
	case c.phase == migrate.PhaseContract:
		// a volatile legacy is no evidence: whether phase 3 still
		// compares with it is not said.
		e.shadowLoose = true
	}
}

// shadowOf compares served with side.
func shadowOf(side migrate.Sides, shadow, served map[string]int) *migrate.Shadow[string] {
	sh := &migrate.Shadow[string]{Side: side}
	for k, v := range shadow {
		sv, ok := served[k]
		switch {
		case !ok:
			sh.OnlyShadow = append(sh.OnlyShadow, k)
		case sv != v:
			sh.Diverged = append(sh.Diverged, k)
		}
	}
	for k := range served {
		if _, ok := shadow[k]; !ok {
			sh.OnlyServed = append(sh.OnlyServed, k)
		}
	}
	return sh
}

// sorted returns keys sorted, nil for none, for comparing key lists.
func sorted(keys []string) []string {
	if len(keys) == 0 {
		return nil
	}
	s := slices.Clone(keys)
	slices.Sort(s)
	return s
}
