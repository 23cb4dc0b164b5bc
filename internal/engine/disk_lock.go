package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/internal/fsys"
)

// The checkpoint's lock: taking it (waiting, and saying who holds it),
// keeping it, and checking before each write that this File still holds
// it and that nobody wrote the checkpoint while it was lost.

func (d *disk) acquire(ctx context.Context, wait time.Duration) error {
	var deadline <-chan time.Time
	if wait >= 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	// flock has no timeout and cannot be interrupted by a context, so poll
	// with a non-blocking lock, backing off to 50ms between tries.
	backoff := time.Millisecond
	var waiting lockWait
	for {
		lock, err := d.fs.TryLock(d.lock)
		if err == nil {
			d.held = lock
			waiting.done(d)
			return nil
		}
		if !errors.Is(err, fsys.ErrWouldBlock) {
			return pathError("open: lock", d.lock, err)
		}
		if wait != 0 {
			waiting.tell(d, wait)
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return d.lockedError("open", ctx.Err())
		case <-deadline:
			t.Stop()
			return d.lockedError("open", nil)
		}
		if wait == 0 {
			return d.lockedError("open", nil)
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// lockWait says, in the log, that Open is waiting for another process's
// lock: at once, then every lockWaitLogEvery, so that a daemon stuck behind
// an old instance during a rolling update says who holds it.
type lockWait struct {
	since, told time.Time
}

// lockWaitLogEvery is how often a wait for the lock is logged again.
const lockWaitLogEvery = 10 * time.Second

func (w *lockWait) tell(d *disk, bound time.Duration) {
	now := time.Now()
	if !w.told.IsZero() && now.Sub(w.told) < lockWaitLogEvery {
		return
	}
	if w.since.IsZero() {
		w.since = now
	}
	w.told = now
	limit := "until the context is done (set checkpoint.WithLockWait to bound it)"
	if bound > 0 {
		limit = "at most " + bound.String()
	}
	h := fsys.LockHolder(d.fs, d.lock)
	pid := h.PID
	if pid == 0 {
		pid = h.Recorded
	}
	d.log.Warn("waiting for the checkpoint's lock, held by another instance",
		zap.String("path", d.path), zap.String("lockFile", d.lock), zap.String("holderPID", strconv.Itoa(pid)),
		zap.String("holder", strings.TrimPrefix(h.String(), " by ")),
		zap.Duration("waited", now.Sub(w.since)), zap.String("waiting", limit))
}

func (w *lockWait) done(d *disk) {
	if !w.since.IsZero() {
		d.log.Info("took the checkpoint's lock", zap.String("path", d.path), zap.Duration("waited", time.Since(w.since)))
	}
}

// makeDir creates the checkpoint's directory and its missing parents (mode
// 0700) and makes them durable, and then checks it (fsys.CheckDir: owned
// by this user or root, writable by nobody else unless sticky), since
// whoever may write it may plant a FIFO, a hard link or a symlink at any
// name this package uses, or swap its files. A new directory's entry lives
// in its parent, which the save protocol never fsyncs: without this, a
// power cut could take away a new directory, and with it the first
// checkpoint saved into it, after Save returned.
func (d *disk) makeDir() error {
	var missing []string // deepest first
	for p := d.dir; ; p = filepath.Dir(p) {
		_, err := d.fs.ReadDirNames(p)
		if err == nil || filepath.Dir(p) == p {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			if p == d.dir {
				return err
			}
			break // an ancestor that cannot be listed exists
		}
		missing = append(missing, p)
	}
	if err := d.fs.MkdirAll(d.dir, 0o700); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := d.fs.SyncDir(filepath.Dir(missing[i])); err != nil {
			return err
		}
	}
	return d.fs.CheckDir(d.dir)
}

// lockedError is the ErrLocked error of op, naming the holder: the
// kernel's word first (/proc/locks), since the PID the lock file records
// is whatever its last writer wrote.
func (d *disk) lockedError(op string, cause error) error {
	holder := fsys.LockHolder(d.fs, d.lock).String()
	msg := fmt.Errorf("%w%s (lock file %s): another instance owns this checkpoint; stop it or wait for it to exit", ErrLocked, holder, d.lock)
	if cause != nil {
		msg = fmt.Errorf("%w (gave up: %w)", msg, cause)
	}
	return pathError(op, d.path, msg)
}

func (d *disk) release() {
	if d.held != nil {
		_ = d.held.Unlock()
		d.held = nil
	}
}

// own makes sure this File still holds the lock at its path before a save
// or a quarantine changes anything there.
//
// A flock stays on the file it was taken on. When the lock file is removed
// (an operator's rm -rf of the directory, a cleanup script), this File
// keeps a lock that nobody else can see, and another Open creates and
// locks a new lock file at the same path: two owners. So every save and
// quarantine first checks that the locked file is still the one at the
// path (an fstat and an lstat). If it is not, it creates the directory
// again as Open does, takes the lock at the path again, and fails with
// ErrLocked if another File holds it. While nobody held the lock at the
// path, another File may have written the checkpoint; with last (a save),
// that is checked too, so that what it wrote is not replaced unread.
func (d *disk) own(op string, last *onDisk) error {
	stale, err := d.held.Stale()
	if err != nil {
		return pathError(op+": check lock", d.lock, err)
	}
	if !stale {
		return nil
	}
	if err := d.makeDir(); err != nil {
		return pathError(op+": create directory", d.dir, err)
	}
	// Whoever created the directory again may not have made its entry
	// durable, and a save fsyncs the directory, not its parent.
	if err := d.fs.SyncDir(filepath.Dir(d.dir)); err != nil {
		return pathError(op+": fsync directory", filepath.Dir(d.dir), err)
	}
	lock, err := d.fs.TryLock(d.lock)
	if errors.Is(err, fsys.ErrWouldBlock) {
		return d.lockedError(op, errors.New("this File's lock file was removed, and another File has taken the lock at its path since"))
	}
	if err != nil {
		return pathError(op+": lock", d.lock, err)
	}
	_ = d.held.Unlock()
	d.held = lock
	d.log.Warn("the checkpoint's lock file had disappeared (was its directory removed?); took the lock again at its path",
		zap.String("path", d.path), zap.String("lock", d.lock))
	if last != nil {
		return d.sameFile(*last)
	}
	return nil
}

// sameFile returns an error wrapping errTakenOver unless the checkpoint at
// the path is missing or is the one described by last.
func (d *disk) sameFile(last onDisk) error {
	data, err := d.fs.ReadFile(d.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // gone with the lock file: nothing to lose
	}
	if err != nil {
		return pathError("save: read", d.path, err)
	}
	p, perr := parse(data)
	if perr == nil && last.exists && p.meta.Seq == last.seq && p.meta.SavedAt.Equal(last.savedAt) {
		return d.sameJournal(last)
	}
	if perr != nil {
		// perr's text never quotes the file (see corrupt).
		return fmt.Errorf("%w: while this File's lock file was gone, another process wrote a file that is not a readable checkpoint (%w; this File last read or wrote seq %d)", errTakenOver, perr, last.seq)
	}
	return fmt.Errorf("%w: while this File's lock file was gone, another process wrote seq %d (this File last read or wrote seq %d)", errTakenOver, p.meta.Seq, last.seq)
}

// sameJournal returns an error wrapping errTakenOver unless the journal is
// as long as last says this File left it: another File may have appended
// to it, without touching the file, while this File's lock file was gone.
func (d *disk) sameJournal(last onDisk) error {
	if last.journal < 0 {
		return nil // not known exactly: the next write rewrites the file
	}
	j, err := d.fs.ReadFile(d.journal)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return pathError("save: read", d.journal, err)
	}
	if int64(len(j)) != last.journal {
		return fmt.Errorf("%w: while this File's lock file was gone, another process wrote the journal (%d bytes; this File left %d)", errTakenOver, len(j), last.journal)
	}
	return nil
}
