package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/engine"
	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// The verdicts on a file, as verify prints them and exits.
const (
	verdictIntact     = "intact"
	verdictMissing    = "missing"
	verdictCorrupt    = "corrupt"
	verdictNewer      = "newer"
	verdictUnreadable = "unreadable"
)

// verdictCode maps a verdict to its exit status.
var verdictCode = map[string]int{
	verdictIntact:     exitOK,
	verdictMissing:    exitMissing,
	verdictCorrupt:    exitCorrupt,
	verdictNewer:      exitNewer,
	verdictUnreadable: exitUnreadable,
}

// judged is a file read with engine.ReadRaw and the verdict on it.
type judged struct {
	*rawfile.File
	verdict string
	reason  string // why it is not intact; "" when it is
}

// readFile reads path, without the lock, and judges it. schema, when
// above 0, is the daemon's value schema: a file of a higher one is newer.
func readFile(ctx context.Context, path string, schema int, ignoreChecksum bool) *judged {
	return judge(engine.ReadRaw(ctx, path, rawfile.Options{IgnoreChecksum: ignoreChecksum}), schema)
}

// judge classifies what checkpoint's Load said about the file. Its
// errors name paths, keys and counts, never values.
func judge(f *rawfile.File, schema int) *judged {
	j := &judged{File: f, verdict: verdictIntact}
	switch err := f.Err; {
	case err == nil:
		if schema > 0 && f.Header.Schema > schema {
			j.verdict = verdictNewer
			j.reason = fmt.Sprintf("the file has value schema %d and the daemon knows up to %d (--schema): a newer binary wrote it", f.Header.Schema, schema)
		}
	case errors.Is(err, checkpoint.ErrNotExist):
		j.verdict, j.reason = verdictMissing, "there is no checkpoint at "+f.Path
	case errors.Is(err, checkpoint.ErrNewerSchema):
		j.verdict, j.reason = verdictNewer, err.Error()
	case errors.Is(err, checkpoint.ErrCorrupt), errors.Is(err, checkpoint.ErrBadEntry), errors.Is(err, checkpoint.ErrOlderSchema):
		j.verdict, j.reason = verdictCorrupt, err.Error()
	default:
		j.verdict, j.reason = verdictUnreadable, err.Error()
	}
	if j.verdict == verdictCorrupt && j.empty() {
		j.reason = fmt.Sprintf("empty file (0 bytes): it holds nothing; run phaseshift %s %s", emptyVerb(f.Path), f.Path)
	}
	return j
}

// emptyVerb is the verb that gets a daemon going again over an empty
// file at path, with nothing lost that the sides hold: restore-prev when
// path.prev reads intact (it puts that back, marked as lacking the last
// save), and otherwise discard-empty (it moves the empty file aside, so
// that a daemon starts as with no file).
func emptyVerb(path string) string {
	if readFile(context.Background(), engine.NamesOf(path).Prev, 0, false).verdict == verdictIntact {
		return "restore-prev"
	}
	return "discard-empty"
}

// code is the exit status of the verdict.
func (j *judged) code() int { return verdictCode[j.verdict] }

// failure is the error a verb returns for a file it needs intact: the
// verdict's exit status, the reason and what to do about it.
func (j *judged) failure() error {
	return fail(j.code(), "%s\n  what to do: %s", j.reason, advice(j))
}

// advice says what an operator can do about a file that is not intact.
func advice(j *judged) string {
	if d := j.Journal.Damage; d != nil && j.verdict == verdictCorrupt {
		return journalAdvice(j, d)
	}
	names := engine.NamesOf(j.Path)
	if j.verdict == verdictCorrupt && j.empty() {
		return emptyAdvice(j.Path)
	}
	switch j.verdict {
	case verdictMissing:
		if _, err := os.Lstat(names.Prev); err == nil {
			return fmt.Sprintf("%s exists: if the file was removed by mistake, stop the daemon and run: phaseshift restore-prev %s", names.Prev, j.Path)
		}
		if _, err := os.Stat(filepath.Dir(j.Path)); err != nil {
			return "check the path: its directory does not exist either"
		}
		return "check the path; a daemon creates the file at its first save (in phase 3 a missing file is a fresh start)"
	case verdictCorrupt:
		return fmt.Sprintf("see it with: phaseshift inspect %s. If you edited it by hand, check the edit with "+
			"phaseshift diff --ignore-checksum %s %s and then run phaseshift reseal --i-edited-this-file-by-hand %s; "+
			"otherwise, where the daemon's legacy holds every acknowledged write (CRI; a registry phase 3 has not run over), restart it in phase 2 (migrate) once: "+
			"it moves the file aside and rebuilds it from legacy with nothing lost; else stop the daemon and run phaseshift restore-prev %s "+
			"(it lacks the last write, and marks the file it puts back so: a daemon does not serve it as current; phaseshift clear-mark says how to go on where legacy cannot rebuild it)",
			j.Path, j.Path, names.Prev, j.Path, j.Path)
	case verdictNewer:
		return "a newer binary wrote it: upgrade the daemon, or keep the file for the roll-forward; do not delete it"
	case verdictUnreadable:
		return "check that the path is a regular file (not a directory or a symlink) and run as a user that can read it (the daemon's, or root)"
	}
	return ""
}

// emptyAdvice says what to do about an empty file at path.
func emptyAdvice(path string) string {
	if emptyVerb(path) == "restore-prev" {
		return fmt.Sprintf("stop the daemon and run phaseshift restore-prev %s: it puts %s back, marked as lacking the last save, so that a daemon does not serve it as current "+
			"(phaseshift clear-mark then says how to go on)", path, engine.NamesOf(path).Prev)
	}
	return fmt.Sprintf("stop the daemon and run phaseshift discard-empty %s: it moves the empty file aside (kept as %s.before-discard-empty-<time>), "+
		"and a daemon then starts as with no checkpoint (phases 0-2 restore from legacy; phase 3 starts empty)", path, path)
}

// journalAdvice says what to do about a damaged journal.
func journalAdvice(j *judged, d *rawfile.Damage) string {
	if d.FileMissing {
		return fmt.Sprintf("the journal %s follows a file that is missing: stop the daemon and run phaseshift restore-prev %s (it keeps the journal aside), "+
			"or restore a kept copy of the file with phaseshift restore-kept (see them with phaseshift inspect %s)", j.Journal.Path, j.Path, j.Path)
	}
	return fmt.Sprintf("see where with: phaseshift inspect %s. Then stop the daemon and run phaseshift repair-journal %s: it says which records it keeps "+
		"(every one before the damage) and which it drops, and does it with --drop-damaged-records; restore-prev would lose every commit since the last compaction",
		j.Path, j.Path)
}

// headerJSON is a header in --json output.
type headerJSON struct {
	Format  int       `json:"format"`
	Schema  int       `json:"schema"`
	Phase   string    `json:"phase"`
	Writer  string    `json:"writer"`
	BootID  string    `json:"bootID"`
	Behind  string    `json:"behind,omitempty"`
	Seq     uint64    `json:"seq"`
	SavedAt time.Time `json:"savedAt"`
}

// shownHeader is the header inspect and verify show: the one Load
// returns, or, for a journal damaged, the last record's before the damage
// (the state whose entries they count).
func (j *judged) shownHeader() *headerJSON {
	if p := j.UpToDamage; p != nil && p.Journal && j.header() != nil {
		h := headerJSON(p.Meta)
		return &h
	}
	return j.header()
}

// header returns the header Load returns, for --json output: with a
// journal, the seq, phase, writer, boot ID and time of its last record
// replayed; nil if the file's header could not be read.
func (j *judged) header() *headerJSON {
	if j.Size < 0 || j.HeaderErr != nil {
		return nil
	}
	h := headerJSON(j.Meta)
	return &h
}

// fileHeader returns the header the file itself holds, which the records
// of its journal follow; nil if it could not be read.
func (j *judged) fileHeader() *headerJSON {
	if j.Size < 0 || j.HeaderErr != nil {
		return nil
	}
	h := headerJSON(j.Header)
	return &h
}

// summary describes the header in one line of text.
func (j *judged) summary() string {
	h := j.header()
	if h == nil {
		return "header unreadable"
	}
	s := fmt.Sprintf("format %d, schema %d, seq %d, saved %s", h.Format, h.Schema, h.Seq, h.SavedAt.Format(time.RFC3339))
	if j.verdict == verdictIntact {
		s += fmt.Sprintf(", %d entries", len(j.Entries))
	}
	if j.Journal.Records > 0 {
		s += fmt.Sprintf("; %d journal records over the file's seq %d", j.Journal.Records, j.Header.Seq)
	}
	return s
}
