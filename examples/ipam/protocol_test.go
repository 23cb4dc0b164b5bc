package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The --serve protocol is documented where a user reads it: --help prints
// serveProtocol, and the README shows its table line for line.
func TestServeProtocolIsDocumented(t *testing.T) {
	var help bytes.Buffer
	assert.Equal(t, 0, run(context.Background(), []string{"--help"}, strings.NewReader(""), &help, &help))
	assert.Contains(t, help.String(), serveProtocol, "--help")
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	for _, l := range strings.Split(serveProtocol, "\n") {
		if strings.HasPrefix(l, "  {") || strings.HasPrefix(l, "   ") {
			assert.Contains(t, string(readme), "\n"+l+"\n", "README.md lacks this line of the --serve protocol")
		}
	}
}

// Each request the protocol documents gets the answer it documents, from
// a daemon on its own in-process runtime (--cri inprocess), which lists
// the sandbox of every acknowledged ADD until its DEL or GC, and keeps
// them for the daemon's next start.
func TestServeProtocolAnswersAsDocumented(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state.json")
	args := []string{"--cri", inprocessEndpoint, "--state", state, "--phase", "expand", "--serve", "--log-level", "error"}
	requests := strings.Join([]string{
		`{"op":"add","id":"c1"}`,
		`{"op":"add","id":"c2"}`,
		`{"op":"add","id":"c3"}`,
		`{"op":"del","id":"c1"}`,
		`{"op":"gc","valid":[{"containerID":"c2","ifname":"eth0"}]}`,
		`{"op":"nonsense"}`,
		`{"op":"dump"}`,
		`{"op":"exit"}`,
		`{"op":"add","id":"after-exit"}`,
	}, "\n") + "\n"
	var out, errs bytes.Buffer
	require.Equal(t, 0, run(context.Background(), args, strings.NewReader(requests), &out, &errs), errs.String())
	var answers []response
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r response
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
		answers = append(answers, r)
	}
	require.Len(t, answers, 9, "the report, then one answer per request up to exit:\n%s", out.String())
	assert.NotNil(t, answers[0].Report, "the first line is the restore report")
	assert.Equal(t, `["10.0.0.2"]`, mustJSON(t, answers[1].IPs), "the first ADD")
	assert.True(t, answers[4].OK, "del")
	assert.Equal(t, []Key{{Network: "demo-net", ContainerID: "c3", IfName: "eth0"}}, answers[5].Released, "gc")
	assert.False(t, answers[6].OK)
	assert.Contains(t, answers[6].Error, "unknown op")
	require.Len(t, answers[7].Entries, 1, "dump")
	assert.Equal(t, "c2", answers[7].Entries[0].Key.ContainerID)
	assert.True(t, answers[8].OK, "exit")

	// The runtime outlives the daemon: a restart in phase 1, which takes
	// CRI's word on which entries exist, finds c2 alone.
	out.Reset()
	require.Equal(t, 0, run(context.Background(), args, strings.NewReader(`{"op":"dump"}`+"\n"), &out, &errs), errs.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, out.String())
	var dump response
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &dump))
	require.Len(t, dump.Entries, 1, lines[1])
	assert.Equal(t, "c2", dump.Entries[0].Key.ContainerID)
	assert.Equal(t, `["10.0.0.3"]`, mustJSON(t, dump.Entries[0].IPs))
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
