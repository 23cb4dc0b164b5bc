// Package testbin is what the module's tests that run a built binary share:
// a TestMain that owns the directory the binaries go to and checks for
// leaked goroutines, and a go build of the package under test.
//
// # Caveats
//
//   - It is for tests only, and needs the go command on PATH.
//   - Run checks for leaked goroutines only when every test passed, so
//     that a leak does not hide the first failure.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// Run is a TestMain's body: it makes a temporary directory for binaries
// (its name starts with prefix) and stores its path in *dir, runs the
// tests, fails the run if they left a goroutine running (the way
// goleak.VerifyTestMain does, but with room to remove the directory first,
// which VerifyTestMain does not leave), removes the directory and returns
// the exit code for os.Exit.
func Run(m *testing.M, prefix string, dir *string) int {
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*dir = d
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left running after the tests: %v\n", err)
			code = 1
		}
	}
	_ = os.RemoveAll(d)
	return code
}

// Build runs go build on pkg (a directory or an import path, in the current
// module) into dir/name and returns its path. args go before the package
// (-race, -tags, ...), env after the current environment (CGO_ENABLED=0).
func Build(dir, name, pkg string, args, env []string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the tests build %s and need the go command on PATH: %w", name, err)
	}
	out := filepath.Join(dir, name)
	full := append([]string{"build", "-buildvcs=false", "-o", out}, args...)
	cmd := exec.Command(goTool, append(full, pkg)...)
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", name, err, b)
	}
	return out, nil
}
