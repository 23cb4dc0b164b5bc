package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"
)

var runE2E = flag.Bool("e2e", false, "run the end-to-end suite against a real containerd (needs root, containerd and runc)")

// suiteTimeout bounds the whole suite, builds included: a hung containerd
// fails it rather than hanging a CI job. It is no measure of speed.
const suiteTimeout = 6 * time.Minute

var (
	setupOnce sync.Once
	shared    *node
	setupErr  error
	skipWhy   string
	suiteCtx  context.Context
)

// TestMain checks what the suite needs and, after the tests, removes
// everything the suite made; copied into the CNI plugin directory as the
// relay plugin, the test binary is that plugin instead. A SIGINT or SIGTERM (go test's -timeout
// kills with neither) cleans up too; a SIGKILL leaves the leftovers to the
// next run's sweep.
func TestMain(m *testing.M) {
	if isRelayPlugin() {
		// Run by the bridge plugin as containerd's pods' IPAM, not as tests.
		os.Exit(relayPluginMain())
	}
	flag.Parse()
	skipWhy = prerequisites()
	if skipWhy != "" {
		os.Exit(m.Run())
	}
	// A teardown that writes to the pipe of a go test that a group signal
	// killed first must not die of SIGPIPE before it has cleaned up.
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	suiteCtx = ctx
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if _, ok := <-signals; ok {
			teardown()
			os.Exit(1)
		}
	}()
	code := m.Run()
	signal.Stop(signals)
	close(signals)
	cancel()
	if err := teardown(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: cleaning up:", err)
		code = 1
	}
	os.Exit(code)
}

// prerequisites says why the suite cannot run here, or "".
func prerequisites() string {
	const how = "run it as root with containerd and runc installed (apt-get install -y containerd): sudo go test ./examples/e2e -e2e"
	if !*runE2E {
		return "the end-to-end suite runs only with -e2e; " + how
	}
	if os.Geteuid() != 0 {
		return "the end-to-end suite needs root (namespaces, mounts, cgroups); " + how
	}
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("the end-to-end suite needs %s on PATH; %s", tool, how)
		}
	}
	return ""
}

// e2eNode returns the node the tests share, setting it up on first use,
// or skips the test with the reason the suite cannot run.
func e2eNode(t *testing.T) *node {
	t.Helper()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	setupOnce.Do(func() { shared, setupErr = setup(suiteCtx) })
	if setupErr != nil {
		t.Fatalf("setting up containerd: %v", setupErr)
	}
	return shared
}

var teardownOnce sync.Once

// teardown stops the node and sweeps whatever is left, once, if this run
// set one up (and so holds the lock that keeps other runs out).
func teardown() error {
	var err error
	teardownOnce.Do(func() {
		if lock == nil {
			return
		}
		if shared != nil {
			shared.stop()
		}
		err = sweep()
		releaseLock()
	})
	return err
}
