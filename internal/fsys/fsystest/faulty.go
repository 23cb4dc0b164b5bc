// Package fsystest provides a fault-injecting fsys.FS for tests in this
// module: a real file system underneath, with chosen operations failing on
// demand.
//
// # Caveats
//
// Faults are matched by operation name and, optionally, by path; they do
// not model what a real failing disk leaves behind (see package
// internal/robustness for power cuts).
package fsystest

import (
	"io/fs"
	"path/filepath"
	"sync"

	"github.com/phaseshift/phaseshift/internal/fsys"
)

// The operations a Faulty can fail. Create, Write, Fsync and Close are
// calls on a temporary file or on a file OpenAppend opened; the path they
// match is the checkpoint's for a temporary file (the target, found from
// the temporary name with fsys.TempOf), the file's own for OpenAppend's.
// Lock matches TryLock and the Stale check of the lock it returns.
const (
	OpMkdir    = "mkdir"
	OpRead     = "read"
	OpCreate   = "create"
	OpWrite    = "write"
	OpFsync    = "fsync"
	OpClose    = "close"
	OpRename   = "rename" // path: the new name
	OpLink     = "link"   // path: the new name
	OpRemove   = "remove"
	OpReadDir  = "readdir"
	OpSyncDir  = "syncdir"
	OpLock     = "lock"
	ShortWrite = "short-write" // a Write that stores half and reports no error
	// OpAppend is OpenAppend (the journal); Write, Fsync and Close of the
	// file it returns match the journal's path, as does OpTruncate.
	OpAppend   = "append"
	OpTruncate = "truncate"
	OpExists   = "exists" // Lstat
)

type rule struct {
	op    string
	path  string // "" matches any path
	err   error
	times int // how many more calls fail; < 0 for ever
	// A pause rule (set by Pause) holds the next matching call instead of
	// failing it: reached is closed when the call arrives, and the call
	// goes on once release is closed.
	reached, release chan struct{}
}

// Faulty is an fsys.FS that passes every call to FS unless a fault set with
// Fail matches it. The zero value uses the real file system. All methods are
// safe for concurrent use.
type Faulty struct {
	FS fsys.FS // the file system underneath; nil means fsys.OS

	mu    sync.Mutex // guards rules and calls
	rules []rule
	calls map[string]int
}

var _ fsys.FS = (*Faulty)(nil)

// Fail makes the next times calls of op on path fail with err (times < 0:
// every call; path "" matches every path). For ShortWrite, err is ignored:
// the write stores half of its bytes and reports success with a short count.
func (f *Faulty) Fail(op, path string, err error, times int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if path != "" {
		path = filepath.Clean(path)
	}
	f.rules = append(f.rules, rule{op: op, path: path, err: err, times: times})
}

// Pause holds the next call of op on path (path "" matches every path)
// until release is called, so that a test can act while, say, a save has
// created its temporary file and not yet renamed it. reached is closed when
// the call arrives. Call release exactly once; the call then goes on to the
// file system (or to a fault set with Fail).
func (f *Faulty) Pause(op, path string) (reached <-chan struct{}, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if path != "" {
		path = filepath.Clean(path)
	}
	r := rule{op: op, path: path, times: 1, reached: make(chan struct{}), release: make(chan struct{})}
	f.rules = append(f.rules, r)
	return r.reached, func() { close(r.release) }
}

// Clear removes every fault.
func (f *Faulty) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// Calls returns how many times op was called, failed or not.
func (f *Faulty) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *Faulty) under() fsys.FS {
	if f.FS == nil {
		return fsys.OS{}
	}
	return f.FS
}

// fault counts a call and returns the error to inject, if any. A pause
// rule that matches holds the call first.
func (f *Faulty) fault(op, path string) error {
	if release := f.paused(op, path); release != nil {
		<-release
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = make(map[string]int)
	}
	f.calls[op]++
	for i := range f.rules {
		r := &f.rules[i]
		if r.reached != nil || !r.matches(op, path) {
			continue
		}
		if r.times > 0 {
			r.times--
		}
		if r.err == nil {
			return fs.ErrInvalid
		}
		return r.err
	}
	return nil
}

// paused consumes a pause rule that matches op on path, signals that the
// call arrived, and returns the channel to wait on; nil if none matches.
func (f *Faulty) paused(op, path string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.rules {
		r := &f.rules[i]
		if r.reached != nil && r.matches(op, path) {
			r.times = 0
			close(r.reached)
			return r.release
		}
	}
	return nil
}

func (r *rule) matches(op, path string) bool {
	return r.op == op && r.times != 0 && (r.path == "" || r.path == filepath.Clean(path))
}

func (f *Faulty) shortWrite(path string) bool {
	return f.fault(ShortWrite, path) != nil
}

// MkdirAll implements fsys.FS.
func (f *Faulty) MkdirAll(dir string, perm fs.FileMode) error {
	if err := f.fault(OpMkdir, dir); err != nil {
		return err
	}
	return f.under().MkdirAll(dir, perm)
}

// Peek implements fsys.FS; it fails where a read of name would.
func (f *Faulty) Peek(name string, head, tail int) (first, last []byte, info fs.FileInfo, err error) {
	if err := f.fault(OpRead, name); err != nil {
		return nil, nil, nil, err
	}
	return f.under().Peek(name, head, tail)
}

// ReadFile implements fsys.FS.
func (f *Faulty) ReadFile(name string) ([]byte, error) {
	if err := f.fault(OpRead, name); err != nil {
		return nil, err
	}
	return f.under().ReadFile(name)
}

// CreateExcl implements fsys.FS.
func (f *Faulty) CreateExcl(name string, perm fs.FileMode) (fsys.File, error) {
	target := name
	if base, ok := fsys.TempOf(filepath.Base(name)); ok {
		target = filepath.Join(filepath.Dir(name), base)
	}
	if err := f.fault(OpCreate, target); err != nil {
		return nil, err
	}
	file, err := f.under().CreateExcl(name, perm)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, f: f, target: target}, nil
}

// Rename implements fsys.FS.
func (f *Faulty) Rename(oldpath, newpath string) error {
	if err := f.fault(OpRename, newpath); err != nil {
		return err
	}
	return f.under().Rename(oldpath, newpath)
}

// Link implements fsys.FS.
func (f *Faulty) Link(oldname, newname string) error {
	if err := f.fault(OpLink, newname); err != nil {
		return err
	}
	return f.under().Link(oldname, newname)
}

// Remove implements fsys.FS.
func (f *Faulty) Remove(name string) error {
	if err := f.fault(OpRemove, name); err != nil {
		return err
	}
	return f.under().Remove(name)
}

// ReadDirNames implements fsys.FS.
func (f *Faulty) ReadDirNames(dir string) ([]string, error) {
	if err := f.fault(OpReadDir, dir); err != nil {
		return nil, err
	}
	return f.under().ReadDirNames(dir)
}

// SyncDir implements fsys.FS.
func (f *Faulty) SyncDir(dir string) error {
	if err := f.fault(OpSyncDir, dir); err != nil {
		return err
	}
	return f.under().SyncDir(dir)
}

// TryLock implements fsys.FS.
func (f *Faulty) TryLock(name string, perm fs.FileMode) (fsys.Lock, error) {
	if err := f.fault(OpLock, name); err != nil {
		return nil, err
	}
	l, err := f.under().TryLock(name, perm)
	if err != nil {
		return nil, err
	}
	return &faultyLock{Lock: l, f: f, name: name}, nil
}

type faultyLock struct {
	fsys.Lock
	f    *Faulty
	name string
}

func (l *faultyLock) Stale() (bool, error) {
	if err := l.f.fault(OpLock, l.name); err != nil {
		return false, err
	}
	return l.Lock.Stale()
}

type faultyFile struct {
	fsys.File
	f      *Faulty
	target string
}

func (ff *faultyFile) Write(p []byte) (int, error) {
	if err := ff.f.fault(OpWrite, ff.target); err != nil {
		return 0, err
	}
	if ff.f.shortWrite(ff.target) {
		n, err := ff.File.Write(p[:len(p)/2])
		return n, err
	}
	return ff.File.Write(p)
}

func (ff *faultyFile) Sync() error {
	if err := ff.f.fault(OpFsync, ff.target); err != nil {
		return err
	}
	return ff.File.Sync()
}

func (ff *faultyFile) Close() error {
	if err := ff.f.fault(OpClose, ff.target); err != nil {
		_ = ff.File.Close() // do not leak the descriptor
		return err
	}
	return ff.File.Close()
}

// OpenAppend implements fsys.FS.
func (f *Faulty) OpenAppend(name string, perm fs.FileMode, create bool) (fsys.AppendFile, error) {
	if err := f.fault(OpAppend, name); err != nil {
		return nil, err
	}
	file, err := f.under().OpenAppend(name, perm, create)
	if err != nil {
		return nil, err
	}
	return &faultyAppend{faultyFile: faultyFile{File: file, f: f, target: name}, af: file}, nil
}

// Lstat implements fsys.FS.
func (f *Faulty) Lstat(name string) (fs.FileInfo, error) {
	if err := f.fault(OpExists, name); err != nil {
		return nil, err
	}
	return f.under().Lstat(name)
}

type faultyAppend struct {
	faultyFile
	af fsys.AppendFile
}

func (fa *faultyAppend) Size() (int64, error) { return fa.af.Size() }

func (fa *faultyAppend) Truncate(size int64) error {
	if err := fa.f.fault(OpTruncate, fa.target); err != nil {
		return err
	}
	return fa.af.Truncate(size)
}
