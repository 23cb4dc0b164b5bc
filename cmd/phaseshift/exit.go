package main

import (
	"fmt"
	"io"
	"strings"
)

// Exit statuses. They are the command's interface to scripts and node
// problem detectors: never renumber one. exitStatuses says what each means;
// --help prints that table, and the table in docs/command.md must equal it
// (a test compares them).
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
	exitRefused    = 9
)

// exitStatus is one row of the table of exit statuses.
type exitStatus struct {
	code    int
	meaning string
}

// exitStatuses is the one table of what each exit status means, in order.
// The verbs that exit 7 and 9 are named from the list of verbs
// (commands), each by what its command says of itself (locks, refused).
func exitStatuses() []exitStatus {
	return []exitStatus{
		{exitOK, "intact, or done (diff: no differences; gate: the fleet may move to the phase)"},
		{exitNo, "no such key (get, delete), or the files differ (diff)"},
		{exitUsage, "usage: a missing or bad argument, flag or key JSON"},
		{exitMissing, "missing: no checkpoint at the path"},
		{exitCorrupt, "corrupt: checksum mismatch, truncated, empty (0 bytes), a key twice, a damaged journal, not a checkpoint"},
		{exitNewer, "newer: a newer file format, or a value schema above --schema"},
		{exitUnreadable, "unreadable: permissions (of the file, or of a running daemon's control socket), a directory, a symlink, an I/O error"},
		{exitLocked, "locked: a daemon holds the checkpoint's lock and serves no control socket (" + verbsThatLock(lockWithoutSocket) + "), or the repair needs it stopped (" + verbsThatLock(lockAlways) + ")"},
		{exitFailed, "a repair failed (the message says which step), or another error (writing the output, opening the lock file, a daemon's control socket that failed or is busy, or no daemon to ask: report, prune-orphans; gate: the Prometheus server failed, or answered empty or malformed)"},
		{exitRefused, "refused, nothing changed (the verb would lose what a file holds without the flag that says you mean it, or its answer is no): " + refusals()},
	}
}

// lockUse is how a verb meets a daemon that holds the checkpoint's lock.
type lockUse int

const (
	lockNever         lockUse = iota // it reads without the lock, or asks the daemon
	lockWithoutSocket                // it takes the lock when no daemon serves a control socket
	lockAlways                       // a repair: it takes the lock
)

// verbsThatLock lists the verbs that take the lock as use says.
func verbsThatLock(use lockUse) string {
	var names []string
	for _, c := range commands() {
		if c.locks == use {
			names = append(names, c.name)
		}
	}
	return strings.Join(names, ", ")
}

// refusals lists the verbs that refuse, each with when.
func refusals() string {
	var parts []string
	for _, c := range commands() {
		if c.refused != "" {
			parts = append(parts, c.name+": "+c.refused)
		}
	}
	return strings.Join(parts, "; ")
}

// printExitStatuses writes the table, one status a line, indented.
func printExitStatuses(w io.Writer) {
	for _, s := range exitStatuses() {
		fmt.Fprintf(w, "  %d  %s\n", s.code, s.meaning)
	}
}

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
