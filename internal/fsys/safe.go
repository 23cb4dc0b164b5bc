package fsys

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUnsafe is returned, inside an *fs.PathError that names the path, when
// a file or directory is not what the checkpoint's own writes leave there:
// a file that is not a regular file (a FIFO, a device, a socket, a
// directory), a file with a hard link outside its directory, a file or
// directory owned by another user than this process's or root, or a
// directory that other users may write. The message says what was found
// and how to fix it.
var ErrUnsafe = errors.New("unsafe")

// unsafeError says what was found at a path and what to do about it.
type unsafeError struct {
	found, fix string
}

func (e *unsafeError) Error() string { return fmt.Sprintf("%v: %s: %s", ErrUnsafe, e.found, e.fix) }

// Is makes errors.Is(err, ErrUnsafe) true.
func (e *unsafeError) Is(target error) bool { return target == ErrUnsafe }

func unsafe(op, name, found, fix string) error {
	return &fs.PathError{Op: op, Path: name, Err: &unsafeError{found: found, fix: fix}}
}

// typeName names the kind of file st describes, for an error.
func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a named pipe (FIFO)"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a unix socket"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symlink"
	}
	return fmt.Sprintf("a file of type %#o", mode&unix.S_IFMT)
}

// ownedByUs reports whether uid is this process's effective uid or root:
// the users who may own what a checkpoint reads and writes.
func ownedByUs(uid uint32) bool { return uid == 0 || uid == uint32(os.Geteuid()) }

// checkFile checks st, the fstat of the file opened at name, before the
// file is used: a regular file, owned by this process's user or root,
// with no hard link outside its directory (with oneLink, no other name at
// all). The checkpoint's protocol itself links its files within their
// directory (path and .prev share a file between the two renames of a
// save, a quarantined or kept copy shares it with the path until the path
// is replaced), and a crash can leave such a pair behind; a name elsewhere
// is another thing: the checkpoint must not read, write or truncate a file
// someone linked into its directory from outside, such as /etc/shadow.
func checkFile(op, name string, st *unix.Stat_t, oneLink bool) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return unsafe(op, name, "it is "+typeName(st.Mode)+", not a regular file",
			"remove it (rm "+name+"); the daemon creates its files itself")
	}
	if !ownedByUs(st.Uid) {
		return unsafe(op, name, fmt.Sprintf("it is owned by uid %d, neither this process's uid %d nor root", st.Uid, os.Geteuid()),
			fmt.Sprintf("if it is this daemon's file, chown %d %s; otherwise remove it", os.Geteuid(), name))
	}
	if st.Nlink <= 1 {
		return nil
	}
	if oneLink {
		return unsafe(op, name, fmt.Sprintf("it has %d hard links (another name shares the file)", st.Nlink),
			"remove it (rm "+name+"); the daemon creates it again")
	}
	inside, err := linksInDir(filepath.Dir(name), st)
	if err != nil {
		return &fs.PathError{Op: op + ": count hard links", Path: name, Err: err}
	}
	if uint64(inside) < uint64(st.Nlink) {
		return unsafe(op, name, fmt.Sprintf("it has %d hard links, %d of them outside its directory (a name elsewhere shares the file)", st.Nlink, uint64(st.Nlink)-uint64(inside)),
			fmt.Sprintf("give it a file of its own: cp %s %s.copy && mv %s.copy %s", name, name, name, name))
	}
	return nil
}

// linksInDir counts the names in dir that lead to the file st describes.
func linksInDir(dir string, st *unix.Stat_t) (int, error) {
	d, err := openDir(dir)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		var o unix.Stat_t
		if unix.Fstatat(int(d.Fd()), name, &o, unix.AT_SYMLINK_NOFOLLOW) == nil && o.Dev == st.Dev && o.Ino == st.Ino {
			n++
		}
	}
	return n, nil
}

// openDir opens a directory for listing or fsync without blocking: with
// O_DIRECTORY, a FIFO planted at its name is refused (ENOTDIR) before it
// is opened.
func openDir(dir string) (*os.File, error) {
	fd, err := retry(func() (int, error) {
		return unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// retry calls open until it is not interrupted by a signal.
func retry(open func() (int, error)) (int, error) {
	for {
		fd, err := open()
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// openChecked opens name with flag, without following a symlink at name
// and without blocking (a FIFO or a device would block an open for
// reading until someone opens its other end, and no context can cancel
// that), checks what it opened (checkFile) before anything is read or
// written, and then turns O_NONBLOCK off again, so that the file is an
// ordinary blocking *os.File. A symlink is an error wrapping ELOOP; what
// checkFile refuses an error wrapping ErrUnsafe.
func openChecked(op, name string, flag int, perm fs.FileMode, oneLink bool) (*os.File, *unix.Stat_t, error) {
	fd, st, err := openCheckedFD(op, name, flag, perm, oneLink)
	if err != nil {
		return nil, nil, err
	}
	// Cleared before os.NewFile, which would otherwise try to register a
	// non-blocking descriptor with the runtime's poller (an epoll_ctl(2)
	// that a regular file refuses): one system call either way.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, nil, &fs.PathError{Op: op + ": fcntl", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), st, nil
}

// openCheckedFD is openChecked's open and checks, returning the raw
// descriptor, still O_NONBLOCK: reads and writes of the regular file
// checkFile let through ignore the flag. The two opens of a commit (the
// checkpoint's Peek, the journal's append) use it with rawFile, which
// spares each the fcntl(2) that clears the flag and the one os.NewFile
// makes to read it: four of a commit's system calls (issue 35).
func openCheckedFD(op, name string, flag int, perm fs.FileMode, oneLink bool) (int, *unix.Stat_t, error) {
	// An lstat first: what is plainly not a regular file is refused
	// without being opened at all (opening some devices does something).
	// The fstat below is what counts: the name may change in between.
	var pre unix.Stat_t
	if err := unix.Lstat(name, &pre); err == nil && pre.Mode&unix.S_IFMT != unix.S_IFREG && pre.Mode&unix.S_IFMT != unix.S_IFLNK {
		return -1, nil, checkFile(op, name, &pre, oneLink)
	}
	fd, err := retry(func() (int, error) {
		return unix.Open(name, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, uint32(perm))
	})
	switch {
	case errors.Is(err, unix.ELOOP):
		return -1, nil, &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("%w: refusing to follow a symlink", err)}
	case errors.Is(err, unix.ENXIO):
		// A FIFO without a reader, opened for writing, or a socket.
		return -1, nil, unsafe(op, name, "it is not a regular file (a FIFO or a socket)", "remove it (rm "+name+"); the daemon creates its files itself")
	case err != nil:
		return -1, nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, nil, &fs.PathError{Op: op + ": fstat", Path: name, Err: err}
	}
	if err := checkFile(op, name, &st, oneLink); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, &st, nil
}

// statInfo is the fs.FileInfo of the fstat an open made (openChecked), so
// that its caller need not fstat the file again. Its SameFile compares
// device and inode with another's, an os.Lstat's included.
type statInfo struct {
	name string
	st   *unix.Stat_t
}

func (i statInfo) Name() string       { return filepath.Base(i.name) }
func (i statInfo) Size() int64        { return i.st.Size }
func (i statInfo) Mode() fs.FileMode  { return fs.FileMode(i.st.Mode & 0o777) } // a regular file: checkFile says so
func (i statInfo) ModTime() time.Time { return time.Unix(i.st.Mtim.Unix()) }
func (i statInfo) IsDir() bool        { return false }
func (i statInfo) Sys() any           { return i.st }

// SameFile reports whether o describes the same file: the same device
// and inode.
func (i statInfo) SameFile(o fs.FileInfo) bool {
	switch st := o.Sys().(type) {
	case *syscall.Stat_t:
		return uint64(st.Dev) == uint64(i.st.Dev) && uint64(st.Ino) == uint64(i.st.Ino)
	case *unix.Stat_t:
		return uint64(st.Dev) == uint64(i.st.Dev) && uint64(st.Ino) == uint64(i.st.Ino)
	}
	return false
}

// CheckDir returns an error wrapping ErrUnsafe unless dir is a directory
// owned by this process's user or root that neither its group nor others
// may write, unless it is sticky (like /tmp, where others may create
// names but not remove or rename this user's). Anyone who may write the
// directory may plant, remove or swap the names a checkpoint uses.
//
// Only dir is checked, not the directories above it: a writable parent
// lets another user move dir away and put another in its place, which
// the checks on each file then meet (another user's files). See
// WritableAbove.
func CheckDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	return checkDirStat(dir, &st)
}

func checkDirStat(dir string, st *unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unsafe("check directory", dir, "it is "+typeName(st.Mode)+", not a directory", "give a path in a directory")
	}
	if !ownedByUs(st.Uid) {
		return unsafe("check directory", dir, fmt.Sprintf("the directory is owned by uid %d, neither this process's uid %d nor root, who may plant or swap files in it", st.Uid, os.Geteuid()),
			fmt.Sprintf("chown %d %s, or keep the checkpoint in a directory of this user's or root's", os.Geteuid(), dir))
	}
	if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		return unsafe("check directory", dir, fmt.Sprintf("the directory is writable by its group or others (mode %#o) and not sticky: they may plant, remove or swap the files in it", st.Mode&0o7777),
			"chmod go-w "+dir)
	}
	return nil
}

// WritableAbove returns the first directory above dir (after symlinks)
// that CheckDir would refuse, or "" if there is none; for a warning, not
// an error: a test's t.TempDir() sits in a /tmp that some machines make
// 0777 without the sticky bit.
func WritableAbove(dir string) string {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return ""
	}
	for p := filepath.Dir(real); ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && checkDirStat(p, &st) != nil {
			return p
		}
		if filepath.Dir(p) == p {
			return ""
		}
	}
}

// rawFile is a regular file's descriptor from openCheckedFD, used without
// an *os.File: Write, Sync, Close, ReadAt and Truncate are the system
// calls themselves, each retried on EINTR (but close).
type rawFile struct {
	fd   int
	name string
}

func (f *rawFile) Name() string { return f.name }

func (f *rawFile) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Write(f.fd, b[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, &fs.PathError{Op: "write", Path: f.name, Err: err}
		}
		if m == 0 {
			return n, &fs.PathError{Op: "write", Path: f.name, Err: io.ErrShortWrite}
		}
		n += m
	}
	return n, nil
}

func (f *rawFile) Sync() error {
	if err := ignoringEINTR(func() error { return unix.Fsync(f.fd) }); err != nil {
		return &fs.PathError{Op: "sync", Path: f.name, Err: err}
	}
	return nil
}

// Close closes the descriptor once; a second Close fails with
// os.ErrClosed rather than close a number the process has reused.
func (f *rawFile) Close() error {
	if f.fd < 0 {
		return &fs.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	fd := f.fd
	f.fd = -1
	if err := unix.Close(fd); err != nil {
		return &fs.PathError{Op: "close", Path: f.name, Err: err}
	}
	return nil
}

// ReadAt reads len(b) bytes at off, fewer at the end of the file.
func (f *rawFile) ReadAt(b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Pread(f.fd, b[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, &fs.PathError{Op: "read", Path: f.name, Err: err}
		}
		if m == 0 {
			return n, io.EOF
		}
		n += m
	}
	return n, nil
}

func (f *rawFile) Truncate(size int64) error {
	if err := ignoringEINTR(func() error { return unix.Ftruncate(f.fd, size) }); err != nil {
		return &fs.PathError{Op: "truncate", Path: f.name, Err: err}
	}
	return nil
}

func (f *rawFile) size() (int64, error) {
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(f.fd, &st) }); err != nil {
		return 0, &fs.PathError{Op: "stat", Path: f.name, Err: err}
	}
	return st.Size, nil
}

func ignoringEINTR(fn func() error) error {
	for {
		if err := fn(); err != unix.EINTR {
			return err
		}
	}
}
