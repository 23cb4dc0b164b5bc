package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/phaseshift/phaseshift/internal/engine"
)

// inspectOptions are inspect's flags.
type inspectOptions struct {
	schema int
}

func (o *inspectOptions) AddFlags(fs *flag.FlagSet) { addSchemaFlag(fs, &o.schema) }

func newInspectCommand() *command {
	o := &inspectOptions{}
	return &command{
		name:    "inspect",
		summary: "show a checkpoint's header, checksum, journal, lock holder, control socket, .prev and kept copies",
		args:    "PATH",
		about: `inspect shows what a daemon would restore from PATH and what lies beside it:
the header Load returns (format, value schema, seq, the writer's phase and
version, boot ID, time of the save: with a journal, its last record's, and
the file's own header beside it), the number of entries and the file's
size, the checksum verdict, the journal (PATH.journal, with
checkpoint.WithJournal: its records, replayed in what the entries count, a
torn last record Load discarded, or where it is damaged: the records
before the damage, the damaged one and those after it, by count, seq and
byte range), whether a process holds the checkpoint's lock (and its PID),
the daemon's control socket (PATH.control.sock), PATH.prev, and the kept
copies, each with its journal if it had one, its seq and why and when it
was kept: the daemon's quarantined files (PATH.corrupt-<time>) and the
files the repairs replaced (PATH.before-<verb>-<time>). It exits with
PATH's verdict, as verify does. It does not take the lock.`,
		examples: []string{
			"phaseshift inspect /var/run/ipamd/state.json",
			"phaseshift inspect --json /var/run/ipamd/state.json | jq .lock",
		},
		addFlags: o.AddFlags,
		run:      func(ctx context.Context, e *env, args []string) error { return runInspect(ctx, e, o, args) },
	}
}

// fileJSON describes one file in inspect's --json output.
type fileJSON struct {
	Path    string `json:"path"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
	Size    int64  `json:"size"`
	Entries *int   `json:"entries"` // as read (see readEntries); null when no count could be read
	// EntriesAtLeast says that the file is damaged and Entries are those
	// read before the damage (UpToDamage says where): it holds at least
	// these.
	EntriesAtLeast bool            `json:"entriesAtLeast,omitempty"`
	UpToDamage     *upToDamageJSON `json:"upToDamage,omitempty"`
	Checksum       string          `json:"checksum"`
	Header         *headerJSON     `json:"header"` // what Load restores: with a journal, its last record's
	File           *headerJSON     `json:"file"`   // the file's own header
	Journal        *journalJSON    `json:"journal"`
}

// inspectJSON is inspect's --json output.
type inspectJSON struct {
	fileJSON
	Exit int      `json:"exit"`
	Lock lockInfo `json:"lock"`
	// Control is the daemon's control socket (package migrate/control):
	// its path, when a socket is there; whether list, get and delete go
	// through it (a process holds the lock, or that cannot be told).
	Control *controlJSON `json:"control"`
	Prev    *fileJSON    `json:"prev"`
	// Kept are the copies kept beside the file, oldest first.
	Kept []keptJSON `json:"kept"`
}

func runInspect(ctx context.Context, e *env, o *inspectOptions, args []string) error {
	if err := wantArgs(args, "PATH"); err != nil {
		return err
	}
	j := readFile(ctx, args[0], o.schema, false)
	names := engine.NamesOf(j.Path)
	out := inspectJSON{fileJSON: describe(j), Exit: j.code(), Lock: lockState(names.Lock), Control: describeControl(j.Path)}
	if p := readFile(ctx, names.Prev, o.schema, false); p.verdict != verdictMissing {
		d := describe(p)
		out.Prev = &d
	}
	out.Kept = describeKept(ctx, j.Path, o.schema)
	if e.json {
		if err := json.NewEncoder(e.out).Encode(out); err != nil {
			return err
		}
	} else {
		printInspect(e.out, &out)
	}
	if j.code() != exitOK {
		return &status{code: j.code()}
	}
	return nil
}

// upToDamageJSON says where the reading of a damaged file's entries
// stopped (rawfile.Partial).
type upToDamageJSON struct {
	// InJournal: the damage is in the journal; the entries are the file's
	// with the journal's records before the damage replayed (and the
	// header is the last of those records').
	InJournal bool  `json:"inJournal,omitempty"`
	Entry     int   `json:"entry,omitempty"`  // the first entry, from 1, whose line does not read; 0 when every one reads
	Offset    int64 `json:"offset,omitempty"` // its byte offset in the file
}

// journalJSON describes the journal beside a file; nil when there is none.
type journalJSON struct {
	Path      string      `json:"path"`
	Bytes     int64       `json:"bytes"`
	Total     int         `json:"total"`              // every record, replayable or not
	FirstSeq  uint64      `json:"firstSeq,omitempty"` // of the first and last records that read
	LastSeq   uint64      `json:"lastSeq,omitempty"`
	Records   int         `json:"records"`   // replayed over the file
	Stale     int         `json:"stale"`     // skipped: the file holds them already
	TornBytes int64       `json:"tornBytes"` // a torn last record discarded, never acknowledged
	Seq       uint64      `json:"seq"`       // the seq of the state the entries are
	Damage    *damageJSON `json:"damage,omitempty"`
}

// damageJSON is where Load refused a journal (rawfile.Damage).
type damageJSON struct {
	Offset      int64   `json:"offset"` // the refused record
	Bytes       int64   `json:"bytes"`
	Seq         uint64  `json:"seq,omitempty"` // its seq, when its header reads
	Reason      string  `json:"reason"`
	Before      runJSON `json:"before"` // replayable: what repair-journal keeps
	After       runJSON `json:"after"`  // not replayable without the refused record
	FileMissing bool    `json:"fileMissing,omitempty"`
}

// runJSON is a run of consecutive records of a journal.
type runJSON struct {
	Records  int    `json:"records"`
	FirstSeq uint64 `json:"firstSeq,omitempty"`
	LastSeq  uint64 `json:"lastSeq,omitempty"`
	Offset   int64  `json:"offset"`
	Bytes    int64  `json:"bytes"`
}

func describeJournal(j *judged) *journalJSON {
	if !j.Journal.Exists {
		return nil
	}
	jj := j.Journal
	out := &journalJSON{Path: jj.Path, Bytes: jj.Bytes, Total: jj.All.Records, FirstSeq: jj.All.FirstSeq, LastSeq: jj.All.LastSeq,
		Records: jj.Records, Stale: jj.Stale, TornBytes: jj.TornBytes, Seq: jj.Seq}
	if d := jj.Damage; d != nil {
		out.Damage = &damageJSON{Offset: d.Offset, Bytes: d.Bytes, Seq: d.Seq, Reason: d.Reason,
			Before: runJSON(d.Before), After: runJSON(d.After), FileMissing: d.FileMissing}
	}
	return out
}

func describe(j *judged) fileJSON {
	d := fileJSON{Path: j.Path, Verdict: j.verdict, Reason: j.reason, Size: j.Size, Header: j.shownHeader(), File: j.fileHeader(), Journal: describeJournal(j)}
	d.Entries, d.EntriesAtLeast, d.UpToDamage = countOf(j)
	switch {
	case j.Size < 0:
		d.Checksum = "not read"
	case j.ChecksumErr != nil:
		d.Checksum = "bad: " + j.ChecksumErr.Error()
	default:
		d.Checksum = "ok"
	}
	return d
}

// countOf is j's count of entries as read, for --json output.
func countOf(j *judged) (*int, bool, *upToDamageJSON) {
	ents, atLeast, counted := j.readEntries()
	if !counted {
		return nil, false, nil
	}
	n := len(ents)
	var where *upToDamageJSON
	if p := j.UpToDamage; atLeast {
		where = &upToDamageJSON{InJournal: p.Journal}
		if p.Line >= 0 {
			where.Entry, where.Offset = p.Line+1, p.Offset
		}
	}
	return &n, atLeast, where
}

// entriesLine says, for inspect, how many entries the file holds as far
// as it reads, and why the count is what it is.
func entriesLine(d *fileJSON) string {
	w := d.UpToDamage
	switch {
	case d.Entries == nil && d.File == nil:
		return "not read (the header does not read)"
	case d.Entries == nil:
		return "not read (the file does not load: see the reason)"
	case d.Size == 0:
		return "0 (an empty file holds nothing)"
	case !d.EntriesAtLeast:
		return fmt.Sprint(*d.Entries)
	case w.InJournal:
		return fmt.Sprintf("at least %d, up to the damage (the file's and the journal's %s before it)", *d.Entries, plural(d.Journal.Damage.Before.Records, "record"))
	case w.Entry == 0:
		return fmt.Sprintf("at least %d, up to the damage (every entry line reads; the damage is in a value, the header or the checksum)%s", *d.Entries, unreplayed(d.Journal))
	}
	return fmt.Sprintf("at least %d, up to the damage (entry %d, at byte %d, does not read as the writer writes it)%s", *d.Entries, w.Entry, w.Offset, unreplayed(d.Journal))
}

// unreplayed notes the records of a journal not replayed over the entries
// counted: they may add or delete entries.
func unreplayed(j *journalJSON) string {
	if j == nil || j.Total == 0 {
		return ""
	}
	return fmt.Sprintf("; the journal's %s, not replayed over them, may change them", plural(j.Total, "record"))
}

func printInspect(w io.Writer, out *inspectJSON) {
	fmt.Fprintf(w, "%s\n", out.Path)
	fmt.Fprintf(w, "  verdict:   %s\n", out.Verdict)
	if out.Reason != "" {
		fmt.Fprintf(w, "  reason:    %s\n", out.Reason)
	}
	if h := out.Header; h != nil {
		fmt.Fprintf(w, "  format:    %d\n  schema:    %d\n  seq:       %d\n", h.Format, h.Schema, h.Seq)
		fmt.Fprintf(w, "  phase:     %s\n  writer:    %s\n  boot ID:   %s\n", orNone(h.Phase), orNone(h.Writer), orNone(h.BootID))
		if h.Behind != "" {
			fmt.Fprintf(w, "  behind:    %s\n", oneLine(h.Behind))
		}
		fmt.Fprintf(w, "  saved at:  %s\n", h.SavedAt.Format(time.RFC3339Nano))
	}
	if f := out.File; f != nil && out.Journal != nil && out.Journal.Records > 0 {
		fmt.Fprintf(w, "  file:      seq %d, phase %s, writer %s, saved %s (the header above is the journal's last record replayed over it)\n",
			f.Seq, orNone(f.Phase), orNone(f.Writer), f.SavedAt.Format(time.RFC3339Nano))
	} else if f != nil && out.UpToDamage != nil && out.UpToDamage.InJournal {
		fmt.Fprintf(w, "  file:      seq %d, phase %s, writer %s, saved %s (the header above is the journal's last record before the damage, replayed over it)\n",
			f.Seq, orNone(f.Phase), orNone(f.Writer), f.SavedAt.Format(time.RFC3339Nano))
	}
	if out.Size >= 0 {
		fmt.Fprintf(w, "  entries:   %s\n  size:      %d bytes\n", entriesLine(&out.fileJSON), out.Size)
	}
	fmt.Fprintf(w, "  checksum:  %s\n", out.Checksum)
	fmt.Fprintf(w, "  journal:   %s\n", journalLine(out.Journal))
	if d := out.Journal.damage(); d != nil {
		printDamage(w, out.Path, d)
	}
	fmt.Fprintf(w, "  lock:      %s\n  lock file: %s\n", out.Lock, out.Lock.Path)
	fmt.Fprintf(w, "  control:   %s\n", out.Control)
	if out.Prev == nil {
		fmt.Fprintf(w, "  .prev:     none\n")
	} else {
		fmt.Fprintf(w, "  .prev:     %s\n", sibling(out.Prev))
	}
	printKept(w, out.Kept)
}

// journalLine describes the journal in one line.
func journalLine(j *journalJSON) string {
	switch {
	case j == nil:
		return "none"
	case j.Damage != nil && j.Damage.FileMissing:
		return fmt.Sprintf("%s: %d bytes, %s, but the file they follow is missing",
			filepath.Base(j.Path), j.Bytes, j.Damage.After.span())
	case j.Damage != nil:
		return fmt.Sprintf("%s: %d bytes, %d records, damaged at byte %d: Load refuses it", filepath.Base(j.Path), j.Bytes, j.Total, j.Damage.Offset)
	case j.Records == 0 && j.Stale == 0 && j.Total > 0 && j.TornBytes == 0:
		return fmt.Sprintf("%s: %d bytes, %s, not replayed: Load refused the file they follow", filepath.Base(j.Path), j.Bytes,
			runJSON{Records: j.Total, FirstSeq: j.FirstSeq, LastSeq: j.LastSeq}.span())
	}
	s := fmt.Sprintf("%s: %d bytes, %d records replayed (state seq %d)", filepath.Base(j.Path), j.Bytes, j.Records, j.Seq)
	if j.Stale > 0 {
		s += fmt.Sprintf(", %d stale skipped", j.Stale)
	}
	if j.TornBytes > 0 {
		s += fmt.Sprintf(", a torn last record of %d bytes discarded (a commit a crash cut short, never acknowledged)", j.TornBytes)
	}
	return s
}

func (j *journalJSON) damage() *damageJSON {
	if j == nil {
		return nil
	}
	return j.Damage
}

// printDamage shows where the journal is damaged and what a repair that
// keeps every intact record keeps and drops.
func printDamage(w io.Writer, path string, d *damageJSON) {
	if d.FileMissing {
		fmt.Fprintf(w, "             what to do: phaseshift restore-prev %s (it keeps the journal aside), or restore a kept copy of the file with phaseshift restore-kept\n", path)
		return
	}
	fmt.Fprintf(w, "             before the damage: %s: replayable\n", d.Before.describe())
	fmt.Fprintf(w, "             the damaged record: bytes %d-%d (%s)%s\n", d.Offset, d.Offset+d.Bytes, d.Reason, seqNote(d.Seq))
	fmt.Fprintf(w, "             after the damage: %s: not replayable without it\n", d.After.describe())
	fmt.Fprintf(w, "             what to do: phaseshift repair-journal %s shows what it keeps and drops; add --drop-damaged-records to do it\n", path)
}

func seqNote(seq uint64) string {
	if seq == 0 {
		return ""
	}
	return fmt.Sprintf(", seq %d", seq)
}

// describe says how many records, their seqs and their bytes.
func (r runJSON) describe() string {
	return fmt.Sprintf("%s, bytes %d-%d", r.span(), r.Offset, r.Offset+r.Bytes)
}

// span says how many records and their seqs.
func (r runJSON) span() string {
	s := plural(r.Records, "record")
	switch {
	case r.FirstSeq == 0:
	case r.FirstSeq == r.LastSeq:
		s += fmt.Sprintf(" (seq %d)", r.FirstSeq)
	default:
		s += fmt.Sprintf(" (seq %d-%d)", r.FirstSeq, r.LastSeq)
	}
	return s
}

func plural(n int, what string) string {
	switch {
	case n == 1:
		return "1 " + what
	case strings.HasSuffix(what, "y"):
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(what, "y"))
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// sibling describes .prev or a quarantined copy in one line.
func sibling(d *fileJSON) string {
	s := filepath.Base(d.Path) + ": " + d.Verdict
	if d.Header != nil {
		s += fmt.Sprintf(", seq %d, saved %s", d.Header.Seq, d.Header.SavedAt.Format(time.RFC3339))
	}
	switch {
	case d.Entries == nil:
	case d.EntriesAtLeast:
		s += fmt.Sprintf(", at least %s read up to the damage", plural(*d.Entries, "entry"))
	case d.Verdict == verdictIntact:
		s += fmt.Sprintf(", %d entries", *d.Entries)
	}
	switch j := d.Journal; {
	case j == nil:
	case j.Damage != nil && !j.Damage.FileMissing:
		s += fmt.Sprintf(", with its journal (%d records, damaged at byte %d)", j.Total, j.Damage.Offset)
	case j.TornBytes > 0:
		s += fmt.Sprintf(", with its journal (%d records, the last torn)", j.Total)
	default:
		s += fmt.Sprintf(", with its journal (%d records)", j.Total)
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return oneLine(s)
}

// oneLine returns s, a text a file holds (a header's phase, writer, boot
// ID, behind), with newline, carriage return and tab escaped as JSON
// escapes: printable lets those through for the lines the command itself
// prints, and a header's text must not add lines of its own (a forged
// "verdict: intact" under the real one).
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\n\r\t") {
		return s
	}
	return strings.NewReplacer("\n", `\u000a`, "\r", `\u000d`, "\t", `\u0009`).Replace(s)
}
