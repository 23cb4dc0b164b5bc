package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// writeTimeout bounds how long a response may wait for a client that does
// not read, so that such a client cannot hold up shutdown forever.
const writeTimeout = 10 * time.Second

// server serves the control protocol on a unix socket: one goroutine per
// connection, one JSON request per line, one JSON response per line, in
// order.
type server struct {
	p    *proxy
	log  *zap.Logger
	ln   *net.UnixListener
	path string
	// ctx is what requests run under. It is not cancelled at shutdown:
	// a request being handled is finished and answered, not cut short
	// between its commit and its acknowledgement.
	ctx context.Context

	mu      sync.Mutex // guards conns and closing
	conns   map[net.Conn]struct{}
	closing bool

	wg sync.WaitGroup // one per connection goroutine
}

// listen creates the control socket at path. A socket left behind by a
// proxy that was killed is replaced; a live one, or anything that is not a
// socket, is not.
func listen(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := removeStale(path); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// Whoever can connect can read every token: owner only. The socket
	// exists with the umask's mode until this chmod, which is why the
	// directory should not be open to others either.
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return ln, nil
}

// removeStale removes the socket at path if nobody answers on it. kill -9
// leaves the socket file behind, and bind fails while it exists.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return errors.New("the path exists and is not a socket: refusing to replace it")
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		_ = c.Close()
		return errors.New("another process is serving on it: stop it, or give this instance another --socket")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("cannot tell whether it is in use: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the stale socket: %w", err)
	}
	return nil
}

func newServer(ctx context.Context, p *proxy, ln *net.UnixListener, log *zap.Logger) *server {
	return &server{p: p, log: log, ln: ln, path: ln.Addr().String(), ctx: ctx, conns: make(map[net.Conn]struct{})}
}

// serve accepts connections until shutdown, and then returns nil.
func (s *server) serve() error {
	backoff := 5 * time.Millisecond
	for {
		c, err := s.ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return nil
			}
			// Out of file descriptors and the like pass; wait and retry
			// rather than exit with every VM's proxy.
			var ne net.Error
			if errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("accept failed; retrying", zap.Error(err), zap.Duration("in", backoff))
				time.Sleep(backoff)
				backoff = min(2*backoff, time.Second)
				continue
			}
			return fmt.Errorf("control socket %s: %w", s.path, err)
		}
		backoff = 5 * time.Millisecond
		if !s.track(c) {
			_ = c.Close()
			continue
		}
		go s.serveConn(c)
	}
}

// track registers a connection, unless shutdown has begun.
func (s *server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// serveConn answers a connection's requests in order until it closes.
func (s *server) serveConn(c net.Conn) {
	defer s.untrack(c)
	defer c.Close()
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 0, 4096), maxRequest)
	enc := json.NewEncoder(c)
	enc.SetEscapeHTML(false)
	reply := func(r response) bool {
		_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
		return enc.Encode(r) == nil
	}
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue // lets a person type at socat without being scolded
		}
		if !reply(s.p.handleLine(s.ctx, line)) {
			return
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		// The rest of the line cannot be told from the next request:
		// answer, then hang up.
		reply(failure(fmt.Errorf("%w: request longer than %d bytes", errBadRequest, maxRequest)))
	}
}

// shutdown stops accepting, lets every connection finish the request it is
// handling, and waits up to grace for them before cutting them off. It
// removes the socket, so a client sees "no such file" rather than a hang.
func (s *server) shutdown(grace time.Duration) {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	_ = s.ln.Close() // a UnixListener from Listen unlinks its socket
	if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("removing the control socket", zap.String("socket", s.path), zap.Error(err))
	}

	// A read deadline in the past wakes a connection waiting for its next
	// request; one handling a request finishes it and answers first.
	s.mu.Lock()
	for c := range s.conns {
		_ = c.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	s.mu.Lock()
	n := len(s.conns)
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.log.Warn("connections did not finish in time; closed them", zap.Int("connections", n), zap.Duration("grace", grace))
	<-done
}
