package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// repairJournalOptions are repair-journal's flags.
type repairJournalOptions struct {
	lockWait time.Duration
	drop     bool
}

func (o *repairJournalOptions) AddFlags(fs *flag.FlagSet) {
	addLockWaitFlag(fs, &o.lockWait)
	fs.BoolVar(&o.drop, "drop-damaged-records", false, "drop the damaged record and every record after it (they cannot be replayed without it), keeping every record before it")
}

func newRepairJournalCommand() *command {
	o := &repairJournalOptions{}
	return &command{
		name:    "repair-journal",
		summary: "keep every intact record of a damaged journal, drop the damaged one and those after it",
		args:    "--drop-damaged-records PATH",
		about: `repair-journal makes a checkpoint whose journal is damaged (PATH.journal,
checkpoint.WithJournal: a record that fails its checksum or its shape and is
not the last, or one out of sequence) load again, losing as little as can
be: it replays the journal's records up to the damage over the file, as
Load does, and writes that state as the checkpoint, under the
checkpoint's lock, durably, with the last kept record's phase, writer and
boot ID and a seq above every record's. The damaged record and every
record after it are dropped: records after a missing one cannot be
replayed without inventing a state that never was.

Without --drop-damaged-records it changes nothing: it says what it would
keep and what it would drop (records, their seqs and their byte ranges in
the journal), and exits 9. With it, it keeps the file and its whole
journal as PATH.before-repair-journal-<time> (and .journal), so that the
dropped records can still be read, removes the journal, and says what it
dropped. PATH.prev is left as it is. A file that is itself damaged is
for restore-prev or reseal; a journal without its file, for restore-prev.
It exits 7 if a daemon holds the lock longer than --lock-wait: stop the
daemon first.`,
		locks:   lockAlways,
		refused: "it would drop records (--drop-damaged-records)",
		examples: []string{
			"phaseshift inspect /var/run/ipamd/state.json            # where the journal is damaged",
			"phaseshift repair-journal /var/run/ipamd/state.json     # what it would keep and drop; exit 9",
			"phaseshift repair-journal --drop-damaged-records /var/run/ipamd/state.json",
		},
		addFlags: o.AddFlags,
		run:      func(ctx context.Context, e *env, args []string) error { return runRepairJournal(ctx, e, o, args) },
	}
}

func runRepairJournal(ctx context.Context, e *env, o *repairJournalOptions, args []string) error {
	if err := wantArgs(args, "PATH"); err != nil {
		return err
	}
	return underLock(ctx, e, args[0], o.lockWait, func(l rawfile.Locked) error {
		return repairJournalLocked(ctx, e, o, l)
	})
}

func repairJournalLocked(ctx context.Context, e *env, o *repairJournalOptions, l rawfile.Locked) error {
	j := judge(l.Read(ctx, rawfile.Options{JournalUpToDamage: true}), 0)
	d := describeJournal(j).damage()
	if err := repairable(e, j, d); err != nil || d == nil {
		return err
	}
	r := &repaired{Path: j.Path, Action: "repair-journal", Replaced: "damaged journal", Damage: d}
	if !o.drop {
		if e.json {
			if err := json.NewEncoder(e.out).Encode(r); err != nil {
				return err
			}
		} else {
			printJournalPlan(e.out, j, d, "would keep", "would drop")
		}
		return fail(exitRefused, "nothing changed: to keep the %s before the damage and drop the rest, run phaseshift repair-journal --drop-damaged-records %s",
			plural(d.Before.Records, "record"), j.Path)
	}
	// Above every record's seq, the dropped ones' too: nothing may take the
	// repaired file for an older one.
	if err := replace(ctx, l, r, j, marked(j.Meta, journalMark(d), j), j.Entries, seqOf(j)); err != nil {
		return err
	}
	if e.json {
		return printRepaired(e, r, "")
	}
	printJournalPlan(e.out, j, d, "kept", "dropped")
	return printRepaired(e, r, fmt.Sprintf("repaired %s: %d entries, now seq %d", r.Path, r.Entries, r.Header.Seq))
}

// repairable checks that j, read under the lock up to its journal's
// damage d, is what repair-journal repairs: nil with d nil when there is
// nothing to repair (it says so), an error when the damage is not the
// journal's.
func repairable(e *env, j *judged, d *damageJSON) error {
	switch {
	case d == nil && j.verdict == verdictIntact:
		msg := fmt.Sprintf("%s: its journal replays (%s): nothing to repair", j.Path, plural(j.Journal.Records, "record"))
		if j.Journal.TornBytes > 0 {
			msg += fmt.Sprintf("; its torn last record (%d bytes, a commit a crash cut short, never acknowledged) is discarded by every Load and removed by the daemon's next save", j.Journal.TornBytes)
		}
		if e.json {
			return json.NewEncoder(e.out).Encode(repaired{Path: j.Path, Action: "repair-journal", Header: j.header(), Entries: len(j.Entries)})
		}
		_, err := fmt.Fprintln(e.out, msg)
		return err
	case d == nil && !j.Journal.Exists:
		return fail(j.code(), "%s has no journal to repair: %s\n  what to do: %s", j.Path, j.reason, advice(j))
	case d == nil:
		return fail(j.code(), "%s\n  the journal is not what is damaged; what to do: %s", j.reason, advice(j))
	case d.FileMissing:
		return fail(exitCorrupt, "%s: the journal's file is missing, so no record can be replayed: "+
			"put the file back with phaseshift restore-prev %s (it keeps the journal aside), or restore a kept copy with phaseshift restore-kept", j.Path, j.Path)
	case j.verdict != verdictIntact:
		return fail(j.code(), "the records before the damage do not replay either: %s", j.reason)
	}
	return nil
}

// printJournalPlan says what the repair keeps and drops.
func printJournalPlan(w io.Writer, j *judged, d *damageJSON, keep, drop string) {
	name := filepath.Base(j.Journal.Path)
	fmt.Fprintf(w, "%s is damaged at byte %d: %s\n", name, d.Offset, d.Reason)
	fmt.Fprintf(w, "  %s: %s of %s, replayed over the file (seq %d): %d entries, seq %d\n",
		keep, d.Before.describe(), name, j.Header.Seq, len(j.Entries), j.Meta.Seq)
	fmt.Fprintf(w, "  %s: the damaged record, bytes %d-%d%s, and %s after it\n", drop, d.Offset, d.Offset+d.Bytes, seqNote(d.Seq), d.After.describe())
}
