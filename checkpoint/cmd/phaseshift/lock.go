package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/phaseshift/phaseshift/internal/fsys"
)

// lockInfo is what inspect knows of a checkpoint's lock. package
// checkpoint takes it with flock(LOCK_EX) on PATH.lock and writes the
// taker's PID into that file; the kernel lists every flock in /proc/locks
// with the PID of the process that took it.
//
// Whether the lock is held is read from /proc/locks only, never by trying
// to take the lock: even a shared flock held for a moment would make a
// daemon that starts at that moment and tries its lock once fail.
type lockInfo struct {
	Path   string `json:"path"`
	Exists bool   `json:"exists"`
	// Held is nil when it cannot be told (/proc/locks unreadable).
	Held *bool `json:"held"`
	// PID is the holder's, from /proc/locks or, when /proc/locks shows
	// none (another PID namespace), from the lock file; 0 if unknown.
	PID     int    `json:"pid,omitempty"`
	Command string `json:"command,omitempty"` // the holder's /proc/PID/comm
	// RecordedPID is the PID in the lock file: its holder's, or its last
	// holder's when nobody holds it.
	RecordedPID int    `json:"recordedPID,omitempty"`
	Note        string `json:"note,omitempty"`
}

// lockState finds out whether a process holds the lock file at path.
func lockState(path string) lockInfo {
	l := lockInfo{Path: path}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			l.Note = "no lock file: no daemon has opened this checkpoint since the directory was made"
			no := false
			l.Held = &no
			return l
		}
		l.Note = "cannot stat the lock file: " + err.Error()
		return l
	}
	l.Exists = true
	l.RecordedPID, _ = strconv.Atoi(fsys.LockHolder(fsys.OS{}, path))
	f, err := os.Open("/proc/locks")
	if err != nil {
		l.Note = "cannot tell whether it is held: " + err.Error()
		return l
	}
	defer f.Close()
	held, pid, byInode, err := flockHolder(f, uint64(unix.Major(st.Dev)), uint64(unix.Minor(st.Dev)), st.Ino, otherDevice(path))
	if err != nil {
		l.Note = "cannot tell whether it is held: reading /proc/locks: " + err.Error()
		return l
	}
	l.Held = &held
	if byInode {
		l.Note = "found in /proc/locks by inode number alone (the kernel names another device for the file, as on btrfs or overlayfs)"
	}
	switch {
	case held && pid > 0:
		l.PID = pid
	case held && l.RecordedPID > 0:
		l.PID = l.RecordedPID
		l.Note = joinNote(l.Note, "the holder is not visible in this PID namespace; its PID is the one the lock file records")
	case held:
		l.Note = joinNote(l.Note, "the holder is not visible in this PID namespace and the lock file records no PID")
	}
	if l.PID > 0 {
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", l.PID)); err == nil {
			l.Command = strings.TrimSpace(string(comm))
		}
	}
	return l
}

// flockHolder reads /proc/locks for an flock on the file with device
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
func flockHolder(r io.Reader, major, minor, ino uint64, byInodeOK bool) (held bool, pid int, byInode bool, err error) {
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

// String describes the lock in one line.
func (l lockInfo) String() string {
	var s string
	switch {
	case l.Held == nil:
		s = "unknown"
	case !*l.Held:
		s = "not held"
		if l.RecordedPID > 0 {
			s += fmt.Sprintf(" (its last holder was PID %d)", l.RecordedPID)
		}
	case l.PID > 0:
		s = fmt.Sprintf("held by PID %d", l.PID)
		if l.Command != "" {
			s += " (" + l.Command + ")"
		}
	default:
		s = "held, PID unknown"
	}
	if l.Note != "" {
		s += "; " + l.Note
	}
	return s
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// otherDevice reports whether path is on a file system whose locks
// /proc/locks may list under another device than stat reports.
func otherDevice(path string) bool {
	var fs unix.Statfs_t
	if unix.Statfs(path, &fs) != nil {
		return false
	}
	return fs.Type == unix.BTRFS_SUPER_MAGIC || fs.Type == unix.OVERLAYFS_SUPER_MAGIC
}
