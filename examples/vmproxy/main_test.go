package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/phaseshift/phaseshift/internal/testbin"
	"github.com/stretchr/testify/require"
)

// binDir holds the vmproxy binary the functional tests run; TestMain owns
// it.
var binDir string

// TestMain checks for leaked goroutines after every test and removes the
// binary.
func TestMain(m *testing.M) { os.Exit(testbin.Run(m, "vmproxy-bin", &binDir)) }

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary returns the path of the vmproxy binary, building it once, on first
// use, so that the in-process tests run without paying for the build. When
// the tests run under the race detector, so does the binary.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		var args []string
		if raceEnabled {
			args = append(args, "-race")
		}
		binPath, buildErr = testbin.Build(binDir, "vmproxy", ".", args, nil)
	})
	require.NoError(t, buildErr)
	return binPath
}

// syncBuffer is a bytes.Buffer that a process's stderr copier and the test
// may use at once.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is a short temporary directory for a socket and a checkpoint: unix
// socket paths must fit in about 108 bytes, which t.TempDir's long names
// can exceed.
type env struct {
	dir, socket, state string
}

func newEnv(t *testing.T) env {
	t.Helper()
	dir, err := os.MkdirTemp("", "vmp")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return env{dir: dir, socket: filepath.Join(dir, "s"), state: filepath.Join(dir, "state.json")}
}

// daemon is a running vmproxy binary.
type daemon struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{} // closed when the process has been waited for
	err    error         // cmd.Wait's result, set before exited is closed
}

// command returns the binary's command line for e, with extra flags.
func (e env) command(t *testing.T, extra ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	args := append([]string{"--socket", e.socket, "--state", e.state}, extra...)
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), "PHASESHIFT_PHASE=") // the tests choose the phase
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	return cmd, stderr
}

// start runs the proxy on e and returns once it answers on its socket.
func (e env) start(t *testing.T, extra ...string) *daemon {
	t.Helper()
	cmd, stderr := e.command(t, extra...)
	require.NoError(t, cmd.Start())
	d := &daemon{t: t, cmd: cmd, stderr: stderr, exited: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		<-d.exited
		// A race detected in the daemon is a failure even when the test
		// killed it before it could exit with status 66.
		if strings.Contains(d.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("the daemon reported a data race:\n%s", d.stderr.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-d.exited:
			t.Fatalf("vmproxy exited before serving (%v); stderr:\n%s", d.err, stderr.String())
		default:
		}
		if c, err := net.Dial("unix", e.socket); err == nil {
			cl := &client{t: t, c: c, r: bufio.NewReader(c)}
			resp, err := cl.try(`{"op":"list"}`)
			_ = c.Close()
			if err == nil && resp.OK {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("vmproxy did not answer on %s in time; stderr:\n%s", e.socket, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runToExit runs the proxy on e and expects it to exit by itself (a failed
// start); it returns the exit code and stderr.
func (e env) runToExit(t *testing.T, extra ...string) (int, string) {
	t.Helper()
	cmd, stderr := e.command(t, extra...)
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), stderr.String()
		}
		require.NoError(t, err)
		return 0, stderr.String()
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("vmproxy did not exit; stderr:\n%s", stderr.String())
		return 0, ""
	}
}

// kill9 kills the daemon as a crash would: no signal handler, no cleanup.
func (d *daemon) kill9() {
	d.t.Helper()
	require.NoError(d.t, d.cmd.Process.Signal(syscall.SIGKILL))
	<-d.exited
}

// stop sends SIGTERM and returns the exit code.
func (d *daemon) stop() int {
	d.t.Helper()
	require.NoError(d.t, d.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-d.exited:
	case <-time.After(20 * time.Second):
		d.t.Fatalf("vmproxy did not stop after SIGTERM; stderr:\n%s", d.stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(d.err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(d.t, d.err)
	return 0
}

// client is one connection to a proxy's control socket.
type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func (e env) dial(t *testing.T) *client {
	t.Helper()
	c, err := net.Dial("unix", e.socket)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

// raw sends one line and returns the answer line.
func (c *client) raw(line string) (string, error) {
	_ = c.c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	return c.r.ReadString('\n')
}

func (c *client) try(req any) (response, error) {
	line, ok := req.(string)
	if !ok {
		b, err := json.Marshal(req)
		if err != nil {
			return response{}, err
		}
		line = string(b)
	}
	out, err := c.raw(line)
	if err != nil {
		return response{}, err
	}
	var resp response
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		return response{}, fmt.Errorf("answer %q: %w", out, err)
	}
	return resp, nil
}

// call sends req (a request, or a raw line) and returns the answer.
func (c *client) call(req any) response {
	c.t.Helper()
	resp, err := c.try(req)
	require.NoError(c.t, err)
	return resp
}

// ok sends req and requires it to succeed.
func (c *client) ok(req request) response {
	c.t.Helper()
	resp := c.call(req)
	require.Truef(c.t, resp.OK, "%+v: %s (%s)", req, resp.Error, resp.Code)
	return resp
}

// list returns the answer to list, as the raw line and decoded.
func (c *client) list() (string, []vmView) {
	c.t.Helper()
	out, err := c.raw(`{"op":"list"}`)
	require.NoError(c.t, err)
	var resp response
	require.NoError(c.t, json.Unmarshal([]byte(out), &resp))
	require.True(c.t, resp.OK, out)
	return out, resp.VMs
}
