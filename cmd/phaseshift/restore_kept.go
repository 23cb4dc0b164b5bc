package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/phaseshift/phaseshift/internal/engine"
	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// restoreKeptOptions are restore-kept's flags.
type restoreKeptOptions struct {
	lockWait      time.Duration
	replaceIntact bool
	acceptLoss    bool
}

func (o *restoreKeptOptions) AddFlags(fs *flag.FlagSet) {
	addLockWaitFlag(fs, &o.lockWait)
	addReplaceIntactFlag(fs, &o.replaceIntact, "the writes made since the copy was kept")
	addAcceptLossFlag(fs, &o.acceptLoss, "the copy")
}

func newRestoreKeptCommand() *command {
	o := &restoreKeptOptions{}
	return &command{
		name:    "restore-kept",
		summary: "put a kept copy (a repair's before-<verb> copy, or a quarantined file) back, with its journal",
		args:    "PATH COPY",
		about: `restore-kept makes COPY, a copy kept beside PATH (as inspect lists them: a
repair's PATH.before-<verb>-<time>, or a quarantined PATH.corrupt-<time>),
the checkpoint again: it reads COPY with its journal (COPY.journal)
replayed, as Load would, and writes that state as PATH, under the
checkpoint's lock, durably, with a seq above every seq it saw. It undoes a
repair: a delete done by mistake, a restore-prev that lost the journal's
commits. COPY may be given as a path or as its name beside PATH.

It keeps the file it replaces, with its journal, as
PATH.before-restore-kept-<time>, so that it can be undone in turn, and
leaves PATH.prev as it is. COPY must read intact (the copy of a damaged
file is kept to inspect, not to restore). An intact PATH, or one a newer
phaseshift wrote, holds writes the copy may lack, so restore-kept refuses
(exit 9) to replace it, saying how they differ, unless --replace-intact
says so. It says what COPY lacks against PATH, as far as PATH reads (a
damaged file up to its damage): the entries PATH holds that COPY lacks or
holds with another value, and the seqs above COPY's; and it refuses (exit
9) to put back a COPY that lacks any such entry unless --accept-loss says
so. It exits 7 if a daemon holds the lock longer than --lock-wait: stop
the daemon first.`,
		examples: []string{
			"phaseshift inspect /var/run/ipamd/state.json      # lists the kept copies",
			"phaseshift restore-kept --replace-intact /var/run/ipamd/state.json state.json.before-delete-20261201T052448.070390553Z",
		},
		locks:    lockAlways,
		refused:  "PATH is intact or newer (--replace-intact), or holds entries COPY lacks (--accept-loss)",
		addFlags: o.AddFlags,
		run:      func(ctx context.Context, e *env, args []string) error { return runRestoreKept(ctx, e, o, args) },
	}
}

func runRestoreKept(ctx context.Context, e *env, o *restoreKeptOptions, args []string) error {
	if err := wantArgs(args, "PATH", "COPY"); err != nil {
		return err
	}
	path := filepath.Clean(args[0])
	c, err := findKept(path, args[1])
	if err != nil {
		return err
	}
	return underLock(ctx, e, path, o.lockWait, func(l rawfile.Locked) error {
		return restoreKeptLocked(ctx, e, o, l, c)
	})
}

func restoreKeptLocked(ctx context.Context, e *env, o *restoreKeptOptions, l rawfile.Locked, c rawfile.Copy) error {
	cur := judge(l.Read(ctx, rawfile.Options{}), 0)
	// Kept copies change only under the checkpoint's lock, which this holds.
	from := readFile(ctx, c.Path, 0, false)
	if !c.HasFile {
		return fail(exitCorrupt, "cannot restore %s: it is a journal kept without the file it followed, which cannot be replayed over anything", c.Journal)
	}
	if from.verdict != verdictIntact {
		return fail(from.code(), "cannot restore %s: %s", c.Path, from.reason)
	}
	if cur.verdict == verdictNewer && !o.replaceIntact {
		return refuseNewer(cur)
	}
	if cur.verdict == verdictIntact && !o.replaceIntact {
		d := compare(cur, from, false)
		return fail(exitRefused, "%s is intact (seq %d); the copy %s (seq %d) differs from it by %d entries only in %s, %d only in the copy and %d with other values (see them with phaseshift diff %s %s). "+
			"If you mean to replace it (undo a repair), pass --replace-intact", cur.Path, seqOf(cur), c.Path, seqOf(from),
			len(d.OnlyInA), filepath.Base(cur.Path), len(d.OnlyInB), len(d.Different), cur.Path, c.Path)
	}
	loss := lacks(from, cur)
	if err := refuseLoss(from, cur, loss, o.acceptLoss, ""); err != nil {
		return err
	}
	r := &repaired{Path: cur.Path, Action: "restore-kept", From: c.Path, Replaced: cur.verdict, Lacks: loss}
	h := from.Meta
	if mark := keptMark(from, cur); mark != "" {
		h = marked(h, mark, cur)
	}
	if err := replace(ctx, l, r, cur, h, from.Entries, seqOf(from)); err != nil {
		return err
	}
	return printRepaired(e, r, fmt.Sprintf("restored %s from %s (seq %d, %d entries), written as seq %d", r.Path, c.Path, seqOf(from), r.Entries, r.Header.Seq))
}

// findKept finds the copy kept beside path that name (a path, or a name
// beside path; the copy's file or its journal) names.
func findKept(path, name string) (rawfile.Copy, error) {
	if !strings.ContainsRune(name, filepath.Separator) {
		name = filepath.Join(filepath.Dir(path), name)
	}
	name = filepath.Clean(name)
	copies, err := engine.Kept(path)
	if err != nil {
		return rawfile.Copy{}, fail(exitUnreadable, "listing the copies kept beside %s: %v", path, err)
	}
	for _, c := range copies {
		if name == c.Path || name == c.Journal {
			return c, nil
		}
	}
	return rawfile.Copy{}, usageError("COPY %s is not a copy kept beside %s (PATH.before-<verb>-<time> or PATH.corrupt-<time>): see them with phaseshift inspect %s", name, path, path)
}
