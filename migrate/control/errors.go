package control

import (
	"errors"
	"fmt"

	"github.com/phaseshift/phaseshift/internal/fsys"
)

// The error codes of a status line (see the package documentation).
const (
	CodeNoSuchKey  = "no-such-key" // get, delete: the Store has no entry for the key
	CodeBadKey     = "bad-key"     // the key is not JSON, or does not read back as the Store's key type
	CodeBadRequest = "bad-request" // not one JSON request of a known op
	CodeRefused    = "refused"     // the peer's uid is neither the daemon's nor root
	CodeBusy       = "busy"        // too many requests at once; try again
	CodeFailed     = "failed"      // the Store's Delete failed; the message says why
	CodeNoReport   = "no-report"   // report, prune-orphans: the daemon serves no restore report (WithReport)
)

// Errors returned by the Client; match them with errors.Is.
var (
	// ErrNoSuchKey is returned when the Store has no entry for the key.
	ErrNoSuchKey = errors.New("no such key")
	// ErrBadKey is returned when the key is not JSON, or does not read back
	// as the Store's key type.
	ErrBadKey = errors.New("bad key")
	// ErrRefused is returned when the daemon refused the connection: its
	// peer's uid is neither the daemon's nor root.
	ErrRefused = errors.New("refused")
	// ErrNoReport is returned when the daemon serves no restore report:
	// it did not give Listen WithReport.
	ErrNoReport = errors.New("no restore report served")
	// ErrInvalidOption is returned by Listen for an option with a bad
	// value.
	ErrInvalidOption = errors.New("invalid option")
	// ErrUnsafe is returned by Listen when the socket's directory is
	// owned by another user than the daemon's or root, or is writable by
	// its group or others without being sticky: whoever may write it may
	// put their own socket, or a symlink, in place of the daemon's. The
	// message names the directory and the fix (chmod go-w DIR). It is
	// checkpoint.ErrUnsafe.
	ErrUnsafe = fsys.ErrUnsafe
	// ErrInUse is returned by Listen when another process serves the
	// socket at the path (it accepts a connection): two daemons of one
	// checkpoint, or a path shared by mistake. The message names the
	// process, by the kernel's SO_PEERCRED.
	ErrInUse = errors.New("control socket in use")
	// ErrNotTheDaemon is returned by a Client made with ExpectServer when
	// the process that serves the socket is not the one it expects: not
	// the process that holds the checkpoint's lock, or of another user.
	// Nothing was sent. The message names the server's PID and uid.
	ErrNotTheDaemon = errors.New("the control socket is not served by the daemon")
)

// RemoteError is a status line with an error: what the daemon said.
type RemoteError struct {
	Code    string // one of the Code constants
	Message string
}

// Error returns the daemon's message and its code.
func (e *RemoteError) Error() string {
	return fmt.Sprintf("control: the daemon says: %s (%s)", e.Message, e.Code)
}

// Is makes errors.Is match the sentinel of the code.
func (e *RemoteError) Is(target error) bool {
	switch e.Code {
	case CodeNoSuchKey:
		return target == ErrNoSuchKey
	case CodeBadKey:
		return target == ErrBadKey
	case CodeRefused:
		return target == ErrRefused
	case CodeNoReport:
		return target == ErrNoReport
	}
	return false
}
