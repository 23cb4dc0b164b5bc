package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/phaseshift/phaseshift/migrate/control"
)

// The restore's report of a running daemon (its control socket, served
// with control.WithReport): report lists the keys of the entries its
// restore left orphaned or diverged, still as it left them, and
// prune-orphans deletes the orphans through the daemon's Store once the
// operator confirms the list, so that nobody types a key.

func newReportCommand() *command {
	return &command{
		name:    "report",
		summary: "a running daemon's last restore: its report, and the orphaned and diverged keys it left",
		args:    "PATH",
		about: `report asks the daemon that holds PATH's lock, through its control socket
(PATH.control.sock, served with control.WithReport), for the report of its
last restore, and lists the keys of the entries that restore left orphaned
(only the checkpoint had them: kept, because the runtime's listing could
have missed them) or diverged (both sides had them, with other values) that
are still as it left them: a write or delete of one since settles it. The
keys are the JSON get and delete take; prune-orphans deletes the orphans
without typing them. It needs the daemon running (the report lives in it;
its log has it too) and exits 8 when none answers.`,
		examples: []string{
			"phaseshift report /var/run/ipamd/state.json",
			"phaseshift report --json /var/run/ipamd/state.json | jq -c '.orphaned[]'",
		},
		run: runReport,
	}
}

// pruneOptions are prune-orphans' flags.
type pruneOptions struct {
	yes bool
}

func (o *pruneOptions) AddFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.yes, "yes", false, "prune the orphans report lists without asking (a script that has read them)")
}

func newPruneOrphansCommand() *command {
	o := &pruneOptions{}
	return &command{
		name:    "prune-orphans",
		summary: "delete a running daemon's orphans, once you confirm its list, through its Store",
		args:    "PATH",
		about: `prune-orphans lists the orphans of the last restore of the daemon that holds
PATH's lock, as report does, asks you to confirm them (type yes; --yes does
not ask), and has the daemon delete them through its own Store, in one
commit, durable before it answers. The daemon judges each again in that
commit: an orphan written since the list was made (the runtime's ADD came
again) is no longer an orphan, and is kept, with its reason; so is one
deleted since. Not confirmed, it prunes nothing and exits 9. An orphan is
an entry only the checkpoint had when a runtime's listing did not have it:
prune it when the pod is gone. It needs the daemon running with its
control socket, and exits 8 when none answers.`,
		examples: []string{
			"phaseshift prune-orphans /var/run/ipamd/state.json",
			"kubectl -n kube-system exec -it $POD -- phaseshift prune-orphans /var/run/ipamd/state.json",
			"kubectl -n kube-system exec $POD -- phaseshift prune-orphans --yes /var/run/ipamd/state.json",
		},
		refused:  "its orphans were not confirmed (--yes)",
		addFlags: o.AddFlags,
		run:      func(ctx context.Context, e *env, args []string) error { return runPruneOrphans(ctx, e, o, args) },
	}
}

// reportJSON is report's --json output.
type reportJSON struct {
	Path     string            `json:"path"`
	Socket   string            `json:"socket"`
	PID      int               `json:"pid,omitempty"`
	Report   string            `json:"report"`
	Orphaned []json.RawMessage `json:"orphaned"`
	Diverged []json.RawMessage `json:"diverged"`
}

// askReport returns the running daemon of path and its restore's report.
func askReport(ctx context.Context, path string) (*daemon, control.RestoreReport, error) {
	d := liveDaemon(path)
	if d == nil {
		return nil, control.RestoreReport{}, fail(exitFailed, "no daemon holds the lock of %s and serves its control socket %s: the report of a restore lives in the daemon that ran it (and in its log)", path, control.SocketPath(path))
	}
	r, err := d.client().Report(ctx)
	switch {
	case notServing(err):
		return nil, r, fail(exitFailed, "nothing answers on %s (left by a daemon that is gone): the report of a restore lives in the daemon that ran it", d.socket)
	case errors.Is(err, control.ErrNoReport):
		return nil, r, fail(exitFailed, "%s serves no restore report on %s: it gave control.Listen no control.WithReport; its restore log line has the keys", d.who(), d.socket)
	case err != nil:
		return nil, r, d.liveError(path, "", err)
	}
	return d, r, nil
}

func runReport(ctx context.Context, e *env, args []string) error {
	if err := wantArgs(args, "PATH"); err != nil {
		return err
	}
	d, r, err := askReport(ctx, args[0])
	if err != nil {
		return err
	}
	if e.json {
		return json.NewEncoder(e.out).Encode(reportJSON{Path: args[0], Socket: d.socket, PID: d.holder.PID, Report: r.Line,
			Orphaned: nonNil(r.Orphaned), Diverged: nonNil(r.Diverged)})
	}
	w := bufio.NewWriter(e.out)
	fmt.Fprintf(w, "%s, last restore: %s\n", d.who(), r.Line)
	fmt.Fprintf(w, "still as that restore left them: %d orphaned, %d diverged\n", len(r.Orphaned), len(r.Diverged))
	for _, k := range r.Orphaned {
		fmt.Fprintf(w, "  orphaned %s\n", k)
	}
	for _, k := range r.Diverged {
		fmt.Fprintf(w, "  diverged %s\n", k)
	}
	if len(r.Orphaned) > 0 {
		fmt.Fprintf(w, "prune the orphans whose pods are gone: phaseshift prune-orphans %s\n", args[0])
	}
	if len(r.Orphaned)+len(r.Diverged) > 0 {
		fmt.Fprintf(w, "see one: phaseshift get %s KEY\n", args[0])
	}
	return w.Flush()
}

func nonNil(keys []json.RawMessage) []json.RawMessage {
	if keys == nil {
		return []json.RawMessage{}
	}
	return keys
}

// prunedJSON is prune-orphans' --json output.
type prunedJSON struct {
	Path   string            `json:"path"`
	Socket string            `json:"socket"`
	Pruned []json.RawMessage `json:"pruned"`
	Kept   []notPrunedJSON   `json:"kept"`
}

type notPrunedJSON struct {
	Key    json.RawMessage `json:"key"`
	Reason string          `json:"reason"`
}

func runPruneOrphans(ctx context.Context, e *env, o *pruneOptions, args []string) error {
	if err := wantArgs(args, "PATH"); err != nil {
		return err
	}
	d, r, err := askReport(ctx, args[0])
	if err != nil {
		return err
	}
	if len(r.Orphaned) == 0 {
		if e.json {
			return json.NewEncoder(e.out).Encode(prunedJSON{Path: args[0], Socket: d.socket, Pruned: []json.RawMessage{}, Kept: []notPrunedJSON{}})
		}
		fmt.Fprintf(e.out, "%s has no orphan left by its last restore: nothing to prune\n", d.who())
		return nil
	}
	if !o.yes {
		if err := confirm(e, d, r.Orphaned); err != nil {
			return err
		}
	}
	res, err := d.client().PruneOrphans(ctx, r.Orphaned)
	if err != nil {
		return d.liveError(args[0], "", err)
	}
	out := prunedJSON{Path: args[0], Socket: d.socket, Pruned: []json.RawMessage{}, Kept: []notPrunedJSON{}}
	for _, p := range res {
		if p.Pruned {
			out.Pruned = append(out.Pruned, p.Key)
		} else {
			out.Kept = append(out.Kept, notPrunedJSON{p.Key, p.Reason})
		}
	}
	if e.json {
		return json.NewEncoder(e.out).Encode(out)
	}
	w := bufio.NewWriter(e.out)
	for _, k := range out.Pruned {
		fmt.Fprintf(w, "pruned %s\n", k)
	}
	for _, k := range out.Kept {
		fmt.Fprintf(w, "kept %s: %s\n", k.Key, k.Reason)
	}
	fmt.Fprintf(w, "pruned %d of %d orphans through %s's control socket %s: its Store's Update made it durable\n", len(out.Pruned), len(res), d.who(), d.socket)
	return w.Flush()
}

// confirm shows the orphans on stderr and reads the operator's answer
// from stdin: yes prunes them, anything else (or nothing) refuses.
func confirm(e *env, d *daemon, orphans []json.RawMessage) error {
	fmt.Fprintf(e.errOut, "%s's last restore left %d orphans still as it left them:\n", d.who(), len(orphans))
	for _, k := range orphans {
		fmt.Fprintf(e.errOut, "  %s\n", k)
	}
	fmt.Fprintf(e.errOut, "delete them through the daemon's Store? (an orphan written since is kept) [yes/no]: ")
	answer, err := bufio.NewReader(e.in).ReadString('\n')
	if err != nil {
		fmt.Fprintln(e.errOut) // no answer, and no newline after the question
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return fail(exitRefused, "not confirmed: nothing was pruned (type yes, or pass --yes once you have read the list)")
}
