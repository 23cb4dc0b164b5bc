package cri

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// greetingWait is how long the probe's first connection waits for the
// server's HTTP/2 greeting. A gRPC server sends it as soon as it accepts a
// connection, before it reads a byte (grpc-go's newHTTP2Server writes its
// SETTINGS frame first), so a healthy runtime answers in microseconds.
// Silence past it means a runtime that is hung, or a server of another
// protocol that waits for its client to speak first; the second
// connection tells them apart.
const greetingWait = 200 * time.Millisecond

// ttrpcProbe is what the probe's second connection sends: a ttrpc request
// (containerd's protocol for its shims, spoken on containerd.sock.ttrpc,
// github.com/containerd/ttrpc: a 10-byte header of payload length, stream
// ID 1, type 1 for a request and no flags, then a protobuf Request with
// service and method) for a service no server has, which a ttrpc server
// answers with an error response on stream 1; then an empty line, so that
// a line-based server (HTTP/1) has a whole request to refuse. A gRPC
// server sends its greeting whatever it is sent.
var ttrpcProbe = func() []byte {
	const service, method = "phaseshift.cri.probe", "Probe"
	payload := append([]byte{0x0a, byte(len(service))}, service...)
	payload = append(append(payload, 0x12, byte(len(method))), method...)
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	msg = binary.BigEndian.AppendUint32(msg, 1)
	msg = append(msg, 1, 0)
	msg = append(msg, payload...)
	return append(msg, "\r\n\r\n"...)
}()

// answer is what a server sent on a probe's connection.
type answer struct {
	got    []byte // its first bytes
	closed bool   // it closed the connection
	silent bool   // it sent nothing before the deadline
}

// probe checks that a gRPC server answers on the socket, within the
// timeout. A runtime that is down, frozen, or not a CRI runtime at all
// (containerd's ttrpc socket, another server) fails it with the error that
// says so, wrapping the gRPC status the call would have failed with.
func (l *Lister) probe(ctx context.Context) error {
	callCtx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	a, err := l.exchange(callCtx, nil, greetingWait)
	if err == nil && a.silent && callCtx.Err() == nil {
		a, err = l.exchange(callCtx, ttrpcProbe, l.cfg.timeout)
	}
	switch {
	case err != nil && callCtx.Err() != nil:
		a = answer{silent: true} // the deadline ran out, or the caller gave up, during the connect
	case err != nil:
		return l.dialError(err)
	}
	return l.judge(ctx, callCtx, a)
}

// exchange connects, sends send (if any), and reads the server's first
// bytes until it has a frame header's worth, the server closes the
// connection, wait passes, or ctx ends. The error is the connect's.
func (l *Lister) exchange(ctx context.Context, send []byte, wait time.Duration) (answer, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", l.path)
	if err != nil {
		return answer{}, err
	}
	defer conn.Close()
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if len(send) > 0 {
		if _, err := conn.Write(send); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return answer{closed: true}, nil // a server that hung up before reading
		}
	}
	buf := make([]byte, 64)
	n := 0
	for n < 10 {
		m, err := conn.Read(buf[n:])
		n += m
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			return answer{got: buf[:n], silent: n == 0}, nil
		default: // EOF, or reset by a server that hung up
			return answer{got: buf[:n], closed: n == 0}, nil
		}
	}
	return answer{got: buf[:n]}, nil
}

// judge turns what the server sent into nil (HTTP/2: a gRPC server, as
// far as one frame tells) or the error for the operator.
func (l *Lister) judge(ctx, callCtx context.Context, a answer) error {
	switch {
	case isHTTP2Settings(a.got):
		return nil
	case isTTRPCResponse(a.got):
		return &callError{
			msg: fmt.Sprintf("cri: not a CRI endpoint: %s speaks ttrpc, containerd's protocol for its shims, not gRPC: "+
				"is it the .ttrpc socket? use containerd.sock (unix:///run/containerd/containerd.sock)", l.path),
			kinds: []error{ErrNotCRIEndpoint},
			cause: status.Error(codes.Unavailable, "server speaks ttrpc, not HTTP/2"),
		}
	case len(a.got) > 0:
		return &callError{
			msg: fmt.Sprintf("cri: not a CRI endpoint: %s does not speak gRPC (HTTP/2): it answered %q: check the endpoint "+
				"(containerd: unix:///run/containerd/containerd.sock, CRI-O: unix:///var/run/crio/crio.sock)",
				l.path, firstLine(a.got)),
			kinds: []error{ErrNotCRIEndpoint},
			cause: status.Error(codes.Unavailable, "server does not speak HTTP/2"),
		}
	case a.closed:
		return &callError{
			msg: fmt.Sprintf("cri: runtime not answering at %s: it closed the connection without a word "+
				"(a runtime shutting down, or a server that is not a CRI runtime)", l.endpoint),
			kinds: []error{ErrRuntimeNotResponding},
			cause: status.Error(codes.Unavailable, "server closed the connection before its HTTP/2 greeting"),
		}
	}
	return l.timeoutError(ctx, callCtx, "a new connection",
		status.Error(codes.DeadlineExceeded, "the server accepted the connection and sent no HTTP/2 greeting"))
}

// isHTTP2Settings reports whether b starts with the header of an HTTP/2
// SETTINGS frame on stream 0 (RFC 9113 3.4: the first frame a server
// sends), the first thing every gRPC server sends.
func isHTTP2Settings(b []byte) bool {
	if len(b) < 9 {
		return false
	}
	length := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
	const typeSettings = 0x4
	return b[3] == typeSettings && binary.BigEndian.Uint32(b[5:9])&0x7fffffff == 0 && length%6 == 0
}

// isTTRPCResponse reports whether b starts with the header of a ttrpc
// response (type 2) on stream 1, the answer to ttrpcProbe.
func isTTRPCResponse(b []byte) bool {
	return len(b) >= 10 && binary.BigEndian.Uint32(b[:4]) <= 4<<20 &&
		binary.BigEndian.Uint32(b[4:8]) == 1 && b[8] == 2
}

// firstLine is the start of what a wrong server said, for the message: up
// to its first line break, at most 40 bytes.
func firstLine(b []byte) []byte {
	if i := bytes.IndexAny(b, "\r\n"); i >= 0 {
		b = b[:i]
	}
	return b[:min(len(b), 40)]
}

// dialError explains a probe's failed connect. It wraps the OS error and
// the gRPC status a call would have failed with (Unavailable).
func (l *Lister) dialError(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		// The runtime went away, and took its socket with it, since the
		// socket was checked.
		if missing := l.checkSocket(); missing != nil {
			return missing
		}
	}
	cause := errors.Join(status.Error(codes.Unavailable, err.Error()), err)
	if errors.Is(err, syscall.EAGAIN) {
		// A unix socket refuses connects when its queue of connections
		// not yet accepted is full: the runtime accepts none.
		return &callError{
			msg: fmt.Sprintf("cri: runtime at %s accepts no connections (its socket's queue is full): "+
				"it is overloaded or hung (try crictl --runtime-endpoint %s pods): %v", l.endpoint, l.endpoint, err),
			kinds: []error{ErrTimeout, ErrRuntimeNotResponding},
			cause: cause,
		}
	}
	why, ok := dialFailure(err)
	if !ok {
		why = "cannot connect to its socket"
	}
	return &callError{
		msg:   fmt.Sprintf("cri: runtime not answering at %s: %s: %v", l.endpoint, why, err),
		kinds: []error{ErrRuntimeNotResponding},
		cause: cause,
	}
}
