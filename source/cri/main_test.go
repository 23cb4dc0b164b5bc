package cri_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: a gRPC
// connection not closed, a fake runtime still serving, a status worker
// still waiting.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
