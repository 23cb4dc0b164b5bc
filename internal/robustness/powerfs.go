package robustness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/phaseshift/phaseshift/internal/fsys"
)

// ErrPowerOff is returned by every call a PowerFS gets after its power was
// cut: the process that made them is as good as dead.
var ErrPowerOff = errors.New("power is off")

// Survival says which of the writes that were not yet made durable a power
// cut keeps.
type Survival int

// The survival models. Durable state (fsynced data, directory entries of a
// synced directory) always survives; these differ in what else does.
const (
	// Drop keeps nothing that was not fsynced: the least a POSIX file
	// system owes, and what a disk with a volatile cache may leave.
	Drop Survival = iota
	// Keep keeps every write, as if the cache had been flushed just
	// before the cut.
	Keep
	// Half keeps the first half of the pending directory operations, in
	// the order they were made, and half of every file's unsynced bytes:
	// a journaling file system (ext4, xfs) that had committed part of its
	// journal, with file data torn.
	Half
	// Reorder keeps, for every directory entry, any one of the values it
	// took since it was last made durable, independently of the other
	// entries, and half of every file's unsynced bytes: a file system that
	// orders nothing without fsync, which POSIX allows. Each combination
	// is one image (see Choices).
	Reorder
)

func (s Survival) String() string {
	return [...]string{"drop", "keep", "half", "reorder"}[s]
}

// PowerFS is an in-memory fsys.FS under a root directory that records, for
// every file, which bytes are durable (fsynced) and, for every directory
// entry, whether it is durable (its directory was fsynced since) or
// pending. A test cuts the power before any call (CutAt) or between calls
// (Cut); from then on every call fails with ErrPowerOff, and Image tells
// what a disk could hold afterwards under each Survival model.
//
// All methods are safe for concurrent use.
type PowerFS struct {
	// NoDirSync makes SyncDir a no-op that reports success, and NoFileSync
	// does the same to File.Sync: file systems (or libraries) that skip
	// the fsync, for tests that prove a checker notices.
	NoDirSync, NoFileSync bool

	root string

	mu     sync.Mutex // guards every field below
	top    *node
	log    []dirOp // directory changes not yet durable, oldest first
	seq    int     // orders dirOps; one rename is one seq
	steps  int     // calls made
	cutAt  int     // the call before which the power goes; < 0: none armed
	off    bool
	locked map[*node]bool
}

// node is a file or a directory.
type node struct {
	dir    bool
	perm   fs.FileMode
	data   []byte // a file's bytes as the running system sees them
	synced []byte // what of them is durable
	// A directory's entries as the running system sees them, and as they
	// were when it was last fsynced.
	entries, durable map[string]*node
}

// dirOp is one change to a directory entry: name bound to target, or
// removed (target nil).
type dirOp struct {
	seq    int
	dir    *node
	name   string
	target *node
}

var _ fsys.FS = (*PowerFS)(nil)

// NewPowerFS returns an empty PowerFS whose root directory, root (an
// absolute, clean path that need not exist on the real disk), is durable.
func NewPowerFS(root string) *PowerFS {
	return &PowerFS{root: filepath.Clean(root), top: newDir(0o755), cutAt: -1, locked: map[*node]bool{}}
}

// newDir returns a directory with no entries, durable or not.
func newDir(perm fs.FileMode) *node {
	return &node{dir: true, perm: perm, entries: map[string]*node{}, durable: map[string]*node{}}
}

// Root returns the root directory.
func (p *PowerFS) Root() string { return p.root }

// Steps returns how many calls the FS has served (or refused once the
// power was off, which counts the first refused one).
func (p *PowerFS) Steps() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.steps
}

// CutAt arms a power cut just before call number n (from 0, counted over
// the FS's life, File methods included).
func (p *PowerFS) CutAt(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutAt = n
}

// Cut cuts the power now.
func (p *PowerFS) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.off = true
}

// Off reports whether the power was cut.
func (p *PowerFS) Off() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.off
}

// step counts a call and says whether it may run. The caller holds mu.
func (p *PowerFS) step() error {
	if p.off {
		return ErrPowerOff
	}
	if p.steps == p.cutAt {
		p.off = true
		p.steps++
		return ErrPowerOff
	}
	p.steps++
	return nil
}

// WriteDurable creates name with data, as durable as if it had been there
// for long: its parents too. It is for setting up a test and takes no step.
func (p *PowerFS) WriteDurable(name string, data []byte, perm fs.FileMode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	parts, err := p.split(name)
	if err != nil {
		return err
	}
	d := p.top
	for _, part := range parts[:len(parts)-1] {
		c := d.entries[part]
		if c == nil {
			c = newDir(0o700)
			d.entries[part], d.durable[part] = c, c
		}
		d = c
	}
	f := &node{perm: perm, data: slices.Clone(data), synced: slices.Clone(data)}
	last := parts[len(parts)-1]
	d.entries[last], d.durable[last] = f, f
	return nil
}

// split returns the components of name below the root.
func (p *PowerFS) split(name string) ([]string, error) {
	rel, err := filepath.Rel(p.root, filepath.Clean(name))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("powerfs: %s is outside the root %s", name, p.root)
	}
	if rel == "." {
		return nil, nil
	}
	return strings.Split(rel, "/"), nil
}

// parent returns the directory holding name and name's last component.
func (p *PowerFS) parent(op, name string) (*node, string, error) {
	parts, err := p.split(name)
	if err != nil {
		return nil, "", err
	}
	if len(parts) == 0 {
		return nil, "", &fs.PathError{Op: op, Path: name, Err: syscall.EINVAL}
	}
	d := p.top
	for _, part := range parts[:len(parts)-1] {
		c := d.entries[part]
		if c == nil {
			return nil, "", &fs.PathError{Op: op, Path: name, Err: syscall.ENOENT}
		}
		if !c.dir {
			return nil, "", &fs.PathError{Op: op, Path: name, Err: syscall.ENOTDIR}
		}
		d = c
	}
	return d, parts[len(parts)-1], nil
}

func (p *PowerFS) lookup(op, name string) (*node, error) {
	parts, err := p.split(name)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return p.top, nil
	}
	d, last, err := p.parent(op, name)
	if err != nil {
		return nil, err
	}
	n := d.entries[last]
	if n == nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: syscall.ENOENT}
	}
	return n, nil
}

// bind changes an entry and logs the change as pending.
func (p *PowerFS) bind(seq int, d *node, name string, target *node) {
	if target == nil {
		delete(d.entries, name)
	} else {
		d.entries[name] = target
	}
	p.log = append(p.log, dirOp{seq: seq, dir: d, name: name, target: target})
}

func (p *PowerFS) nextSeq() int {
	p.seq++
	return p.seq
}

// MkdirAll implements fsys.FS.
func (p *PowerFS) MkdirAll(dir string, perm fs.FileMode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.step(); err != nil {
		return err
	}
	parts, err := p.split(dir)
	if err != nil {
		return err
	}
	d := p.top
	for _, part := range parts {
		c := d.entries[part]
		if c == nil {
			c = newDir(perm)
			p.bind(p.nextSeq(), d, part, c)
		} else if !c.dir {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		d = c
	}
	return nil
}

// ReadFile implements fsys.FS.
func (p *PowerFS) ReadFile(name string) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.step(); err != nil {
		return nil, err
	}
	n, err := p.lookup("open", name)
	if err != nil {
		return nil, err
	}
	if n.dir {
		return nil, &fs.PathError{Op: "read", Path: name, Err: syscall.EISDIR}
	}
	return slices.Clone(n.data), nil
}

// Peek implements fsys.FS.
func (p *PowerFS) Peek(name string, head, tail int) (first, last []byte, info fs.FileInfo, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.step(); err != nil {
		return nil, nil, nil, err
	}
	n, err := p.lookup("open", name)
	if err != nil {
		return nil, nil, nil, err
	}
	if n.dir {
		return nil, nil, nil, &fs.PathError{Op: "read", Path: name, Err: syscall.EISDIR}
	}
	size := len(n.data)
	first = slices.Clone(n.data[:min(head, size)])
	last = slices.Clone(n.data[size-min(tail, size):])
	return first, last, &powerInfo{n: n, name: filepath.Base(name), size: int64(size), mode: n.perm}, nil
}

// CreateExcl implements fsys.FS: it fails with EEXIST if name is taken.
func (p *PowerFS) CreateExcl(name string, perm fs.FileMode) (fsys.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.step(); err != nil {
		return nil, err
	}
	d, last, err := p.parent("open", name)
	if err != nil {
		return nil, err
	}
	if d.entries[last] != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EEXIST}
	}
	n := &node{perm: perm}
	p.bind(p.nextSeq(), d, last, n)
	return &powerFile{p: p, n: n, name: name}, nil
}

// Rename implements fsys.FS: one atomic change of two entries.
func (p *PowerFS) Rename(oldpath, newpath string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.step(); err != nil {
		return err
	}
	od, oname, err := p.parent("rename", oldpath)
	if err != nil {
		return err
	}
	n := od.entries[oname]
	if n == nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: syscall.ENOENT}
	}
	nd, nname, err := p.parent("rename", newpath)
	if err != nil {
		return err
	}
	if old := nd.entries[nname]; old != nil && old.dir {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: syscall.EISDIR}
	}
	if od == nd && oname == nname {
		return nil
	}
	seq := p.nextSeq()
	p.bind(seq, od, oname, nil)
	p.bind(seq, nd, nname, n)
	return nil
}

// Link implements fsys.FS.
func (p *PowerFS) Link(oldname, newname string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.step(); err != nil {
		return err
	}
	n, err := p.lookup("link", oldname)
	if err != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: syscall.ENOENT}
	}
	d, name, err := p.parent("link", newname)
	if err != nil {
		return err
	}
	if d.entries[name] != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: syscall.EEXIST}
	}
	p.bind(p.nextSeq(), d, name, n)
	return nil
}

// Remove implements fsys.FS.
func (p *PowerFS) Remove(name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.step(); err != nil {
		return err
	}
	d, last, err := p.parent("remove", name)
	if err != nil {
		return err
	}
	n := d.entries[last]
	if n == nil {
		return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOENT}
	}
	if n.dir && len(n.entries) > 0 {
		return &fs.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
	}
	p.bind(p.nextSeq(), d, last, nil)
	return nil
}

// ReadDirNames implements fsys.FS.
func (p *PowerFS) ReadDirNames(dir string) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.step(); err != nil {
		return nil, err
	}
	d, err := p.lookup("open", dir)
	if err != nil {
		return nil, err
	}
	if !d.dir {
		return nil, &fs.PathError{Op: "readdirent", Path: dir, Err: syscall.ENOTDIR}
	}
	names := make([]string, 0, len(d.entries))
	for name := range d.entries {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// SyncDir implements fsys.FS: dir's entries become durable (not the
// entries of its subdirectories, nor its own entry in its parent).
func (p *PowerFS) SyncDir(dir string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.step(); err != nil {
		return err
	}
	d, err := p.lookup("open", dir)
	if err != nil {
		return err
	}
	if !d.dir {
		return &fs.PathError{Op: "sync", Path: dir, Err: syscall.ENOTDIR}
	}
	if p.NoDirSync {
		return nil
	}
	d.durable = make(map[string]*node, len(d.entries))
	for name, n := range d.entries {
		d.durable[name] = n
	}
	p.log = slices.DeleteFunc(p.log, func(o dirOp) bool { return o.dir == d })
	return nil
}
