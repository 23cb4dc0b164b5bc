package main

import (
	"encoding/json"
	"fmt"

	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// What the command says of a file's entries is what it read of them: all
// of them when the file loads; those before the damage, as a lower bound,
// when it is damaged (rawfile.Partial); none when it is empty; and no
// count at all when nothing could be read. The repairs that put another
// file in its place (restore-prev, restore-kept) say, from the same
// reading, what that file lacks against it, and refuse to lose entries
// unless told to.

// readEntries returns the entries read of j: every one when it loaded,
// those before the damage when it is damaged (atLeast: it holds at least
// these), none when it is missing or empty; counted is false when no count
// of its entries could be read (unreadable, newer, a header that does not
// read).
func (j *judged) readEntries() (ents []rawfile.Entry, atLeast, counted bool) {
	switch {
	case j.verdict == verdictIntact:
		return j.Entries, false, true
	case j.verdict == verdictMissing && !j.Journal.Exists, j.empty():
		return nil, false, true
	case j.UpToDamage != nil:
		return j.UpToDamage.Entries, true, true
	}
	return nil, false, false
}

// empty reports whether j is a file of 0 bytes (what `: > file` leaves).
func (j *judged) empty() bool { return j.Size == 0 }

// entriesText says how many entries j holds, as far as it reads: "3
// entries", "at least 3 entries read", "no entry count".
func (j *judged) entriesText() string {
	ents, atLeast, counted := j.readEntries()
	switch {
	case !counted:
		return "no entry count"
	case atLeast:
		return "at least " + plural(len(ents), "entry") + " read"
	}
	return plural(len(ents), "entry")
}

// lossJSON is what a replacement lacks against the file it replaces, as
// far as that file reads: the entries it holds that the replacement does
// not hold, or holds with another value, and the seqs it names above the
// replacement's.
type lossJSON struct {
	Entries        int    `json:"entries"` // OnlyInReplaced + Different
	OnlyInReplaced int    `json:"onlyInReplaced"`
	Different      int    `json:"different"`
	FirstSeq       uint64 `json:"firstSeq,omitempty"`
	LastSeq        uint64 `json:"lastSeq,omitempty"`
}

// lacks says what repl, an intact file a repair would put in cur's place,
// lacks against cur; nil when cur holds nothing it lacks, or when cur's
// entries could not be read at all.
func lacks(repl, cur *judged) *lossJSON {
	ents, _, counted := cur.readEntries()
	l := &lossJSON{}
	if s, r := seqOf(cur), seqOf(repl); s > r {
		l.FirstSeq, l.LastSeq = r+1, s
	}
	if counted {
		has := make(map[rawfile.Key]json.RawMessage, len(repl.Entries))
		for _, e := range repl.Entries {
			has[e.Key] = e.Value
		}
		for _, e := range ents {
			switch v, ok := has[e.Key]; {
			case !ok:
				l.OnlyInReplaced++
			case !sameValue(v, e.Value):
				l.Different++
			}
		}
	}
	l.Entries = l.OnlyInReplaced + l.Different
	if l.Entries == 0 && l.LastSeq == 0 {
		return nil
	}
	return l
}

// lossLine says what repl lacks against cur in one sentence.
func lossLine(repl, cur *judged, l *lossJSON) string {
	return fmt.Sprintf("%s (seq %d, %s) lacks against %s (seq %d, %s): %s only in %s, %d with other values, and %s",
		repl.Path, seqOf(repl), repl.entriesText(), cur.Path, seqOf(cur), cur.entriesText(),
		plural(l.OnlyInReplaced, "entry"), cur.Path, l.Different, l.seqs())
}

// seqs names the seqs lost.
func (l *lossJSON) seqs() string {
	switch {
	case l == nil || l.LastSeq == 0:
		return "no seq"
	case l.FirstSeq == l.LastSeq:
		return fmt.Sprintf("seq %d", l.LastSeq)
	}
	return fmt.Sprintf("seqs %d-%d", l.FirstSeq, l.LastSeq)
}

// refuseLoss is the refusal (exit 9, nothing changed) to put repl in the
// place of cur, which holds entries repl lacks, without --accept-loss;
// nil when it lacks none, or accept says the operator means it.
func refuseLoss(repl, cur *judged, l *lossJSON, accept bool, instead string) error {
	if l == nil || l.Entries == 0 || accept {
		return nil
	}
	return fail(exitRefused, "%s. Nothing changed. %sIf you mean to lose them, pass --accept-loss", lossLine(repl, cur, l), instead)
}

// alsoAcceptLoss adds, to a refusal that names --replace-intact, that
// --accept-loss is needed too when the replacement lacks entries.
func alsoAcceptLoss(l *lossJSON) string {
	if l == nil || l.Entries == 0 {
		return ""
	}
	return ", and --accept-loss to lose those entries"
}

// lossNote says, after a repair, what the file it put back lacks of the
// one it replaced; "" when nothing.
func lossNote(l *lossJSON) string {
	if l == nil {
		return ""
	}
	return fmt.Sprintf("it lacks %s of the file it replaced (%d only in it, %d with other values) and %s",
		plural(l.Entries, "entry"), l.OnlyInReplaced, l.Different, l.seqs())
}
