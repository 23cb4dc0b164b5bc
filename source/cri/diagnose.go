package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

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

const v1Runtimes = "containerd 1.6 or later, CRI-O 1.26 or later"

// unsupported builds the error for a runtime that does not serve v1. It
// asks the v1alpha2 service, whose Version messages are wire-compatible with
// v1's, so that the error can name the runtime the operator must upgrade.
func (l *Lister) unsupported(ctx context.Context, v1err error) error {
	callCtx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	var old runtimeapi.VersionResponse
	err := l.conn.Invoke(callCtx, "/runtime.v1alpha2.RuntimeService/Version",
		&runtimeapi.VersionRequest{Version: "0.1.0"}, &old)
	if err == nil && old.GetRuntimeName() != "" {
		return &callError{
			msg: fmt.Sprintf("cri: runtime %s %s at %s does not support CRI v1, only %s: "+
				"upgrade it (%s): %v",
				old.GetRuntimeName(), old.GetRuntimeVersion(), l.endpoint, old.GetRuntimeApiVersion(), v1Runtimes, v1err),
			kinds: []error{ErrUnsupportedAPI},
			cause: v1err,
		}
	}
	return &callError{
		msg: fmt.Sprintf("cri: runtime at %s does not support CRI v1 (and did not say what it is): "+
			"upgrade it (%s): %v", l.endpoint, v1Runtimes, v1err),
		kinds: []error{ErrUnsupportedAPI},
		cause: v1err,
	}
}

// explain turns a failed RPC into an error that says what an operator
// should look at. ctx is the caller's context and callCtx the call's, so
// that a caller's cancellation or deadline is told apart from the runtime
// being slow.
func (l *Lister) explain(ctx, callCtx context.Context, method string, err error) error {
	if l.closed.Load() {
		return &callError{
			msg:   fmt.Sprintf("cri: %s at %s: lister closed during the call", method, l.endpoint),
			kinds: []error{ErrClosed},
			cause: err,
		}
	}
	if ctxErr := ctx.Err(); errors.Is(ctxErr, context.Canceled) {
		// The caller gave up; nothing is wrong with the runtime.
		return fmt.Errorf("cri: %s at %s: %w (%w)", method, l.endpoint, ctxErr, err)
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded:
		// Which deadline ran out is read from the deadlines, not from
		// ctx.Err(): the server sees the deadline too and may end the call
		// a moment before the caller's context expires.
		within := "within " + l.cfg.timeout.String()
		callerDeadline, bound := ctx.Deadline()
		if callDeadline, _ := callCtx.Deadline(); bound && !callerDeadline.After(callDeadline) {
			within = "before the caller's deadline"
		}
		return &callError{
			msg: fmt.Sprintf("cri: runtime at %s did not answer %s %s: it is overloaded or hung "+
				"(try crictl --runtime-endpoint %s pods): %v", l.endpoint, method, within, l.endpoint, err),
			kinds: []error{ErrTimeout, ErrRuntimeNotResponding},
			cause: err,
		}
	case codes.Unavailable:
		if missing := l.checkSocket(); missing != nil {
			// The runtime went away, and took its socket with it, between
			// the precheck and the call.
			return missing
		}
		why, cause := "the connection failed or was dropped", err
		if p := l.lastDialErr.Load(); p != nil {
			switch {
			case errors.Is(*p, syscall.ECONNREFUSED):
				why = "connection refused: the socket file exists but nothing listens on it " +
					"(the runtime stopped or crashed, or is restarting)"
				cause = errors.Join(err, *p)
			case errors.Is(*p, fs.ErrPermission):
				why = "permission denied: the daemon needs read and write access to the socket (usually root)"
				cause = errors.Join(err, *p)
			}
		}
		return &callError{
			msg:   fmt.Sprintf("cri: runtime not answering at %s: %s: %v", l.endpoint, why, err),
			kinds: []error{ErrRuntimeNotResponding},
			cause: cause,
		}
	case codes.Unimplemented:
		return &callError{
			msg:   fmt.Sprintf("cri: runtime at %s does not implement %s of CRI v1: %v", l.endpoint, method, err),
			kinds: []error{ErrUnsupportedAPI},
			cause: err,
		}
	case codes.ResourceExhausted:
		if strings.Contains(status.Convert(err).Message(), "larger than max") {
			return &callError{
				msg: fmt.Sprintf("cri: %s answer from %s is larger than the receive limit of %d bytes: "+
					"raise it with the cri.WithMaxReceiveSize option: %v", method, l.endpoint, l.cfg.maxReceiveSize, err),
				kinds: []error{ErrResponseTooLarge},
				cause: err,
			}
		}
	}
	return fmt.Errorf("cri: %s at %s: %w", method, l.endpoint, err)
}

// fatal reports whether a failed status call means the rest of the listing
// would fail the same way, so that it must end rather than be reported
// sandbox by sandbox: a runtime that went away, a caller that gave up, a
// closed Lister.
func fatal(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	return errors.Is(err, ErrClosed) || errors.Is(err, ErrSocketMissing) || errors.Is(err, ErrUnsupportedAPI) ||
		(errors.Is(err, ErrRuntimeNotResponding) && !errors.Is(err, ErrTimeout))
}
