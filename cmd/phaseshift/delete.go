package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// deleteOptions are delete's flags.
type deleteOptions struct {
	lockWait time.Duration
}

func (o *deleteOptions) AddFlags(fs *flag.FlagSet) { addLockWaitFlag(fs, &o.lockWait) }

func newDeleteCommand() *command {
	o := &deleteOptions{}
	return &command{
		name:    "delete",
		summary: "remove one entry (a leaked one) from a checkpoint, durably",
		args:    "PATH KEY",
		about: `delete removes the entry of KEY (as JSON, see phaseshift get --help) from
PATH, under the checkpoint's lock, durably. It keeps the file it replaces,
with its journal, as PATH.before-delete-<time> (phaseshift restore-kept
puts it back: a mistaken delete can be undone) and, as every save does, as
PATH.prev; every other entry is written as it was. The file must be intact
(see restore-prev and reseal for one that is not). It exits 1, changing
nothing, if there is no such key.

When a daemon holds the checkpoint's lock and serves its control socket
(PATH.control.sock, package migrate/control), delete sends the delete to
the daemon's own Store through it: the daemon deletes the entry as its own
write, durably, so that its memory and its checkpoint agree afterwards (no
copy is kept then; save the entry first with phaseshift get if you may
want it back). A daemon that holds the lock and serves no socket would not
see a change to its file and would write the entry back at its next save:
delete then waits --lock-wait and exits 7; stop the daemon first.`,
		locks: lockWithoutSocket,
		examples: []string{
			"phaseshift delete /var/run/ipamd/state.json '{\"network\":\"aws-cni\",\"containerID\":\"c1\",\"ifName\":\"eth0\"}'",
			"phaseshift delete --lock-wait 30s /var/run/vmproxy/state.json '\"vm-17\"'",
			"phaseshift get /var/run/vmproxy/state.json '\"vm-17\"' > vm-17.json && phaseshift delete /var/run/vmproxy/state.json '\"vm-17\"'   # a live daemon",
		},
		addFlags: o.AddFlags,
		run:      func(ctx context.Context, e *env, args []string) error { return runDelete(ctx, e, o, args) },
	}
}

func runDelete(ctx context.Context, e *env, o *deleteOptions, args []string) error {
	if err := wantArgs(args, "PATH", "KEY"); err != nil {
		return err
	}
	key, err := parseKey(args[1])
	if err != nil {
		return err
	}
	if d := liveDaemon(args[0]); d != nil {
		if served, err := d.liveDelete(ctx, e, args[0], key); served {
			return err
		}
	}
	return underLock(ctx, e, args[0], o.lockWait, func(l rawfile.Locked) error {
		return deleteLocked(ctx, e, l, key)
	})
}

func deleteLocked(ctx context.Context, e *env, l rawfile.Locked, key rawfile.Key) error {
	j := judge(l.Read(ctx, rawfile.Options{}), 0)
	if j.verdict != verdictIntact {
		return j.failure()
	}
	i, err := findKey(j.Entries, key)
	if err != nil {
		return err
	}
	if i < 0 {
		return noSuchKey(j.Path, key)
	}
	r := &repaired{Path: j.Path, Action: "delete", Key: j.Entries[i].Key, Replaced: verdictIntact}
	if r.Kept, err = l.KeepCopy(ctx, r.Action); err != nil {
		return fail(exitFailed, "keeping a copy of the file before the change, nothing changed: %v", err)
	}
	if err := l.Delete(ctx, j.Meta, r.Key); err != nil {
		return fail(exitFailed, "deleting the entry, the file is unchanged: %v", err)
	}
	if err := finish(ctx, l, r); err != nil {
		return err
	}
	return printRepaired(e, r, fmt.Sprintf("deleted the entry of key %s from %s (now seq %d, %d entries)", r.Key, r.Path, r.Header.Seq, r.Entries))
}
