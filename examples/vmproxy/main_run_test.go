package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/control"
)

func TestParseFlags(t *testing.T) {
	env := func(phase string) func(string) string {
		return func(k string) string {
			if k == phaseEnv {
				return phase
			}
			return ""
		}
	}
	cases := []struct {
		name  string
		args  []string
		env   string
		phase migrate.Phase
		err   string
	}{
		{name: "default is contract", phase: migrate.PhaseContract},
		{name: "env gives the phase", env: "migrate", phase: migrate.PhaseMigrate},
		{name: "env takes numbers", env: "1", phase: migrate.PhaseExpand},
		{name: "flag wins over env", args: []string{"--phase", "legacy"}, env: "migrate", phase: migrate.PhaseLegacy},
		{name: "flag wins over a bad env", args: []string{"--phase", "2"}, env: "sideways", phase: migrate.PhaseMigrate},
		{name: "bad env", env: "sideways", err: phaseEnv},
		{name: "bad flag", args: []string{"--phase", "9"}, err: "phase"},
		{name: "positional argument", args: []string{"serve"}, err: "unexpected argument"},
		{name: "bad log format", args: []string{"--log-format", "xml"}, err: "log-format"},
		{name: "negative lock wait", args: []string{"--lock-wait", "-1s"}, err: "lock-wait"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, err := parseFlags(c.args, env(c.env), io.Discard)
			if c.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.phase, o.phase)
		})
	}
	t.Run("help", func(t *testing.T) {
		_, err := parseFlags([]string{"--help"}, env(""), io.Discard)
		assert.ErrorIs(t, err, flag.ErrHelp)
		assert.Equal(t, 0, run(context.Background(), []string{"-h"}, env(""), io.Discard))
	})
	t.Run("bad command line exits 2", func(t *testing.T) {
		assert.Equal(t, 2, run(context.Background(), []string{"--nope"}, env(""), io.Discard))
	})
}

// TestRun runs the daemon in this process and shuts it down by cancelling
// its context, as SIGTERM does: the socket goes, the lock is released and
// no goroutine is left behind (TestMain checks).
func TestRun(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &syncBuffer{}
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, []string{"--socket", e.socket, "--state", e.state, "--log-level", "debug", "--control-socket"}, func(string) string { return "" }, stderr)
	}()

	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(e.socket); err == nil {
			break
		}
		select {
		case code := <-exit:
			t.Fatalf("run exited with %d: %s", code, stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "no socket: %s", stderr.String())
	}
	c := e.dial(t)
	c.ok(request{Op: "register", VM: "vm-1"})
	c.ok(request{Op: "register", VM: "vm-2"})
	e.dial(t) // an idle connection must not hold up shutdown
	// The operator's command deletes through the control socket.
	require.NoError(t, control.NewClient(control.SocketPath(e.state)).Delete(ctx, json.RawMessage(`"vm-2"`)))
	var served []string
	for _, vm := range c.ok(request{Op: "list"}).VMs {
		served = append(served, vm.ID)
	}
	assert.Equal(t, []string{"vm-1"}, served, "the proxy no longer serves vm-2")

	cancel()
	select {
	case code := <-exit:
		assert.Equal(t, 0, code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context was cancelled")
	}
	_, err := os.Stat(e.socket)
	assert.True(t, errors.Is(err, os.ErrNotExist), "the socket is removed")
	assert.NoFileExists(t, control.SocketPath(e.state), "and the control socket")
	_, err = c.try(request{Op: "list"})
	assert.Error(t, err, "connections are closed")

	// The lock is free, and what was acknowledged is in the file.
	f, err := checkpoint.Open[string, VM](context.Background(), e.state, checkpoint.WithLockWait(0))
	require.NoError(t, err)
	defer f.Close()
	snap, err := f.Load(context.Background())
	require.NoError(t, err)
	assert.Contains(t, snap.Entries, "vm-1")
	assert.NotContains(t, snap.Entries, "vm-2", "the file agrees with what the proxy served")
	assert.Contains(t, stderr.String(), `"msg":"stopped"`)
}
