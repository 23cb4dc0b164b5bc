package fsys

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// lockMode is the lock file's mode, whatever the checkpoint's files are
// (checkpoint.WithFileMode): flock needs only read access, so a lock file
// another user can open is a lock another user can hold, and with it keep
// the daemon from starting.
const lockMode = 0o600

// TryLock takes flock(LOCK_EX|LOCK_NB) on name. flock locks belong to the
// open file description, so a second TryLock in the same process conflicts
// too, and the kernel drops the lock when the process dies, even by SIGKILL.
//
// The file is created with O_EXCL, or else opened without following a
// symlink and without blocking, and checked (a regular file of this
// user's or root's with one name: it is written below, and a name linked
// from elsewhere would make that write land in another file), and made
// 0600 if it is not. Once locked, the holder's PID is written into it for
// the messages of the next one to try; the kernel's word on who holds it
// comes first (LockHolder), since anyone who can write the file can write
// another PID.
//
// A lock file whose mode let others open it (an older version's, say) is
// not only tightened but replaced, once locked, by a new 0600 file renamed
// over it: a chmod does not take back a descriptor another user opened
// before it, through which that user could take the lock at the daemon's
// next start.
func (OS) TryLock(name string) (Lock, error) {
	for tries := 0; ; tries++ {
		f, loose, err := openLockFile(name)
		if err != nil {
			return nil, err
		}
		if err := flock(f, name); err != nil {
			f.Close()
			return nil, err
		}
		// The file locked must still be the one at the name: one renamed
		// over it since it was opened (a replacement, below, by another
		// process) holds no lock of anyone's that matters.
		if stale, err := (&osLock{f: f, name: name}).Stale(); err != nil || stale {
			f.Close()
			if err != nil {
				return nil, err
			}
			if tries < 8 {
				continue
			}
			return nil, ErrWouldBlock
		}
		if loose {
			if f, err = replaceLockFile(name, f); err != nil {
				return nil, err
			}
		}
		// Best effort: the PID only decorates the error another process sees.
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		return &osLock{f: f, name: name}, nil
	}
}

// flock takes flock(LOCK_EX|LOCK_NB) on f, and returns ErrWouldBlock when
// another open file description holds it.
func flock(f *os.File, name string) error {
	var err error
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return ErrWouldBlock
	}
	return &fs.PathError{Op: "flock", Path: name, Err: err}
}

// replaceLockFile puts a new lock file, 0600 and locked, at name in place
// of old, which this process has locked, and releases old: whoever opened
// old before it was tightened holds a descriptor of a file that is no
// longer the lock. It returns the new file.
func replaceLockFile(name string, old *os.File) (*os.File, error) {
	tmp := TempName(name)
	fd, err := retry(func() (int, error) {
		return unix.Open(tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, lockMode)
	})
	if err != nil {
		old.Close()
		return nil, &fs.PathError{Op: "open", Path: tmp, Err: err}
	}
	f := os.NewFile(uintptr(fd), tmp)
	fail := func(op string, err error) (*os.File, error) {
		f.Close()
		_ = os.Remove(tmp)
		old.Close()
		return nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	if err := f.Chmod(lockMode); err != nil {
		return fail("chmod", err)
	}
	if err := flock(f, tmp); err != nil {
		return fail("flock", err)
	}
	if err := os.Rename(tmp, name); err != nil {
		return fail("rename", err)
	}
	old.Close()
	return f, nil
}

// openLockFile creates the lock file, or opens and checks the one there;
// loose says that its mode let others open it (it is tightened now, and
// TryLock replaces it once locked).
func openLockFile(name string) (f *os.File, loose bool, err error) {
	for tries := 0; ; tries++ {
		fd, err := retry(func() (int, error) {
			return unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, lockMode)
		})
		if err == nil {
			f := os.NewFile(uintptr(fd), name)
			if err := f.Chmod(lockMode); err != nil { // whatever the umask
				f.Close()
				return nil, false, err
			}
			return f, false, nil
		}
		if !errors.Is(err, unix.EEXIST) {
			return nil, false, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		var st *unix.Stat_t
		f, st, err = openChecked("open", name, unix.O_RDWR, 0, true)
		if errors.Is(err, fs.ErrNotExist) && tries < 8 {
			continue // removed since: create it
		}
		if err != nil {
			return nil, false, err
		}
		if st.Mode&0o777 == lockMode {
			return f, false, nil
		}
		if st.Uid != uint32(os.Geteuid()) {
			f.Close()
			return nil, false, unsafe("open", name, fmt.Sprintf("the lock file is mode %#o, and owned by root, not this process's uid %d, which cannot tighten it", st.Mode&0o777, os.Geteuid()),
				"chmod 600 "+name+" (flock needs only read access: anyone who can read it can hold the lock)")
		}
		if err := f.Chmod(lockMode); err != nil {
			f.Close()
			return nil, false, &fs.PathError{Op: "chmod", Path: name, Err: err}
		}
		return f, true, nil
	}
}

// osLock is a flock held through an open file.
type osLock struct {
	f    *os.File
	name string
}

func (l *osLock) Unlock() error { return l.f.Close() }

// Stale compares the locked file (fstat of the open descriptor) with what
// is at the name now (lstat): a flock stays on the file it was taken on,
// even once that file has no name left.
func (l *osLock) Stale() (bool, error) {
	held, err := l.f.Stat()
	if err != nil {
		return false, err
	}
	now, err := os.Lstat(l.name)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return !os.SameFile(held, now), nil
}

// Holder is what can be told of who holds the flock on a lock file.
type Holder struct {
	// Asked says that the kernel's list of locks (/proc/locks) was read
	// for the file; Held and PID are its word.
	Asked bool
	Held  bool
	// PID is the holder's, from /proc/locks; 0 when the kernel shows none
	// (a holder in another PID namespace).
	PID int
	// ByInode says that the lock was matched by inode number alone (the
	// kernel names another device for the file, as on btrfs or overlayfs).
	ByInode bool
	// Command is the holder's /proc/PID/comm, when PID is known.
	Command string
	// Recorded is the PID written into the file by its last holder; 0 if
	// none reads. Whoever can write the file can write any PID there.
	Recorded int
	// Err says why the kernel was not asked, when it was not.
	Err error
}

// LockHolder finds who holds the lock on name: the kernel's word, where
// /proc/locks can be read for the file (fsys's Lstat must describe a real
// file), and the PID the file records.
func LockHolder(fsys FS, name string) Holder {
	var h Holder
	if b, err := fsys.ReadFile(name); err == nil && len(b) > 0 && len(b) <= 32 {
		h.Recorded, _ = strconv.Atoi(strings.TrimSuffix(string(b), "\n"))
		h.Recorded = max(h.Recorded, 0)
	}
	fi, err := fsys.Lstat(name)
	if err != nil {
		h.Err = err
		return h
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		h.Err = errors.New("a simulated file system")
		return h
	}
	locks, err := os.Open("/proc/locks")
	if err != nil {
		h.Err = err
		return h
	}
	defer locks.Close()
	h.Held, h.PID, h.ByInode, err = FlockHolder(locks, uint64(unix.Major(st.Dev)), uint64(unix.Minor(st.Dev)), st.Ino, OtherDevice(name))
	if err != nil {
		h.Err = fmt.Errorf("reading /proc/locks: %w", err)
		return h
	}
	h.Asked = true
	if h.PID > 0 {
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", h.PID)); err == nil {
			h.Command = strings.TrimSpace(string(comm))
		}
	}
	return h
}

// String names the holder for an error message: " by process N (comm)",
// with where that comes from, or "" when nothing is known.
func (h Holder) String() string {
	recorded := ""
	if h.Recorded > 0 && h.Recorded != h.PID {
		recorded = fmt.Sprintf("; the lock file names process %d, which the kernel does not show holding it", h.Recorded)
	}
	switch {
	case h.Asked && h.Held && h.PID > 0:
		s := fmt.Sprintf(" by process %d", h.PID)
		if h.Command != "" {
			s += fmt.Sprintf(" (%q)", h.Command) // a process names itself: quoted
		}
		return s + " according to the kernel (/proc/locks)" + recorded
	case h.Asked && h.Held && h.Recorded > 0:
		return fmt.Sprintf(" by a process the kernel does not show in this PID namespace (the lock file names process %d)", h.Recorded)
	case h.Asked && h.Held:
		return " by a process the kernel does not show in this PID namespace"
	case !h.Asked && h.Recorded > 0:
		return fmt.Sprintf(" by process %d, as the lock file says (the kernel's /proc/locks was not read to confirm it)", h.Recorded)
	}
	return ""
}

// FlockHolder reads /proc/locks (r) for an flock on the file with device
// major:minor and inode ino, and returns its holder's PID (0 when the
// kernel shows none: a holder outside this PID namespace). Lines look
// like
//
//	1: FLOCK  ADVISORY  WRITE 22752 fe:00:9977886 0 EOF
//	1: -> FLOCK  ADVISORY  WRITE 22753 fe:00:9977886 0 EOF
//
// (the second is a process waiting for the lock, not holding it), with
// the device in hex and the inode in decimal (fs/locks.c, lock_get_status).
// The kernel names the device of the inode's super block, which on some
// file systems (btrfs subvolumes, overlayfs) is not the device stat
// reports; there (byInodeOK), when no line matches both, a single flock on
// the same inode number is taken as the holder, and byInode says so.
func FlockHolder(r io.Reader, major, minor, ino uint64, byInodeOK bool) (held bool, pid int, byInode bool, err error) {
	sc := bufio.NewScanner(r)
	sameInode, inodePID := 0, 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[1] != "FLOCK" {
			continue // a waiter ("->"), a POSIX or OFD lock, or an odd line
		}
		id := strings.Split(f[5], ":")
		if len(id) != 3 {
			continue
		}
		maj, err1 := strconv.ParseUint(id[0], 16, 64)
		mnr, err2 := strconv.ParseUint(id[1], 16, 64)
		n, err3 := strconv.ParseUint(id[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || n != ino {
			continue
		}
		p, _ := strconv.Atoi(f[4])
		if maj == major && mnr == minor {
			return true, max(p, 0), false, nil
		}
		sameInode, inodePID = sameInode+1, max(p, 0)
	}
	if byInodeOK && sameInode == 1 {
		return true, inodePID, true, sc.Err()
	}
	return false, 0, false, sc.Err()
}

// OtherDevice reports whether path is on a file system whose locks
// /proc/locks may list under another device than stat reports.
func OtherDevice(path string) bool {
	var fs unix.Statfs_t
	if unix.Statfs(path, &fs) != nil {
		return false
	}
	return fs.Type == unix.BTRFS_SUPER_MAGIC || fs.Type == unix.OVERLAYFS_SUPER_MAGIC
}
