package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/engine"
	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// What the repairs share: taking the checkpoint's lock, and reporting what
// they did. Each repair keeps the file it replaces, with its journal, as
// PATH.before-<verb>-<time> (restore-kept puts such a copy back), then
// replaces it with checkpoint's write protocol (temporary file, fsync,
// rename, fsync of the directory), reads the result back to check it, and
// removes the oldest copies the repairs kept beyond the bound.

// repaired is a repair's --json output.
type repaired struct {
	Path   string      `json:"path"`
	Action string      `json:"action"`
	Key    rawfile.Key `json:"key,omitempty"`
	From   string      `json:"from,omitempty"` // restore-prev, restore-kept: the file restored
	// Replaced is the verdict on the file replaced, or why reseal replaced
	// it; Kept is its copy, kept before the repair.
	Replaced string      `json:"replaced,omitempty"`
	Kept     string      `json:"kept,omitempty"`
	Header   *headerJSON `json:"header"`
	Entries  int         `json:"entries"`
	// Changed says whether the repair changed anything; Reason says why
	// not, when it did not (clear-mark of a file that carries no mark).
	Changed bool   `json:"changed"`
	Reason  string `json:"reason,omitempty"`
	// Lacks is, for restore-prev and restore-kept, what the file put back
	// lacks against the one it replaced, as far as that one read.
	Lacks *lossJSON `json:"lacks,omitempty"`
	// Damage is, for repair-journal, where the journal was damaged: what
	// it kept (before) and dropped (the damaged record and after).
	Damage *damageJSON `json:"damage,omitempty"`
	// Pruned are the oldest kept copies the repair removed, beyond the
	// bound.
	Pruned []string `json:"pruned,omitempty"`
	// Via is, for a delete through a daemon's control socket, the socket.
	Via string `json:"via,omitempty"`
}

// lock opens path under its lock, failing without creating anything when
// its directory does not exist, and with exit 7, naming the holder, when
// a process holds the lock beyond wait. When the lock is held as it starts
// to wait, it says so on e's error output, naming the holder, so that an
// operator knows what the command is waiting for.
func lock(ctx context.Context, e *env, path string, wait time.Duration) (rawfile.Locked, error) {
	if wait < 0 {
		return nil, usageError("--lock-wait %v is negative: give how long to wait, e.g. 5s, or 0 to try once", wait)
	}
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fail(exitMissing, "there is no checkpoint at %s: its directory does not exist", path)
		}
		return nil, fail(exitUnreadable, "%v", err)
	}
	if wait > 0 {
		if held := lockState(engine.NamesOf(path).Lock); held.Held != nil && *held.Held {
			fmt.Fprintf(e.errOut, "phaseshift: the checkpoint's lock is %s: waiting up to %v for it\n", held, wait)
		}
	}
	l, err := engine.LockRaw(ctx, path, wait)
	if err == nil {
		return l, nil
	}
	if errors.Is(err, checkpoint.ErrLocked) {
		holder := lockState(engine.NamesOf(path).Lock)
		return nil, fail(exitLocked, "the checkpoint's lock is %s, after waiting %v: a daemon has %s open. "+
			"Stop it first (a repair must not race its saves), or wait longer with --lock-wait", holder, wait, path)
	}
	return nil, fail(exitFailed, "%v", err)
}

// replace keeps a copy of what is at the path (cur, read under the lock),
// if anything is, writes h and entries over it with a seq above seqAbove
// (and above cur's), and finishes.
func replace(ctx context.Context, l rawfile.Locked, r *repaired, cur *judged, h rawfile.Header, entries []rawfile.Entry, seqAbove uint64) (err error) {
	if cur.verdict != verdictMissing || cur.Journal.Exists {
		if r.Kept, err = l.KeepCopy(ctx, r.Action); err != nil {
			return fail(exitFailed, "keeping a copy of the file before replacing it, nothing changed: %v", err)
		}
	}
	if err := l.Replace(ctx, h, entries, max(seqAbove, seqOf(cur))); err != nil {
		return fail(exitFailed, "writing %s: %v", r.Path, err)
	}
	return finish(ctx, l, r)
}

// finish reads the repaired file back under the lock and describes it,
// then removes the oldest kept copies beyond the bound.
func finish(ctx context.Context, l rawfile.Locked, r *repaired) error {
	j := judge(l.Read(ctx, rawfile.Options{}), 0)
	if j.verdict != verdictIntact {
		return fail(exitFailed, "the repaired file does not read back intact: %s; the file it replaced is kept as %s", j.reason, r.Kept)
	}
	r.Header, r.Entries, r.Changed = j.header(), len(j.Entries), true
	// Best effort: the repair is done, and a copy left over is harmless.
	r.Pruned, _ = l.PruneKept(ctx)
	return nil
}

func printRepaired(e *env, r *repaired, text string) error {
	if e.json {
		return json.NewEncoder(e.out).Encode(r)
	}
	fmt.Fprintln(e.out, text)
	if note := lossNote(r.Lacks); note != "" {
		fmt.Fprintln(e.out, note)
	}
	switch {
	case r.Kept == "":
	case r.Replaced == verdictIntact:
		// The repaired file is intact too, so the undo replaces an intact file.
		fmt.Fprintf(e.out, "the file it replaced (%s) is kept as %s (undo with: phaseshift restore-kept --replace-intact %s %s)\n", r.Replaced, r.Kept, r.Path, r.Kept)
	default:
		// restore-kept puts back only a copy that reads intact.
		fmt.Fprintf(e.out, "the file it replaced (%s) is kept as %s, to inspect (phaseshift inspect %s)\n", r.Replaced, r.Kept, r.Kept)
	}
	for _, p := range r.Pruned {
		fmt.Fprintf(e.out, "removed the oldest copy kept by a repair, %s: a checkpoint keeps its %d newest\n", p, engine.KeptBound)
	}
	return nil
}

// seqOf returns the highest seq j is known to hold: its header's, or the
// last record's of its journal, replayed or not (a damaged journal's, a
// journal's without its file); 0 if none could be read.
func seqOf(j *judged) uint64 {
	seq := j.Journal.Seq
	if h := j.header(); h != nil {
		seq = max(seq, h.Seq)
	}
	if d := j.Journal.Damage; d != nil {
		seq = max(seq, d.Seq, d.Before.LastSeq, d.After.LastSeq)
	}
	// A journal over a file Load refused is not replayed, but its records
	// name seqs all the same.
	return max(seq, j.Journal.All.LastSeq)
}

// refuseNewer is the refusal to replace cur, a file a newer phaseshift
// wrote: it holds that build's acknowledged writes, and the roll-forward
// reads it.
func refuseNewer(cur *judged) error {
	return fail(exitRefused, "%s was written by a newer phaseshift (%s): keep it for the roll-forward. "+
		"If you mean to replace it, pass --replace-intact", cur.Path, cur.reason)
}

// underLock runs f holding the lock of the checkpoint at path (see lock),
// and releases it after.
func underLock(ctx context.Context, e *env, path string, wait time.Duration, f func(rawfile.Locked) error) (err error) {
	l, err := lock(ctx, e, path, wait)
	if err != nil {
		return err
	}
	defer closeLocked(l, &err)
	return f(l)
}

// closeLocked releases the lock, reporting a failure only when nothing
// else failed.
func closeLocked(l rawfile.Locked, err *error) {
	if cerr := l.Close(); cerr != nil && *err == nil {
		*err = fail(exitFailed, "releasing the lock: %v", cerr)
	}
}
