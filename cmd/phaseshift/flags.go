package main

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"time"
)

// The flags that several verbs take, each registered by the verb's own
// options (its AddFlags) through these functions, so that a flag has one
// name, default and help text wherever it appears.

func addSchemaFlag(fs *flag.FlagSet, p *int) {
	fs.IntVar(p, "schema", 0, "the value schema the daemon knows (its checkpoint.WithSchema): a file of a higher schema is reported as newer, exit 5")
}

func addIgnoreChecksumFlag(fs *flag.FlagSet, p *bool) {
	fs.BoolVar(p, "ignore-checksum", false, "read a file whose checksum fails (a hand edit) as if it held; its layout must still be the writer's")
}

const defaultLockWait = 5 * time.Second

func addLockWaitFlag(fs *flag.FlagSet, p *time.Duration) {
	fs.DurationVar(p, "lock-wait", defaultLockWait, "how long to wait for a process that holds the checkpoint's lock before failing (exit 7)")
}

func addReplaceIntactFlag(fs *flag.FlagSet, p *bool, loses string) {
	fs.BoolVar(p, "replace-intact", false, "replace the file even if it is intact or written by a newer phaseshift (it then loses "+loses+")")
}

func addAcceptLossFlag(fs *flag.FlagSet, p *bool, what string) {
	fs.BoolVar(p, "accept-loss", false, "put "+what+" back even though it lacks entries the file it replaces holds, as far as that file reads (they are lost; the file is kept)")
}

func addFileFlag(fs *flag.FlagSet, p *bool) {
	fs.BoolVar(p, "file", false, "read the file even when a daemon holds the lock and serves a control socket (by default the daemon's Store is read through it)")
}

var errHelp = errors.New("help")

// newFlagSet returns the flag set of c, with --json (every verb's) bound
// to *json and the verb's own flags bound to its options.
func newFlagSet(c *command, json *bool) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(json, "json", false, "print JSON for machines instead of text")
	if c.addFlags != nil {
		c.addFlags(fs)
	}
	return fs
}

// parseFlags parses args into fs, allowing flags after the positional
// arguments (phaseshift get PATH KEY --json); everything after "--" is
// positional, for a key that starts with "-" (a negative number).
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, rest = args[:i], args[i+1:]
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, errHelp
			}
			msg := err.Error()
			if strings.Contains(msg, "flag provided but not defined: -") {
				msg += " (a key that starts with \"-\" goes after \"--\": phaseshift " + fs.Name() + " PATH -- -1)"
			}
			return nil, usageError("%s", msg)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	return append(pos, rest...), nil
}

// wantArgs checks the number of positional arguments.
func wantArgs(args []string, names ...string) error {
	if len(args) < len(names) {
		return usageError("missing %s", strings.Join(names[len(args):], " and "))
	}
	if len(args) > len(names) {
		return usageError("too many arguments: want %s, got %d arguments (quote a key that has spaces)", strings.Join(names, " "), len(args))
	}
	for i, a := range args {
		if a == "" {
			return usageError("%s is empty", names[i])
		}
	}
	return nil
}
