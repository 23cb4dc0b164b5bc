package main

import (
	"fmt"
	"path/filepath"

	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// What a repair that writes a file lacking acknowledged commits (an older
// file put back, a journal cut at its damage) leaves in its header for a
// daemon's restore to read (package migrate, rules 7, 9 and 10): a mark
// in Behind, so that the daemon does not serve the file as current, and
// the phase of the file it replaced where phase 3 wrote that one, so that
// over an explicit legacy, which phase 3 does not write, the daemon knows
// that legacy may lack what the file lacks too.

// phaseContract is what a file phase 3 wrote records as its phase.
const phaseContract = "contract"

// marked returns h, the header a repair writes, with mark in Behind and
// the phase carried from cur, the file it replaces.
func marked(h rawfile.Header, mark string, cur *judged) rawfile.Header {
	h.Behind = mark
	if replacedByPhase3(cur) {
		h.Phase = phaseContract
	}
	return h
}

// replacedByPhase3 reports whether phase 3 may have written cur, the file
// a repair replaces, as far as it can be read: its state's header (the
// last journal record replayed), or the file's own, says so; or neither
// can be read, and nothing says which phase wrote it.
func replacedByPhase3(cur *judged) bool {
	switch {
	case cur.Meta.Phase == phaseContract, cur.HeaderErr == nil && cur.Header.Phase == phaseContract:
		return true
	case cur.HeaderErr == nil && cur.Header.Phase != "":
		return false
	}
	return cur.verdict != verdictIntact // unreadable, or missing: unknown
}

// prevMark is the mark of a file restore-prev puts back: .prev lacks the
// last save, and, with a journal, every commit since the last compaction.
func prevMark(prev *judged) string {
	return fmt.Sprintf("restored by phaseshift restore-prev from %s (seq %d), which lacks every commit after it", filepath.Base(prev.Path), seqOf(prev))
}

// keptMark is the mark of a kept copy restore-kept puts back over cur,
// or "" when nothing was committed after the copy but the repair that
// kept it (which wrote one seq above it): undoing that repair loses
// nothing acknowledged.
func keptMark(from, cur *judged) string {
	if cur.verdict == verdictMissing && !cur.Journal.Exists {
		return fmt.Sprintf("restored by phaseshift restore-kept from %s (seq %d) where no file was: what came after it is not known", filepath.Base(from.Path), seqOf(from))
	}
	if s := seqOf(cur); s != 0 && s <= seqOf(from)+1 {
		return ""
	}
	return fmt.Sprintf("restored by phaseshift restore-kept from %s (seq %d) over seq %d, which it lacks the commits of", filepath.Base(from.Path), seqOf(from), seqOf(cur))
}

// journalMark is the mark of a file repair-journal writes: it lacks the
// damaged record and every one after it.
func journalMark(d *damageJSON) string {
	return fmt.Sprintf("repaired by phaseshift repair-journal, which dropped the damaged record (bytes %d-%d) and %s after it", d.Offset, d.Offset+d.Bytes, d.After.describe())
}
