package readme_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// laptopHeading is the README's heading of the operator's walkthrough on a
// machine with no container runtime.
const laptopHeading = "The same steps on a laptop, with no runtime installed"

// askLine is a line of the walkthrough that sends the daemon a request
// and says, in its comment, what the daemon answers.
var askLine = regexp.MustCompile(`^ask '[^']*' +# (\{.*\})$`)

// TestLaptopWalkthrough runs the README's operator walkthrough on a laptop
// as written, in bash, against the binaries its install line names built
// from this repository, with no container runtime: every command must
// succeed, each answer the README states must come, the daemon's memory
// and its file must agree after the delete, and the deleted entry must be
// gone from what the daemon serves.
func TestLaptopWalkthrough(t *testing.T) {
	goCmd := goTool(t)
	if runtime.GOOS != "linux" {
		t.Skipf("the walkthrough needs Linux (the control socket checks its peers with SO_PEERCRED), not %s", runtime.GOOS)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("the walkthrough is bash, which is not on PATH")
	}
	blocks := under(t, readmeBlocks(t), laptopHeading)
	require.Len(t, blocks, 3, "README.md, %q: the install line, the walkthrough and the protocol", laptopHeading)
	install, walk := blocks[0], blocks[1]

	// The install line, built into a directory of the test's own.
	fields := strings.Fields(strings.SplitN(install.text, "#", 2)[0])
	require.Greater(t, len(fields), 2, "README.md:%d: no go install line", install.line)
	require.Equal(t, []string{"go", "install"}, fields[:2], "README.md:%d", install.line)
	bin := t.TempDir()
	build := exec.Command(goCmd, append([]string{"build", "-o", bin + "/"}, fields[2:]...)...)
	build.Dir = repoRoot(t)
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build %v:\n%s", fields[2:], out)

	// A short TMPDIR: mktemp -d and the runtime's socket directory go
	// there, and a unix socket's path has at most about 107 bytes.
	tmp, err := os.MkdirTemp("", "readme")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(tmp) })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, "-e", "-o", "pipefail", "-c", walk.text)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "TMPDIR="+tmp)
	// Its own process group, so that a daemon a failed run left in the
	// background is killed with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	outb, err := cmd.CombinedOutput()
	output := string(outb)
	require.NoError(t, err, "README.md:%d: the walkthrough failed:\n%s", walk.line, output)

	stated := 0
	for _, l := range strings.Split(walk.text, "\n") {
		if m := askLine.FindStringSubmatch(l); m != nil {
			assert.Contains(t, output, m[1]+"\n", "README.md:%d: %q does not answer what the README says", walk.line, l)
			stated++
		}
	}
	assert.Positive(t, stated, "README.md:%d: no ask line states its answer", walk.line)
	assert.Contains(t, output, `{"ok":true,"report":{"phase":"migrate"`, "the restore report")
	assert.Regexp(t, `control: +\S+state.json.control.sock: list, get and delete go to the running daemon's Store`, output)
	assert.Contains(t, output, "through the running daemon", "the delete went through the control socket")
	assert.Contains(t, output, "\nagree\n", "the daemon's memory and its file")
	dump := regexp.MustCompile(`(?m)^\{"ok":true,"entries":.*$`).FindString(output)
	assert.Contains(t, dump, `"containerID":"c1"`)
	assert.Contains(t, dump, `"containerID":"c3"`)
	assert.NotContains(t, dump, `"containerID":"c2"`, "the entry deleted through the daemon is still served")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "the walkthrough's last line removes what it made")
}
