package cri_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOnlyCRIPullsGRPC holds the module to what the package doc and the
// README promise: gRPC, protobuf and cri-api reach a program only through
// this package (or critest). A daemon that imports checkpoint, migrate or
// source links none of them.
func TestOnlyCRIPullsGRPC(t *testing.T) {
	const (
		module = "github.com/phaseshift/phaseshift"
		cri    = module + "/source/cri"
	)
	heavy := []string{"google.golang.org/grpc", "google.golang.org/protobuf", "k8s.io/cri-api"}

	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "listing the module's imports needs the go command on PATH")
	// -deps is not used: Deps already holds every package a package needs
	// to build (tests excluded), which is what a program that imports it
	// links.
	out, err := exec.Command(goTool, "list", "-json=ImportPath,Deps", module+"/...").Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("go list: %v\n%s", err, exit.Stderr)
	}
	require.NoError(t, err)

	var checked []string
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		checked = append(checked, p.ImportPath)
		if p.ImportPath == cri || strings.HasPrefix(p.ImportPath, cri+"/") || slices.Contains(p.Deps, cri) {
			continue // through source/cri, as it should be
		}
		// The Prometheus client's data model is protobuf: package metrics
		// (a module of its own, which a daemon imports only to export
		// metrics) links protobuf through it, and nothing more of these.
		viaPrometheus := slices.Contains(p.Deps, "github.com/prometheus/client_golang/prometheus")
		var linked []string
		for _, dep := range p.Deps {
			for _, h := range heavy {
				if viaPrometheus && h == "google.golang.org/protobuf" {
					continue
				}
				if dep == h || strings.HasPrefix(dep, h+"/") {
					linked = append(linked, dep)
				}
			}
		}
		assert.Empty(t, linked, "%s links these without importing source/cri", p.ImportPath)
	}
	// The check means something only if it saw the packages that must stay
	// light.
	for _, light := range []string{"checkpoint", "migrate", "source"} {
		assert.Contains(t, checked, module+"/"+light)
	}
}
