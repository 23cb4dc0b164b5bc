package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/phaseshift/phaseshift/internal/testbin"
	"github.com/stretchr/testify/require"
)

// The tests exec two real plugin binaries, as a runtime does: this plugin,
// built from this package, and the real host-local of the plugins module
// at the version go.mod requires. Both live in binDir, which TestMain owns,
// under the names a network configuration's "type" gives.
const (
	ourPlugin   = "phaseshift-host-local"
	hostLocal   = "host-local"
	pluginsPath = "github.com/containernetworking/plugins"
)

var binDir string

// TestMain removes the binaries after the tests and fails the package if a
// test leaves a goroutine behind.
func TestMain(m *testing.M) { os.Exit(testbin.Run(m, "phaseshift-hostlocal-bin", &binDir)) }

var (
	buildOnce sync.Once
	buildErr  error
)

// plugins builds both binaries into binDir, once, on first use (the unit
// tests do not pay for it), and returns binDir, the CNI_PATH to find them
// in.
func plugins(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() { buildErr = buildPlugins() })
	require.NoError(tb, buildErr)
	return binDir
}

func buildPlugins() error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the tests build the plugins and need the go command on PATH: %w", err)
	}
	// Static binaries, as the plugins' releases build theirs
	// (CGO_ENABLED=0 in their release workflow): a runtime execs them
	// with nothing to load. Not under the race detector, even when the
	// tests are: the tests exec the plugin hundreds of times, and a race
	// binary's start alone costs more than an exec; TestInProcess runs
	// the plugin's code in the test binary instead, under -race with it.
	if _, err := testbin.Build(binDir, ourPlugin, ".", nil, []string{"CGO_ENABLED=0"}); err != nil {
		return err
	}
	v, err := pluginsVersion()
	if err != nil {
		return err
	}
	// go install pkg@version builds host-local in its own module, with the
	// plugins module's go.mod and go.sum, so this module need not require
	// host-local's dependencies (netlink, iptables, ...) to test against it.
	cmd := exec.Command(goTool, "install", pluginsPath+"/plugins/ipam/host-local@"+v)
	cmd.Dir = binDir
	cmd.Env = append(os.Environ(), "GOBIN="+binDir, "GOWORK=off", "CGO_ENABLED=0", "GOFLAGS="+withoutModFlag(os.Getenv("GOFLAGS")))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go install host-local@%s (the real host-local, the reference of these tests; it needs its dependencies in the module cache or a module proxy): %v\n%s", v, err, out)
	}
	return nil
}

// pluginsVersion is the version of the plugins module this test binary
// was built with: the one go.mod requires.
func pluginsVersion() (string, error) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "", fmt.Errorf("no build information in the test binary")
	}
	for _, d := range bi.Deps {
		if d.Path == pluginsPath {
			if d.Replace != nil {
				return "", fmt.Errorf("%s is replaced in go.mod; the tests build host-local from a released version", pluginsPath)
			}
			return d.Version, nil
		}
	}
	return "", fmt.Errorf("%s is not a dependency of the test binary", pluginsPath)
}

// withoutModFlag drops -mod=... from GOFLAGS: go install pkg@version
// refuses it.
func withoutModFlag(flags string) string {
	var keep []string
	for _, f := range strings.Fields(flags) {
		if !strings.HasPrefix(f, "-mod=") {
			keep = append(keep, f)
		}
	}
	return strings.Join(keep, " ")
}
