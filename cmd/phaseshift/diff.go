package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/phaseshift/phaseshift/internal/jsonvalue"
	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// diffOptions are diff's flags.
type diffOptions struct {
	ignoreChecksum bool
	values         bool
}

func (o *diffOptions) AddFlags(fs *flag.FlagSet) {
	addIgnoreChecksumFlag(fs, &o.ignoreChecksum)
	fs.BoolVar(&o.values, "values", false, "print the values of the entries that differ, not only their keys")
}

func newDiffCommand() *command {
	o := &diffOptions{}
	return &command{
		name:    "diff",
		summary: "compare the entries of two checkpoints: only in A, only in B, different",
		args:    "A B",
		about: `diff compares the entries of two checkpoint files: PATH and PATH.prev, a
quarantined copy, or another node's file. It prints the keys only in A, only
in B, and in both with different values (compared as JSON values, so field
order inside a value does not count); with --values it prints the values of
those entries too. It exits 0 when the entries are the same, 1 when they
differ, and with a file's verdict when one is not intact (--ignore-checksum
reads hand-edited files).`,
		examples: []string{
			"phaseshift diff /var/run/ipamd/state.json /var/run/ipamd/state.json.prev",
			"phaseshift diff --ignore-checksum --values state.json state.json.prev   # before a reseal",
			"phaseshift diff --json a.json b.json | jq '.different[].key'",
		},
		addFlags: o.AddFlags,
		run:      func(ctx context.Context, e *env, args []string) error { return runDiff(ctx, e, o, args) },
	}
}

// diffEntry is one key in diff's --json output; the values are there with
// --values only.
type diffEntry struct {
	Key   rawfile.Key     `json:"key"`
	Value json.RawMessage `json:"value,omitempty"` // only in A, or only in B
	A     json.RawMessage `json:"a,omitempty"`     // different
	B     json.RawMessage `json:"b,omitempty"`
}

// diffJSON is diff's --json output.
type diffJSON struct {
	A         string      `json:"a"`
	B         string      `json:"b"`
	HeaderA   *headerJSON `json:"headerA"`
	HeaderB   *headerJSON `json:"headerB"`
	OnlyInA   []diffEntry `json:"onlyInA"`
	OnlyInB   []diffEntry `json:"onlyInB"`
	Different []diffEntry `json:"different"`
}

func runDiff(ctx context.Context, e *env, o *diffOptions, args []string) error {
	if err := wantArgs(args, "A", "B"); err != nil {
		return err
	}
	a := readFile(ctx, args[0], 0, o.ignoreChecksum)
	if a.verdict != verdictIntact {
		return a.failure()
	}
	b := readFile(ctx, args[1], 0, o.ignoreChecksum)
	if b.verdict != verdictIntact {
		return b.failure()
	}
	d := compare(a, b, o.values)
	if e.json {
		if err := json.NewEncoder(e.out).Encode(d); err != nil {
			return err
		}
	} else {
		printDiff(e.out, &d)
	}
	if len(d.OnlyInA)+len(d.OnlyInB)+len(d.Different) > 0 {
		return &status{code: exitNo}
	}
	return nil
}

// compare lists the differences between a's and b's entries, in a's order
// and then b's.
func compare(a, b *judged, values bool) diffJSON {
	d := diffJSON{A: a.Path, B: b.Path, HeaderA: a.header(), HeaderB: b.header(),
		OnlyInA: []diffEntry{}, OnlyInB: []diffEntry{}, Different: []diffEntry{}}
	inB := make(map[rawfile.Key]json.RawMessage, len(b.Entries))
	for _, ent := range b.Entries {
		inB[ent.Key] = ent.Value
	}
	inA := make(map[rawfile.Key]bool, len(a.Entries))
	for _, ent := range a.Entries {
		inA[ent.Key] = true
		bv, ok := inB[ent.Key]
		switch {
		case !ok:
			d.OnlyInA = append(d.OnlyInA, diffEntry{Key: ent.Key, Value: pick(values, ent.Value)})
		case !sameValue(ent.Value, bv):
			d.Different = append(d.Different, diffEntry{Key: ent.Key, A: pick(values, ent.Value), B: pick(values, bv)})
		}
	}
	for _, ent := range b.Entries {
		if !inA[ent.Key] {
			d.OnlyInB = append(d.OnlyInB, diffEntry{Key: ent.Key, Value: pick(values, ent.Value)})
		}
	}
	return d
}

func pick(values bool, v json.RawMessage) json.RawMessage {
	if values {
		return v
	}
	return nil
}

// sameValue compares two values as JSON values.
func sameValue(a, b json.RawMessage) bool { return jsonvalue.SameText(a, b) }

func printDiff(w io.Writer, d *diffJSON) {
	fmt.Fprintf(w, "A: %s (%s)\nB: %s (%s)\n", d.A, headerLine(d.HeaderA), d.B, headerLine(d.HeaderB))
	if len(d.OnlyInA)+len(d.OnlyInB)+len(d.Different) == 0 {
		fmt.Fprintln(w, "the entries are the same")
		return
	}
	printKeys(w, "only in A", d.OnlyInA)
	printKeys(w, "only in B", d.OnlyInB)
	printKeys(w, "different", d.Different)
}

func printKeys(w io.Writer, title string, ents []diffEntry) {
	fmt.Fprintf(w, "%s: %d\n", title, len(ents))
	for _, ent := range ents {
		fmt.Fprintf(w, "  %s\n", ent.Key)
		if ent.Value != nil {
			fmt.Fprintf(w, "    value: %s\n", compactJSON(ent.Value))
		}
		if ent.A != nil {
			fmt.Fprintf(w, "    A: %s\n    B: %s\n", compactJSON(ent.A), compactJSON(ent.B))
		}
	}
}

func headerLine(h *headerJSON) string {
	if h == nil {
		return "header unreadable"
	}
	return fmt.Sprintf("seq %d, schema %d, phase %s, saved %s", h.Seq, h.Schema, orNone(h.Phase), h.SavedAt.Format(time.RFC3339))
}
