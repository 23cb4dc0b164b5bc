package readme_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// block is one fenced code block of the README.
type block struct {
	lang    string // what follows the opening fence: "go", "sh", ""
	heading string // the nearest heading above it, without its #s
	line    int    // the line of its opening fence, from 1
	text    string // its lines, each ending in a newline
}

// repoRoot is the root module's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"))
	return root
}

// readmeBlocks returns the README's fenced code blocks, in order.
func readmeBlocks(t *testing.T) []block {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "README.md"))
	require.NoError(t, err)
	defer f.Close()
	var blocks []block
	var cur *block
	heading := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{lang: strings.TrimSpace(strings.TrimPrefix(line, "```")), heading: heading, line: n}
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case strings.HasPrefix(line, "#"):
			heading = strings.TrimSpace(strings.TrimLeft(line, "#"))
		}
	}
	require.NoError(t, sc.Err())
	require.Nil(t, cur, "README.md: a code block is not closed")
	return blocks
}

// under returns the blocks under the heading h, in order; it fails the
// test when there is none.
func under(t *testing.T, blocks []block, h string) []block {
	t.Helper()
	var out []block
	for _, b := range blocks {
		if b.heading == h {
			out = append(out, b)
		}
	}
	require.NotEmpty(t, out, "README.md has no code block under the heading %q: this test runs it; rename it here too", h)
	return out
}

// goTool is the go command, or a skip where it is not on PATH.
func goTool(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: builds and runs the README's programs")
	}
	g, err := exec.LookPath("go")
	require.NoError(t, err, "these tests run the go command; it must be on PATH")
	return g
}
