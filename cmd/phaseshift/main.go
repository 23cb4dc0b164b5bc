// Command phaseshift checks, shows and repairs a phaseshift checkpoint file
// (package checkpoint) on a node, without knowing the daemon's Go types:
// keys and values are raw JSON; and it asks a Prometheus server that
// evaluates metrics/phaseshift.rules.yml whether a fleet may move to the
// next phase (gate).
//
//	go install github.com/phaseshift/phaseshift/cmd/phaseshift@latest
//
//	phaseshift verify PATH                 is it intact? (the exit status says)
//	phaseshift inspect PATH                header, checksum, journal, lock holder, .prev, kept copies
//	phaseshift list PATH                   entries as JSON lines, for jq
//	phaseshift get PATH KEY                one entry; KEY is JSON: '"c1"', '{"id":"c1"}'
//	phaseshift diff A B                    entries only in A, only in B, and different
//	phaseshift report PATH                 a running daemon's last restore: its orphaned and diverged keys
//	phaseshift delete PATH KEY             remove a leaked entry
//	phaseshift prune-orphans PATH          delete a running daemon's orphans, once confirmed
//	phaseshift restore-prev PATH           put PATH.prev back (--accept-loss if it lacks entries PATH holds)
//	phaseshift restore-kept PATH COPY      put a kept copy back (undo a repair)
//	phaseshift repair-journal --drop-damaged-records PATH   keep the journal's records before its damage
//	phaseshift reseal --i-edited-this-file-by-hand PATH     re-checksum after a hand edit
//	phaseshift clear-mark (--accept-loss | --legacy-current) PATH   how a daemon goes on from a file marked behind
//	phaseshift discard-empty PATH          move an empty (0-byte) file aside: a daemon starts as with none
//	phaseshift gate --prometheus URL N     may the fleet move to phase N? (Prometheus's HTTP API)
//
// That list is commands()'s, the one list of verbs, in its order; a test
// holds it, and docs/command.md's, equal to it.
//
// It reads and writes files with package checkpoint's own code (the engine
// under it, internal/engine), so it reports what a daemon's Load would restore: with a
// journal (checkpoint.WithJournal), the header is the last commit's, and
// the file's own header is shown beside it. The read-only verbs do not take
// the checkpoint's lock; the repairs take it, so they wait for (and then
// refuse to race) a daemon that has the file open, and each keeps the file
// it replaces, with its journal, as PATH.before-<verb>-<UTC time>, which
// restore-kept puts back. A daemon that serves a control socket
// (PATH.control.sock, package migrate/control) takes list, get and delete
// while it runs: the command sends them to its Store.
//
// The exit statuses are listed by phaseshift --help (and in
// docs/command.md, which a test holds equal to it); verify, inspect, list, get, diff and
// delete exit with the verdict of the file they read when it is not intact
// (diff: A's, then B's); restore-prev and restore-kept with that of the
// copy they restore; reseal with that of PATH read as if its checksum held.
//
// inspect and verify never give a count they did not read: of a damaged
// file they give its header's seq and the entries up to the damage, as
// "at least N"; restore-prev and restore-kept say what the file they put
// back lacks against the one they replace, and refuse to lose entries
// without --accept-loss. An empty file (0 bytes) holds nothing:
// discard-empty moves it aside, or restore-prev puts PATH.prev back.
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
//     {"a":2,"b":1}. diff matches keys by text alone. Through a daemon's
//     control socket, a key is matched as the daemon's Store.Get matches it
//     (with its Match, if it has one).
//   - Whether a process holds the lock comes from /proc/locks (Linux),
//     matched by the lock file's device and inode (on btrfs and overlayfs,
//     whose locks the kernel may list under another device, by inode alone,
//     and inspect says so); where /proc/locks cannot be read, inspect says
//     the holder is unknown rather than guess. It never tries the lock
//     itself: a daemon starting at that instant could fail to get it. The
//     PID written into the lock file names its last holder, who may have
//     exited.
//   - The repairs keep the phase, writer and boot ID of the state they
//     write from, and give it a seq above every seq they saw, so that
//     nothing takes the repaired file for an older one.
//   - Kept copies are bounded as package checkpoint bounds them: making one
//     more than the bound removes the oldest of its kind.
//   - Error messages name paths, keys, counts, seqs and byte offsets, never
//     values; list and get print values, because that is what they are
//     asked for.
//   - What it prints comes in part from the files it reads, which anyone
//     who could write them may have crafted (the checksum is a CRC): every
//     byte it writes, text and JSON, passes one filter that writes ESC and
//     the other C0 controls but newline and tab, DEL, the C1 controls and
//     the Unicode format characters as JSON \u escapes (invalid UTF-8 as
//     \ufffd), so its JSON decodes to what the file holds and a terminal
//     is never driven by it. A FIFO or a device at a file's name is
//     reported, never opened for reading (it would hang the command).
//   - A KEY with a field twice is refused: it names no one key.
//   - gate knows what the Prometheus server knows: it waits for every
//     target of --job that the server discovers, and a node the server
//     does not discover blocks only through phaseshift:expected_nodes. It
//     compares sample times with the server's clock (time()), not its own.
//   - report and prune-orphans need the daemon running with its control
//     socket, served with control.WithReport: the report of a restore
//     lives in the daemon that ran it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
