package deps_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// commonPins are modules the root module requires that every Kubernetes
// node daemon pins as well, at Kubernetes 1.30's versions: golang.org/x/sys
// (client-go requires it), zap and testify. The README says each module
// requires "at the lowest version that builds and passes its tests", so
// that an importer's pins stay its own; the root module builds, and its
// tests pass, with golang.org/x/sys v0.18.0 (it uses flock, fstat, open,
// statfs and the like, all years old: v0.1.0 builds it too), yet its
// go.mod requires v0.32.0, and testify v1.10.0 for its tests alone.
var commonPins = []struct{ path, version, pkg string }{
	{"golang.org/x/sys", "v0.18.0", "golang.org/x/sys/unix"},
	{"go.uber.org/zap", "v1.26.0", "go.uber.org/zap"},
	{"github.com/stretchr/testify", "v1.8.4", "github.com/stretchr/testify/assert"},
}

// TestImporterKeepsItsCommonPins is TestImporterKeepsItsPins for the
// modules the root module itself requires: a daemon that imports
// checkpoint and migrate, and pins Kubernetes 1.30's golang.org/x/sys,
// zap and testify for packages of its own, keeps them after go mod tidy.
//
// It fails on the current code: tidy raises golang.org/x/sys to v0.32.0
// and testify to v1.10.0.
func TestImporterKeepsItsCommonPins(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: go mod tidy takes a while")
	}
	dir := t.TempDir()
	var mod, imports strings.Builder
	fmt.Fprintf(&mod, "module example.com/nodedaemon\n\ngo 1.24.0\n\nrequire (\n\tgithub.com/phaseshift/phaseshift v0.0.0-00010101000000-000000000000\n")
	imports.WriteString("\t_ \"github.com/phaseshift/phaseshift/checkpoint\"\n\t_ \"github.com/phaseshift/phaseshift/migrate\"\n")
	for _, p := range commonPins {
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
	for _, p := range commonPins {
		args = append(args, p.path)
	}
	out, err = goCmd(t, dir, args...)
	require.NoError(t, err, out)
	for _, p := range commonPins {
		assert.Contains(t, strings.Split(strings.TrimSpace(out), "\n"), p.path+" "+p.version, "go mod tidy moved the pin of %s", p.path)
	}
}
