package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"time"

	"go.uber.org/zap"

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
