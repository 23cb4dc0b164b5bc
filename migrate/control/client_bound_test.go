package control_test

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/migrate/control"
)

// The Client reads the daemon's answer line by line with no bound on a
// line (bufio.Reader.ReadBytes), so whatever serves the socket - a daemon
// gone wrong, or another user's process at the name (a sticky directory
// lets one create it first) - makes the phaseshift command, run as root,
// hold as much memory as it sends: a 256 MiB answer line with no newline
// is buffered whole before the Client fails. This is the "client memory
// exhaustion by a hostile server" the README counts against gRPC's
// floors, in the library's own client. A line longer than any answer can
// be (a request is at most 1 MiB; an entry's line is its key and value)
// should end the request with an error.
//
// It fails on the current code: List allocates more than 512 MiB for the
// one line before it returns.
func TestClientBoundsAnAnswerLine(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer ln.Close()
	const size = 256 << 20
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return // the client gave up: what the test wants
			}
		}
	}()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = control.NewClient(sock).List(context.Background(), func([]byte) error { return nil })
	runtime.ReadMemStats(&after)
	<-done
	require.Error(t, err, "an answer line that never ends is not an answer")
	allocated := after.TotalAlloc - before.TotalAlloc
	assert.Less(t, allocated, uint64(64<<20), "the Client allocated %d MiB for one line of the server's", allocated>>20)
}
