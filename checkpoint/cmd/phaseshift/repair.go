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
	"github.com/phaseshift/phaseshift/checkpoint/internal/rawfile"
)

// What the repairs share: taking the checkpoint's lock, and reporting what
// they did. Each repair keeps the file it replaces as a quarantined copy,
// then replaces it with checkpoint's write protocol (temporary file, fsync,
// rename, fsync of the directory), and reads the result back to check it.

// repaired is a repair's --json output.
type repaired struct {
	Path   string      `json:"path"`
	Action string      `json:"action"`
	Key    rawfile.Key `json:"key,omitempty"`
	From   string      `json:"from,omitempty"` // restore-prev: the file restored
	// Replaced is the verdict on the file replaced, or why reseal replaced
	// it; Kept is its quarantined copy.
	Replaced string      `json:"replaced,omitempty"`
	Kept     string      `json:"kept,omitempty"`
	Header   *headerJSON `json:"header"`
	Entries  int         `json:"entries"`
}

// lock opens path under its lock, failing without creating anything when
// its directory does not exist, and with exit 7, naming the holder, when
// a process holds the lock beyond wait.
func lock(ctx context.Context, path string, wait time.Duration) (rawfile.Locked, error) {
	if wait < 0 {
		return nil, usageError("--lock-wait %v is negative: give how long to wait, e.g. 5s, or 0 to try once", wait)
	}
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fail(exitMissing, "there is no checkpoint at %s: its directory does not exist", path)
		}
		return nil, fail(exitUnreadable, "%v", err)
	}
	l, err := rawfile.Lock(ctx, path, wait)
	if err == nil {
		return l, nil
	}
	if errors.Is(err, checkpoint.ErrLocked) {
		holder := lockState(rawfile.NamesOf(path).Lock)
		return nil, fail(exitLocked, "the checkpoint's lock is %s, after waiting %v: a daemon has %s open. "+
			"Stop it first (a repair must not race its saves), or wait longer with --lock-wait", holder, wait, path)
	}
	return nil, fail(exitFailed, "%v", err)
}

// check reads the repaired file back under the lock and describes it.
func check(ctx context.Context, l rawfile.Locked, r *repaired) error {
	j := judge(l.Read(ctx, rawfile.Options{}), 0)
	if j.verdict != verdictIntact {
		return fail(exitFailed, "the repaired file does not read back intact: %s; the file it replaced is kept as %s", j.reason, r.Kept)
	}
	r.Header, r.Entries = j.header(), len(j.Entries)
	return nil
}

func printRepaired(e *env, r *repaired, text string) error {
	if e.json {
		return json.NewEncoder(e.out).Encode(r)
	}
	fmt.Fprintln(e.out, text)
	if r.Kept != "" {
		fmt.Fprintf(e.out, "the file it replaced (%s) is kept as %s\n", r.Replaced, r.Kept)
	}
	return nil
}

// seqOf returns the highest seq j is known to hold: its header's, or the
// last record's of its journal; 0 if neither could be read.
func seqOf(j *judged) uint64 {
	seq := j.Journal.Seq
	if h := j.header(); h != nil {
		seq = max(seq, h.Seq)
	}
	return seq
}

// closeLocked releases the lock, reporting a failure only when nothing
// else failed.
func closeLocked(l rawfile.Locked, err *error) {
	if cerr := l.Close(); cerr != nil && *err == nil {
		*err = fail(exitFailed, "releasing the lock: %v", cerr)
	}
}
