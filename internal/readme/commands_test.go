package readme_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// commands are a shell block's command lines, comments and blank lines
// left out.
func commands(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(strings.SplitN(l, "#", 2)[0])
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// TestTwoCommands: the README's "Two commands" are two - the demo and one
// test command - and the test command covers every module, examples/vpccni
// (outside go.work) included, and is what .ci/run runs.
func TestTwoCommands(t *testing.T) {
	blocks := under(t, readmeBlocks(t), "Two commands")
	require.Equal(t, "sh", blocks[0].lang)
	cmds := commands(blocks[0].text)
	require.Equal(t, []string{"go run ./examples/ipam", "./test"}, cmds, "README.md:%d", blocks[0].line)

	root := repoRoot(t)
	fi, err := os.Stat(filepath.Join(root, "test"))
	require.NoError(t, err, "the README's test command")
	assert.NotZero(t, fi.Mode()&0o111, "./test is not executable")
	script, err := os.ReadFile(filepath.Join(root, "test"))
	require.NoError(t, err)
	assert.Contains(t, string(script), "go test -json \"$@\" github.com/phaseshift/phaseshift/...", "every module in go.work")
	assert.Contains(t, string(script), "cd examples/vpccni && GOWORK=off go test -json \"$@\" ./...", "the module outside go.work")

	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	require.NoError(t, err)
	ciCmds := commands(string(ci))
	for _, c := range cmds {
		assert.Contains(t, ciCmds, c, ".ci/run does not run the README's command %q", c)
	}
}
