package cri_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: a gRPC
// connection not closed, a fake runtime still serving, a status worker
// still waiting. Started with envChildRuntime set, the test binary is
// instead a runtime in a process of its own (see startChild), which a test
// can kill with -9 or freeze with SIGSTOP.
func TestMain(m *testing.M) {
	if path := os.Getenv(envChildRuntime); path != "" {
		os.Exit(serveChild(path))
	}
	goleak.VerifyTestMain(m)
}
