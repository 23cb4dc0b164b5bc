package cri

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Errors of NewLister and Reader: configuration mistakes.
var (
	// ErrInvalidEndpoint is returned by NewLister when the endpoint is not a unix
	// socket given as unix:///path or as an absolute path. CRI runtimes listen
	// on a local unix socket; TCP and Windows named pipes are not supported.
	ErrInvalidEndpoint = errors.New("invalid runtime endpoint")

	// ErrInvalidOption is returned by NewLister when an option is nil or its
	// value is out of range, such as WithTimeout(0), and by Reader when its
	// Lister or mapping function is nil.
	ErrInvalidOption = errors.New("invalid option")
)

// Errors of a call to the runtime (Sandboxes, Runtime, a Reader's List).
var (
	// ErrSocketMissing is returned when the runtime's socket file does not
	// exist, or something other than a socket (often a directory that a
	// hostPath mount created before the runtime did) sits at its path. The
	// runtime is not running, is still starting, or listens elsewhere; the
	// message names the path.
	ErrSocketMissing = errors.New("runtime socket does not exist")

	// ErrRuntimeNotResponding is returned when the socket exists but the
	// runtime does not answer on it: the connection is refused (a stale
	// socket file left by a runtime that stopped or crashed), denied,
	// dropped, or closed before the runtime said anything. Errors that wrap [ErrTimeout] match it too.
	ErrRuntimeNotResponding = errors.New("runtime not answering")

	// ErrTimeout is returned when the runtime accepted the connection but did
	// not answer a call before its deadline (the [WithTimeout] option, or the
	// caller's context if that expires first). The runtime is overloaded or
	// hung. It also matches [ErrRuntimeNotResponding].
	ErrTimeout = errors.New("runtime did not answer in time")

	// ErrUnsupportedAPI is returned when the runtime does not serve CRI v1:
	// it answers the v1 Version call with Unimplemented (containerd before
	// 1.6 and other runtimes that speak only v1alpha2) or reports a
	// pre-v1 API version.
	ErrUnsupportedAPI = errors.New("runtime does not support CRI v1")

	// ErrNotCRIEndpoint is returned when something listens on the socket
	// but does not speak gRPC: it answers in another protocol (containerd's
	// ttrpc socket, containerd.sock.ttrpc, an HTTP/1 server, a banner) or
	// says nothing useful. The endpoint is wrong; the message says what
	// answered and which socket to use instead.
	ErrNotCRIEndpoint = errors.New("not a CRI endpoint")

	// ErrResponseTooLarge is returned when an answer from the runtime is
	// larger than the receive limit (the [WithMaxReceiveSize] option). Raise the
	// limit; a node with thousands of pods needs more than gRPC's 4 MiB.
	ErrResponseTooLarge = errors.New("runtime answer larger than the receive limit")

	// ErrClosed is returned when a Lister is used after Close, or is closed
	// while a call is in flight.
	ErrClosed = errors.New("lister closed")
)

// Errors about one sandbox. They come inside a [*SandboxError], inside the
// *source.ListError that Sandboxes returns with the sandboxes it could read.
var (
	// ErrInvalidIP is returned when the runtime reports an IP address for a
	// sandbox that does not parse. The sandbox is left out of the listing
	// rather than listed with fewer addresses than it holds.
	ErrInvalidIP = errors.New("runtime reported an invalid IP address")

	// ErrNoStatus is returned when the runtime answers a sandbox's status
	// call without a status.
	ErrNoStatus = errors.New("runtime returned no sandbox status")

	// ErrDuplicateKey is returned by a [Reader]'s List when two sandboxes
	// map to the same key. The newer sandbox (by CreatedAt) is kept; the
	// error names both.
	ErrDuplicateKey = errors.New("two sandboxes map to the same key")
)

// SandboxError reports a problem with one pod sandbox. Sandboxes returns
// SandboxErrors inside a *source.ListError, together with the sandboxes it
// could read.
type SandboxError struct {
	ID        string // sandbox ID as the runtime lists it
	Namespace string // pod namespace, if the listing said
	Name      string // pod name, if the listing said
	Err       error
}

// Error names the sandbox, and its pod when known, so that an operator can
// find it with crictl inspectp. What the runtime sent (the IDs and names,
// the message of its gRPC status) is bounded: see bounded.
func (e *SandboxError) Error() string {
	cause := fmt.Sprint(e.Err)
	if len(cause) > maxCause {
		cause = fmt.Sprintf("%s... (%d bytes)", strings.ToValidUTF8(cause[:maxCause], ""), len(cause))
	}
	if e.Namespace != "" || e.Name != "" {
		return fmt.Sprintf("sandbox %s (pod %s/%s): %s", short(e.ID), short(e.Namespace), short(e.Name), cause)
	}
	return fmt.Sprintf("sandbox %s: %s", short(e.ID), cause)
}

const (
	// maxQuoted is how much of a string the runtime returned an error
	// quotes; maxCause how much of the message of the error it caused.
	maxQuoted = 64
	maxCause  = 512
)

// bounded quotes s, a string the runtime returned, for an error: whole
// when it is at most maxQuoted bytes, and otherwise its first maxQuoted
// bytes and its length. A runtime that sends a megabyte where an address
// belongs must not make an error (and every Report and log line that
// carries it, once per sandbox) as large.
func bounded(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:maxQuoted], len(s))
}

// short is s as it is when it is short and printable (a sandbox ID, a pod
// name), and bounded otherwise.
func short(s string) string {
	if len(s) <= maxQuoted && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return bounded(s)
}

// Unwrap returns the cause, so errors.Is matches the sentinels above.
func (e *SandboxError) Unwrap() error { return e.Err }

// callError is a failed call described for an operator. Its message is
// written whole at the call site, because the sentence an operator needs
// ("socket X does not exist: is containerd running?") does not read well as
// a sentinel text glued to a gRPC status. It still wraps both: the sentinels
// that classify it and the gRPC or OS error underneath, as %w would.
type callError struct {
	msg   string
	kinds []error // sentinels this error matches
	cause error   // the gRPC status or OS error; may be nil
}

func (e *callError) Error() string { return e.msg }

func (e *callError) Unwrap() []error {
	errs := make([]error, 0, len(e.kinds)+1)
	errs = append(errs, e.kinds...)
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}
