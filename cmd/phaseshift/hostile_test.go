package main_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// The command against files crafted by whoever could write them (issue 34
// items 3 and 6): FIFOs beside the checkpoint, and headers, keys and
// values holding terminal escapes.

// A FIFO at .prev, at a kept copy's name or at the lock's name does not
// hang inspect: each is reported for what it is. Before, inspect blocked
// in open(2) on each (the test's 30s bound killed it).
func TestInspectDoesNotBlockOnAFIFO(t *testing.T) {
	for _, name := range []string{".prev", ".corrupt-20261130T080000.000000000Z", ".lock"} {
		t.Run(name, func(t *testing.T) {
			path := save(t, t.TempDir(), entries(2))
			fifo := path + name
			_ = os.Remove(fifo)
			require.NoError(t, syscall.Mkfifo(fifo, 0o600))
			r := run(t, "inspect", path)
			require.Equal(t, 0, r.code, "the checkpoint itself is intact: %s %s", r.stdout, r.stderr)
			if name == ".lock" {
				assert.Contains(t, r.stdout, "lock:      not held")
				return
			}
			assert.Contains(t, r.stdout, filepath.Base(fifo)+": unreadable")
			r = run(t, "inspect", "--json", path)
			assert.Contains(t, r.stdout, "a named pipe (FIFO), not a regular file")
		})
	}
}

// hostile is text a terminal would act on: a color, a clear-screen by a C1
// CSI, a window title ended by BEL, a right-to-left override.
const hostile = "\x1b[31mred\u009b2J\x1b]0;pwned\x07\u202etxt"

// hasControls reports whether s holds a character a terminal acts on.
func hasControls(s string) bool {
	for _, r := range s {
		if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) || r == '\u202e' {
			return true
		}
	}
	return false
}

// Nothing inspect, diff, list or get prints, text or JSON, on stdout or
// stderr, holds ESC, BEL, a C1 control or a bidirectional override from a
// crafted header, key or value; the JSON outputs still decode to what the
// file holds. Before, inspect and diff printed the header's phase, writer,
// boot ID and behind as decoded (ESC included), and list and get printed
// the C1 controls of keys and values raw.
func TestHostileTextIsEscaped(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	f, err := checkpoint.Open[key, value](ctx, path, append(checkpointtest.Schema(schema), checkpoint.WithoutJournal())...)
	require.NoError(t, err)
	bad := key{Network: "n" + hostile, ContainerID: "c1", IfName: "eth0"}
	ents := map[key]value{bad: {IP: "10.0.0.1", Token: hostile}, k(2): v(2)}
	m := checkpoint.Meta{Phase: "migrate" + hostile, Writer: "ipamd" + hostile, BootID: "boot" + hostile, Behind: "behind" + hostile}
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[key, value]{Meta: m, Entries: entries(1)}))
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[key, value]{Meta: m, Entries: ents}))
	require.NoError(t, f.Close())
	badJSON, err := json.Marshal(bad)
	require.NoError(t, err)

	for _, args := range [][]string{
		{"inspect", path},
		{"inspect", "--json", path},
		{"diff", "--values", path, path + ".prev"},
		{"diff", "--json", "--values", path, path + ".prev"},
		{"list", path},
		{"get", path, string(badJSON)},
		{"get", path, "\"\u009b2J\""}, // no such key: the error names it
	} {
		r := run(t, args...)
		assert.False(t, hasControls(r.stdout), "%v printed a control character: %q", args, r.stdout)
		assert.False(t, hasControls(r.stderr), "%v printed a control character on stderr: %q", args, r.stderr)
		assert.Contains(t, r.stdout+r.stderr, `\u009b2J`, "%v shows what was there", args)
		if args[0] == "inspect" && args[1] == "--json" {
			var out struct {
				Header struct{ Phase, Writer, BootID, Behind string }
			}
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
			assert.Equal(t, m.Phase, out.Header.Phase, "the JSON decodes to the file's header")
			assert.Equal(t, m.Behind, out.Header.Behind)
		}
		if args[0] == "list" || (args[0] == "get" && r.code == 0) {
			got := lines(t, r.stdout)
			assert.Equal(t, ents[bad], got[bad], "%v: the JSON decodes to the file's entry", args)
		}
	}
}

// The filter keeps a character cut across two writes whole.
func TestLongOutputKeepsUnicode(t *testing.T) {
	big := map[key]value{}
	for i := range 3000 {
		kk := k(i)
		kk.IfName = "eth0-ünïcødé-日本"
		big[kk] = value{IP: "10.0.0.1", Token: strings.Repeat("é", 7)}
	}
	path := save(t, t.TempDir(), big)
	r := run(t, "list", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stdout, `\ufffd`)
	assert.Len(t, lines(t, r.stdout), 3000)
}

// A KEY with a field twice names no entry: get and delete refuse it,
// naming the field. Before, the last of the two won, as encoding/json
// reads it: get printed c3's entry and delete deleted it.
func TestKeyWithAFieldTwice(t *testing.T) {
	path := save(t, t.TempDir(), entries(5))
	twice := `{"network":"aws-cni","containerID":"c1","containerID":"c3","ifName":"eth0"}`
	for _, verb := range []string{"get", "delete"} {
		r := run(t, verb, path, twice)
		assert.Equal(t, 2, r.code, "%s: %s %s", verb, r.stdout, r.stderr)
		assert.Contains(t, r.stderr, `the key has the field "containerID" twice`)
		assert.Empty(t, r.stdout)
	}
	s, err := load(t, path)
	require.NoError(t, err)
	assert.Equal(t, entries(5), s.Entries, "nothing deleted")
}
