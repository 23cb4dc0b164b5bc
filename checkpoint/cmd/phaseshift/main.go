// Command phaseshift checks, shows and repairs a phaseshift checkpoint file
// (package checkpoint) on a node, without knowing the daemon's Go types:
// keys and values are raw JSON.
//
//	go install github.com/phaseshift/phaseshift/checkpoint/cmd/phaseshift@latest
//
//	phaseshift verify PATH                 is it intact? (the exit status says)
//	phaseshift inspect PATH                header, checksum, lock holder, .prev, quarantined copies
//	phaseshift list PATH                   entries as JSON lines, for jq
//	phaseshift get PATH KEY                one entry; KEY is JSON: '"c1"', '{"id":"c1"}'
//	phaseshift diff A B                    entries only in A, only in B, and different
//	phaseshift delete PATH KEY             remove a leaked entry
//	phaseshift restore-prev PATH           put PATH.prev back
//	phaseshift reseal --i-edited-this-file-by-hand PATH   re-checksum after a hand edit
//
// It reads and writes files with package checkpoint's own code (through an
// internal hook), so it reports what a daemon's Load would restore. The
// read-only verbs do not take the checkpoint's lock; the repairs take it, so
// they wait for (and then refuse to race) a daemon that has the file open,
// and each keeps the file it replaces as a quarantined copy
// (PATH.corrupt-<UTC time>) before replacing it durably.
//
// Exit statuses: 0 intact (or done; for diff, no differences), 1 no such
// key (get, delete) or the files differ (diff), 2 usage, 3 missing,
// 4 corrupt, 5 newer format or schema, 6 unreadable (permissions, not a
// regular file), 7 locked by another process, 8 a repair failed or another
// error (writing the output, opening the lock file). verify, inspect, list,
// get, diff and delete exit with the verdict of the file they read when it
// is not intact (diff: A's, then B's); restore-prev with .prev's; reseal
// with that of PATH read as if its checksum held.
//
// # Caveats
//
//   - The command does not know the daemon's value schema: a file of a newer
//     schema than the daemon's reads as intact unless verify or inspect is
//     told the daemon's with --schema. Fields the daemon's types lack, which
//     its Load refuses, cannot be seen without those types.
//   - The read-only verbs read without the lock: each reads the file once,
//     then its journal, so a daemon's save in between can show an older
//     state or a corrupt verdict; run the verb again to confirm.
//   - Keys are matched by their JSON text (compacted), and failing that by
//     their JSON value, so '{"b":1,"a":2}' finds the key the file writes as
//     {"a":2,"b":1}. diff matches keys by text alone.
//   - Whether a process holds the lock comes from /proc/locks (Linux),
//     matched by the lock file's device and inode (on btrfs and overlayfs,
//     whose locks the kernel may list under another device, by inode alone,
//     and inspect says so); where /proc/locks cannot be read, inspect says
//     the holder is unknown rather than guess. It never tries the lock
//     itself: a daemon starting at that instant could fail to get it. The
//     PID written into the lock file names its last holder, who may have
//     exited.
//   - delete and restore-prev and reseal keep the phase, writer and boot ID
//     of the file they write from, and give it a seq above every seq they
//     saw, so that nothing takes the repaired file for an older one.
//   - Error messages name paths, keys and counts, never values; list and get
//     print values, because that is what they are asked for.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// verb is one of the command's subcommands.
type verb struct {
	summary  string
	args     string // the positional arguments, for the usage line
	about    string // what it does, for its --help
	examples []string
	flags    []string // the flags it takes besides --json (see flagDecls)
	run      func(ctx context.Context, e *env, o *options, args []string) error
}

// verbs is filled in by the verb files' init functions.
var verbs = map[string]*verb{}

// env is where a verb writes.
type env struct {
	out, errOut io.Writer
	json        bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "--help", "-help", "help":
		if len(args) > 1 && verbs[args[1]] != nil {
			fmt.Fprint(stdout, verbHelp(args[1], verbs[args[1]]))
			return exitOK
		}
		fmt.Fprint(stdout, usage())
		return exitOK
	}
	v := verbs[name]
	if v == nil {
		fmt.Fprintf(stderr, "phaseshift: unknown verb %q: run phaseshift --help for the list\nusage: phaseshift VERB [flags] ARGS\n", name)
		return exitUsage
	}
	o, pos, err := parseFlags(name, v, args[1:])
	if err == errHelp {
		fmt.Fprint(stdout, verbHelp(name, v))
		return exitOK
	}
	e := &env{out: stdout, errOut: stderr, json: o.json}
	if err == nil {
		err = v.run(ctx, e, o, pos)
	}
	return report(e, name, err)
}

// report prints err, if any, and returns the exit status it carries.
func report(e *env, name string, err error) int {
	if err == nil {
		return exitOK
	}
	st, ok := err.(*status)
	if !ok {
		st = &status{code: exitFailed, msg: err.Error()}
	}
	if st.msg != "" {
		fmt.Fprintf(e.errOut, "phaseshift %s: %s\n", name, st.msg)
	}
	if st.code == exitUsage {
		fmt.Fprintf(e.errOut, "usage: phaseshift %s %s (phaseshift %s --help for more)\n", name, verbs[name].args, name)
	}
	return st.code
}

func usage() string {
	var b strings.Builder
	b.WriteString("phaseshift checks, shows and repairs a phaseshift checkpoint file.\n\nusage: phaseshift VERB [flags] ARGS\n\nverbs:\n")
	names := make([]string, 0, len(verbs))
	for n := range verbs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "  %-13s %s\n", n, verbs[n].summary)
	}
	b.WriteString(`
Every verb takes --json for machine-readable output (stdout then holds
only JSON; errors go to stderr as text) and --help for its flags and
examples. Keys are given as JSON: '"c1"' for a string key,
'{"network":"n1","containerID":"c1","ifName":"eth0"}' for a struct key.

exit status:
  0  intact, or done (diff: no differences)
  1  no such key (get, delete), or the files differ (diff)
  2  usage: a missing or bad argument or flag
  3  missing: no checkpoint at the path
  4  corrupt: checksum mismatch, truncated, a key twice, not a checkpoint
  5  newer: a newer file format, or a schema above --schema
  6  unreadable: permissions, a directory, a symlink, an I/O error
  7  locked: a daemon holds the checkpoint's lock (repairs only)
  8  a repair failed (the message says which step), or another error
     (writing the output, opening the lock file)

examples:
  phaseshift verify /var/run/ipamd/state.json && echo intact
  phaseshift inspect /var/run/ipamd/state.json
  phaseshift list /var/run/ipamd/state.json | jq -c 'select(.value.ip == "10.0.0.7")'
  phaseshift diff /var/run/ipamd/state.json /var/run/ipamd/state.json.prev
  phaseshift delete /var/run/ipamd/state.json '{"network":"aws-cni","containerID":"c1","ifName":"eth0"}'
`)
	return b.String()
}

func verbHelp(name string, v *verb) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: phaseshift %s [flags] %s\n\n%s\n", name, v.args, v.about)
	o := &options{}
	fs := newFlagSet(name, v, o)
	b.WriteString("\nflags:\n")
	fs.SetOutput(&b)
	fs.PrintDefaults()
	b.WriteString("\nexamples:\n")
	for _, ex := range v.examples {
		fmt.Fprintf(&b, "  %s\n", ex)
	}
	b.WriteString("\nexit status: 0 ok, 1 no such key or differences, 2 usage, 3 missing,\n4 corrupt, 5 newer, 6 unreadable, 7 locked, 8 a repair failed or another error.\n")
	return b.String()
}
