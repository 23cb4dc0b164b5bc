package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/phaseshift/phaseshift/internal/engine"
	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// resealOptions are reseal's flags.
type resealOptions struct {
	lockWait   time.Duration
	handEdited bool
}

func (o *resealOptions) AddFlags(fs *flag.FlagSet) {
	addLockWaitFlag(fs, &o.lockWait)
	fs.BoolVar(&o.handEdited, "i-edited-this-file-by-hand", false, "confirm that the file's content is what you want the daemon to restore")
}

func newResealCommand() *command {
	o := &resealOptions{}
	return &command{
		name:    "reseal",
		summary: "write a fresh checksum after a deliberate hand edit",
		args:    "--i-edited-this-file-by-hand PATH",
		about: `reseal makes a hand-edited checkpoint load again: it reads PATH as if its
checksum held, checks every entry, and writes the same header and entries
with a fresh checksum and a seq above both PATH's and PATH.prev's, under the
checkpoint's lock, durably. A checksum that fails may also mean bit rot or a
torn write, which reseal would make the daemon trust: so it runs only with
--i-edited-this-file-by-hand. Check the edit first with
phaseshift diff --ignore-checksum PATH PATH.prev. The edit must keep the
writer's layout (one entry per line, the header's lines as they were). The
hand-edited file is kept as PATH.before-reseal-<time>; PATH.prev is left as
it is.
With a journal (PATH.journal, checkpoint.WithJournal), its records are
replayed over the edited file and folded into the resealed one, which
records the last record's phase and writer, and the journal is kept with
the copy and removed.`,
		locks: lockAlways,
		examples: []string{
			"phaseshift diff --ignore-checksum --values /var/run/ipamd/state.json /var/run/ipamd/state.json.prev",
			"phaseshift reseal --i-edited-this-file-by-hand /var/run/ipamd/state.json",
		},
		addFlags: o.AddFlags,
		run:      func(ctx context.Context, e *env, args []string) error { return runReseal(ctx, e, o, args) },
	}
}

func runReseal(ctx context.Context, e *env, o *resealOptions, args []string) error {
	if err := wantArgs(args, "PATH"); err != nil {
		return err
	}
	if !o.handEdited {
		return usageError("reseal makes the daemon trust whatever %s holds, and a checksum that fails may be bit rot or a torn write, not your edit: "+
			"check it with phaseshift diff --ignore-checksum %s %s.prev, then pass --i-edited-this-file-by-hand", args[0], args[0], args[0])
	}
	return underLock(ctx, e, args[0], o.lockWait, func(l rawfile.Locked) error {
		return resealLocked(ctx, e, l)
	})
}

func resealLocked(ctx context.Context, e *env, l rawfile.Locked) error {
	j := judge(l.Read(ctx, rawfile.Options{IgnoreChecksum: true}), 0)
	if j.verdict != verdictIntact {
		return fail(j.code(), "cannot reseal: %s", j.reason)
	}
	if j.ChecksumErr == nil {
		r := &repaired{Path: j.Path, Action: "reseal", Reason: "the file is intact already (its checksum holds): nothing to reseal, nothing changed", Header: j.header(), Entries: len(j.Entries)}
		return printRepaired(e, r, fmt.Sprintf("%s is intact already (its checksum holds): nothing to reseal", j.Path))
	}
	r := &repaired{Path: j.Path, Action: "reseal", Replaced: "checksum mismatch"}
	prev := readFile(ctx, engine.NamesOf(j.Path).Prev, 0, false)
	if err := replace(ctx, l, r, j, j.Meta, j.Entries, seqOf(prev)); err != nil {
		return err
	}
	return printRepaired(e, r, fmt.Sprintf("resealed %s: %d entries, now seq %d", r.Path, r.Entries, r.Header.Seq))
}
