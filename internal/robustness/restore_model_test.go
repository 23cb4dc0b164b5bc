package robustness_test

// The model FuzzRestore checks Restore against. It is written from package
// migrate's documentation (doc.go "# Two kinds of legacy", "# Restore
// rules" and "# What holds", the fields of Config and Report), not from its
// code: each function below encodes one documented sentence, quoted in its
// comment, so that a disagreement with the implementation points at either
// a code bug or a sentence to fix. Where the docs leave a case open, the
// comment says which reading the model takes and why.

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

// epochMode is whether the fuzzed Store has a boot epoch: the checkpoint's
// BootID method (checkpoint.WithBootID) is its one source. The fuzz input
// still spends two bits on it, so that seeds keep their shape; every mode
// but epochOff turns it on.
type epochMode int

const (
	epochOff epochMode = iota
	epochOn
	epochOn2
	epochOn3
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

// metaKnown: the file says who wrote it and in which boot ("With
// ErrNewerSchema, the Snapshot's Meta still describes the file",
// checkpoint.File.Load).
func (v fileView) metaKnown() bool {
	return v.kind == fileClean || v.kind == fileBadEntries || v.kind == fileNewer
}

// unreadable: "A corrupt checkpoint, one with a newer schema than the
// binary knows ..., or entries that do not decode, is never used silently
// and never overwritten: it is moved aside (Report.Quarantined), its
// readable entries (if any) still used, and the error reported."
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
	canUse    bool           // restore may use its (readable) entries
	usable    map[string]int // those entries
	discarded bool           // from an earlier boot
	behind    bool           // carries phase 0's mark
	byPhase3  bool           // its header says phase 3 wrote it, and it is not discarded
}

// trusted: phase 2 "cannot trust [a checkpoint] to hold every entry" when
// it is "missing, moved aside, from an earlier boot, or behind legacy". A
// file with entries that do not decode is moved aside.
func (j judged) trusted() bool {
	return j.view.kind == fileClean && !j.discarded && !j.behind
}

// judge applies "Judging the checkpoint".
func judge(c restoreCase, v fileView) judged {
	j := judged{view: v, usable: map[string]int{}}
	j.discarded = fromEarlierBoot(c, v)
	if j.discarded {
		// "Whatever else it says (a newer schema, phase 3 as its writer)
		// no longer matters."
		return j
	}
	if v.kind == fileClean || v.kind == fileBadEntries {
		// "its readable entries (if any) still used"
		j.canUse, j.usable = true, maps.Clone(v.entries)
	}
	// "A checkpoint that carries the mark of phase 0 is behind legacy": the
	// mark is judged on a file restore can use; one moved aside unread is
	// not trusted in any case (Report.Quarantined says why).
	j.behind = j.canUse && v.meta.Phase == migrate.PhaseLegacy.String()
	j.byPhase3 = v.metaKnown() && v.meta.Phase == migrate.PhaseContract.String()
	return j
}

// fromEarlierBoot: "With a boot epoch, a checkpoint from an earlier boot is
// stale and discarded (Report.Stale): its state died with the reboot.
// Whatever else it says (a newer schema, phase 3 as its writer) no longer
// matters. A checkpoint that records no boot (written before the epoch was
// turned on) is judged as if from this boot." A file whose header cannot
// be read (corrupt) says no boot.
func fromEarlierBoot(c restoreCase, v fileView) bool {
	return c.epoch != epochOff && v.metaKnown() && v.meta.BootID != "" && v.meta.BootID != bootNow
}

// expectation is what the model says Restore must do.
type expectation struct {
	refusals []error // non-empty: Restore fails with an error matching one
	rule     rule
	j        judged

	served                   map[string]int
	fromCheckpoint           int // Report.FromCheckpoint
	readFrom                 migrate.Sides
	backfilled, dropped      []string
	orphaned, pruned         []string
	diverged                 []string
	legacyAfter              map[string]int // everything legacy holds afterwards
	mustSave                 bool
	recorded                 string         // the phase a save records
	saved                    map[string]int // the entries a save holds
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
	e.served, e.fromCheckpoint = b.served, b.fromCk
	e.backfilled, e.dropped, e.orphaned, e.pruned, e.diverged = b.backfilled, b.dropped, b.orphaned, b.pruned, b.diverged
	e.readFrom = readFrom(c, j, e.rule)
	e.legacyAfter = legacyAfter(c, j, e.rule, e.served)
	e.recorded = recordedPhase(c)
	e.saved = savedEntries(c, j, e.served)
	e.mustSave = mustSave(c, j, e.rule, e.served, e.recorded)
	e.stale, e.legacyStale = staleText(c, j, e.rule, e.served), legacyStaleText(c, e.rule)
	expectShadow(c, j, &e)
	e.unreadable = v.unreadable() || c.list != listComplete
	return e
}

// refusals lists every documented refusal that applies; Restore may name
// any of them.
func refusals(c restoreCase, j judged) []error {
	var errs []error
	errs = append(errs, strictRefusals(c, j.view)...)
	errs = append(errs, newerSoleCopy(c, j)...)
	errs = append(errs, unsafeLegacyStale(c, j)...)
	errs = append(errs, refuseBehind(c, j)...)
	errs = append(errs, servedSideUnreadable(c, j)...)
	return errs
}

// strictRefusals: "With Config.Strict, anything that cannot be read (a
// corrupt or newer file, an entry that does not decode, a legacy listing
// that failed or is partial) fails Restore in every phase, and nothing is
// changed." A file from an earlier boot is no exception: it cannot be
// read, and Strict leaves every file as it was.
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

// soleCopy: "where the checkpoint is the sole copy of the state (phase 3,
// or phases 1 and 2 with VolatileLegacy)".
func soleCopy(c restoreCase) bool {
	return c.phase == migrate.PhaseContract || (c.volatile && (c.phase == migrate.PhaseExpand || c.phase == migrate.PhaseMigrate))
}

// newerSoleCopy: "where the checkpoint is the sole copy of the state ..., a
// newer file fails Restore whatever Strict says (a binary rollback must not
// replace good data it cannot read)" - unless it is from an earlier boot,
// whose newer schema "no longer matters": it is moved aside like any
// unreadable file.
func newerSoleCopy(c restoreCase, j judged) []error {
	if j.view.kind == fileNewer && !j.discarded && soleCopy(c) {
		return []error{checkpoint.ErrNewerSchema}
	}
	return nil
}

// unsafeLegacyStale, rule 1: "A checkpoint written by phase 3 ... makes a
// legacy the Store writes stale ...: a phase that writes legacy serves the
// checkpoint and rewrites legacy to match it. If either side cannot be read
// in full, Restore fails (ErrUnsafeRestore)." And in judging: "a file that
// says legacy is stale ... and cannot be read in full fails with
// ErrUnsafeRestore" - not one from an earlier boot, whose writer "no longer
// matters".
func unsafeLegacyStale(c restoreCase, j judged) []error {
	says := c.explicit && c.phase.WritesLegacy() && j.byPhase3
	switch {
	case says && j.view.kind != fileClean:
		return []error{migrate.ErrUnsafeRestore}
	case legacyIsStale(c, j) && c.list != listComplete:
		return []error{migrate.ErrUnsafeRestore}
	}
	return nil
}

// legacyIsStale: rule 1 applies.
func legacyIsStale(c restoreCase, j judged) bool {
	return c.explicit && c.phase.WritesLegacy() && j.byPhase3 && j.canUse
}

// refuseBehind, rule 2: "Phase 3 refuses a checkpoint behind legacy
// (ErrStale)." It comes before rule 3, so VolatileLegacy changes nothing.
func refuseBehind(c restoreCase, j judged) []error {
	if c.phase == migrate.PhaseContract && j.behind {
		return []error{migrate.ErrStale}
	}
	return nil
}

// servedSideUnreadable: "a legacy listing that fails where legacy decides
// (phase 0, phase 1, phase 2 over a checkpoint it cannot trust; with
// VolatileLegacy, only over a checkpoint behind legacy) ... fails Restore
// in every mode." Phase 0 with VolatileLegacy serves legacy where rule 3
// does not apply to it (see volatilePhase0), and then legacy decides.
func servedSideUnreadable(c restoreCase, j judged) []error {
	var decides bool
	switch {
	case c.phase == migrate.PhaseContract:
	case c.volatile && c.phase == migrate.PhaseLegacy:
		decides = !volatilePhase0(j)
	case c.volatile:
		decides = j.behind
	case c.phase == migrate.PhaseLegacy, c.phase == migrate.PhaseExpand:
		decides = true
	case c.phase == migrate.PhaseMigrate:
		decides = !j.trusted()
	}
	if c.list == listFailed && decides {
		return []error{errListFailed}
	}
	return nil
}

// volatilePhase0: rule 3 covers "phase 0 with a Checkpoint", and "over a
// checkpoint behind legacy ... (phase 0 serves legacy)"; Config's
// VolatileLegacy says phase 0 "does as phases 1 and 2 at restore". The
// model reads "with a Checkpoint" as a checkpoint restore can use: phase 0
// keeps "the checkpoint's own entries, or saves legacy's when the
// checkpoint cannot be used", so a missing, unreadable or discarded file
// has nothing to serve with legacy, and phase 0 serves legacy (rule 4), as
// the old binary did. (Reported: the docs could say "usable".)
func volatilePhase0(j judged) bool {
	return j.canUse && !j.behind
}

// pickRule: "Building the state (the first rule that applies decides)".
func pickRule(c restoreCase, j judged) rule {
	switch {
	case legacyIsStale(c, j):
		return ruleLegacyStale
	case c.phase == migrate.PhaseContract && j.behind:
		return ruleRefuseBehind // refused before
	case c.volatile && c.phase != migrate.PhaseLegacy:
		return ruleVolatile
	case c.volatile && volatilePhase0(j):
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
	c                   restoreCase
	legacyBasis         bool // legacy decides which entries exist
	served              map[string]int
	fromCk              int
	backfilled, dropped []string
	orphaned, pruned    []string
	diverged            []string
}

// build applies the rule picked.
func build(c restoreCase, j judged, r rule) *builder {
	b := &builder{c: c, served: map[string]int{}}
	switch {
	case r == ruleLegacyStale, r == rulePhase2NoListing, r == rulePhase3:
		b.serveCheckpoint(j.usable)
	case r == ruleVolatile && c.phase == migrate.PhaseContract:
		// "Phase 3 serves the checkpoint, and neither takes legacy as
		// evidence nor compares with it."
		b.serveCheckpoint(j.usable)
	case r == ruleVolatile && j.behind:
		// "Over a checkpoint behind legacy they let legacy decide which
		// entries exist, as phase 1 does".
		b.legacyDecides(j.usable)
	case r == ruleVolatile:
		b.volatile(j.usable)
	case r == rulePhase0:
		b.serveLegacy(c.listed())
	case r == rulePhase1, r == rulePhase2Untrusted:
		b.legacyDecides(j.usable)
	case r == rulePhase2:
		b.reconcile(j.usable)
	}
	return b
}

// serveCheckpoint, rules 1, 7 and 9 (and rule 3 in phase 3): the
// checkpoint is served as it is.
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

// volatile, rule 3: "With VolatileLegacy, phases 1 and 2 (and phase 0 with
// a Checkpoint) serve the checkpoint with whatever legacy holds, and refill
// legacy, even when the listing failed: legacy is not the side they serve
// from." "An entry only the checkpoint has ... With VolatileLegacy it is
// kept without a word." That holds on a partial listing too: legacy is no
// evidence, so what it could not read changes nothing.
func (b *builder) volatile(ck map[string]int) {
	l := b.c.listed()
	b.both(ck, l)
	b.onlyLegacy(ck, l)
	for k, v := range ck {
		if _, ok := l[k]; !ok {
			b.fromCheckpoint(k, v)
		}
	}
}

// legacyDecides, rules 5 and 6 (and 3 over a checkpoint behind legacy):
// "Phase 1 takes legacy's word on which entries exist." "Phase 2 does the
// same over a checkpoint it cannot trust to hold every entry".
func (b *builder) legacyDecides(ck map[string]int) {
	b.legacyBasis = true
	l := b.c.listed()
	b.both(ck, l)
	b.onlyLegacy(ck, l)
	for k, v := range ck {
		if _, ok := l[k]; ok {
			continue
		}
		if !b.onPartialListing(k, v) {
			// "An entry only the checkpoint has is dropped where legacy
			// decides which entries exist (rules 5 and 6)".
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
		if _, ok := l[k]; ok || b.onPartialListing(k, v) {
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

// onPartialListing decides an entry the checkpoint has and a partial
// listing lacks, and reports whether it did: "Nothing is dropped, pruned or
// deleted on the evidence of a partial listing. An entry it lacks that the
// checkpoint holds is kept and reported as an orphan for a legacy that
// observes (whose record would lose to the checkpoint's anyway); for a
// legacy the Store writes, whose record would win and could not be read, it
// is not served this run, and stays where it lives, in legacy (the
// listing's error is in Report.Errors)." Not served, and not dropped
// either: no key list names it.
func (b *builder) onPartialListing(k string, v int) bool {
	switch {
	case b.c.list != listPartial:
		return false
	case b.c.explicit:
	default:
		b.orphaned = append(b.orphaned, k)
		b.fromCheckpoint(k, v)
	}
	return true
}

// both: "An entry both sides hold with values Config.Equal calls the same
// is served with the checkpoint's key and value; for a legacy the Store
// writes, with legacy's key if it differs. With values that differ
// (Report.Diverged), Config.Merge picks the value and the key comes with
// it; by default legacy's value for a legacy the Store writes, the
// checkpoint's for one that observes." Keys never differ here (no Match),
// so an entry whose values agree is served with the checkpoint's record.
func (b *builder) both(ck, l map[string]int) {
	for k, cv := range ck {
		lv, ok := l[k]
		switch {
		case !ok:
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

// onlyLegacy: "An entry only legacy has is served (Report.Backfilled,
// except in phase 1, where legacy is the basis)." Read with its reason:
// phase 1 under rule 3 builds on the checkpoint, and what it adds from
// legacy is a backfill (reported: "except where legacy is the basis (phase
// 1)" would say it without the second reading).
func (b *builder) onlyLegacy(ck, l map[string]int) {
	for k, v := range l {
		if _, ok := ck[k]; ok {
			continue
		}
		if !(b.c.phase == migrate.PhaseExpand && b.legacyBasis) {
			b.backfilled = append(b.backfilled, k)
		}
		b.fromLegacy(k, v)
	}
}

// fromCheckpoint serves the checkpoint's record: Report.FromCheckpoint is
// "of those, served with the checkpoint's key and value".
func (b *builder) fromCheckpoint(k string, v int) {
	b.served[k] = v
	b.fromCk++
}

// fromLegacy serves legacy's record: Report.FromLegacy is "of those,
// [served] with legacy's (Backfilled included)".
func (b *builder) fromLegacy(k string, v int) { b.served[k] = v }

// readFrom: "ReadFrom is the sides restore read to build the served state:
// legacy in phase 0; the checkpoint and legacy in phases 1 and 2 (legacy
// alone when the checkpoint could not be used); the checkpoint in phase 3
// and when legacy is stale; ReadNothing for a fresh start". "A side read
// only to compare is in Shadow."
//
// The rule that builds from a side that could not be used (a checkpoint
// missing, moved aside unread or discarded; a listing that failed) did not
// read it to build: phase 2 whose listing failed (rule 7) reads the
// checkpoint, and phase 3 over a file it could not use reads nothing (a
// fresh start). With VolatileLegacy, phase 0 reads both sides to build, as
// phases 1 and 2 do (reported: the field's "legacy in phase 0" does not
// name that case).
func readFrom(c restoreCase, j judged, r rule) migrate.Sides {
	ck, lg := j.canUse, true
	switch {
	case r == rulePhase0:
		ck = false
	case r == ruleLegacyStale, r == rulePhase2NoListing, r == rulePhase3,
		r == ruleVolatile && c.phase == migrate.PhaseContract:
		lg = false
	case r == ruleVolatile && !j.behind:
		// "for a legacy that does not survive a restart ..., when it held
		// nothing" it is left out.
		lg = c.list != listFailed && len(c.listed()) > 0
	}
	switch {
	case ck && lg:
		return migrate.ReadCheckpointAndLegacy
	case ck:
		return migrate.ReadCheckpoint
	case lg:
		return migrate.ReadLegacy
	}
	return migrate.ReadNothing
}

// legacyAfter is what legacy holds after Restore (for a legacy that
// observes, what it held: "[it] is never written").
//
// "A legacy the Store writes is brought in line with what is served, in
// the phases that write it (Report.LegacyWrites): all of it when it is
// stale or volatile, otherwise the entries whose served record is not
// legacy's (a Merge that chose the checkpoint's value). An entry kept only
// because a listing was partial is not written." With the default Merge
// (legacy's value) no served record differs from legacy's, so only rule 1
// (stale) and rule 3 (volatile: phases 0 to 2 over a checkpoint not behind
// legacy, where it serves the checkpoint; behind it, legacy decides and
// already holds what is served) write. What a partial listing hid stays,
// since nothing is "deleted on the evidence of a partial listing" (nor of a
// failed one, which shows restore nothing of legacy at all).
func legacyAfter(c restoreCase, j judged, r rule, served map[string]int) map[string]int {
	after := maps.Clone(c.legacy)
	if !c.explicit || !c.phase.WritesLegacy() {
		return after
	}
	switch {
	case r == ruleLegacyStale:
		return maps.Clone(served)
	case r == ruleVolatile && !j.behind:
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
// Checkpoint, once per boot; ...), and a phase 1 or 2 run that could not
// read legacy in full, which may have missed an entry only legacy holds
// (not with VolatileLegacy, whose legacy holds nothing the checkpoint
// lacks)."
func recordedPhase(c restoreCase) string {
	incomplete := c.list != listComplete && !c.volatile && (c.phase == migrate.PhaseExpand || c.phase == migrate.PhaseMigrate)
	if c.phase == migrate.PhaseLegacy || incomplete {
		return migrate.PhaseLegacy.String()
	}
	return c.phase.String()
}

// savedEntries is what a save holds: what is served, except that phase 0
// "keeps the checkpoint's own entries, or saves legacy's when the
// checkpoint cannot be used".
func savedEntries(c restoreCase, j judged, served map[string]int) map[string]int {
	if c.phase == migrate.PhaseLegacy && j.canUse {
		return j.usable
	}
	return served
}

// mustSave: "Whenever restore changed what the checkpoint should hold
// (phase 1's rebuild from legacy when it differs; a backfill, a drop, a
// prune, a merged value, a file moved aside, a mark set or cleared, the
// state of an earlier boot, a checkpoint phase 1 or 2 finds missing), the
// checkpoint is saved before Restore returns, so that the next phase finds
// it current. A checkpoint already current is left alone."
//
// Rule 1 also must save: legacy was healed, and a file that still said
// phase 3 wrote last would make the next run heal legacy again, over the
// writes an old binary made to it in between.
func mustSave(c restoreCase, j judged, r rule, served map[string]int, recorded string) bool {
	if c.phase == migrate.PhaseLegacy {
		// Phase 0 sets its mark "once per boot": unless the file already
		// carries it (and is of this boot, or records none: "judged as if
		// from this boot").
		return !(j.view.kind == fileClean && j.behind)
	}
	held := map[string]int{}
	if j.view.kind == fileClean {
		held = j.view.entries
	}
	marked := j.view.kind == fileClean && j.view.meta.Phase == migrate.PhaseLegacy.String()
	markChanged := (recorded == migrate.PhaseLegacy.String()) != marked
	// "A checkpoint already current is left alone": phase 1 too.
	createMissing := j.view.kind == fileMissing && c.phase.WritesLegacy()
	return j.view.unreadable() || createMissing || !maps.Equal(held, served) ||
		(markChanged && j.view.kind != fileMissing) || (recorded == migrate.PhaseLegacy.String() && j.view.kind == fileMissing) ||
		r == ruleLegacyStale
}

// staleText: Report.Stale is "why the checkpoint was not trusted as it is;
// "" if it was". Judging: "a checkpoint from an earlier boot is stale and
// discarded (Report.Stale)" (a newer file of an earlier boot included:
// "Whatever else it says ... no longer matters"); "A checkpoint that
// carries the mark of phase 0 is behind legacy (Report.Stale)"; "Phase 1
// also reports a checkpoint that differs from what it builds
// (Report.Stale)" - where it lets legacy decide (rule 5): with
// VolatileLegacy, phase 1 builds on the checkpoint (rule 3), which it then
// trusts, and the field's own doc says "" for a checkpoint trusted
// (reported: the sentence could say "Phase 1, where legacy decides,").
// A missing checkpoint is not distrusted: there is none (so phase 1's first
// run after phase 0, the rollout's first step, reports nothing stale).
// Phase 0, which does not build on the checkpoint unless
// rule 1 or 3 applies, and a file moved aside (Report.Quarantined says
// why) are left free.
func staleText(c restoreCase, j judged, r rule, served map[string]int) tri {
	switch {
	case j.discarded, j.behind && c.phase != migrate.PhaseLegacy:
		return someText
	case r == rulePhase1 && j.canUse && !maps.Equal(j.usable, served):
		return someText
	case c.phase == migrate.PhaseLegacy || j.view.unreadable():
		return anyText
	}
	return noText // missing, or clean, current and (phase 1) what is built
}

// legacyStaleText: rule 1 "(Report.LegacyStale)"; a legacy that observes
// "is never stale". Volatile legacy and incomplete listings are left free
// (the docs do not say whether they count as "not trusted").
func legacyStaleText(c restoreCase, r rule) tri {
	switch {
	case r == ruleLegacyStale:
		return someText
	case !c.explicit:
		return noText
	case c.volatile || c.list != listComplete || c.phase == migrate.PhaseContract:
		return anyText
	}
	return noText
}

// expectShadow: Report.Shadow is "the comparison with a side that was read
// only to compare (the checkpoint in phase 0 with Config.Verify, legacy in
// phase 3); nil when none was". Config.Verify: "phase 0 ... report how it
// differs from legacy (Report.Shadow), without changing what is served".
// Config.Legacy: in phase 3 "when set, Restore cross-checks the checkpoint
// against it and reports differences". Rule 3: "Phase 3 serves the
// checkpoint, and neither takes legacy as evidence nor compares with it."
// Where phase 0 builds from the checkpoint (rules 1 and 3), it is not read
// only to compare.
func expectShadow(c restoreCase, j judged, e *expectation) {
	switch {
	case e.rule == rulePhase0 && c.verify && j.canUse:
		e.shadow = shadowOf(migrate.ReadCheckpoint, j.usable, e.served)
		e.shadowExact = true
	case e.rule == rulePhase0 && c.verify:
		// A file phase 0 cannot use (missing, unreadable, discarded):
		// whether an empty comparison is reported is not said.
		e.shadow = &migrate.Shadow[string]{Side: migrate.ReadCheckpoint}
		e.shadowLoose = true
	case e.rule == rulePhase3:
		e.shadow = shadowOf(migrate.ReadLegacy, c.listed(), e.served)
		e.shadowExact = c.list == listComplete
		e.shadowLoose = !e.shadowExact
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
