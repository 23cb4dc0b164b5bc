package cri_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/source/cri/critest"
)

// envChildRuntime, set to a socket path, makes the test binary serve a
// runtime on that path instead of running tests.
const envChildRuntime = "PHASESHIFT_CRI_TEST_CHILD_RUNTIME"

// childReady is what a child runtime prints once it listens.
const childReady = "listening"

// serveChild is a runtime process: as containerd does when it starts, it
// removes a socket file a crashed predecessor left behind, then serves one
// sandbox until its stdin closes (the test ended) or it is killed.
func serveChild(path string) int {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintln(os.Stderr, "child runtime:", err)
		return 1
	}
	rt := critest.New()
	rt.SetVersion("child-runtime", "v1.0.0")
	rt.Add(pod("a", "10.0.0.2"))
	srv, err := rt.Serve(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child runtime:", err)
		return 1
	}
	fmt.Println(childReady)
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.Close()
	return 0
}

// child is a runtime running in a process of its own.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startChild starts a runtime process serving on path and returns once it
// listens. The process dies with the test process (Pdeathsig) and is
// killed when the test ends.
func startChild(t *testing.T, path string) *child {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envChildRuntime+"="+path)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, stdin: stdin}
	t.Cleanup(c.kill)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the child runtime did not start")
	require.Equal(t, childReady, strings.TrimSpace(line))
	return c
}

// kill kills the runtime with SIGKILL, as a crash does: its socket file
// stays. It is idempotent.
func (c *child) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Kill()
	_ = c.stdin.Close()
	_ = c.cmd.Wait()
}

// freeze stops the runtime with SIGSTOP and returns once it is stopped:
// the kernel still accepts connections on its socket, and nothing answers
// them.
func (c *child) freeze(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGSTOP))
	require.Eventually(t, func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
		if err != nil {
			return false
		}
		// pid (comm) state ...: the state follows the last ')'.
		i := strings.LastIndexByte(string(stat), ')')
		return i >= 0 && strings.HasPrefix(string(stat[i+1:]), " T")
	}, 10*time.Second, 5*time.Millisecond, "the child runtime did not stop")
}
