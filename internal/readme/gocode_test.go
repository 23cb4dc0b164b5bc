package readme_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// workspace makes a temporary module (example.com/readme) that uses this
// repository's modules through a go.work, and returns its directory and
// the environment to run the go command in it with.
func workspace(t *testing.T) (string, []string) {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	mod := "module example.com/readme\n\ngo 1.26.0\n\nrequire (\n" +
		"\tgithub.com/phaseshift/phaseshift v0.0.0-00010101000000-000000000000\n" +
		"\tgo.uber.org/zap v1.27.0\n)\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	work := "go 1.26.0\n\nuse (\n\t.\n"
	for _, m := range []string{".", "examples", "metrics", "source/cri", "source/hostlocal"} {
		work += "\t" + filepath.Join(root, m) + "\n"
	}
	work += ")\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.work"), []byte(work), 0o644))
	env := append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"), "GOFLAGS=-buildvcs=false", "GOTOOLCHAIN=local")
	return dir, env
}

// TestQuickStart runs the README's Quick start as written, with the
// commands the README shows under it, and checks that each prints what
// the README shows: in particular that a restart from phase 1 to phase 2,
// with the registry (a source.Map) empty again, serves every VM the run
// before acknowledged.
func TestQuickStart(t *testing.T) {
	goCmd := goTool(t)
	blocks := under(t, readmeBlocks(t), "Quick start")
	var prog, shown *block
	for i := range blocks {
		if blocks[i].lang == "go" && strings.HasPrefix(blocks[i].text, "package main\n") && i+1 < len(blocks) && blocks[i+1].lang == "" {
			prog, shown = &blocks[i], &blocks[i+1]
			break
		}
	}
	require.NotNil(t, prog, "README.md: the Quick start is a program (package main) followed by what it prints")
	dir, env := workspace(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(prog.text), 0o644))
	// Built once, so that each command's go run only links.
	build := exec.Command(goCmd, "build", "-o", os.DevNull, ".")
	build.Dir, build.Env = dir, env
	out, err := build.CombinedOutput()
	require.NoError(t, err, "README.md:%d: the Quick start does not build:\n%s", prog.line, out)

	// The shown block: "$ " lines are commands, the lines after each what
	// it prints.
	type run struct {
		cmd  string
		want string
	}
	var runs []run
	for _, l := range strings.SplitAfter(shown.text, "\n") {
		if c, ok := strings.CutPrefix(l, "$ "); ok {
			runs = append(runs, run{cmd: strings.TrimSpace(c)})
			continue
		}
		require.NotEmpty(t, runs, "README.md:%d: output before any command", shown.line)
		runs[len(runs)-1].want += l
	}
	require.Len(t, runs, 2, "README.md:%d: the phase-1 run and the phase-2 restart", shown.line)
	for i, r := range runs {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", r.cmd)
		cmd.Dir, cmd.Env = dir, append(env, "PATH="+filepath.Dir(goCmd)+":"+os.Getenv("PATH"))
		got, err := cmd.CombinedOutput()
		cancel()
		require.NoError(t, err, "README.md:%d: %s:\n%s", shown.line, r.cmd, got)
		assert.Equal(t, r.want, string(got), fmt.Sprintf("README.md:%d: run %d, %s, does not print what the README shows", shown.line, i+1, r.cmd))
	}
}
