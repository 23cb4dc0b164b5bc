package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/phaseshift/phaseshift/internal/engine"
	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// The copies kept beside a checkpoint (package checkpoint's Kept copies):
// the daemon's quarantined files (PATH.corrupt-<time>, also what a
// phaseshift command older than the names by verb kept before a repair)
// and the files the repairs replaced (PATH.before-<verb>-<time>), each with
// its journal, if it had one.

// keptJSON describes a kept copy in inspect's --json output.
type keptJSON struct {
	fileJSON
	Why    rawfile.Why `json:"why"`            // "quarantine" or "repair"
	Verb   string      `json:"verb,omitempty"` // the repair that kept it
	KeptAt time.Time   `json:"keptAt"`
	// JournalOnly says that only the journal was kept: it followed a file
	// that was missing. Path is then the journal's.
	JournalOnly bool `json:"journalOnly,omitempty"`
}

// describeKept describes the copies kept beside path, oldest first.
func describeKept(ctx context.Context, path string, schema int) []keptJSON {
	copies, err := engine.Kept(path)
	if err != nil {
		return []keptJSON{}
	}
	out := make([]keptJSON, 0, len(copies))
	for _, c := range copies {
		k := keptJSON{fileJSON: describe(readFile(ctx, c.Path, schema, false)), Why: c.Why, Verb: c.Verb, KeptAt: c.At, JournalOnly: !c.HasFile}
		if k.JournalOnly {
			k.Path = c.Journal
		}
		out = append(out, k)
	}
	return out
}

func printKept(w io.Writer, kept []keptJSON) {
	if len(kept) == 0 {
		fmt.Fprintf(w, "  kept copies: none\n")
		return
	}
	fmt.Fprintf(w, "  kept copies: %d (restore one with phaseshift restore-kept [--replace-intact] PATH COPY)\n", len(kept))
	for i := range kept {
		fmt.Fprintf(w, "    %s\n", keptLine(&kept[i]))
	}
}

// keptLine describes a kept copy in one line: what it holds, and why and
// when it was kept.
func keptLine(k *keptJSON) string {
	var s string
	if k.JournalOnly {
		s = filepath.Base(k.Path) + ": a journal kept without its file"
		if k.Journal != nil && k.Journal.Damage != nil {
			s += ", " + k.Journal.Damage.After.span()
		}
	} else {
		s = sibling(&k.fileJSON)
	}
	at := k.KeptAt.Format(time.RFC3339)
	if k.Why == rawfile.WhyRepair {
		return s + fmt.Sprintf("; kept before %s at %s", k.Verb, at)
	}
	return s + "; quarantined at " + at
}
