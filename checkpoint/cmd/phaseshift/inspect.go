package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/phaseshift/phaseshift/checkpoint/internal/rawfile"
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
		summary: "show a checkpoint's header, checksum, lock holder, .prev and quarantined copies",
		args:    "PATH",
		about: `inspect shows what a daemon would restore from PATH and what lies beside it:
the header (format, value schema, seq, the writer's phase and version, boot
ID, time of the save), the number of entries and the file's size, the
checksum verdict, the journal (PATH.journal, with checkpoint.WithJournal:
its records, replayed in what the entries count, and a torn last record
Load discarded), whether a process holds the checkpoint's lock (and its
PID), PATH.prev and the quarantined copies (PATH.corrupt-<time>, each with
its journal if it had one) with their seq and time. It exits with PATH's verdict, as verify does. It does not take
the lock.`,
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
	Path     string       `json:"path"`
	Verdict  string       `json:"verdict"`
	Reason   string       `json:"reason,omitempty"`
	Size     int64        `json:"size"`
	Entries  int          `json:"entries"`
	Checksum string       `json:"checksum"`
	Header   *headerJSON  `json:"header"` // what Load restores: with a journal, its last record's
	File     *headerJSON  `json:"file"`   // the file's own header
	Journal  *journalJSON `json:"journal"`
	// QuarantinedAt is when a quarantined copy was made, from its name.
	QuarantinedAt *time.Time `json:"quarantinedAt,omitempty"`
}

// inspectJSON is inspect's --json output.
type inspectJSON struct {
	fileJSON
	Exit        int        `json:"exit"`
	Lock        lockInfo   `json:"lock"`
	Prev        *fileJSON  `json:"prev"`
	Quarantined []fileJSON `json:"quarantined"`
}

func runInspect(ctx context.Context, e *env, o *inspectOptions, args []string) error {
	if err := wantArgs(args, "PATH"); err != nil {
		return err
	}
	j := readFile(ctx, args[0], o.schema, false)
	names := rawfile.NamesOf(j.Path)
	out := inspectJSON{fileJSON: describe(j), Exit: j.code(), Lock: lockState(names.Lock), Quarantined: []fileJSON{}}
	if p := readFile(ctx, names.Prev, o.schema, false); p.verdict != verdictMissing {
		d := describe(p)
		out.Prev = &d
	}
	out.Quarantined = quarantined(ctx, names.QuarantinePrefix, o.schema)
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

// journalJSON describes the journal beside a file; nil when there is none.
type journalJSON struct {
	Path      string `json:"path"`
	Bytes     int64  `json:"bytes"`
	Records   int    `json:"records"`   // replayed over the file
	Stale     int    `json:"stale"`     // skipped: the file holds them already
	TornBytes int64  `json:"tornBytes"` // a torn last record discarded, never acknowledged
	Seq       uint64 `json:"seq"`       // the seq of the state the entries are
}

func describeJournal(j *judged) *journalJSON {
	if !j.Journal.Exists {
		return nil
	}
	jj := j.Journal
	return &journalJSON{Path: jj.Path, Bytes: jj.Bytes, Records: jj.Records, Stale: jj.Stale, TornBytes: jj.TornBytes, Seq: jj.Seq}
}

func describe(j *judged) fileJSON {
	d := fileJSON{Path: j.Path, Verdict: j.verdict, Reason: j.reason, Size: j.Size, Entries: len(j.Entries), Header: j.header(), File: j.fileHeader(), Journal: describeJournal(j)}
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

// quarantined describes the quarantined copies of a checkpoint, oldest
// first: the files whose names start with prefix.
func quarantined(ctx context.Context, prefix string, schema int) []fileJSON {
	dir, base := filepath.Split(prefix)
	ents, err := os.ReadDir(filepath.Clean(dir))
	if err != nil {
		return []fileJSON{}
	}
	var names []string
	for _, de := range ents {
		// A quarantined journal is read with its file (NAME.journal).
		if strings.HasPrefix(de.Name(), base) && !strings.HasSuffix(de.Name(), ".journal") {
			names = append(names, de.Name())
		}
	}
	sort.Strings(names) // the names carry their UTC time: oldest first
	out := make([]fileJSON, 0, len(names))
	for _, n := range names {
		d := describe(readFile(ctx, filepath.Join(dir, n), schema, false))
		stamp, _, _ := strings.Cut(strings.TrimPrefix(n, base), "-")
		if t, err := time.Parse("20060102T150405.000000000Z", stamp); err == nil {
			d.QuarantinedAt = &t
		}
		out = append(out, d)
	}
	return out
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
		fmt.Fprintf(w, "  saved at:  %s\n", h.SavedAt.Format(time.RFC3339Nano))
	}
	if f := out.File; f != nil && out.Journal != nil {
		fmt.Fprintf(w, "  file:      seq %d, phase %s, writer %s, saved %s (the header above is the journal's last record replayed over it)\n",
			f.Seq, orNone(f.Phase), orNone(f.Writer), f.SavedAt.Format(time.RFC3339Nano))
	}
	if out.Size >= 0 {
		fmt.Fprintf(w, "  entries:   %d\n  size:      %d bytes\n", out.Entries, out.Size)
	}
	fmt.Fprintf(w, "  checksum:  %s\n", out.Checksum)
	fmt.Fprintf(w, "  journal:   %s\n", journalLine(out.Journal))
	fmt.Fprintf(w, "  lock:      %s\n  lock file: %s\n", out.Lock, out.Lock.Path)
	if out.Prev == nil {
		fmt.Fprintf(w, "  .prev:     none\n")
	} else {
		fmt.Fprintf(w, "  .prev:     %s\n", sibling(out.Prev))
	}
	if len(out.Quarantined) == 0 {
		fmt.Fprintf(w, "  quarantined copies: none\n")
		return
	}
	fmt.Fprintf(w, "  quarantined copies: %d\n", len(out.Quarantined))
	for i := range out.Quarantined {
		fmt.Fprintf(w, "    %s\n", sibling(&out.Quarantined[i]))
	}
}

// journalLine describes the journal in one line.
func journalLine(j *journalJSON) string {
	if j == nil {
		return "none"
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

// sibling describes .prev or a quarantined copy in one line.
func sibling(d *fileJSON) string {
	s := filepath.Base(d.Path) + ": " + d.Verdict
	if d.Header != nil {
		s += fmt.Sprintf(", seq %d, saved %s", d.Header.Seq, d.Header.SavedAt.Format(time.RFC3339))
	}
	if d.Verdict == verdictIntact {
		s += fmt.Sprintf(", %d entries", d.Entries)
	}
	if d.Journal != nil {
		s += fmt.Sprintf(", with its journal (%d records)", d.Journal.Records)
	}
	if d.QuarantinedAt != nil {
		s += ", quarantined " + d.QuarantinedAt.Format(time.RFC3339)
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
