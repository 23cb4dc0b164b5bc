package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The binaries the suite runs, by the names a network configuration's
// "type" gives them.
const (
	ourPlugin   = "phaseshift-host-local"
	hostLocal   = "host-local"
	pluginsPath = "github.com/containernetworking/plugins"
)

// build builds what the node runs: the CNI plugins of the plugins module
// the examples require (bridge, loopback, and the real host-local),
// examples/hostlocal and examples/ipam, static as the plugins' releases
// are.
func (n *node) build(ctx context.Context) error {
	v, err := pluginsVersion(ctx)
	if err != nil {
		return err
	}
	// go install pkg@version builds in the plugins module, with its own
	// go.mod and go.sum, from the module cache (or the module proxy the
	// first time).
	install := []string{"install"}
	for _, p := range []string{"main/bridge", "main/loopback", "ipam/host-local"} {
		install = append(install, pluginsPath+"/plugins/"+p+"@"+v)
	}
	if err := goTool(ctx, "", []string{"GOBIN=" + n.cniBin, "GOWORK=off"}, install...); err != nil {
		return err
	}
	if err := goTool(ctx, "", nil, "build", "-o", filepath.Join(n.cniBin, ourPlugin), "github.com/phaseshift/phaseshift/examples/hostlocal"); err != nil {
		return err
	}
	n.ipamBin = filepath.Join(n.dir, "bin", "ipam")
	return goTool(ctx, "", nil, "build", "-o", n.ipamBin, "github.com/phaseshift/phaseshift/examples/ipam")
}

// goTool runs the go command in dir (the package's directory if ""),
// static, without VCS stamping, and with GOFLAGS' -mod removed for go
// install pkg@version, which refuses it.
func goTool(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var flags []string
	for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
		if !strings.HasPrefix(f, "-mod=") {
			flags = append(flags, f)
		}
	}
	flags = append(flags, "-buildvcs=false")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS="+strings.Join(flags, " "))
	cmd.Env = append(cmd.Env, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// pluginsVersion is the version of the plugins module the examples
// require, as the go command resolves it here (go.mod, or go.work).
func pluginsVersion(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{if .Replace}}replaced{{else}}{{.Version}}{{end}}", pluginsPath).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", pluginsPath, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "replaced" || v == "" {
		return "", fmt.Errorf("%s is replaced in go.mod; the suite builds the plugins of a released version", pluginsPath)
	}
	return v, nil
}
