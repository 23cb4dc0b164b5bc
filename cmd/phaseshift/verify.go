package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
)

// verifyOptions are verify's flags.
type verifyOptions struct {
	schema int
}

func (o *verifyOptions) AddFlags(fs *flag.FlagSet) { addSchemaFlag(fs, &o.schema) }

func newVerifyCommand() *command {
	o := &verifyOptions{}
	return &command{
		name:    "verify",
		summary: "check a checkpoint's format and checksum; the exit status says the verdict",
		args:    "PATH",
		about: `verify reads PATH as the daemon's Load would (with its journal replayed) and
exits with the verdict's status: intact, missing, corrupt (checksum
mismatch, truncation, a damaged journal, not a checkpoint), newer (a newer
file format, or with --schema a newer value schema than the daemon's), or
unreadable (permissions, not a regular file). It does not take the
checkpoint's lock, so it is safe beside a running daemon.`,
		examples: []string{
			"phaseshift verify /var/run/ipamd/state.json",
			"phaseshift verify --schema 2 /var/run/ipamd/state.json || echo \"verdict $?\"",
			"phaseshift verify --json /var/run/ipamd/state.json | jq -r .verdict",
		},
		addFlags: o.AddFlags,
		run:      func(ctx context.Context, e *env, args []string) error { return runVerify(ctx, e, o, args) },
	}
}

// verifyJSON is verify's --json output.
type verifyJSON struct {
	Path    string      `json:"path"`
	Verdict string      `json:"verdict"`
	Exit    int         `json:"exit"`
	Reason  string      `json:"reason,omitempty"`
	Header  *headerJSON `json:"header"`  // what Load restores: with a journal, its last record's (before the damage, if damaged)
	File    *headerJSON `json:"file"`    // the file's own header
	Entries *int        `json:"entries"` // as inspect counts them: null when no count could be read
	// EntriesAtLeast says that the file is damaged and Entries are those
	// read before the damage: it holds at least these.
	EntriesAtLeast bool `json:"entriesAtLeast,omitempty"`
}

func runVerify(ctx context.Context, e *env, o *verifyOptions, args []string) error {
	if err := wantArgs(args, "PATH"); err != nil {
		return err
	}
	j := readFile(ctx, args[0], o.schema, false)
	if e.json {
		out := verifyJSON{Path: j.Path, Verdict: j.verdict, Exit: j.code(), Reason: j.reason, Header: j.shownHeader(), File: j.fileHeader()}
		out.Entries, out.EntriesAtLeast, _ = countOf(j)
		if err := json.NewEncoder(e.out).Encode(out); err != nil {
			return err
		}
		if j.code() != exitOK {
			return &status{code: j.code()}
		}
		return nil
	}
	if j.verdict == verdictIntact {
		fmt.Fprintf(e.out, "%s: intact (%s)\n", j.Path, j.summary())
		return nil
	}
	fmt.Fprintf(e.out, "%s: %s%s\n", j.Path, j.verdict, readNote(j))
	return j.failure()
}

// readNote says, for a file that is not intact, what of it was read: its
// seq and its entries up to the damage.
func readNote(j *judged) string {
	h := j.shownHeader()
	ents, atLeast, counted := j.readEntries()
	switch {
	case j.empty():
		return " (an empty file: 0 bytes)"
	case h == nil:
		return ""
	case atLeast:
		return fmt.Sprintf(" (seq %d; at least %s read up to the damage)", h.Seq, plural(len(ents), "entry"))
	case counted:
		return fmt.Sprintf(" (seq %d; %s)", h.Seq, plural(len(ents), "entry"))
	}
	return fmt.Sprintf(" (seq %d)", h.Seq)
}
