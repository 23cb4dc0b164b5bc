package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// clearMarkOptions are clear-mark's flags.
type clearMarkOptions struct {
	lockWait      time.Duration
	acceptLoss    bool
	legacyCurrent bool
}

func (o *clearMarkOptions) AddFlags(fs *flag.FlagSet) {
	addLockWaitFlag(fs, &o.lockWait)
	fs.BoolVar(&o.acceptLoss, "accept-loss", false, "serve the file as it is: the commits its mark says it lacks are lost")
	fs.BoolVar(&o.legacyCurrent, "legacy-current", false, "this node did not run phase 3 since the file's last good save, so legacy holds every acknowledged write: let phase 1 or 2 rebuild the file from it")
}

func newClearMarkCommand() *command {
	o := &clearMarkOptions{}
	return &command{
		name:    "clear-mark",
		summary: "say how a daemon goes on from a file marked as lacking acknowledged commits",
		args:    "(--accept-loss | --legacy-current) PATH",
		about: `clear-mark is the operator's word on a checkpoint whose header is marked
"behind": restore-prev, restore-kept and repair-journal mark a file that
lacks acknowledged commits, and a daemon's phase 3 refuses it, as phases 1
and 2 do over an explicit legacy that phase 3 left stale (neither side
then holds every acknowledged write). Without a flag it shows the mark and
exits 9. --legacy-current says that this node did not run phase 3 since
the file's last good save, so that legacy holds every acknowledged write:
it records the file as written by phase 2, keeping the mark, and the next
phase-1 or phase-2 start rebuilds it from legacy, losing nothing.
--accept-loss removes the mark: the daemon serves the file as it is (and,
over an explicit legacy, rewrites legacy from it), and the commits it
lacks are lost. Under the checkpoint's lock, durably, with a seq above the
file's; the file it replaces is kept as PATH.before-clear-mark-<time>.`,
		locks:   lockAlways,
		refused: "PATH is marked and neither --accept-loss nor --legacy-current says how to go on",
		examples: []string{
			"phaseshift clear-mark /var/run/ipamd/state.json",
			"phaseshift clear-mark --legacy-current /var/run/ipamd/state.json",
			"phaseshift clear-mark --accept-loss /var/run/ipamd/state.json",
		},
		addFlags: o.AddFlags,
		run:      func(ctx context.Context, e *env, args []string) error { return runClearMark(ctx, e, o, args) },
	}
}

func runClearMark(ctx context.Context, e *env, o *clearMarkOptions, args []string) error {
	if err := wantArgs(args, "PATH"); err != nil {
		return err
	}
	if o.acceptLoss && o.legacyCurrent {
		return usageError("--accept-loss and --legacy-current say different things: give one")
	}
	return underLock(ctx, e, args[0], o.lockWait, func(l rawfile.Locked) error {
		return clearMarkLocked(ctx, e, o, l)
	})
}

func clearMarkLocked(ctx context.Context, e *env, o *clearMarkOptions, l rawfile.Locked) error {
	j := judge(l.Read(ctx, rawfile.Options{}), 0)
	if j.verdict != verdictIntact {
		return fail(j.code(), "cannot clear its mark: %s", j.reason)
	}
	if j.Meta.Behind == "" {
		r := &repaired{Path: j.Path, Action: "clear-mark", Reason: "the file carries no mark: nothing to clear, nothing changed", Header: j.header(), Entries: len(j.Entries)}
		return printRepaired(e, r, fmt.Sprintf("%s carries no mark: nothing to clear, nothing changed", j.Path))
	}
	r := &repaired{Path: j.Path, Action: "clear-mark", Replaced: verdictIntact}
	h := j.Meta
	switch {
	case o.acceptLoss:
		h.Behind = ""
	case o.legacyCurrent:
		h.Phase = "migrate"
	default:
		return fail(exitRefused, "%s is marked: %s.\n"+
			"  if this node did not run phase 3 since, legacy holds every acknowledged write: phaseshift clear-mark --legacy-current %s, and start phase 1 or 2, which rebuilds the file from it;\n"+
			"  otherwise phaseshift clear-mark --accept-loss %s serves the file as it is, and what it lacks is lost. Nothing changed",
			j.Path, oneLine(j.Meta.Behind), j.Path, j.Path)
	}
	if err := replace(ctx, l, r, j, h, j.Entries, seqOf(j)); err != nil {
		return err
	}
	what := "its mark removed: a daemon serves it as it is"
	if o.legacyCurrent {
		what = "recorded as written by phase 2: the next phase-1 or phase-2 start rebuilds it from legacy"
	}
	return printRepaired(e, r, fmt.Sprintf("%s: %s (now seq %d)", r.Path, what, r.Header.Seq))
}
