package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/internal/fsys"
)

// File is a checkpoint file on disk, owned by this File from Open to Close.
//
// Keys must read back from JSON as themselves (==): Save and Commit refuse
// a key that would not (invalid UTF-8, a time.Time with a monotonic reading
// or a *time.Location, a non-nil pointer, a difference only in unexported
// fields; see the package documentation) with an *EncodeError matching
// ErrEncode, and write nothing.
//
// All methods are safe for concurrent use; they run one at a time.
type File[K comparable, V any] struct {
	c    *core[K, V]
	disk *disk
}

// Open opens the checkpoint at path, which need not exist yet.
//
// Open creates path's directory if it is missing (mode 0700, made durable
// by an fsync of its parent, so that the first save survives a power cut),
// takes an exclusive lock on path+".lock" for the life of the File, and
// then removes the temporary files that a save of this checkpoint
// interrupted by a crash left next to path (only those: another
// checkpoint's, in the same directory, are left alone). If the lock file
// is removed later (with its directory, say), the next save or quarantine
// takes the lock at the path again, or fails with ErrLocked if another
// File has taken it.
// When another File holds the lock, in this process or another, Open waits
// until ctx is done (or the WithLockWait bound elapses) and returns an error
// matching ErrLocked that names the path and, when it can, the holder's PID.
//
// Open reads nothing: call Load.
func Open[K comparable, V any](ctx context.Context, path string, opts ...Option) (*File[K, V], error) {
	cfg, err := configure[K, V](opts)
	if err != nil {
		return nil, err
	}
	if path == "" {
		return nil, errors.New("checkpoint: the path is empty: give the file to keep the checkpoint in, e.g. /var/run/mydaemon/state.json")
	}
	path = filepath.Clean(path)
	var bootID string
	if cfg.bootID != nil {
		if bootID, err = cfg.bootID(); err != nil {
			return nil, fmt.Errorf("checkpoint %s: boot ID: %w", path, err)
		}
	}
	if cfg.fs == nil {
		cfg.fs = fsys.OS{}
	}
	d := &disk{
		fs:      cfg.fs,
		path:    path,
		dir:     filepath.Dir(path),
		prev:    path + ".prev",
		prevTmp: filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".prev-tmp"),
		lock:    path + ".lock",
		journal: path + ".journal",
		appends: cfg.journal,
		mode:    cfg.mode,
		log:     cfg.logger,
	}
	if err := d.makeDir(); err != nil {
		return nil, pathError("open: create directory", d.dir, err)
	}
	if err := d.acquire(ctx, cfg.lockWait); err != nil {
		return nil, err
	}
	if n, err := d.removeLeftovers(); err != nil {
		d.release()
		return nil, pathError("open: remove leftover temporary files", d.dir, err)
	} else if n > 0 {
		cfg.logger.Info("removed temporary files left by an interrupted save", zap.String("path", path), zap.Int("count", n))
	}
	return &File[K, V]{c: newCore[K, V](cfg, d, bootID), disk: d}, nil
}

// Path returns the checkpoint's path.
func (f *File[K, V]) Path() string { return f.disk.path }

// BootID returns the boot ID this File stamps into saved files, or "" when
// it was opened without WithBootID.
func (f *File[K, V]) BootID() string { return f.c.bootID }

// Size returns the size in bytes of the checkpoint, its journal included,
// as this File last read it (Load, whether or not it could use what it
// read) or wrote it (Save, Commit); 0 before either, when Load found no
// file, and after Quarantine.
// It does not touch the disk and does not wait for a save in progress.
func (f *File[K, V]) Size() int64 { return f.c.size.Load() }

// Journal returns what the checkpoint's journal (see WithJournal) held at
// the last Load, torn record included, and what Commit appended since; a
// save that folds the journal into the file resets it (Torn stays until
// the next Load). It does not touch the disk; it waits for a save in
// progress.
func (f *File[K, V]) Journal() JournalStatus { return f.c.journal() }

// Load reads and checks the checkpoint and returns it, with its journal,
// if there is one, replayed over it (whether or not this File was opened
// WithJournal; see the package documentation's Journal section).
//
// A missing file gives ErrNotExist (and an empty Snapshot). A file that is
// not intact gives ErrCorrupt, one written by a newer binary ErrNewerSchema,
// one too old to upgrade ErrOlderSchema; an older schema with a registered
// upgrade chain is upgraded entry by entry. When the file is intact but some
// entries cannot be decoded (or upgraded, or are rejected by the
// WithValidate function), Load returns the others together with a
// *BadEntriesError (errors.Is ErrBadEntry). With ErrNewerSchema, the
// Snapshot's Meta still describes the file (its phase, writer and schema),
// so a caller can tell who wrote it. After any failure other than
// ErrNotExist, Save and Commit refuse to replace the file until Quarantine
// has moved it aside.
func (f *File[K, V]) Load(ctx context.Context) (Snapshot[K, V], error) {
	return f.c.load(ctx)
}

// Save replaces the checkpoint with s, durably: it returns nil only once the
// new file and its directory entry are on stable storage. It sets
// s.Meta's Format, Schema, Seq and SavedAt (and BootID, if empty and the
// File has one); Phase and Writer are the caller's.
//
// The write protocol: every entry is encoded (and every key checked) first;
// the lock is checked to still be this File's at its path (see Open); the
// previous file is hard-linked as path+".prev"; the new content goes to a
// temporary file created exclusively in the same directory, which is
// written, fsynced and closed, then renamed over path; then the directory
// is fsynced. A crash at any instant leaves either the previous or the new
// checkpoint at path, never a torn one. Each step that fails is named in
// the error, and path still holds the previous checkpoint. If the file was
// removed since this File last wrote it, Save writes it again (and logs
// that it had disappeared).
//
// Save refuses (ErrUnreadable) to replace a file that could not be read;
// it reads the file first if nothing has yet. A key or value that cannot be
// written fails Save with an *EncodeError (ErrEncode) before anything on
// disk changes.
func (f *File[K, V]) Save(ctx context.Context, s Snapshot[K, V]) error {
	return f.c.save(ctx, s)
}

// Commit saves the checkpoint as it was last loaded or saved, with changes
// applied in order; it writes the same file Save would, with the same
// guarantees, but encodes only the changed entries. With WithJournal it
// appends the changes to the journal instead and fsyncs it, and writes the
// whole file only to compact the journal (see the package documentation's
// Journal section). If the write fails, neither what is on disk (as far as
// the write protocol can undo it) nor what Commit applies to next changes.
// An entry that cannot be written fails Commit with an *EncodeError whose
// Index is the position of its change.
func (f *File[K, V]) Commit(ctx context.Context, m Meta, changes []Change[K, V]) error {
	return f.c.commit(ctx, m, changes)
}

// Quarantine moves the checkpoint aside to path+".corrupt-<UTC time>" for
// inspection (its journal, if any, to the same name + ".journal") and
// returns the new name. Afterwards there is no checkpoint and Save may
// create one. It returns ErrNotExist if there is no file. The checkpoint
// keeps its 5 newest quarantined copies: Quarantine removes older ones
// (see the package documentation's Kept copies).
func (f *File[K, V]) Quarantine(ctx context.Context) (string, error) {
	return f.c.quarantine(ctx)
}

// Close releases the lock. It is idempotent: later calls return nil. Other
// methods return ErrClosed after Close.
func (f *File[K, V]) Close() error {
	return f.c.close()
}

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
	// nil: a journal is appended to only while it is still there.
	seen fs.FileInfo
}

// errTakenOver is returned by disk.replace when another File wrote the
// checkpoint while this one's lock file was gone.
var errTakenOver = errors.New("another File wrote the checkpoint")

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
	for {
		lock, err := d.fs.TryLock(d.lock, d.mode)
		if err == nil {
			d.held = lock
			return nil
		}
		if !errors.Is(err, fsys.ErrWouldBlock) {
			return pathError("open: lock", d.lock, err)
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

// makeDir creates the checkpoint's directory and its missing parents (mode
// 0700) and makes them durable. A new directory's entry lives in its
// parent, which the save protocol never fsyncs: without this, a power cut
// could take away a new directory, and with it the first checkpoint saved
// into it, after Save returned.
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
	return nil
}

func (d *disk) lockedError(op string, cause error) error {
	holder := ""
	if pid := fsys.LockHolder(d.fs, d.lock); pid != "" {
		holder = " by process " + pid
	}
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
	lock, err := d.fs.TryLock(d.lock, d.mode)
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
		d.seen = seen // nil on failure: the next commit rewrites the file
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
	base := keptBase(d.path, keptQuarantine, "", time.Now())
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
	d.pruneKept(keptQuarantine)
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
