package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/phaseshift/phaseshift/internal/fsys"
	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// disk is the backend of File. Its methods run under the core's mutex.
type disk struct {
	fs      fsys.FS
	path    string
	dir     string
	prev    string
	prevTmp string
	lock    string
	journal string
	appends bool // WithJournal: commits may append to the journal, which needs seen
	mode    fs.FileMode
	log     *zap.Logger
	held    fsys.Lock // the lock on path+".lock"; nil once released
	// seen is the checkpoint this File last read or wrote at path, or
	// nil: a journal is appended to only while it is still there. ends
	// are its first bytes up to the end of its header (Seq and SavedAt
	// included) and its checksum line: a file written over in place (cp
	// of .prev onto it, an editor, a truncation) keeps its inode, but not
	// these.
	seen fs.FileInfo
	ends fileEnds
}

// fileEnds are the bytes at the two ends of a checkpoint file that tell
// one save from another: the header, which holds the save's Seq and
// SavedAt, and the trailer, which holds the checksum of everything.
type fileEnds struct{ head, tail []byte }

// endsOf returns the ends of data, a whole checkpoint file (copies: data
// may be a buffer reused by the next save).
func endsOf(data []byte) fileEnds {
	head := len(data)
	if i := bytes.Index(data, []byte(entriesStart)); i >= 0 {
		head = i
	}
	head = min(head, 4<<10) // a header is short; a file without one is not appended to
	tail := min(trailerLen, len(data))
	return fileEnds{head: bytes.Clone(data[:head]), tail: bytes.Clone(data[len(data)-tail:])}
}

func (d *disk) name() string { return d.path }

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

// removeLeftovers removes the temporary files of saves of this checkpoint
// that a crash cut short. Holding the lock, nobody else can be writing
// them. Another checkpoint's temporary files in the same directory, even
// one whose name starts with this one's, are never touched: fsys.TempOf
// reads a temporary name back to exactly one checkpoint.
func (d *disk) removeLeftovers() (int, error) {
	names, err := d.fs.ReadDirNames(d.dir)
	if err != nil {
		return 0, err
	}
	base, n := filepath.Base(d.path), 0
	for _, name := range names {
		if of, ok := fsys.TempOf(name); (ok && of == base) || name == filepath.Base(d.prevTmp) {
			if err := d.fs.Remove(filepath.Join(d.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

func (d *disk) read() ([]byte, error) {
	// The stat comes first: if the file is replaced between the two calls,
	// seen is the older file, and the next commit finds it gone and
	// rewrites the whole file; in the other order it would append records
	// that follow the bytes read to a file that holds others.
	if !d.appends {
		return d.fs.ReadFile(d.path)
	}
	seen, serr := d.fs.Lstat(d.path)
	data, err := d.fs.ReadFile(d.path)
	d.seen = nil
	if err == nil && serr == nil {
		d.seen, d.ends = seen, endsOf(data) // nil on failure: the next commit rewrites the file
	}
	return data, err
}

func (d *disk) replace(data []byte, last onDisk) error {
	fail := func(step string, err error) error { return pathError("save: "+step, d.path, err) }
	if err := d.own("save", &last); err != nil {
		return err
	}
	keptPrev := false
	if last.exists {
		var err error
		if keptPrev, err = d.keepPrev(); err != nil {
			return fail("keep previous", err)
		}
		if !keptPrev {
			// Removed under a running daemon (an operator's rm, a cleanup
			// script): the state is in memory, and this save writes all
			// of it, with the usual durability.
			d.log.Warn("the checkpoint file had disappeared; this save writes it again from the state in memory",
				zap.String("path", d.path), zap.Uint64("lastSeq", last.seq))
		}
	}
	tmp, step, err := d.writeTemp(data)
	if err != nil {
		return fail(step, err)
	}
	d.seen = nil
	if err := d.fs.Rename(tmp, d.path); err != nil {
		_ = d.fs.Remove(tmp)
		return fail("rename", err)
	}
	if d.appends {
		d.seen, _ = d.fs.Lstat(d.path)
		d.ends = endsOf(data)
	}
	// The rename is atomic but not durable until the directory is
	// synced: a power cut could bring the old entry back. renameio stops
	// before this step; raft's file snapshot store and etcd take it.
	if err := d.fs.SyncDir(d.dir); err != nil {
		d.undoRename(keptPrev)
		return fail("fsync directory", err)
	}
	return nil
}

// writeTemp writes data to a new temporary file beside the checkpoint,
// fsyncs and closes it, and returns its name; on failure it removes it and
// says which step failed.
func (d *disk) writeTemp(data []byte) (name, step string, err error) {
	f, err := d.createTemp()
	if err != nil {
		return "", "create temporary file", err
	}
	cleanup := func() { _ = f.Close(); _ = d.fs.Remove(f.Name()) }
	n, err := f.Write(data)
	if err == nil && n < len(data) {
		err = io.ErrShortWrite
	}
	if err != nil {
		cleanup()
		return "", "write", err
	}
	// fsync before rename, or the rename can reach the disk before the
	// data and a crash leaves an empty file (renameio quotes Ts'o on this:
	// "a zero-length file is a valid and possible outcome after the
	// rename" without it).
	if err := f.Sync(); err != nil {
		cleanup()
		return "", "fsync", err
	}
	if err := f.Close(); err != nil {
		_ = d.fs.Remove(f.Name())
		return "", "close", err
	}
	return f.Name(), "", nil
}

// keepPrev makes the checkpoint path+".prev" too. A hard link keeps the
// previous file without ever leaving path empty, and rename makes the new
// .prev appear atomically. It reports false, having changed nothing, when
// there is no checkpoint to keep.
func (d *disk) keepPrev() (bool, error) {
	if err := d.fs.Remove(d.prevTmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := d.fs.Link(d.path, d.prevTmp); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	if err := d.fs.Rename(d.prevTmp, d.prev); err != nil {
		_ = d.fs.Remove(d.prevTmp)
		return false, err
	}
	return true, nil
}

// createTemp creates a temporary file for a save, exclusively, under a
// random name that only this checkpoint's cleanup recognises
// (fsys.TempName). A name that is taken draws another.
func (d *disk) createTemp() (fsys.File, error) {
	for tries := 1; ; tries++ {
		f, err := d.fs.CreateExcl(fsys.TempName(d.path), d.mode)
		if err == nil || !errors.Is(err, fs.ErrExist) || tries == 8 {
			return f, err
		}
	}
}

// undoRename puts the previous checkpoint back at path after the rename of
// a save that then failed, or removes the new file if there was none
// before: a save reported failed must not be visible, or a restart would
// serve a write its caller was told did not happen. Best effort: after a
// failed fsync nothing is known to be durable, and the next save replaces
// the file anyway.
func (d *disk) undoRename(hadPrev bool) {
	if !hadPrev {
		_ = d.fs.Remove(d.path)
		return
	}
	_ = d.fs.Remove(d.prevTmp)
	if d.fs.Link(d.prev, d.prevTmp) == nil && d.fs.Rename(d.prevTmp, d.path) != nil {
		_ = d.fs.Remove(d.prevTmp)
	}
}

func (d *disk) quarantine() (string, error) {
	if err := d.own("quarantine", nil); err != nil {
		return "", err
	}
	base := keptBase(d.path, rawfile.WhyQuarantine, "", time.Now())
	dst, hasFile, err := d.linkAside(d.path, base, "")
	if err != nil {
		return "", err
	}
	// The journal goes with its file, under the same name + ".journal".
	jbase := base
	if hasFile {
		jbase = dst
	}
	jdst, hasJournal, err := d.linkAside(d.journal, jbase, ".journal")
	if err != nil {
		return "", err
	}
	if !hasFile && !hasJournal {
		return "", fs.ErrNotExist
	}
	if !hasFile {
		dst = jdst
	}
	// The new names must be durable before the old ones go: a file system
	// may persist directory changes in any order without an fsync, and
	// the quarantined file may be the only copy of state nobody has read.
	if err := d.fs.SyncDir(d.dir); err != nil {
		return "", pathError("quarantine: fsync directory", d.dir, err)
	}
	// The file goes first, durably, and the journal after it: a crash in
	// between leaves a journal without its file, which Load reports as
	// corrupt, never a file without its journal, which would load without
	// the journal's commits.
	for _, p := range []struct {
		name string
		has  bool
	}{{d.path, hasFile}, {d.journal, hasJournal}} {
		if !p.has {
			continue
		}
		if err := d.fs.Remove(p.name); err != nil {
			return "", pathError("quarantine: remove", p.name, err)
		}
		if err := d.fs.SyncDir(d.dir); err != nil {
			return "", pathError("quarantine: fsync directory", d.dir, err)
		}
	}
	d.pruneKept(rawfile.WhyQuarantine)
	return dst, nil
}

// linkAside links name to base+suffix, or to base+"-<n>"+suffix when that
// is taken, and says where; it reports false when there is no name.
func (d *disk) linkAside(name, base, suffix string) (string, bool, error) {
	dst := base + suffix
	// Link, unlike rename, fails instead of replacing an earlier
	// quarantined file that happens to have the same name.
	for i := 1; ; i++ {
		err := d.fs.Link(name, dst)
		if err == nil {
			return dst, true, nil
		}
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		if !errors.Is(err, fs.ErrExist) || i > 100 {
			return "", false, pathError("quarantine: link", name, err)
		}
		dst = fmt.Sprintf("%s-%d%s", base, i, suffix)
	}
}

func (d *disk) close() error {
	if d.held == nil {
		return nil
	}
	err := d.held.Unlock()
	d.held = nil
	if err != nil {
		return pathError("close: unlock", d.lock, err)
	}
	return nil
}

// The journal of a File on disk: path+".journal" (see journal.go for the
// format, the rules and when the core uses it).

func (d *disk) journalName() string { return d.journal }

func (d *disk) readJournal() ([]byte, error) { return d.fs.ReadFile(d.journal) }

// appendJournal appends rec to the journal and fsyncs it; a journal it
// creates has its directory fsynced too, or a power cut could take its
// name, and the acknowledged record, away.
//
// Before anything, the lock is checked to be this File's (as a save
// does), the checkpoint the records follow to still be there (the file
// this File last read or wrote, not one put at its path since), and the
// journal to be as long as this File left it: records appended to a
// journal that lost its file, or to one that was cut or removed, could
// not be replayed, so then errRewrite makes the commit write the whole
// file. A journal longer than this File left it holds records another File
// appended, which a rewrite would lose: then the commit fails
// (errTakenOver).
func (d *disk) appendJournal(rec []byte, at int64, last onDisk) error {
	if err := d.own("save", &last); err != nil {
		return err
	}
	if err := d.stillFollowed(); err != nil {
		return err
	}
	f, err := d.fs.OpenAppend(d.journal, d.mode, at == 0)
	if (at == 0 && errors.Is(err, fs.ErrExist)) || (at > 0 && errors.Is(err, fs.ErrNotExist)) {
		return errRewrite
	}
	if err != nil {
		return pathError("commit: journal open", d.journal, err)
	}
	if at > 0 {
		size, err := f.Size()
		if err != nil {
			_ = f.Close()
			return pathError("commit: journal stat", d.journal, err)
		}
		if size != at {
			_ = f.Close()
			// Cut short (by hand?): what this File holds in memory
			// goes back to disk whole. Grown: records this File did
			// not write, which a rewrite would lose.
			if size > at {
				return fmt.Errorf("%w: the journal holds %d bytes this File did not write", errTakenOver, size-at)
			}
			return errRewrite
		}
	}
	if step, err := writeSync(f, rec); err != nil {
		d.cutBack(f, at)
		return pathError("commit: journal "+step, d.journal, err)
	}
	if err := f.Close(); err != nil {
		return pathError("commit: journal close", d.journal, err)
	}
	if at == 0 {
		if err := d.fs.SyncDir(d.dir); err != nil {
			// The record is written but its name may not last: take it
			// back (best effort) so that a write reported failed is not
			// replayed.
			_ = d.fs.Remove(d.journal)
			return pathError("commit: journal fsync directory", d.dir, err)
		}
	}
	return nil
}

// stillFollowed returns nil if the checkpoint at the path is the file this
// File last read or wrote, which the journal's records follow, and
// errRewrite if it is not: removed, replaced by another file (a rename of
// a copy over it), or written over in place (cp of .prev onto it, which
// keeps the inode; a truncation; an editor that writes in place). Records
// appended after any of these would follow a file that is no longer
// there, and the next Load would refuse the journal as corrupt, with every
// commit since: the whole file is written from memory instead, as
// WithoutJournal does at every commit. The check reads the file's two ends
// through one open (its header holds the save's Seq and SavedAt, its
// trailer the checksum of everything), not the whole file.
func (d *disk) stillFollowed() error {
	if d.seen == nil {
		return errRewrite
	}
	head, tail, fi, err := d.fs.Peek(d.path, len(d.ends.head), len(d.ends.tail))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ELOOP) {
		return errRewrite
	}
	if err != nil {
		return pathError("commit: journal: read checkpoint", d.path, err)
	}
	if !fsys.SameFile(fi, d.seen) || fi.Size() != d.seen.Size() || !fi.ModTime().Equal(d.seen.ModTime()) ||
		!bytes.Equal(head, d.ends.head) || !bytes.Equal(tail, d.ends.tail) {
		return errRewrite
	}
	return nil
}

// writeSync writes rec to f and fsyncs it, and names the step that failed.
func writeSync(f fsys.File, rec []byte) (string, error) {
	n, err := f.Write(rec)
	if err == nil && n < len(rec) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return "write", err
	}
	// The record is acknowledged once it is on stable storage, and not
	// before: an fsync, as etcd's WAL does after every batch of entries.
	if err := f.Sync(); err != nil {
		return "fsync", err
	}
	return "", nil
}

// cutBack takes a record that failed to be written or synced back out of
// the journal and closes it: a commit reported failed must not be
// replayed by a restart. Best effort: after a failed fsync nothing is
// known to be durable, and the core writes the whole file at its next
// commit anyway.
func (d *disk) cutBack(f fsys.AppendFile, at int64) {
	if f.Truncate(at) == nil {
		_ = f.Sync()
	}
	_ = f.Close()
}

// The compaction of the journal in the background (see compact.go).

var _ compactor = (*disk)(nil)

// compacting is what a compaction in the background has on disk besides
// the checkpoint: its new file, until it is renamed into place, its new
// journal, until that is, and a link that keeps the old .prev's blocks
// until the compaction frees them off the core's mutex. Every name is a
// temporary name of this checkpoint (fsys.TempName), which the next Open
// removes if a crash leaves it.
type compacting struct {
	file        string // the new file; "" once renamed
	ends        fileEnds
	size        int64
	prevLink    string    // a link to the old .prev; "" if none
	journal     fsys.File // the new journal, being written; nil if none
	journalLink string    // a link to the old journal; "" if none
}

// writeCompaction writes the file of m and lines to a new temporary file
// beside the checkpoint, a piece (compactPiece) at a time, each fsynced
// (see compactPiece), and closes it; then it links the current .prev
// aside, so that installing the new file, which replaces .prev, does not
// free the old one's blocks while commits wait (an unlink of the last
// link of a 20 MB file takes milliseconds). It runs off the core's mutex,
// and touches nothing but its own temporary files.
func (d *disk) writeCompaction(m Meta, lines [][]byte, stop *atomic.Bool) (*compacting, error) {
	f, err := d.createTemp()
	if err != nil {
		return nil, pathError("compact: create temporary file", d.path, err)
	}
	p := &compacting{file: f.Name()}
	step := "write"
	p.ends, err = streamFile(m, lines, compactPiece, func(piece []byte) error {
		if stop.Load() {
			return errAbandoned
		}
		n, err := f.Write(piece)
		p.size += int64(n)
		if err == nil && n < len(piece) {
			err = io.ErrShortWrite
		}
		if err != nil {
			return err
		}
		// fsync before rename, as a save does; piece by piece, so that a
		// commit's fsync of the journal never waits for more of it.
		step = "fsync"
		err = f.Sync()
		step = "write"
		return err
	})
	if err == nil {
		step = "close"
		err = f.Close()
	} else {
		_ = f.Close()
	}
	if err != nil {
		_ = d.fs.Remove(p.file)
		return nil, pathError("compact: "+step, d.path, err)
	}
	p.prevLink = d.linkAsTemp(d.prev)
	return p, nil
}

// linkAsTemp links name to a new temporary name of this checkpoint and
// returns it, or "" if name is missing or cannot be linked (then its
// blocks are freed where it is replaced): a compaction that replaces a
// file (.prev, the journal) under the core's mutex keeps its blocks this
// way until discardCompaction frees them off it.
func (d *disk) linkAsTemp(name string) string {
	for tries := 0; tries < 8; tries++ {
		tmp := fsys.TempName(d.path)
		err := d.fs.Link(name, tmp)
		if err == nil {
			return tmp
		}
		if !errors.Is(err, fs.ErrExist) {
			return ""
		}
	}
	return ""
}

// installCompaction makes p's file the checkpoint, as replace makes a
// save's temporary file the checkpoint: the lock checked, the file kept as
// .prev, rename. The directory's fsync is the caller's next step, off the
// core's mutex: the new file holds nothing a commit was told failed, and
// the journal's records follow the old file and the new one alike, so a
// rename a crash undoes loses nothing (see compact.go). The caller holds
// the core's mutex.
func (d *disk) installCompaction(p *compacting, last onDisk) error {
	fail := func(step string, err error) error { return pathError("compact: "+step, d.path, err) }
	if err := d.own("save", &last); err != nil {
		return err
	}
	if _, err := d.keepPrev(); err != nil {
		return fail("keep previous", err)
	}
	seen := d.seen
	d.seen = nil
	if err := d.fs.Rename(p.file, d.path); err != nil {
		d.seen = seen
		return fail("rename", err)
	}
	p.file = ""
	d.seen, _ = d.fs.Lstat(d.path) // nil on failure: the next commit writes the whole file
	d.ends = p.ends
	return nil
}

// syncCompaction makes the new file's name durable: the fsync of the
// directory, off the core's mutex.
func (d *disk) syncCompaction() error {
	if err := d.fs.SyncDir(d.dir); err != nil {
		return pathError("compact: fsync directory", d.dir, err)
	}
	return nil
}

// writeCompactionJournal appends data, records appended since the
// compaction's snapshot, to the new journal and fsyncs it, off the core's
// mutex: a new temporary file the first time, which stays open for the
// rest; the old journal is then linked aside (see linkAsTemp).
func (d *disk) writeCompactionJournal(p *compacting, data []byte) error {
	if p.journal == nil {
		f, err := d.createTemp()
		if err != nil {
			return pathError("compact: create temporary journal", d.journal, err)
		}
		p.journal = f
		p.journalLink = d.linkAsTemp(d.journal)
	}
	if step, err := writeSync(p.journal, data); err != nil {
		return pathError("compact: temporary journal "+step, d.journal, err)
	}
	return nil
}

// installCompactionJournal makes the new journal the journal: it appends
// tail, the records appended since writeCompactionJournal, fsyncs and
// closes it, renames it over the journal and fsyncs the directory; with no
// record since the snapshot, it removes the journal instead (a removal
// need not be durable: what comes back after a crash is stale). It runs
// once the new file's name is durable, and under the core's mutex, which
// keeps appends out. On failure the journal is as it was (journalKept),
// or, renamed over but perhaps not durably, unknown (journalUnsure);
// either way a Load replays it over the new file.
func (d *disk) installCompactionJournal(p *compacting, tail []byte, empty bool) (journalAfter, error) {
	fail := func(step string, err error) error { return pathError("compact: "+step, d.journal, err) }
	if empty {
		if err := d.removeJournal(); err != nil {
			return journalKept, err
		}
		return journalNew, nil
	}
	f := p.journal
	p.journal = nil
	step, err := "", error(nil)
	if len(tail) > 0 {
		step, err = writeSync(f, tail)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		step, err = "close", cerr
	}
	if err == nil {
		step, err = "rename", d.fs.Rename(f.Name(), d.journal)
	}
	if err != nil {
		_ = d.fs.Remove(f.Name())
		return journalKept, fail("temporary journal "+step, err)
	}
	if err := d.fs.SyncDir(d.dir); err != nil {
		return journalUnsure, fail("fsync directory", err)
	}
	return journalNew, nil
}

// discardCompaction removes what p has left on disk: a new file or journal
// that was not renamed into place, and the links to the old .prev and the
// old journal, whose blocks are freed now, off the core's mutex.
func (d *disk) discardCompaction(p *compacting) {
	if p.journal != nil {
		_ = p.journal.Close()
		_ = d.fs.Remove(p.journal.Name())
	}
	for _, name := range []string{p.file, p.prevLink, p.journalLink} {
		if name != "" {
			_ = d.fs.Remove(name)
		}
	}
}

func (d *disk) removeJournal() error {
	if err := d.fs.Remove(d.journal); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return pathError("save: remove journal", d.journal, err)
	}
	return nil
}
