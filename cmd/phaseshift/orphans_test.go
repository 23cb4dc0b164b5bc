package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// put has the test daemon write entry i, as a retried ADD would.
func (d *daemonProc) put(t *testing.T, i int) {
	t.Helper()
	_, err := io.WriteString(d.in, "put "+string(rune('0'+i))+"\n")
	require.NoError(t, err)
	require.True(t, d.out.Scan())
	require.Equal(t, "put", d.out.Text())
}

// A daemon in phase 2 whose runtime lists only entry 1: its restore left
// entries 2 and 3 orphaned. report lists their keys as JSON that get and
// delete take; prune-orphans asks, prunes nothing unless told yes, and
// then deletes through the daemon's Store the orphans still as restore
// left them - not entry 3, which was written between the list and the
// prune.
func TestReportAndPruneOrphans(t *testing.T) {
	path := journaled(t, t.TempDir())
	d := startDaemon(t, path, envLegacy+"=1")

	r := run(t, "report", path)
	require.Equal(t, 0, r.code, r.stderr)
	k2, k3 := keyJSON(t, k(2)), keyJSON(t, k(3))
	assert.Contains(t, r.stdout, "last restore: phase 2 (migrate): read checkpoint+legacy")
	assert.Contains(t, r.stdout, "still as that restore left them: 2 orphaned, 0 diverged\n  orphaned "+k2+"\n  orphaned "+k3+"\n")
	assert.Contains(t, r.stdout, "phaseshift prune-orphans "+path)
	r = run(t, "report", "--json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var rep struct {
		Report   string
		Orphaned []json.RawMessage
		Diverged []json.RawMessage
	}
	decodeJSON(t, r.stdout, &rep)
	require.Len(t, rep.Orphaned, 2)
	assert.Empty(t, rep.Diverged)
	assert.Contains(t, rep.Report, "orphaned 2 [")
	r = run(t, "get", path, string(rep.Orphaned[0]))
	assert.Equal(t, 0, r.code, "a listed key is one get takes: %s", r.stderr)

	for _, answer := range []string{"", "no\n", "later\n"} {
		r = runIn(t, answer, "prune-orphans", path)
		assert.Equal(t, 9, r.code, "answer %q: %s", answer, r.stderr)
		assert.Contains(t, r.stderr, "orphans still as it left them:\n  "+k2+"\n  "+k3+"\n")
		assert.Contains(t, r.stderr, "not confirmed: nothing was pruned")
	}
	assert.Equal(t, journalState(), d.dump(t), "nothing pruned")

	// The operator reads the question; meanwhile entry 3's ADD comes
	// again, and it is no longer an orphan; then the operator says yes.
	cmd := exec.Command(command(t), "prune-orphans", path)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	require.NoError(t, cmd.Start())
	asked := readUntil(t, stderr, "[yes/no]: ")
	assert.Contains(t, asked, k3, "entry 3 was an orphan when listed")
	d.put(t, 3)
	_, err = io.WriteString(stdin, "yes\n")
	require.NoError(t, err)
	rest, err := io.ReadAll(stderr)
	require.NoError(t, err)
	require.NoError(t, cmd.Wait(), string(rest))
	assert.Contains(t, stdout.String(), "pruned "+k2+"\n")
	assert.Contains(t, stdout.String(), "kept "+k3+": written since the restore: no longer an orphan, kept\n")
	assert.Contains(t, stdout.String(), "pruned 1 of 2 orphans through the running daemon")
	want := journalState()
	delete(want, k(2))
	assert.Equal(t, want, d.dump(t))

	r = run(t, "prune-orphans", "--yes", "--json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var pruned struct{ Pruned, Kept []json.RawMessage }
	decodeJSON(t, r.stdout, &pruned)
	assert.Empty(t, pruned.Pruned)
	assert.Empty(t, pruned.Kept)
	r = run(t, "prune-orphans", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "no orphan left by its last restore: nothing to prune")

	d.stop(t)
	assert.Equal(t, want, mustLoadJournaled(t, path).Entries, "the prune is durable")
	r = run(t, "report", path)
	assert.Equal(t, 8, r.code)
	assert.Contains(t, r.stderr, "no daemon holds the lock of "+path)
}

// readUntil reads r until what it read ends with suffix, and returns it.
func readUntil(t *testing.T, r io.Reader, suffix string) string {
	t.Helper()
	br := bufio.NewReader(r)
	var b strings.Builder
	for !strings.HasSuffix(b.String(), suffix) {
		c, err := br.ReadByte()
		require.NoError(t, err, "read %q", b.String())
		b.WriteByte(c)
	}
	return b.String()
}
