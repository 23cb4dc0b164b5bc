package cri

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const v1Runtimes = "containerd 1.6 or later, CRI-O 1.26 or later"

// unsupported builds the error for a runtime that does not serve v1. It
// asks the v1alpha2 service, whose Version messages are wire-compatible with
// v1's, so that the error can name the runtime the operator must upgrade.
func (l *Lister) unsupported(ctx context.Context, ch *channel, v1err error) error {
	callCtx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	var old runtimeapi.VersionResponse
	err := ch.conn.Invoke(callCtx, "/runtime.v1alpha2.RuntimeService/Version",
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
		return l.timeoutError(ctx, callCtx, method, err)
	case codes.Unavailable:
		if missing := l.checkSocket(); missing != nil {
			// The runtime went away, and took its socket with it, between
			// connect and the call.
			return missing
		}
		why, cause := "the connection failed or was dropped", err
		if p := l.lastDialErr.Load(); p != nil {
			if w, ok := dialFailure(*p); ok {
				why, cause = w, errors.Join(err, *p)
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

// timeoutError reports a runtime that did not answer what (a method, or a
// new connection) before the deadline ran out. ctx is the caller's context
// and callCtx the call's, so that a caller's cancellation is told apart
// from the runtime being slow.
func (l *Lister) timeoutError(ctx, callCtx context.Context, what string, err error) error {
	if ctxErr := ctx.Err(); errors.Is(ctxErr, context.Canceled) {
		return fmt.Errorf("cri: %s at %s: %w (%w)", what, l.endpoint, ctxErr, err)
	}
	// Which deadline ran out is read from the deadlines, not from
	// ctx.Err(): the server sees the deadline too and may end the call a
	// moment before the caller's context expires.
	within := "within " + l.cfg.timeout.String()
	callerDeadline, bound := ctx.Deadline()
	if callDeadline, _ := callCtx.Deadline(); bound && !callerDeadline.After(callDeadline) {
		within = "before the caller's deadline"
	}
	return &callError{
		msg: fmt.Sprintf("cri: runtime at %s did not answer %s %s: it is overloaded or hung "+
			"(try crictl --runtime-endpoint %s pods): %v", l.endpoint, what, within, l.endpoint, err),
		kinds: []error{ErrTimeout, ErrRuntimeNotResponding},
		cause: err,
	}
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
