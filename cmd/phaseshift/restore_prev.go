package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/phaseshift/phaseshift/internal/engine"
	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// restorePrevOptions are restore-prev's flags.
type restorePrevOptions struct {
	lockWait      time.Duration
	replaceIntact bool
}

func (o *restorePrevOptions) AddFlags(fs *flag.FlagSet) {
	addLockWaitFlag(fs, &o.lockWait)
	addReplaceIntactFlag(fs, &o.replaceIntact, "the writes made since .prev")
}

func newRestorePrevCommand() *command {
	o := &restorePrevOptions{}
	return &command{
		name:    "restore-prev",
		summary: "put PATH.prev back as the checkpoint, durably",
		args:    "PATH",
		about: `restore-prev makes PATH.prev (the previous good save) the checkpoint again,
under the checkpoint's lock, durably, with a seq above both files' (and
above every journal record's). It keeps the file it replaces, if any, as
PATH.before-restore-prev-<time> (phaseshift restore-kept puts it back), and
leaves PATH.prev as it is. PATH.prev must be intact. With a journal
(PATH.journal, checkpoint.WithJournal), the journal is kept with the copy
(PATH.before-restore-prev-<time>.journal) and removed: its records follow
the file replaced. A journal left without its file (PATH missing) is kept
alone, as the daemon's quarantine would. PATH.prev lacks the last write
(with a journal, every commit since the last compaction): the file it
writes is marked so (its header's "behind"), and records phase 3 where
phase 3 wrote the file it replaces (or nothing says which phase did), so
that a daemon in phase 3 refuses it, phases 1 and 2 rebuild it from a
legacy that holds every write, and refuse it over one phase 3 left stale
(package migrate, rules 7, 9 and 10; phaseshift clear-mark then says how
to go on); and it refuses
(exit 9) to replace an intact file, or one a newer phaseshift wrote (kept
for the roll-forward), unless --replace-intact says so (say, after a buggy
daemon wrote a bad but intact file); for a damaged journal,
phaseshift repair-journal keeps more. It exits 7 if a daemon holds the
lock longer than --lock-wait: stop the daemon first.`,
		examples: []string{
			"phaseshift restore-prev /var/run/ipamd/state.json",
			"phaseshift restore-prev --replace-intact /var/run/ipamd/state.json",
		},
		addFlags: o.AddFlags,
		run:      func(ctx context.Context, e *env, args []string) error { return runRestorePrev(ctx, e, o, args) },
	}
}

func runRestorePrev(ctx context.Context, e *env, o *restorePrevOptions, args []string) error {
	if err := wantArgs(args, "PATH"); err != nil {
		return err
	}
	return underLock(ctx, e, args[0], o.lockWait, func(l rawfile.Locked) error {
		return restorePrevLocked(ctx, e, o, l)
	})
}

func restorePrevLocked(ctx context.Context, e *env, o *restorePrevOptions, l rawfile.Locked) error {
	cur := judge(l.Read(ctx, rawfile.Options{}), 0)
	// .prev changes only under the checkpoint's lock, which this holds.
	prev := readFile(ctx, engine.NamesOf(cur.Path).Prev, 0, false)
	if prev.verdict != verdictIntact {
		return fail(prev.code(), "cannot restore %s: %s", prev.Path, prev.reason)
	}
	if cur.verdict == verdictNewer && !o.replaceIntact {
		return refuseNewer(cur)
	}
	if cur.verdict == verdictIntact && !o.replaceIntact {
		return fail(exitRefused, "%s is intact (seq %d); %s (seq %d) lacks the writes since. "+
			"If you mean to undo them (a buggy daemon wrote a bad but intact file), pass --replace-intact", cur.Path, seqOf(cur), prev.Path, seqOf(prev))
	}
	r := &repaired{Path: cur.Path, Action: "restore-prev", From: prev.Path, Replaced: cur.verdict}
	// .prev lacks the last save (with a journal, every commit since the
	// last compaction): the restored file says so, in the mark a daemon's
	// restore reads (Meta.Behind), so that phase 3 refuses it and phases 1
	// and 2 rebuild it from legacy instead of serving it as current.
	h := marked(prev.Meta, prevMark(prev), cur)
	if err := replace(ctx, l, r, cur, h, prev.Entries, seqOf(prev)); err != nil {
		return err
	}
	return printRepaired(e, r, fmt.Sprintf("restored %s from %s (seq %d, %d entries), written as seq %d", r.Path, prev.Path, seqOf(prev), r.Entries, r.Header.Seq))
}
