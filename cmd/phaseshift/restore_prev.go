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
	acceptLoss    bool
}

func (o *restorePrevOptions) AddFlags(fs *flag.FlagSet) {
	addLockWaitFlag(fs, &o.lockWait)
	addReplaceIntactFlag(fs, &o.replaceIntact, "the writes made since .prev")
	addAcceptLossFlag(fs, &o.acceptLoss, ".prev")
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
daemon wrote a bad but intact file). It says what PATH.prev lacks against
PATH, as far as PATH reads (a damaged file up to its damage, a damaged
journal up to its damaged record): the entries PATH holds that PATH.prev
lacks or holds with another value, and the seqs above PATH.prev's; and it
refuses (exit 9) to put back a PATH.prev that lacks any such entry unless
--accept-loss says so. For a damaged journal, phaseshift repair-journal
keeps more. Over an empty PATH (0 bytes, which holds nothing), it loses
nothing. It exits 7 if a daemon holds the lock longer than --lock-wait:
stop the daemon first.`,
		examples: []string{
			"phaseshift restore-prev /var/run/ipamd/state.json",
			"phaseshift restore-prev --accept-loss /var/run/ipamd/state.json",
			"phaseshift restore-prev --replace-intact /var/run/ipamd/state.json",
		},
		locks:    lockAlways,
		refused:  "PATH is intact or newer (--replace-intact), or holds entries PATH.prev lacks (--accept-loss)",
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
	loss := lacks(prev, cur)
	if cur.verdict == verdictIntact && !o.replaceIntact {
		return fail(exitRefused, "%s is intact (seq %d); %s lacks the writes since: %s. "+
			"If you mean to undo them (a buggy daemon wrote a bad but intact file), pass --replace-intact%s", cur.Path, seqOf(cur), prev.Path,
			lossLine(prev, cur, loss), alsoAcceptLoss(loss))
	}
	if err := refuseLoss(prev, cur, loss, o.acceptLoss, prevInstead(cur)); err != nil {
		return err
	}
	r := &repaired{Path: cur.Path, Action: "restore-prev", From: prev.Path, Replaced: cur.verdict, Lacks: loss}
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

// prevInstead names what keeps more than restore-prev over cur, for its
// refusal: repair-journal, where the damage is in the journal.
func prevInstead(cur *judged) string {
	if d := cur.Journal.Damage; d != nil && !d.FileMissing {
		return fmt.Sprintf("phaseshift repair-journal %s keeps every record before the damage. ", cur.Path)
	}
	return fmt.Sprintf("See what reads of it with phaseshift inspect %s. ", cur.Path)
}
