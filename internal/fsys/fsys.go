// Package fsys is the file-system seam under package checkpoint: every
// operation a checkpoint file makes goes through an [FS], so that tests in
// this module can put a fault-injecting or power-cut-recording file system
// under a real checkpoint.File.
//
// Production code gets [OS]. A test selects another FS with the option
// fsystest.WithFS, which is package internal/engine's WithFS: nothing in
// the public API of the module exposes the seam (package checkpoint does
// not re-export it), and no caller's context can change which file system
// a checkpoint uses.
//
// # Caveats
//
// The seam is as narrow as the checkpoint's write protocol needs, not a
// general file-system abstraction: whole-file reads, exclusive creation of
// temporary files, appends (for the journal), rename, link, remove,
// directory fsync and an advisory lock that can tell when its file was
// removed.
//
// [OS] opens every existing file without following a symlink and without
// blocking, and checks it (a regular file of this user's or root's, with
// no hard link from outside its directory) before use; [CheckDir] checks a
// directory; see safe.go. A simulated FS checks what it can.
//
// Temporary files are named by [TempName], and only [TempOf] recognises
// them: the name is this module's, not a dependency's, so cleanup never
// depends on another library's private naming.
package fsys

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrWouldBlock is returned by [FS.TryLock] when another open file
// description holds the lock.
var ErrWouldBlock = errors.New("lock is held")

// File is a file being written.
type File interface {
	Name() string
	Write(p []byte) (int, error)
	Sync() error
	Close() error
}

// Lock is an exclusive advisory lock taken by [FS.TryLock].
type Lock interface {
	// Unlock releases the lock.
	Unlock() error
	// Stale reports whether the locked file is no longer the file at the
	// name it was locked under: it was removed or replaced (with its
	// directory, say). Another process can then create and lock a new
	// file at that name, so the lock no longer keeps anyone out.
	Stale() (bool, error)
}

// FS is what a checkpoint file needs from the file system.
type FS interface {
	// MkdirAll creates dir and its parents with perm where missing.
	MkdirAll(dir string, perm fs.FileMode) error
	// ReadFile reads a whole file without following a symlink at name.
	ReadFile(name string) ([]byte, error)
	// CreateExcl creates the file name for writing, with permissions
	// exactly perm. It fails, with an error matching fs.ErrExist, if
	// anything (a symlink included) is already at name.
	CreateExcl(name string, perm fs.FileMode) (File, error)
	// Rename atomically replaces newpath with oldpath.
	Rename(oldpath, newpath string) error
	// Link makes newname a hard link to oldname (not following symlinks).
	Link(oldname, newname string) error
	// Remove removes a file.
	Remove(name string) error
	// ReadDirNames lists the names in dir.
	ReadDirNames(dir string) ([]string, error)
	// SyncDir makes dir's entries durable (fsync of the directory).
	SyncDir(dir string) error
	// TryLock takes an exclusive advisory lock on name, creating it with
	// mode 0600, without waiting; it returns ErrWouldBlock when the lock
	// is held. The lock lasts until it is unlocked or the process dies.
	// An existing lock file is opened only if it is a regular file of
	// this process's user or root with no other name (an error wrapping
	// ErrUnsafe otherwise), and is made 0600: anyone who can open it can
	// hold it, and keep the daemon from starting.
	TryLock(name string) (Lock, error)
	// OpenAppend opens name for appending, without following a symlink.
	// With create, name must not exist (fs.ErrExist otherwise) and is
	// created with permissions exactly perm; without, it must exist
	// (fs.ErrNotExist otherwise).
	OpenAppend(name string, perm fs.FileMode, create bool) (AppendFile, error)
	// Lstat describes what is at name (a symlink included, not followed);
	// its error matches fs.ErrNotExist when nothing is.
	Lstat(name string) (fs.FileInfo, error)
	// Peek reads the first head and the last tail bytes of the regular
	// file at name (fewer when it is shorter) and describes it, through one
	// open that does not follow a symlink: what a journal's append checks
	// before it trusts that the file it follows is still the one it read
	// or wrote, without reading the whole file.
	Peek(name string, head, tail int) (first, last []byte, info fs.FileInfo, err error)
	// CheckDir returns an error wrapping ErrUnsafe unless dir is a
	// directory that only this process's user or root may write (see the
	// function CheckDir).
	CheckDir(dir string) error
}

// AppendFile is a file opened by [FS.OpenAppend]: every Write goes to its
// end.
type AppendFile interface {
	File
	// Size returns the file's current size.
	Size() (int64, error)
	// Truncate cuts the file to size bytes.
	Truncate(size int64) error
}

// The name of a temporary file is "." + the target's base name + tempInfix
// + tempDigits lowercase hex digits. The suffix has a fixed length and no
// dot, so a name has exactly one reading: TempOf cuts the suffix and the
// infix off the end and what is left is the target's base name. (The
// renameio names used before, "."+base+digits, were ambiguous: ".vm1123"
// could be a temporary file of "vm" or of "vm1".)
const (
	tempInfix  = ".tmp-"
	tempDigits = 16
)

// TempName returns a new name, in target's directory, for a temporary file
// that will be renamed to target. It is random: create it with CreateExcl,
// and draw another name if that fails with fs.ErrExist.
func TempName(target string) string {
	var b [tempDigits / 2]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	return filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+tempInfix+hex.EncodeToString(b[:]))
}

// TempOf reports whether name (a base name) is one TempName makes, and if
// so the base name of the target it was made for.
func TempOf(name string) (targetBase string, ok bool) {
	end := len(name) - tempDigits - len(tempInfix) // where the target's base name ends
	if end < 2 || name[0] != '.' || name[end:end+len(tempInfix)] != tempInfix {
		return "", false
	}
	for _, c := range []byte(name[end+len(tempInfix):]) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return name[1:end], true
}

// OS is the real file system.
type OS struct{}

var _ FS = OS{}

// MkdirAll calls os.MkdirAll.
func (OS) MkdirAll(dir string, perm fs.FileMode) error { return os.MkdirAll(dir, perm) }

// ReadFile opens name as openChecked does: without following a symlink
// planted where the checkpoint should be (an error wrapping ELOOP rather
// than a redirection), without blocking on a FIFO or a device, and
// refusing (ErrUnsafe) what is not a regular file of this user's or
// root's without a hard link from outside its directory.
func (OS) ReadFile(name string) ([]byte, error) {
	f, st, err := openChecked("open", name, unix.O_RDONLY, 0, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Size the buffer from the fstat so that a large checkpoint is read
	// with one allocation; ReadFrom still copes if the file grew meanwhile.
	buf := bytes.NewBuffer(make([]byte, 0, st.Size+bytes.MinRead))
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// CreateExcl opens name with O_CREAT|O_EXCL|O_NOFOLLOW, so that it never
// opens, truncates or follows what is already there, and then sets its
// permissions to perm exactly, whatever the umask.
func (OS) CreateExcl(name string, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		_ = os.Remove(name)
		return nil, err
	}
	return f, nil
}

// Rename calls os.Rename, which does not follow a symlink at newpath: it
// replaces the link itself.
func (OS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Link calls os.Link (linkat without AT_SYMLINK_FOLLOW).
func (OS) Link(oldname, newname string) error { return os.Link(oldname, newname) }

// Remove calls os.Remove.
func (OS) Remove(name string) error { return os.Remove(name) }

// ReadDirNames lists dir, opened with O_DIRECTORY (see openDir).
func (OS) ReadDirNames(dir string) ([]string, error) {
	d, err := openDir(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// SyncDir fsyncs dir. After a rename, the new directory entry is durable only
// once the directory itself is synced (rename(2) and fsync(2); raft's file
// snapshot store and etcd's fileutil do the same; renameio does not).
func (OS) SyncDir(dir string) error {
	d, err := openDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// CheckDir calls the function CheckDir.
func (OS) CheckDir(dir string) error { return CheckDir(dir) }

// OpenAppend opens name with O_APPEND|O_NOFOLLOW, and with create
// O_CREAT|O_EXCL, setting the permissions to perm exactly, whatever the
// umask, as CreateExcl does. An existing file is opened and checked as
// ReadFile's is (openChecked): a FIFO at the journal's name would block an
// open for writing until a reader came.
func (OS) OpenAppend(name string, perm fs.FileMode, create bool) (AppendFile, error) {
	flag := os.O_WRONLY | os.O_APPEND | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !create {
		fd, st, err := openCheckedFD("open", name, unix.O_WRONLY|unix.O_APPEND, 0, false)
		if err != nil {
			return nil, err
		}
		return &rawAppend{rawFile: &rawFile{fd: fd, name: name}, opened: st.Size, fresh: true}, nil
	}
	f, err := openFile(name, flag|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		_ = os.Remove(name)
		return nil, err
	}
	return osAppend{f}, nil
}

// openFile is os.OpenFile for the files a journal's append opens (the
// journal, and the checkpoint it checks with Peek): open(2), then
// os.NewFile. os.OpenFile also tries to register every file it opens with
// the runtime's poller, which a regular file refuses: four fcntl(2) and an
// epoll_ctl(2) per open, where os.NewFile makes one fcntl(2). With two
// opens per commit, that was 8 of a commit's 22 system calls (strace -c,
// issue 35). The file is used in blocking mode either way.
func openFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	for {
		fd, err := unix.Open(name, flag|unix.O_CLOEXEC, uint32(perm.Perm()))
		if err == unix.EINTR {
			continue // as os.OpenFile retries
		}
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return os.NewFile(uintptr(fd), name), nil
	}
}

// osAppend is an os.File created for appending (a new journal).
type osAppend struct{ *os.File }

func (f osAppend) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// rawAppend is an existing journal opened for appending (openCheckedFD).
// Until its first Write or Truncate, Size is the size the open's fstat
// saw, without another.
type rawAppend struct {
	*rawFile
	opened int64
	fresh  bool
}

func (f *rawAppend) Size() (int64, error) {
	if f.fresh {
		return f.opened, nil
	}
	return f.size()
}

func (f *rawAppend) Write(b []byte) (int, error) {
	f.fresh = false
	return f.rawFile.Write(b)
}

func (f *rawAppend) Truncate(size int64) error {
	f.fresh = false
	return f.rawFile.Truncate(size)
}

// Lstat calls os.Lstat.
func (OS) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(name) }

// Peek opens name as ReadFile does (openChecked), and reads its two ends
// with pread.
func (OS) Peek(name string, head, tail int) (first, last []byte, info fs.FileInfo, err error) {
	fd, st, err := openCheckedFD("open", name, unix.O_RDONLY, 0, false)
	if err != nil {
		return nil, nil, nil, err
	}
	f := &rawFile{fd: fd, name: name}
	defer f.Close()
	info = statInfo{name: name, st: st}
	size := info.Size()
	if first, err = readAt(f, 0, min(int64(head), size)); err != nil {
		return nil, nil, nil, err
	}
	if last, err = readAt(f, max(size-int64(tail), 0), min(int64(tail), size)); err != nil {
		return nil, nil, nil, err
	}
	return first, last, info, nil
}

// readAt reads n bytes at off; a file cut shorter meanwhile reads short.
func readAt(f io.ReaderAt, off, n int64) ([]byte, error) {
	b := make([]byte, n)
	got, err := f.ReadAt(b, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return b[:got], err
}

// LastLink reports whether fi, a result of an FS's Lstat, describes a
// regular file whose only link is the name it was read at, as the
// operating system counts links; false where it cannot say (a simulated
// file system's FileInfo).
func LastLink(fi fs.FileInfo) bool {
	if fi == nil || !fi.Mode().IsRegular() {
		return false
	}
	switch st := fi.Sys().(type) {
	case *syscall.Stat_t:
		return st.Nlink == 1
	case *unix.Stat_t:
		return st.Nlink == 1
	}
	return false
}

// SameFile reports whether a and b, results of an FS's Lstat, describe the
// same file: os.SameFile, or the SameFile method of a simulated file
// system's FileInfo.
func SameFile(a, b fs.FileInfo) bool {
	if a == nil || b == nil {
		return false
	}
	if s, ok := a.(interface{ SameFile(fs.FileInfo) bool }); ok {
		return s.SameFile(b)
	}
	return os.SameFile(a, b)
}
