package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is one of the command's verbs. Each verb file has a
// newXCommand function that makes its typed options, binds addFlags and
// run to them, and returns the command; commands lists them all.
type command struct {
	name     string
	summary  string // one line, for phaseshift --help
	args     string // the positional arguments, for the usage line
	about    string // what it does, for its --help
	examples []string
	addFlags func(fs *flag.FlagSet) // registers the verb's flags on its options; nil if none
	run      func(ctx context.Context, e *env, args []string) error
	// locks says whether the verb takes the checkpoint's lock, and so may
	// exit 7; refused says when it refuses, exiting 9 (and the flag that
	// overrides it, if any), "" if it never does. The meanings of those
	// statuses name the verbs from these.
	locks   lockUse
	refused string
}

// commands returns every verb, in the order --help lists them: the ones
// that read, then the repairs, then the fleet's gate. This is the one
// list of verbs.
func commands() []*command {
	return []*command{
		newVerifyCommand(),
		newInspectCommand(),
		newListCommand(),
		newGetCommand(),
		newDiffCommand(),
		newReportCommand(),
		newDeleteCommand(),
		newPruneOrphansCommand(),
		newRestorePrevCommand(),
		newRestoreKeptCommand(),
		newRepairJournalCommand(),
		newResealCommand(),
		newClearMarkCommand(),
		newDiscardEmptyCommand(),
		newGateCommand(),
	}
}

// find returns the verb called name, or nil.
func find(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// env is where a verb reads and writes, and how.
type env struct {
	in          io.Reader // prune-orphans' confirmation
	out, errOut io.Writer
	json        bool
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		if len(args) > 1 {
			if c := find(args[1]); c != nil {
				fmt.Fprint(stdout, verbHelp(c))
				return exitOK
			}
		}
		fmt.Fprint(stdout, usage())
		return exitOK
	}
	c := find(args[0])
	if c == nil {
		fmt.Fprintf(stderr, "phaseshift: unknown verb %q: run phaseshift --help for the list\nusage: phaseshift VERB [flags] ARGS\n", args[0])
		return exitUsage
	}
	// Everything a verb prints passes one filter (see printable).
	out, errOut := newPrintable(stdout), newPrintable(stderr)
	defer out.Flush()
	defer errOut.Flush()
	e := &env{in: stdin, out: out, errOut: errOut}
	pos, err := parseFlags(newFlagSet(c, &e.json), args[1:])
	if err == errHelp {
		fmt.Fprint(stdout, verbHelp(c))
		return exitOK
	}
	if err == nil {
		err = c.run(ctx, e, pos)
	}
	return report(e, c, err)
}

// report prints err, if any, and returns the exit status it carries.
func report(e *env, c *command, err error) int {
	if err == nil {
		return exitOK
	}
	st, ok := err.(*status)
	if !ok {
		st = &status{code: exitFailed, msg: err.Error()}
	}
	if st.msg != "" {
		fmt.Fprintf(e.errOut, "phaseshift %s: %s\n", c.name, st.msg)
	}
	if st.code == exitUsage {
		fmt.Fprintf(e.errOut, "usage: phaseshift %s %s (phaseshift %s --help for more)\n", c.name, c.args, c.name)
	}
	return st.code
}

func usage() string {
	var b strings.Builder
	b.WriteString("phaseshift checks, shows and repairs a phaseshift checkpoint file, and gates a fleet's rollout.\n\nusage: phaseshift VERB [flags] ARGS\n\nverbs:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-15s %s\n", c.name, c.summary)
	}
	b.WriteString(`
Every verb takes --json for machine-readable output (stdout then holds
only JSON; errors go to stderr as text) and --help for its flags and
examples. Keys are given as JSON: '"c1"' for a string key,
'{"network":"n1","containerID":"c1","ifName":"eth0"}' for a struct key.

When a daemon holds the checkpoint's lock and serves its control socket
(PATH.control.sock, see package migrate/control), list, get and delete go
through it to the daemon's own Store; the other repairs need the daemon
stopped.

exit status:
`)
	printExitStatuses(&b)
	b.WriteString(`
examples:
  phaseshift verify /var/run/ipamd/state.json && echo intact
  phaseshift inspect /var/run/ipamd/state.json
  phaseshift list /var/run/ipamd/state.json | jq -c 'select(.value.ips | index("10.0.0.7"))'
  phaseshift diff /var/run/ipamd/state.json /var/run/ipamd/state.json.prev
  phaseshift delete /var/run/ipamd/state.json '{"network":"aws-cni","containerID":"c1","ifName":"eth0"}'
  phaseshift gate --prometheus http://prometheus.monitoring:9090 3
`)
	return b.String()
}

func verbHelp(c *command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: phaseshift %s [flags] %s\n\n%s\n", c.name, c.args, c.about)
	var json bool
	fs := newFlagSet(c, &json)
	b.WriteString("\nflags:\n")
	fs.SetOutput(&b)
	fs.PrintDefaults()
	b.WriteString("\nexamples:\n")
	for _, ex := range c.examples {
		fmt.Fprintf(&b, "  %s\n", ex)
	}
	b.WriteString("\nexit status:\n")
	printExitStatuses(&b)
	return b.String()
}
