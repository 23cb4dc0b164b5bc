package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Exit statuses. They are the command's interface to scripts and node
// problem detectors: never renumber one.
const (
	exitOK         = 0
	exitNo         = 1 // no such key; the files differ
	exitUsage      = 2
	exitMissing    = 3
	exitCorrupt    = 4
	exitNewer      = 5
	exitUnreadable = 6
	exitLocked     = 7
	exitFailed     = 8
)

// status is an error that carries an exit status. An empty msg prints
// nothing (the verb has said it on stdout).
type status struct {
	code int
	msg  string
}

func (s *status) Error() string { return s.msg }

func fail(code int, format string, args ...any) error {
	return &status{code: code, msg: fmt.Sprintf(format, args...)}
}

func usageError(format string, args ...any) error {
	return fail(exitUsage, format, args...)
}

// options are every verb's flags; each verb declares the ones it takes.
type options struct {
	json           bool
	schema         int
	ignoreChecksum bool
	values         bool
	lockWait       time.Duration
	handEdited     bool
	replaceIntact  bool
}

var errHelp = errors.New("help")

func newFlagSet(name string, v *verb, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&o.json, "json", false, "print JSON for machines instead of text")
	for _, f := range v.flags {
		flagDecls[f](fs, o)
	}
	return fs
}

// parseFlags parses args, allowing flags after the positional arguments
// (phaseshift get PATH KEY --json); everything after "--" is positional,
// for a key that starts with "-" (a negative number).
func parseFlags(name string, v *verb, args []string) (*options, []string, error) {
	o := &options{}
	fs := newFlagSet(name, v, o)
	var rest []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, rest = args[:i], args[i+1:]
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return o, nil, errHelp
			}
			msg := err.Error()
			if strings.Contains(msg, "flag provided but not defined: -") {
				msg += " (a key that starts with \"-\" goes after \"--\": phaseshift " + name + " PATH -- -1)"
			}
			return o, nil, usageError("%s", msg)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	return o, append(pos, rest...), nil
}

// flagDecls declares each flag a verb may take (verb.flags names them).
var flagDecls = map[string]func(fs *flag.FlagSet, o *options){
	"schema": func(fs *flag.FlagSet, o *options) {
		fs.IntVar(&o.schema, "schema", 0, "the value schema the daemon knows (its checkpoint.WithSchema): a file of a higher schema is reported as newer, exit 5")
	},
	"ignore-checksum": func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.ignoreChecksum, "ignore-checksum", false, "read a file whose checksum fails (a hand edit) as if it held; its layout must still be the writer's")
	},
	"values": func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.values, "values", false, "print the values of the entries that differ, not only their keys")
	},
	"lock-wait": func(fs *flag.FlagSet, o *options) {
		fs.DurationVar(&o.lockWait, "lock-wait", defaultLockWait, "how long to wait for a process that holds the checkpoint's lock before failing (exit 7)")
	},
	"i-edited-this-file-by-hand": func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.handEdited, "i-edited-this-file-by-hand", false, "confirm that the file's content is what you want the daemon to restore")
	},
	"replace-intact": func(fs *flag.FlagSet, o *options) {
		fs.BoolVar(&o.replaceIntact, "replace-intact", false, "replace the file even if it is intact (it then loses the writes made since .prev)")
	},
}

const defaultLockWait = 5 * time.Second

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
