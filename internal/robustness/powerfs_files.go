package robustness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/phaseshift/phaseshift/internal/fsys"
)

// The PowerFS's locks, append files (the journal's), and what Lstat and
// CheckDir see.

// TryLock implements fsys.FS with an in-memory lock on the file's node.
func (p *PowerFS) TryLock(name string) (fsys.Lock, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.step(); err != nil {
		return nil, err
	}
	d, last, err := p.parent("open", name)
	if err != nil {
		return nil, err
	}
	n := d.entries[last]
	if n == nil {
		n = &node{perm: 0o600}
		p.bind(p.nextSeq(), d, last, n)
	}
	if p.locked[n] {
		return nil, fsys.ErrWouldBlock
	}
	p.locked[n] = true
	return &powerLock{p: p, n: n, name: name}, nil
}

// powerLock is a lock on a node, which stays locked when its name goes.
type powerLock struct {
	p    *PowerFS
	n    *node
	name string
}

func (l *powerLock) Unlock() error {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	delete(l.p.locked, l.n)
	return nil
}

// Stale reports whether name no longer leads to the locked node.
func (l *powerLock) Stale() (bool, error) {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	if err := l.p.step(); err != nil {
		return false, err
	}
	n, err := l.p.lookup("lstat", l.name)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return n != l.n, nil
}

// OpenAppend implements fsys.FS: with create, like CreateExcl; without,
// the file must exist, and writes extend it.
func (p *PowerFS) OpenAppend(name string, perm fs.FileMode, create bool) (fsys.AppendFile, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.step(); err != nil {
		return nil, err
	}
	d, last, err := p.parent("open", name)
	if err != nil {
		return nil, err
	}
	n := d.entries[last]
	switch {
	case create && n != nil:
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EEXIST}
	case create:
		n = &node{perm: perm}
		p.bind(p.nextSeq(), d, last, n)
	case n == nil:
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.ENOENT}
	case n.dir:
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	}
	return &powerFile{p: p, n: n, name: name}, nil
}

// CheckDir implements fsys.FS: a simulated tree has no owners, so only
// the directory's mode is checked. It is not a step: it changes nothing
// a power cut could undo.
func (p *PowerFS) CheckDir(dir string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, err := p.lookup("stat", dir)
	switch {
	case err != nil:
		return err
	case !n.dir:
		return &fs.PathError{Op: "check directory", Path: dir, Err: fmt.Errorf("%w: it is not a directory", fsys.ErrUnsafe)}
	case n.perm&0o022 != 0:
		return &fs.PathError{Op: "check directory", Path: dir, Err: fmt.Errorf("%w: the directory is writable by its group or others (mode %#o): chmod go-w %s", fsys.ErrUnsafe, uint32(n.perm), dir)}
	}
	return nil
}

// Lstat implements fsys.FS.
func (p *PowerFS) Lstat(name string) (fs.FileInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.step(); err != nil {
		return nil, err
	}
	n, err := p.lookup("lstat", name)
	if err != nil {
		return nil, err
	}
	mode := n.perm
	if n.dir {
		mode |= fs.ModeDir
	}
	return &powerInfo{n: n, name: filepath.Base(name), size: int64(len(n.data)), mode: mode}, nil
}

// powerInfo is what PowerFS.Lstat returns.
type powerInfo struct {
	n    *node
	name string
	size int64
	mode fs.FileMode
}

func (i *powerInfo) Name() string       { return i.name }
func (i *powerInfo) Size() int64        { return i.size }
func (i *powerInfo) Mode() fs.FileMode  { return i.mode }
func (i *powerInfo) ModTime() time.Time { return time.Time{} }
func (i *powerInfo) IsDir() bool        { return i.mode.IsDir() }
func (i *powerInfo) Sys() any           { return nil }

// SameFile is os.SameFile for PowerFS: the same node.
func (i *powerInfo) SameFile(o fs.FileInfo) bool {
	j, ok := o.(*powerInfo)
	return ok && j.n == i.n
}

type powerFile struct {
	p      *PowerFS
	n      *node
	name   string
	closed bool
}

func (f *powerFile) Name() string { return f.name }

func (f *powerFile) Write(b []byte) (int, error) {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if err := f.p.step(); err != nil {
		return 0, err
	}
	if f.closed {
		return 0, os.ErrClosed
	}
	f.n.data = append(f.n.data, b...)
	return len(b), nil
}

func (f *powerFile) Sync() error {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if err := f.p.step(); err != nil {
		return err
	}
	if f.closed {
		return os.ErrClosed
	}
	if !f.p.NoFileSync {
		f.n.synced = slices.Clone(f.n.data)
	}
	return nil
}

// Size returns the file's size as the running system sees it.
func (f *powerFile) Size() (int64, error) {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if err := f.p.step(); err != nil {
		return 0, err
	}
	return int64(len(f.n.data)), nil
}

// Truncate cuts the file; like a write, the cut is durable only once the
// file is synced.
func (f *powerFile) Truncate(size int64) error {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if err := f.p.step(); err != nil {
		return err
	}
	if f.closed {
		return os.ErrClosed
	}
	if size < int64(len(f.n.data)) {
		f.n.data = slices.Clone(f.n.data[:size])
	}
	return nil
}

func (f *powerFile) Close() error {
	f.p.mu.Lock()
	defer f.p.mu.Unlock()
	if err := f.p.step(); err != nil {
		return err
	}
	if f.closed {
		return os.ErrClosed
	}
	f.closed = true
	return nil
}
