package main

import (
	"fmt"
	"io"
)

// Exit statuses. They are the command's interface to scripts and node
// problem detectors: never renumber one. exitStatuses says what each means;
// --help prints that table, and the README's table must equal it (a test
// compares them).
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
var exitStatuses = []exitStatus{
	{exitOK, "intact, or done (diff: no differences; gate: the fleet may move to the phase)"},
	{exitNo, "no such key (get, delete), or the files differ (diff)"},
	{exitUsage, "usage: a missing or bad argument, flag or key JSON"},
	{exitMissing, "missing: no checkpoint at the path"},
	{exitCorrupt, "corrupt: checksum mismatch, truncated, a key twice, a damaged journal, not a checkpoint"},
	{exitNewer, "newer: a newer file format, or a value schema above --schema"},
	{exitUnreadable, "unreadable: permissions (of the file, or of a running daemon's control socket), a directory, a symlink, an I/O error"},
	{exitLocked, "locked: a daemon holds the checkpoint's lock and serves no control socket (delete), or the repair needs it stopped (restore-prev, restore-kept, repair-journal, reseal)"},
	{exitFailed, "a repair failed (the message says which step), or another error (writing the output, opening the lock file, a daemon's control socket that failed or is busy, or no daemon to ask: report, prune-orphans)"},
	{exitRefused, "refused: the repair would lose acknowledged writes, and the flag that says you mean it is missing (restore-prev, restore-kept: --replace-intact; repair-journal: --drop-damaged-records), or prune-orphans was not confirmed; nothing changed. gate: the fleet may not move to the phase (the blocking nodes are listed), or the data did not become fresh within --timeout"},
}

// printExitStatuses writes the table, one status a line, indented.
func printExitStatuses(w io.Writer) {
	for _, s := range exitStatuses {
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
