package hostlocal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// acquire takes host-local's lock: flock(LOCK_EX) on path, the file
// "lock" in the network directory. flock locks belong to the open file
// description, so this one conflicts with host-local's (go-filemutex opens
// the same file) and with every other acquire, in this process too, and
// the kernel drops it when the holder dies, even by SIGKILL. It returns the
// open file; closing it releases the lock.
//
// host-local blocks in flock with no timeout. flock cannot be interrupted
// by a context, so acquire polls a non-blocking flock instead, backing off
// to 10ms between tries, until ctx is done.
func acquire(ctx context.Context, path string) (*os.File, error) {
	// The descriptor is close-on-exec (os.OpenFile sets O_CLOEXEC), so a
	// child the plugin starts does not inherit the lock; go-filemutex's
	// is not.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("hostlocal: lock: %w", err)
	}
	backoff := 100 * time.Microsecond
	for {
		err := flock(f)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("hostlocal: lock: %w", &fs.PathError{Op: "flock", Path: path, Err: err})
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, fmt.Errorf("hostlocal: lock %s: %w: a host-local binary, another exec of the plugin or another Source holds it; gave up: %w", path, ErrLocked, ctx.Err())
		}
		backoff = min(2*backoff, 10*time.Millisecond)
	}
}

func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
