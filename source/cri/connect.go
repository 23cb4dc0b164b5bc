package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// channel is one gRPC connection to the runtime. A Lister replaces its
// channel (redial) when gRPC would make the next call wait out a reconnect
// backoff; calls that took the old one finish on it, and the last of them
// closes it.
type channel struct {
	conn    *grpc.ClientConn
	client  runtimeapi.RuntimeServiceClient
	users   int  // calls holding the channel; guarded by Lister.chMu
	retired bool // replaced by a newer channel; guarded by Lister.chMu
}

// connect is the first step of every call. It fails fast on what needs no
// round trip (a closed Lister, a missing socket); then, unless the
// connection is up, it checks that a gRPC server answers on the socket
// (probe), so that a runtime that is down, frozen or the wrong one is
// reported at once and in its own words rather than as gRPC's. When gRPC
// gave up on an earlier connection and waits to retry, the next attempt
// may be seconds away (its backoff grows while the runtime is down), so a
// runtime the probe found answering gets a new connection at once. The
// caller releases the returned channel.
//
// The socket is checked at every call, not by NewLister, because a daemon
// is often started before the runtime.
func (l *Lister) connect(ctx context.Context) (*channel, error) {
	if l.closed.Load() {
		return nil, l.closedError()
	}
	if err := l.checkSocket(); err != nil {
		return nil, err
	}
	ch := l.acquire()
	state := ch.conn.GetState()
	if state == connectivity.Ready {
		return ch, nil
	}
	if err := l.probe(ctx); err != nil {
		l.release(ch)
		return nil, err
	}
	if state != connectivity.TransientFailure {
		// Idle (never connected, or the connection dropped) or already
		// connecting: the call connects now, with no backoff to wait out.
		return ch, nil
	}
	l.release(ch)
	return l.redial(ch)
}

func (l *Lister) closedError() error {
	return &callError{msg: fmt.Sprintf("cri: lister for %s is closed", l.endpoint), kinds: []error{ErrClosed}}
}

// acquire returns the current channel, counted as in use.
func (l *Lister) acquire() *channel {
	l.chMu.Lock()
	defer l.chMu.Unlock()
	l.ch.users++
	return l.ch
}

// release ends a call's use of ch, and closes ch if it was retired and
// this was its last call.
func (l *Lister) release(ch *channel) {
	l.chMu.Lock()
	defer l.chMu.Unlock()
	ch.users--
	if ch.retired && ch.users == 0 {
		_ = ch.conn.Close()
	}
}

// redial replaces old, a connection waiting out gRPC's reconnect backoff,
// with a new one, unless a concurrent call already did, and returns the
// current channel, counted as in use.
func (l *Lister) redial(old *channel) (*channel, error) {
	l.chMu.Lock()
	defer l.chMu.Unlock()
	if l.closed.Load() {
		return nil, l.closedError()
	}
	if l.ch == old {
		ch, err := l.newChannel()
		if err != nil {
			return nil, err
		}
		old.retired = true
		if old.users == 0 {
			_ = old.conn.Close()
		}
		l.ch = ch
		l.log.Info("CRI runtime answers again: new connection")
	}
	l.ch.users++
	return l.ch, nil
}

// checkSocket fails when nothing, or something other than a socket, is at
// the socket's path.
func (l *Lister) checkSocket() error {
	fi, err := os.Stat(l.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &callError{
			msg:   fmt.Sprintf("cri: runtime socket %s does not exist: %s", l.path, socketHint(l.path)),
			kinds: []error{ErrSocketMissing},
			cause: err,
		}
	case err != nil:
		// Not ours to judge (often EACCES on a parent directory): the
		// connect that follows fails with the reason.
		return nil
	case fi.Mode().Type() != fs.ModeSocket:
		return &callError{
			msg: fmt.Sprintf("cri: runtime socket %s is a %s, not a socket: a hostPath volume for a socket "+
				"that did not exist yet leaves a directory in its place; remove it, mount the socket's directory "+
				"instead, and check the endpoint: %s", l.path, fileKind(fi.Mode()), socketHint(l.path)),
			kinds: []error{ErrSocketMissing},
		}
	}
	return nil
}

// socketHint says which runtime is expected at path and where the other
// common one listens, so a misconfigured endpoint is easy to spot.
func socketHint(path string) string {
	switch {
	case strings.Contains(path, "crio"):
		return "is CRI-O running? (for containerd use unix:///run/containerd/containerd.sock)"
	case strings.Contains(path, "containerd"):
		return "is containerd running? (for CRI-O use unix:///var/run/crio/crio.sock)"
	default:
		return "is the container runtime running? (containerd listens on unix:///run/containerd/containerd.sock, " +
			"CRI-O on unix:///var/run/crio/crio.sock)"
	}
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	default:
		return "file of mode " + m.Type().String()
	}
}

// dialFailure says why a connect to the socket failed, in an operator's
// words, for the causes that have a remedy; ok is false for the others.
func dialFailure(err error) (why string, ok bool) {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused: the socket file exists but nothing listens on it " +
			"(the runtime stopped or crashed, or is restarting)", true
	case errors.Is(err, fs.ErrPermission):
		return "permission denied: the daemon needs read and write access to the socket (usually root)", true
	}
	return "", false
}
