package cri_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/phaseshift/phaseshift/source/cri"
)

// listen listens on a unix socket in a short temporary directory and
// serves every connection with serve until the test ends.
func listen(t *testing.T, name string, serve func(net.Conn)) string {
	t.Helper()
	path := shortSocketPath(t, name)
	lis, err := net.Listen("unix", path)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(c) }()
		}
	}()
	t.Cleanup(func() { _ = lis.Close(); <-done })
	return path
}

// TestWrongEndpoint points a Lister at sockets that do not speak CRI: each
// call fails at once with ErrNotCRIEndpoint, saying what to use instead,
// not after the timeout with ErrTimeout ("overloaded or hung"), which is
// what a runtime that accepts a connection and says nothing gets.
func TestWrongEndpoint(t *testing.T) {
	ctx := context.Background()

	t.Run("an HTTP/1.1 server", func(t *testing.T) {
		path := shortSocketPath(t, "http.sock")
		lis, err := net.Listen("unix", path)
		require.NoError(t, err)
		srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Minute}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(lis) }()
		t.Cleanup(func() { _ = srv.Close(); <-done })

		l := dial(t, path, cri.WithTimeout(time.Minute))
		for _, call := range []func() error{
			func() error { _, err := l.Sandboxes(ctx); return err },
			func() error { _, err := l.Runtime(ctx); return err },
		} {
			err := call()
			assert.ErrorIs(t, err, cri.ErrNotCRIEndpoint)
			assert.NotErrorIs(t, err, cri.ErrTimeout)
			assert.NotErrorIs(t, err, cri.ErrRuntimeNotResponding)
			assert.ErrorContains(t, err, "not a CRI endpoint: "+path)
			assert.ErrorContains(t, err, `"HTTP/1.1 400 Bad Request`)
			assert.Equal(t, codes.Unavailable, status.Code(err), "the gRPC status the call would have failed with")
		}
	})

	t.Run("a server that speaks first", func(t *testing.T) {
		path := listen(t, "ssh.sock", func(c net.Conn) {
			_, _ = io.WriteString(c, "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
			_, _ = io.Copy(io.Discard, c)
		})
		_, err := dial(t, path, cri.WithTimeout(time.Minute)).Sandboxes(ctx)
		assert.ErrorIs(t, err, cri.ErrNotCRIEndpoint)
		assert.ErrorContains(t, err, `"SSH-2.0-OpenSSH_9`)
		assert.ErrorContains(t, err, "unix:///run/containerd/containerd.sock")
	})

	t.Run("containerd's ttrpc socket", func(t *testing.T) {
		// What ttrpc v1.1's server (containerd 1.6's shim API socket,
		// containerd.sock.ttrpc) does, and only that: it reads 10-byte
		// message headers, answers a request for an unknown service with
		// a response on the same stream, and waits in silence for the
		// rest of anything longer than its 4 MiB limit (an HTTP/2
		// preface reads as a 1.3 GB message). The end-to-end suite points
		// a Lister at the real socket.
		path := listen(t, "containerd.sock.ttrpc", serveTTRPC)
		_, err := dial(t, "unix://"+path, cri.WithTimeout(time.Minute)).Sandboxes(ctx)
		assert.ErrorIs(t, err, cri.ErrNotCRIEndpoint)
		assert.NotErrorIs(t, err, cri.ErrTimeout)
		assert.ErrorContains(t, err, "not a CRI endpoint: "+path+" speaks ttrpc")
		assert.ErrorContains(t, err, "is it the .ttrpc socket? use containerd.sock")
	})

	t.Run("a server that hangs up at once", func(t *testing.T) {
		path := listen(t, "closer.sock", func(net.Conn) {})
		_, err := dial(t, path, cri.WithTimeout(time.Minute)).Sandboxes(ctx)
		assert.ErrorIs(t, err, cri.ErrRuntimeNotResponding)
		assert.NotErrorIs(t, err, cri.ErrTimeout)
		assert.ErrorContains(t, err, "closed the connection")
	})
}

// serveTTRPC answers as a ttrpc server answers a client that asks for a
// service it does not have.
func serveTTRPC(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		var hdr [10]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		length, stream := binary.BigEndian.Uint32(hdr[:4]), binary.BigEndian.Uint32(hdr[4:8])
		if length > 4<<20 {
			_, _ = io.Copy(io.Discard, r) // waits for bytes that never come
			return
		}
		if _, err := r.Discard(int(length)); err != nil {
			return
		}
		// Response{status: {code: 12 (Unimplemented), message: "service x"}}
		msg := "service phaseshift.probe"
		st := append([]byte{0x08, 12, 0x12, byte(len(msg))}, msg...)
		payload := append([]byte{0x0a, byte(len(st))}, st...)
		out := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
		out = binary.BigEndian.AppendUint32(out, stream)
		out = append(out, 2, 0) // messageTypeResponse, no flags
		if _, err := c.Write(append(out, payload...)); err != nil {
			return
		}
	}
}

// TestFrozenRuntime stops a runtime process with SIGSTOP: the kernel still
// accepts connections on its socket and nothing answers, so calls fail
// with ErrTimeout after the timeout, both on a connection made before the
// runtime froze and on a Lister that first connects to the frozen one.
func TestFrozenRuntime(t *testing.T) {
	ctx := context.Background()
	path := shortSocketPath(t, "containerd.sock")
	rt := startChild(t, path)
	before := dial(t, path, cri.WithTimeout(300*time.Millisecond))
	// Connected and answered once: on a loaded machine (-race, other
	// packages testing) the child's first answer can take longer than the
	// short timeout, so ask until it answers.
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err = before.Sandboxes(ctx); err == nil || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, err, "the runtime answers before it is frozen")

	rt.freeze(t)
	for name, l := range map[string]*cri.Lister{
		"connected before": before,
		"connecting after": dial(t, path, cri.WithTimeout(300*time.Millisecond)),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := l.Sandboxes(ctx)
			assert.ErrorIs(t, err, cri.ErrTimeout)
			assert.ErrorIs(t, err, cri.ErrRuntimeNotResponding)
			assert.NotErrorIs(t, err, cri.ErrNotCRIEndpoint)
			assert.ErrorContains(t, err, "overloaded or hung")
			assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "the gRPC status the call would have failed with")
			assert.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}
