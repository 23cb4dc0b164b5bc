package robustness_test

// The model FuzzRestore checks Restore against. It is written from package
// migrate's documentation (the kinds of legacy, the restore rules 1 to 26
// as the package doc's table and each rule's function state them, "# What
// holds", the fields of Config and Report, checkpoint.Meta.Behind), not
// from its code: each function below encodes
// one documented sentence, quoted in its comment with its rule number, so
// that a disagreement with the implementation points at either a code bug
// or a sentence to fix. Where the docs leave a case open, the comment says
// which reading the model takes and why.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

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
	discard                 bool // Config.DiscardUnreadableCheckpoint
	preferCheckpoint        bool // Config.Merge is migrate.PreferCheckpoint; otherwise nil (the default)
	coarse                  bool // an implicit legacy's Config.Equal compares v>>3 only (it records less)
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

// equal is the Config.Equal the harness gives: for an explicit legacy
// none, so the default, reflect.DeepEqual (on ints, ==); for an implicit
// one, which New requires it for ("New requires Config.Equal for it: what
// it can see"), == or, with c.coarse, the high bits only: such a legacy
// "records less than the checkpoint", and Equal "compare[s] what legacy
// records".
func (c restoreCase) equal(a, b int) bool {
	if !c.explicit && c.coarse {
		return a>>3 == b>>3
	}
	return a == b
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

// unreadable: rules 4 and 5, "a checkpoint that cannot be read in full
// (corrupt, of another schema, with entries that do not decode ...)".
func (v fileView) unreadable() bool {
	return v.kind == fileBadEntries || v.kind == fileNewer || v.kind == fileUnreadable
}

// marked, rule 7: "A checkpoint whose Meta.Behind is set is behind legacy
// ... A file written before Meta.Behind existed says the first [a phase-0
// run came after it] by its phase alone." Every save records the Store's
// phase (rule 26), and phase 0's saves always carry its mark, so a file
// whose phase is "legacy" and whose Behind is empty can only be such an
// older file. A file whose header cannot be read says nothing.
//
// Issue 41, rule 5: phase 0's keyed mark (JSON in Meta.Behind) that names
// nothing marks nothing. One that names keys marks those keys only; the
// seeds carry none, and the model reads it as a mark (Stale, phase 3
// refuses) without deciding which entries it names.
func (v fileView) marked() bool {
	return v.metaKnown() && (behindText(v.meta.Behind) != "" || (v.meta.Behind == "" && v.meta.Phase == migrate.PhaseLegacy.String()))
}

// keyedNames reports whether the file carries phase 0's keyed mark, and
// whether it names keys.
func (v fileView) keyedNames() (keyed, named bool) {
	if !v.metaKnown() || !strings.HasPrefix(v.meta.Behind, `{"kind":"phase0"`) {
		return false, false
	}
	return true, behindText(v.meta.Behind) != ""
}

// phase0Whole: the file carries phase 0's mark of the whole file, the
// old-style mark ("an old-style mark (Meta.Phase "legacy" with empty
// Behind, or the text "phase 0 (legacy) ran, which writes legacy only")
// still marks the whole file", issue 41 rule 5). Only that mark says a
// volatile legacy's state died with the run that left it: "a repair's text
// mark over a volatile legacy is not phase 0's" (rule 6), nor is a partial
// listing's.
func (v fileView) phase0Whole() bool {
	return v.metaKnown() && (v.meta.Behind == seedMarkPhase0 || (v.meta.Behind == "" && v.meta.Phase == migrate.PhaseLegacy.String()))
}

// The rules that pick how the served state is built (rules 9 to 17), by
// their number in the package doc.
type rule int

const (
	rule9LegacyStale      rule = 9  // checkpoint by phase 3 over an explicit legacy
	rule10RefuseBehind    rule = 10 // phase 3 over a checkpoint behind legacy
	rule11Volatile        rule = 11
	rule12Phase0          rule = 12
	rule13Phase1          rule = 13
	rule14Phase2Untrusted rule = 14
	rule15Phase2NoListing rule = 15
	rule16Phase2          rule = 16
	rule17Phase3          rule = 17
)

// judged is the checkpoint as rules 1 to 8 leave it.
type judged struct {
	view      fileView
	canUse    bool           // restore may use its (readable) entries
	usable    map[string]int // those entries
	discarded bool           // from an earlier boot
	behind    bool           // behind legacy (rule 7): marked
	// behindVolatile: with VolatileLegacy, the file is behind legacy only
	// under phase 0's mark of the whole file, whose state died with the
	// run; any other mark leaves it the sole copy (issue 41, rule 6). For
	// any other legacy it is behind.
	behindVolatile bool
	byPhase3       bool // its header says phase 3 wrote it, and it is not discarded
}

// trusted, rule 14: phase 2 "cannot trust [a checkpoint] to hold every
// entry: missing, moved aside, from an earlier boot, or behind legacy". A
// file with entries that do not decode is moved aside (rule 5).
func (j judged) trusted() bool {
	return j.view.kind == fileClean && !j.discarded && !j.behind
}

// judge applies rules 1, 3, 5 and 7.
func judge(c restoreCase, v fileView) judged {
	// Rule 1: "A missing checkpoint is an empty one."
	j := judged{view: v, usable: map[string]int{}}
	j.discarded = fromEarlierBoot(c, v)
	if j.discarded {
		// Rule 3: "whatever else it says or whether it can be read".
		return j
	}
	if v.kind == fileClean || v.kind == fileBadEntries {
		// Rule 5: "its readable entries still used"; rule 4 with
		// DiscardUnreadableCheckpoint: "what could be read is served".
		j.canUse, j.usable = true, maps.Clone(v.entries)
	}
	// Rule 7 is judged on a file restore can use: one moved aside unread
	// is not trusted in any case, and its header is unknown.
	// Rule 7's second half is gone (issue 41, rule 2): an observing
	// legacy listing an entry the checkpoint never held is no evidence
	// that the checkpoint is behind; it is backfilled.
	j.behind = j.canUse && v.marked()
	j.behindVolatile = j.behind && (!c.volatile || v.phase0Whole())
	j.byPhase3 = v.metaKnown() && v.meta.Phase == migrate.PhaseContract.String()
	return j
}

// fromEarlierBoot, rule 3: "With a boot epoch (Checkpoint.BootID is not
// empty), a checkpoint written in an earlier boot is stale and discarded
// (Report.Stale), whatever else it says or whether it can be read ... One
// that records no boot is judged as from this boot." A file whose header
// cannot be read (corrupt) says no boot.
func fromEarlierBoot(c restoreCase, v fileView) bool {
	return c.epoch != epochOff && v.metaKnown() && v.meta.BootID != "" && v.meta.BootID != bootNow
}

// expectation is what the model says Restore must do.
type expectation struct {
	refusals []error // non-empty: Restore fails with an error matching one
	rule     rule
	j        judged

	served              map[string]int
	fromCheckpoint      int // Report.FromCheckpoint
	readFrom            migrate.Sides
	backfilled, dropped []string
	orphaned, pruned    []string
	diverged            []string
	legacyAfter         map[string]int // everything legacy holds afterwards
	save                saveRule
	recorded            string         // the phase a save records
	mark                markKind       // the mark a save records
	saved               map[string]int // the entries a save holds
	stale, legacyStale  tri
	shadow              *migrate.Shadow[string] // nil: Report.Shadow must be nil
	shadowExact         bool                    // compare the key lists
	shadowLoose         bool                    // compare only the side, if any
	unreadable          bool                    // something could not be read: Report.Errors says what
}

// tri is what a report text must be.
type tri int

const (
	anyText tri = iota
	someText
	noText
)

// saveRule is whether Restore must save the checkpoint.
type saveRule int

const (
	saveEither saveRule = iota
	saveMust
	saveMustNot
)

// markKind is the mark (Meta.Behind) a save records (rule 26).
type markKind int

const (
	markNone       markKind = iota
	markPhase0              // "phase 0 records that it ran"
	markIncomplete          // "a phase 1 or 2 run that could not read legacy in full records that"
	markKeyedNone           // phase 0's keyed mark naming nothing (issue 41, rule 5)
	markKept                // the file's own mark of the whole file, kept by phase 0
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
	e.readFrom = readFrom(c, j, e.rule, len(b.backfilled) > 0)
	e.legacyAfter = legacyAfter(c, j, e.rule, e.served)
	e.recorded = c.phase.String()
	e.mark = recordedMark(c, j)
	e.saved = savedEntries(c, j, e.served)
	e.save = saveExpected(c, j, e)
	e.stale, e.legacyStale = staleText(c, j, e.rule, e.served), legacyStaleText(c, e.rule)
	expectShadow(c, j, &e)
	e.unreadable = v.unreadable() || c.list != listComplete
	return e
}

// refusals lists every documented refusal that applies; Restore may name
// any of them ("Without Strict, what Restore refuses is what it must:
// rules 4, 5, 6, 9 and 10").
func refusals(c restoreCase, j judged) []error {
	var errs []error
	errs = append(errs, strictRefusals(c, j.view)...)
	errs = append(errs, soleCopyRefusal(c, j)...)
	errs = append(errs, unsafeLegacyStale(c, j)...)
	errs = append(errs, refuseBehind(c, j)...)
	errs = append(errs, servedSideUnreadable(c, j)...)
	return errs
}

// strictRefusals, rule 2: "With Config.Strict, anything that cannot be read
// (a corrupt or newer checkpoint, an entry that does not decode, a damaged
// journal, a legacy listing that failed or is partial) fails Restore in
// every phase, and nothing is changed." A file from an earlier boot is no
// exception: it cannot be read, and Strict leaves every file as it was
// (Config.DiscardUnreadableCheckpoint: "Strict takes precedence").
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

// soleCopy, rule 4: "Where the checkpoint is the only copy of the state -
// phase 3, which writes nothing else, and every phase with VolatileLegacy
// unless the checkpoint is marked behind legacy (rule 7), whose state then
// died with the run that marked it". The mark is read from the header, so
// that of a file with entries that do not decode, or of a newer schema,
// counts; a corrupt file's cannot be read, and it is not marked.
//
// Issue 41, rule 6: only phase 0's mark of the whole file says that; a
// repair's or a partial listing's mark leaves the file the sole copy.
func soleCopy(c restoreCase, v fileView) bool {
	return c.phase == migrate.PhaseContract || (c.volatile && !v.phase0Whole())
}

// soleCopyRefusal, rule 4: "a checkpoint that cannot be read in full ...
// fails Restore and every file is left as it was; the error says how to
// recover. With Config.DiscardUnreadableCheckpoint it is moved aside and
// what could be read is served instead, except a checkpoint of a newer
// schema, which a binary rollback must leave for the roll-forward in any
// case." Not one from an earlier boot: rule 3 discards it "whatever else
// it says or whether it can be read". The doc names no sentinel for this
// refusal; the model expects the error to match the one Load returned
// (checkpoint.ErrCorrupt, ErrNewerSchema, ErrBadEntry), as a careful user
// would test for it with errors.Is.
func soleCopyRefusal(c restoreCase, j judged) []error {
	v := j.view
	if !v.unreadable() || j.discarded || !soleCopy(c, v) {
		return nil
	}
	if v.kind == fileNewer || !c.discard {
		return []error{loadSentinel(v.err)}
	}
	return nil
}

// unsafeLegacyStale, rules 5 and 9. Rule 9: "A checkpoint written by
// phase 3, which does not write legacy, makes an explicit legacy stale
// (Report.LegacyStale): a phase that writes legacy serves the checkpoint
// and rewrites legacy to match it. If either side cannot be read in full,
// Restore fails (ErrUnsafeRestore)." Rule 5: an unreadable checkpoint is
// moved aside "unless it says legacy is stale (rule 9) and cannot be read
// in full: then neither side holds everything, and Restore fails
// (ErrUnsafeRestore)". Not a file from an earlier boot (rule 3).
func unsafeLegacyStale(c restoreCase, j judged) []error {
	says := c.explicit && c.phase.WritesLegacy() && j.byPhase3 && !j.discarded
	switch {
	case says && j.view.kind != fileClean:
		return []error{migrate.ErrUnsafeRestore}
	case legacyIsStale(c, j) && c.list != listComplete:
		return []error{migrate.ErrUnsafeRestore}
	}
	return nil
}

// legacyIsStale: rule 9 applies.
func legacyIsStale(c restoreCase, j judged) bool {
	return c.explicit && c.phase.WritesLegacy() && j.byPhase3 && j.canUse
}

// refuseBehind, rule 10: "Phase 3 refuses a checkpoint behind legacy
// (ErrStale): only legacy has what the run that marked it did." It comes
// before rule 11, so VolatileLegacy changes nothing.
func refuseBehind(c restoreCase, j judged) []error {
	if c.phase == migrate.PhaseContract && j.behind {
		return []error{migrate.ErrStale}
	}
	return nil
}

// servedSideUnreadable, rule 6: "a legacy listing that fails where legacy
// decides (phase 0, phase 1, phase 2 over a checkpoint it cannot trust;
// with VolatileLegacy, only over a checkpoint behind legacy) ... fails
// Restore in every mode." Phase 0 with VolatileLegacy serves legacy where
// rule 11 does not apply to it (see volatilePhase0): over a checkpoint
// behind legacy, as the parenthesis says, and over one it cannot use
// (missing, moved aside unread, discarded), where rule 12 lets legacy
// decide. The model reads the parenthesis as naming the case where rule 11
// lets legacy decide, not as sparing phase 0 that serves legacy alone.
func servedSideUnreadable(c restoreCase, j judged) []error {
	var decides bool
	switch {
	case c.phase == migrate.PhaseContract:
	case c.volatile && c.phase == migrate.PhaseLegacy:
		decides = !volatilePhase0(j)
	case c.volatile:
		decides = j.behindVolatile
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

// volatilePhase0, rule 11: "phase 0 with a checkpoint it can use", and
// "Over a checkpoint behind legacy they let legacy decide ... (phase 0
// serves legacy)".
func volatilePhase0(j judged) bool {
	return j.canUse && !j.behindVolatile
}

// pickRule: "picks how to build the served state by the first of rules 9
// to 17 that applies".
func pickRule(c restoreCase, j judged) rule {
	switch {
	case legacyIsStale(c, j):
		return rule9LegacyStale
	case c.phase == migrate.PhaseContract && j.behind:
		return rule10RefuseBehind // refused before
	case c.volatile && c.phase != migrate.PhaseLegacy:
		return rule11Volatile
	case c.volatile && volatilePhase0(j):
		return rule11Volatile
	case c.phase == migrate.PhaseLegacy:
		return rule12Phase0
	case c.phase == migrate.PhaseExpand:
		return rule13Phase1
	case c.phase == migrate.PhaseMigrate && !j.trusted():
		return rule14Phase2Untrusted
	case c.phase == migrate.PhaseMigrate && c.list == listFailed:
		return rule15Phase2NoListing
	case c.phase == migrate.PhaseMigrate:
		return rule16Phase2
	}
	return rule17Phase3
}

// builder builds the served state entry by entry (rules 18 to 21) and
// records what the report must say about each.
type builder struct {
	c                   restoreCase
	behind              bool // the checkpoint is marked behind legacy (rule 19)
	behindVolatile      bool // judged.behindVolatile: legacy decides which entries exist
	legacyBasis         bool // legacy decides which entries exist
	served              map[string]int
	fromCk              int
	backfilled, dropped []string
	orphaned, pruned    []string
	diverged            []string
}

// build applies the rule picked.
func build(c restoreCase, j judged, r rule) *builder {
	b := &builder{c: c, behind: j.behind, behindVolatile: j.behindVolatile, served: map[string]int{}}
	switch {
	case r == rule9LegacyStale, r == rule15Phase2NoListing:
		b.serveCheckpoint(j.usable)
	case r == rule17Phase3:
		b.serveCheckpoint(j.usable)
		b.backfillPhase3(j)
	case r == rule11Volatile && c.phase == migrate.PhaseContract:
		// Rule 11: "Phase 3 serves the checkpoint, and neither takes
		// legacy as evidence nor compares with it."
		b.serveCheckpoint(j.usable)
	case r == rule11Volatile && j.behindVolatile:
		// Rule 11: "Over a checkpoint behind legacy they let legacy decide
		// which entries exist, as phase 1 does".
		b.legacyDecides(j.usable)
	case r == rule11Volatile:
		b.volatile(j.usable)
	case r == rule12Phase0:
		b.serveLegacy(c.listed())
	case r == rule13Phase1, r == rule14Phase2Untrusted:
		b.legacyDecides(j.usable)
	case r == rule16Phase2:
		b.reconcile(j.usable)
	}
	return b
}

// serveCheckpoint, rules 9 and 15 ("serves the checkpoint as it is"), and
// the first half of rule 17: the checkpoint is served as it is.
func (b *builder) serveCheckpoint(ck map[string]int) {
	for k, v := range ck {
		b.fromCheckpoint(k, v)
	}
}

// backfillPhase3, rule 17: "Phase 3 serves the checkpoint and, when a
// legacy that is not volatile is still configured, what legacy holds and
// the checkpoint lacks (Report.Backfilled): it is in use, so handing it out
// as free would hand it out twice. Not for an explicit legacy that may hold
// what is no longer in use: the checkpoint says phase 3 wrote it ..., its
// header cannot be read to say which phase did, or it is from an earlier
// boot". Rules 18 to 22 apply only "when both sides are
// used (rules 11, 13, 14 and 16)": an entry both hold is served with the
// checkpoint's record, and the difference is in the Shadow.
func (b *builder) backfillPhase3(j judged) {
	if b.c.volatile || leftBehind(b.c, j) {
		return
	}
	for k, v := range b.c.listed() {
		if _, ok := b.served[k]; !ok {
			b.backfilled = append(b.backfilled, k)
			b.fromLegacy(k, v)
		}
	}
}

// leftBehind: an explicit legacy "that may hold what is no longer in use:
// the checkpoint says phase 3 wrote it ..., its header cannot be read to
// say which phase did, or it is from an earlier boot (rule 3: legacy's
// state of then died with it too). A file moved aside whose header says
// phase 1 or 2 wrote it can say". A missing file says nothing.
func leftBehind(c restoreCase, j judged) bool {
	if !c.explicit {
		return false
	}
	return j.byPhase3 || j.discarded || j.view.kind == fileUnreadable
}

// serveLegacy, rule 12: "Phase 0 serves legacy, as the old binary did."
func (b *builder) serveLegacy(l map[string]int) {
	for k, v := range l {
		b.fromLegacy(k, v)
	}
}

// volatile, rule 11: "With VolatileLegacy, phases 1 and 2 (and phase 0 with
// a checkpoint it can use) serve the checkpoint with whatever legacy holds,
// and refill legacy, even when the listing failed." Rule 21: "An entry only
// the checkpoint has ... With VolatileLegacy it is kept without a word",
// and on a partial listing "with VolatileLegacy it is kept, and legacy
// refilled with it".
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

// legacyDecides, rules 13 and 14 (and 11 over a checkpoint behind legacy):
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
		b.onlyCheckpoint(k, v)
	}
}

// reconcile, rule 16: "Phase 2 otherwise serves the checkpoint reconciled
// with legacy."
func (b *builder) reconcile(ck map[string]int) {
	l := b.c.listed()
	b.both(ck, l)
	b.onlyLegacy(ck, l)
	for k, v := range ck {
		if _, ok := l[k]; ok {
			continue
		}
		b.onlyCheckpoint(k, v)
	}
}

// onlyCheckpoint, rule 21 as issue 41 (rule 3) states it: "an entry only
// the checkpoint holds is dropped ONLY for a durable explicit legacy
// listed in full, in phases 1 and 2" (Report.Dropped). "For an observing
// legacy it is kept and reported in Report.Orphaned (PruneOrphans prunes
// it in phase 2 only), for a volatile legacy kept quietly; on a partial
// listing kept and reported as an orphan for every kind." Over a file
// marked behind as a whole (phase 0's old-style mark, rule 5), legacy
// decides every entry: "a marked entry legacy lacks is dropped" for a
// legacy phase 0 writes (explicit, volatile or durable).
func (b *builder) onlyCheckpoint(k string, v int) {
	switch {
	case b.c.list == listPartial:
		b.orphaned = append(b.orphaned, k)
		b.fromCheckpoint(k, v)
	case b.c.explicit && (!b.c.volatile || b.behindVolatile):
		b.dropped = append(b.dropped, k)
	case b.c.volatile:
		b.fromCheckpoint(k, v)
	case b.c.prune && b.c.phase == migrate.PhaseMigrate:
		b.pruned = append(b.pruned, k)
	default:
		b.orphaned = append(b.orphaned, k)
		b.fromCheckpoint(k, v)
	}
}

// both, rules 18 and 19, for the entries both sides hold. Rule 18: "An
// entry both sides hold with values Config.Equal calls the same is served
// with the checkpoint's key and value for an implicit legacy (its record
// is richer), and with legacy's key for an explicit one." Keys never
// differ here (no Match), and an explicit legacy's Equal is the default,
// so its values are the same: the checkpoint's record is served either
// way. Rule 19: "An entry both sides hold with values that differ
// (Report.Diverged) is served with legacy's key and value over a
// checkpoint behind legacy, whatever Config.Merge says ... Otherwise
// Config.Merge picks the value (by default legacy's, for both kinds ...),
// and the key comes with it."
func (b *builder) both(ck, l map[string]int) {
	for k, cv := range ck {
		lv, ok := l[k]
		switch {
		case !ok:
		case b.c.equal(cv, lv):
			b.fromCheckpoint(k, cv)
		case b.behind || !b.c.preferCheckpoint:
			b.diverged = append(b.diverged, k)
			b.fromLegacy(k, lv)
		default:
			b.diverged = append(b.diverged, k)
			b.fromCheckpoint(k, cv)
		}
	}
}

// onlyLegacy, rule 20: "An entry only legacy has is served
// (Report.Backfilled, except where legacy is the basis: phase 1, rule
// 13)." Phase 1 under rule 11 over a checkpoint behind legacy lets legacy
// decide "as phase 1 does", so legacy is its basis too; over one not
// behind it builds on the checkpoint, and what it adds is a backfill.
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

// readFrom, Report.ReadFrom: "the sides restore built the served state
// from: legacy in phase 0; the checkpoint and legacy in phases 1 and 2;
// the checkpoint in phase 3 and when legacy is stale. A side is left out
// when it could not be used (a checkpoint missing, moved aside or from an
// earlier boot) and, for a legacy that does not survive a restart
// (Config.VolatileLegacy, which phase 0 also reads through when it has a
// checkpoint), when it held nothing. ReadNothing when neither side counts
// ... A side read only to compare is in Shadow."
//
// Readings: a file moved aside whose readable entries were "still used"
// (rule 5) was used, so it counts; "moved aside" in the parenthesis is one
// moved aside unread. Phase 2 whose listing failed (rule 15) builds from
// the checkpoint alone. Phase 3 built from legacy too when rule 17
// backfilled an entry from it (the state was built from it, and it was not
// read only to compare); otherwise legacy is its Shadow. Where legacy
// decides which entries exist (rules 13 and 14, and 11 over a checkpoint
// behind legacy), it counts even when it held nothing: that emptiness
// decided.
func readFrom(c restoreCase, j judged, r rule, backfilled bool) migrate.Sides {
	ck, lg := j.canUse, true
	switch {
	case r == rule12Phase0:
		ck = false
	case r == rule9LegacyStale, r == rule15Phase2NoListing,
		r == rule11Volatile && c.phase == migrate.PhaseContract:
		lg = false
	case r == rule17Phase3:
		lg = backfilled
	case r == rule11Volatile && !j.behindVolatile:
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

// legacyAfter is what legacy holds after Restore (an implicit legacy "is
// ... only read"; Phase.WritesLegacy: writes go to legacy "in phases 0 to
// 2").
//
// Rule 23: "An explicit legacy is brought in line with what is served, in
// the phases that write it (Report.LegacyWrites): all of it when it is
// stale (rule 9) or volatile; otherwise the second keys of rule 22 and the
// entries whose served record is not legacy's (a Merge that chose the
// checkpoint's value). An entry kept only because a listing was partial is
// not written." Rule 11: "refill legacy". Over a checkpoint behind legacy,
// rule 11 lets legacy decide and legacy's record wins (rule 19), so
// nothing served differs from legacy. What a partial listing hid stays:
// nothing is "deleted on the evidence of a partial listing" (rule 21).
func legacyAfter(c restoreCase, j judged, r rule, served map[string]int) map[string]int {
	after := maps.Clone(c.legacy)
	if !c.explicit || !c.phase.WritesLegacy() {
		return after
	}
	listed := c.listed()
	switch {
	case r == rule9LegacyStale:
		return maps.Clone(served)
	case r == rule11Volatile && !j.behindVolatile:
		maps.Copy(after, served)
		return after
	}
	for k, v := range served {
		if lv, ok := listed[k]; ok && lv != v {
			after[k] = v
		}
	}
	return after
}

// recordedMark, rule 26: "Every save records the Store's phase
// (Meta.Phase). It also records a mark (Meta.Behind ...) where the
// checkpoint may lack what only legacy holds: ... a phase 1 or 2 run that
// could not read legacy in full records that (not with VolatileLegacy,
// whose legacy holds nothing the checkpoint lacks)." Rule 9 in phases 1
// and 2 needs a complete listing, so it never records the second.
//
// Phase 0 (issue 41, rule 5): over a checkpoint it cannot use (missing,
// unreadable, of an earlier boot) it saves legacy's entries "with a keyed
// mark naming nothing"; over a file it could read only in part (entries
// that do not decode, moved aside) it saves what it read "with the old
// whole-file text mark"; over a file it can use (it saves only to heal
// legacy), a mark of the whole file the file carries stays, a durable
// legacy it finds different marks the whole file (phase0FindsDifferent),
// and otherwise its keyed mark names what it wrote: nothing yet.
func recordedMark(c restoreCase, j judged) markKind {
	switch {
	case c.phase == migrate.PhaseLegacy && j.discarded:
		return markKeyedNone
	case c.phase == migrate.PhaseLegacy && j.view.kind == fileBadEntries:
		return markPhase0
	case c.phase == migrate.PhaseLegacy && j.view.kind == fileClean && j.view.marked():
		return markKept
	case c.phase == migrate.PhaseLegacy && phase0FindsDifferent(c, j):
		return markPhase0
	case c.phase == migrate.PhaseLegacy:
		return markKeyedNone
	case c.volatile || c.list == listComplete || c.phase == migrate.PhaseContract:
		return markNone
	}
	return markIncomplete
}

// phase0FindsDifferent, rule 26: phase 0 marks "the whole file ... over a
// durable legacy phase 0 finds different" ("What holds": the old binary
// wrote legacy since, or a crash cut a write), so that phase 3 after it
// refuses. Different is judged as the code does, on a clean file it can use
// and a complete listing of an explicit, durable legacy that rule 9 does
// not call stale: another key set, or a value Config.Equal tells apart.
// A file that carries phase 0's keyed mark keeps it (marks.go startMarks:
// "the keys an earlier phase-0 run marked are kept"); the doc's sentence
// does not name that case (reported to the lead).
func phase0FindsDifferent(c restoreCase, j judged) bool {
	if keyed, _ := j.view.keyedNames(); keyed {
		return false
	}
	if !c.explicit || c.volatile || c.list != listComplete || !j.canUse || j.view.kind != fileClean || j.byPhase3 {
		return false
	}
	if len(c.legacy) != len(j.usable) {
		return true
	}
	for k, lv := range c.legacy {
		if cv, ok := j.usable[k]; !ok || !c.equal(cv, lv) {
			return true
		}
	}
	return false
}

// savedEntries is what a save holds: what is served (rule 24: a checkpoint
// moved aside "is replaced by what is served"; rule 25: saved "so that the
// next phase finds it current"), except that phase 0 records that it ran
// "keeping the checkpoint's own entries, or legacy's when the checkpoint
// cannot be used" (rule 26). Legacy's are what phase 0 serves then.
func savedEntries(c restoreCase, j judged, served map[string]int) map[string]int {
	if c.phase == migrate.PhaseLegacy && j.canUse {
		return j.usable
	}
	return served
}

// saveExpected, rules 24 to 26. Rule 25: "Whenever restore changed what
// the checkpoint should hold, the checkpoint is saved before Restore
// returns, so that the next phase finds it current: phase 1's rebuild from
// legacy when it differs, a backfill, a drop, a prune, a merged value, a
// file moved aside, a mark set or cleared (rule 26), the state of an
// earlier boot, a checkpoint phases 1 and 2 find missing ..., and a
// checkpoint that does not record phase 3 in phase 3 .... A checkpoint
// already current is left alone." Rule 26: phase 0 records that it ran
// "when it has a Checkpoint, once per boot". See saveTriggers.
//
// "Already current" is read as: the file holds what a save would hold,
// under the phase this run records (phase 0's file records "legacy"), and
// carries no mark and needs none. A file that differs only in the phase
// it records is current too outside phases 0 and 3: rule 25 names phase 3
// as the one phase whose record alone asks for a save. Where both the file
// and this run's save carry a mark in phases 1 and 2, whether the mark's
// text changing is a "mark set" is left open (saveEither).
func saveExpected(c restoreCase, j judged, e expectation) saveRule {
	if saveTriggers(c, j, e) {
		return saveMust
	}
	if e.mark == markNone || c.phase == migrate.PhaseLegacy {
		// "Phase 0's restore saves only to heal legacy (a phase-3 file
		// over an explicit legacy) or to replace a file it cannot use"
		// (issue 41, rule 5).
		return saveMustNot
	}
	return saveEither
}

// saveTriggers lists the documented reasons to save (saveExpected).
//
// Rule 9 (legacy healed) also saves, although rule 25 does not name it: a
// file that still said phase 3 wrote it would make the next run that
// writes legacy "heal" it again, over what an old binary (which may follow
// phase 2, "What holds") wrote to legacy in between. Reported to the lead
// as a sentence rule 25 could add.
func saveTriggers(c restoreCase, j judged, e expectation) bool {
	v := j.view
	clean := v.kind == fileClean && !j.discarded
	fileMarked := clean && v.marked()
	switch {
	case v.unreadable(), j.discarded: // moved aside; the state of an earlier boot
		return true
	case c.phase == migrate.PhaseLegacy:
		// Phase 0 "no longer saves at its start over a file it can use":
		// it saves to replace a file it cannot use (missing here) or to
		// heal legacy (issue 41, rule 5).
		// Its whole-file mark over a durable legacy it finds different
		// is a mark set (rule 26).
		return v.kind == fileMissing || e.rule == rule9LegacyStale || (e.mark == markPhase0 && phase0FindsDifferent(c, j))
	case v.kind == fileMissing: // phases 1 and 2 find it missing; phase 3's does not record phase 3
		return true
	case c.phase == migrate.PhaseContract && v.meta.Phase != migrate.PhaseContract.String():
		return true
	case fileMarked != (e.mark != markNone): // a mark set or cleared
		return true
	case e.rule == rule9LegacyStale:
		return true
	}
	return !maps.Equal(v.entries, e.saved) // a rebuild, backfill, drop, prune or merged value
}

// staleText: Report.Stale is "why the checkpoint was not trusted as it was
// found; "" if it was". Rule 3: one of an earlier boot "is stale and
// discarded (Report.Stale)". Rule 7: one marked behind legacy "is behind
// legacy (Report.Stale says why)". Rule 8: "Phase 1, where legacy decides
// (rule 13), also reports an existing checkpoint that differs from what it
// builds (Report.Stale)". A missing checkpoint is not distrusted: there is
// none. Phase 0, which does not build on the checkpoint unless rule 9 or
// 11 applies (and whose own mark makes the file behind), and a file moved
// aside (Report.Quarantined says why) are left free.
func staleText(c restoreCase, j judged, r rule, served map[string]int) tri {
	switch {
	case j.discarded, j.behind && c.phase != migrate.PhaseLegacy:
		return someText
	case r == rule13Phase1 && j.canUse && !maps.Equal(j.usable, served):
		return someText
	case c.phase == migrate.PhaseLegacy || j.view.unreadable():
		return anyText
	}
	return noText // missing, or clean, current and (phase 1) what is built
}

// legacyStaleText: rule 9 "(Report.LegacyStale)"; an implicit legacy "is
// never stale". Volatile legacy, incomplete listings and phase 3 (where an
// explicit legacy may be left behind, rule 17) are left free: the docs do
// not say whether they count as "not trusted".
func legacyStaleText(c restoreCase, r rule) tri {
	switch {
	case r == rule9LegacyStale:
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
// Rule 17: phase 3 with a legacy that is not volatile serves what only
// legacy holds, and "The rest is compared and reported (Report.Shadow)":
// compared with what is served, backfill included. Rule 11: "Phase 3 serves
// the checkpoint, and neither takes legacy as evidence nor compares with
// it." Where phase 0 builds from the checkpoint (rules 9 and 11), it is not
// read only to compare. Shadow.Diverged is "served entries that side holds
// with another value": another value by Config.Equal, which is what legacy
// can see (issue 21: a steady state reports nothing diverged).
func expectShadow(c restoreCase, j judged, e *expectation) {
	switch {
	case e.rule == rule12Phase0 && c.verify && j.canUse:
		e.shadow = shadowOf(c, migrate.ReadCheckpoint, j.usable, e.served)
		e.shadowExact = true
	case e.rule == rule12Phase0 && c.verify:
		// A file phase 0 cannot use (missing, unreadable, discarded):
		// whether an empty comparison is reported is not said.
		e.shadow = &migrate.Shadow[string]{Side: migrate.ReadCheckpoint}
		e.shadowLoose = true
	case e.rule == rule17Phase3:
		e.shadow = shadowOf(c, migrate.ReadLegacy, c.listed(), e.served)
		e.shadowExact = c.list == listComplete
		e.shadowLoose = !e.shadowExact
	}
}

// shadowOf compares served with side.
func shadowOf(c restoreCase, side migrate.Sides, shadow, served map[string]int) *migrate.Shadow[string] {
	sh := &migrate.Shadow[string]{Side: side}
	for k, v := range shadow {
		sv, ok := served[k]
		switch {
		case !ok:
			sh.OnlyShadow = append(sh.OnlyShadow, k)
		case !c.equal(sv, v):
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

// markNames: Report.Behind "says which" mark this restore left ("this
// phase-0 run, or a listing that was not complete"), and the mark is
// Meta.Behind, which "says why the writer knows the file may lack entries
// its legacy source holds". The model reads "says which" as: the text
// names the phase of the run that left it ("phase 0" for phase 0's mark),
// as issue 21 asked ("The mark says which happened").
func markNames(c restoreCase, m markKind) string {
	if m == markNone {
		return ""
	}
	return fmt.Sprintf("phase %d", c.phase)
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
