package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

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
	// fromKernel says PID is the one /proc/locks shows.
	fromKernel bool
	// owner is the lock file's owner: the daemon's user, which created it.
	owner uint32
}

// lockState finds out whether a process holds the lock file at path.
func lockState(path string) lockInfo {
	l := lockInfo{Path: path}
	if _, err := os.Lstat(path); err != nil {
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
	if fi, err := os.Lstat(path); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			l.owner = st.Uid
		}
	}
	h := fsys.LockHolder(fsys.OS{}, path)
	l.RecordedPID = h.Recorded
	if !h.Asked {
		l.Note = "cannot tell whether it is held: " + h.Err.Error()
		return l
	}
	held := h.Held
	l.Held = &held
	if h.ByInode {
		l.Note = "found in /proc/locks by inode number alone (the kernel names another device for the file, as on btrfs or overlayfs)"
	}
	switch {
	case held && h.PID > 0:
		l.PID, l.Command, l.fromKernel = h.PID, h.Command, true
	case held && l.RecordedPID > 0:
		l.PID = l.RecordedPID
		l.Note = joinNote(l.Note, "the holder is not visible in this PID namespace; its PID is the one the lock file records")
	case held:
		l.Note = joinNote(l.Note, "the holder is not visible in this PID namespace and the lock file records no PID")
	}
	return l
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
