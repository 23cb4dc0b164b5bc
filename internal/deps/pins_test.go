package deps_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// heavy are the modules the root module must not require, even
// indirectly: the ones a Kubernetes node daemon pins to its release.
var heavy = []string{
	"google.golang.org/grpc",
	"google.golang.org/protobuf",
	"github.com/golang/protobuf",
	"k8s.io/cri-api",
	"github.com/prometheus/",
	"github.com/containernetworking/",
}

// pins are what a daemon of Kubernetes 1.30 pins (client_golang: of 1.22,
// older than the metrics module's), each older than what this
// repository's other modules require.
var pins = []struct{ path, version, pkg string }{
	{"google.golang.org/grpc", "v1.58.3", "google.golang.org/grpc"},
	{"k8s.io/cri-api", "v0.30.4", "k8s.io/cri-api/pkg/apis/runtime/v1"},
	{"github.com/prometheus/client_golang", "v1.11.0", "github.com/prometheus/client_golang/prometheus"},
	{"github.com/containernetworking/cni", "v1.1.2", "github.com/containernetworking/cni/pkg/skel"},
	{"github.com/containernetworking/plugins", "v1.3.0", "github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"},
}

// repoRoot is the root module's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"))
	return root
}

// goCmd runs the go command in dir, outside any workspace and with no
// -mod flag from the environment, and returns its combined output.
func goCmd(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "these tests run the go command; it must be on PATH")
	cmd := exec.Command(goTool, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false", "GOTOOLCHAIN=local")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// unreachable matches what the go command says when it cannot reach the
// module proxy.
var unreachable = regexp.MustCompile(`dial tcp|lookup .*: |no such host|connection refused|i/o timeout|TLS handshake timeout|proxyconnect|network is unreachable|GOPROXY=off|disabled by GOPROXY|module lookup disabled`)

// skipOffline skips the test when out says the proxy cannot be reached,
// unless PHASESHIFT_REQUIRE_PROXY=1 (CI), which fails it instead.
func skipOffline(t *testing.T, out string, err error) {
	t.Helper()
	if err == nil || !unreachable.MatchString(out) {
		return
	}
	if os.Getenv("PHASESHIFT_REQUIRE_PROXY") == "1" {
		t.Fatalf("the Go module proxy cannot be reached, and PHASESHIFT_REQUIRE_PROXY=1 requires this test to run:\n%s", out)
	}
	t.Skipf("the Go module proxy cannot be reached, so the pins are not checked here (.ci/run checks them):\n%s", out)
}

// TestRootModuleRequiresNoHeavyModule: go mod graph of the root module,
// every requirement of every module it requires included, names none of
// the modules a node daemon pins.
func TestRootModuleRequiresNoHeavyModule(t *testing.T) {
	out, err := goCmd(t, repoRoot(t), "mod", "graph")
	skipOffline(t, out, err)
	require.NoError(t, err, out)
	require.Contains(t, out, "go.uber.org/zap@", "the graph is the root module's")
	for _, line := range strings.Split(out, "\n") {
		for _, h := range heavy {
			assert.NotContains(t, line, " "+h, "the root module's graph requires %s", h)
		}
	}
}

// TestImporterKeepsItsPins builds, in a temporary directory, the module of
// a node daemon that imports checkpoint and migrate (replaced by this
// repository) and pins older gRPC, cri-api, Prometheus and CNI modules
// for packages of its own, runs go mod tidy, and checks that every pin is
// the version selected. Before the root module was split, tidy raised
// gRPC to v1.72.1, cri-api to v0.34.0, client_golang to v1.11.1, CNI to
// v1.3.0 and plugins to v1.7.1.
func TestImporterKeepsItsPins(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: go mod tidy of a module with Kubernetes' dependencies takes a while")
	}
	dir := t.TempDir()
	var mod, imports strings.Builder
	fmt.Fprintf(&mod, "module example.com/nodedaemon\n\ngo 1.24.0\n\nrequire (\n\tgithub.com/phaseshift/phaseshift v0.0.0-00010101000000-000000000000\n")
	imports.WriteString("\t_ \"github.com/phaseshift/phaseshift/checkpoint\"\n\t_ \"github.com/phaseshift/phaseshift/migrate\"\n")
	for _, p := range pins {
		fmt.Fprintf(&mod, "\t%s %s\n", p.path, p.version)
		fmt.Fprintf(&imports, "\t_ %q\n", p.pkg)
	}
	fmt.Fprintf(&mod, ")\n\nreplace github.com/phaseshift/phaseshift => %s\n", repoRoot(t))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod.String()), 0o644))
	main := "package main\n\nimport (\n" + imports.String() + ")\n\nfunc main() {}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o644))

	out, err := goCmd(t, dir, "mod", "tidy")
	skipOffline(t, out, err)
	require.NoError(t, err, "go mod tidy:\n%s", out)

	args := []string{"list", "-m", "-f", "{{.Path}} {{.Version}}"}
	for _, p := range pins {
		args = append(args, p.path)
	}
	out, err = goCmd(t, dir, args...)
	require.NoError(t, err, out)
	for _, p := range pins {
		assert.Contains(t, strings.Split(strings.TrimSpace(out), "\n"), p.path+" "+p.version, "go mod tidy moved the pin of %s", p.path)
	}
}

// TestCRIImporterEndsUpWith builds the module of a daemon that imports
// source/cri and checks what go mod tidy gives it: with no pins of its
// own, the gRPC and cri-api source/cri requires (the lowest with which it
// builds and passes its tests: grpc.NewClient came in gRPC v1.63.0, the
// CRI v1 API in cri-api v0.20.0); with Kubernetes 1.30's pins, its own
// cri-api and the gRPC source/cri needs, which is newer than 1.30's.
func TestCRIImporterEndsUpWith(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: go mod tidy of a module with gRPC takes a while")
	}
	for _, tc := range []struct {
		name      string
		pins      string
		grpc, cri string
	}{
		{"no pins", "", "v1.63.0", "v0.20.0"},
		{"Kubernetes 1.30's pins", "\tgoogle.golang.org/grpc v1.58.3\n\tk8s.io/cri-api v0.30.4\n", "v1.63.0", "v0.30.4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			root := repoRoot(t)
			mod := fmt.Sprintf("module example.com/crinode\n\ngo 1.24.0\n\nrequire (\n\tgithub.com/phaseshift/phaseshift v0.0.0-00010101000000-000000000000\n\tgithub.com/phaseshift/phaseshift/source/cri v0.0.0-00010101000000-000000000000\n%s)\n\nreplace (\n\tgithub.com/phaseshift/phaseshift => %s\n\tgithub.com/phaseshift/phaseshift/source/cri => %s\n)\n",
				tc.pins, root, filepath.Join(root, "source", "cri"))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
			main := "package main\n\nimport _ \"github.com/phaseshift/phaseshift/source/cri\"\n\nfunc main() {}\n"
			require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o644))
			out, err := goCmd(t, dir, "mod", "tidy")
			skipOffline(t, out, err)
			require.NoError(t, err, "go mod tidy:\n%s", out)
			out, err = goCmd(t, dir, "list", "-m", "-f", "{{.Path}} {{.Version}}", "google.golang.org/grpc", "k8s.io/cri-api")
			require.NoError(t, err, out)
			assert.Equal(t, "google.golang.org/grpc "+tc.grpc+"\nk8s.io/cri-api "+tc.cri, strings.TrimSpace(out))
		})
	}
}
