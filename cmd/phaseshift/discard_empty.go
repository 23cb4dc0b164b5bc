package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/phaseshift/phaseshift/internal/engine"
	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// discardEmptyOptions are discard-empty's flags.
type discardEmptyOptions struct {
	lockWait   time.Duration
	acceptLoss bool
}

func (o *discardEmptyOptions) AddFlags(fs *flag.FlagSet) {
	addLockWaitFlag(fs, &o.lockWait)
	fs.BoolVar(&o.acceptLoss, "accept-loss", false, "discard the empty file even though its journal holds records: they follow the file's lost content, cannot be replayed without it, and are lost (they are kept)")
}

func newDiscardEmptyCommand() *command {
	o := &discardEmptyOptions{}
	return &command{
		name:    "discard-empty",
		summary: "move an empty (0-byte) checkpoint aside, so that a daemon starts as with no checkpoint",
		args:    "PATH",
		about: `discard-empty moves aside a checkpoint file of 0 bytes: what ': > PATH'
leaves, or a crash between the file's creation and its first write on some
file systems. An empty file holds nothing, so nothing is lost, but a daemon
refuses it over a volatile registry and in phase 3, as it refuses every
unreadable sole copy. Under the checkpoint's lock, it keeps the file (and
its journal, if any) as PATH.before-discard-empty-<time>, then removes
them, durably: a daemon then starts as with no checkpoint (phases 0-2
restore from legacy; phase 3 starts empty).

It refuses (exit 9, nothing changed) a file that is not empty (see it with
phaseshift inspect); a PATH.prev that reads intact (phaseshift
restore-prev PATH puts it back, marked as lacking the last save, and loses
nothing it holds); and a journal that holds records, which follow the
file's lost content and are lost with it, unless --accept-loss says so. It
exits 7 if a daemon holds the lock longer than --lock-wait: stop the daemon
first.`,
		examples: []string{
			"phaseshift discard-empty /var/run/vmproxy/state.json",
			"phaseshift discard-empty --lock-wait 30s /var/run/vmproxy/state.json",
		},
		locks:    lockAlways,
		refused:  "PATH is not empty, PATH.prev is intact (restore-prev puts it back), or its journal holds records (--accept-loss)",
		addFlags: o.AddFlags,
		run:      func(ctx context.Context, e *env, args []string) error { return runDiscardEmpty(ctx, e, o, args) },
	}
}

func runDiscardEmpty(ctx context.Context, e *env, o *discardEmptyOptions, args []string) error {
	if err := wantArgs(args, "PATH"); err != nil {
		return err
	}
	return underLock(ctx, e, args[0], o.lockWait, func(l rawfile.Locked) error {
		return discardEmptyLocked(ctx, e, o, l)
	})
}

func discardEmptyLocked(ctx context.Context, e *env, o *discardEmptyOptions, l rawfile.Locked) error {
	cur := judge(l.Read(ctx, rawfile.Options{}), 0)
	if err := discardable(ctx, cur, o.acceptLoss); err != nil {
		return err
	}
	r := &repaired{Path: cur.Path, Action: "discard-empty", Replaced: "empty file"}
	var err error
	if r.Kept, err = l.KeepCopy(ctx, r.Action); err != nil {
		return fail(exitFailed, "keeping a copy of the file before discarding it, nothing changed: %v", err)
	}
	if err := l.Discard(ctx); err != nil {
		return fail(exitFailed, "discarding %s: %v; it is kept as %s", cur.Path, err, r.Kept)
	}
	r.Changed = true
	// Best effort: the repair is done, and a copy left over is harmless.
	r.Pruned, _ = l.PruneKept(ctx)
	if e.json {
		return printRepaired(e, r, "")
	}
	fmt.Fprintf(e.out, "moved the empty file %s aside as %s: a daemon now starts as with no checkpoint (phases 0-2 restore from legacy; phase 3 starts empty)\n", cur.Path, r.Kept)
	for _, p := range r.Pruned {
		fmt.Fprintf(e.out, "removed the oldest copy kept by a repair, %s: a checkpoint keeps its %d newest\n", p, engine.KeptBound)
	}
	return nil
}

// discardable checks that cur, read under the lock, is an empty file that
// discard-empty may move aside losing nothing: nil if so, the refusal
// otherwise.
func discardable(ctx context.Context, cur *judged, acceptLoss bool) error {
	if cur.Size < 0 {
		return fail(cur.code(), "cannot discard %s: %s", cur.Path, cur.reason)
	}
	if !cur.empty() {
		return fail(exitRefused, "%s is not empty (%d bytes, %s): discard-empty moves aside only an empty file, which holds nothing. "+
			"See what it holds with phaseshift inspect %s. Nothing changed", cur.Path, cur.Size, cur.verdict, cur.Path)
	}
	if prev := readFile(ctx, engine.NamesOf(cur.Path).Prev, 0, false); prev.verdict == verdictIntact {
		return fail(exitRefused, "%s is empty, and %s is intact (seq %d, %s): put it back with phaseshift restore-prev %s, which loses nothing it holds; "+
			"without a file a daemon would not see it. Nothing changed", cur.Path, prev.Path, seqOf(prev), prev.entriesText(), cur.Path)
	}
	if n := cur.Journal.All; n.Records > 0 && !acceptLoss {
		return fail(exitRefused, "%s is empty, but its journal %s holds %s, which follow the file's lost content and cannot be replayed without it. "+
			"To discard both (they are kept as PATH.before-discard-empty-<time>), pass --accept-loss. Nothing changed", cur.Path, cur.Journal.Path, runJSON(n).span())
	}
	return nil
}
