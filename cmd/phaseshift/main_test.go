package main_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/internal/testbin"
)

// The tests run the built command, as an operator does, against files that
// checkpoint.File wrote with real Go types, and read what the repairs
// wrote back with checkpoint.File.

var (
	binDir    string // testbin.Run's
	buildOnce sync.Once
	bin       string // the built command
	buildErr  error
)

// TestMain runs the tests, or, in a child the tests start, plays a
// daemon that serves its Store on its control socket (live_test.go).
func TestMain(m *testing.M) {
	if path := os.Getenv(envDaemon); path != "" {
		os.Exit(runDaemon(path))
	}
	if sock := os.Getenv(envImpostor); sock != "" {
		os.Exit(runImpostor(sock))
	}
	os.Exit(testbin.Run(m, "phaseshift-cmd", &binDir))
}

// command builds the command once, on first use, and returns its path.
func command(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() { bin, buildErr = testbin.Build(binDir, "phaseshift", ".", nil, nil) })
	require.NoError(t, buildErr)
	return bin
}

// The Go types the daemon of these tests writes: an IPAM key and a value
// with a secret in it, which must never reach an error message.
type key struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

type value struct {
	IP    string `json:"ip"`
	Token string `json:"token"`
}

const (
	schema = 2
	secret = "tok-secret-"
)

func k(i int) key { return key{Network: "aws-cni", ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0"} }

func v(i int) value {
	return value{IP: fmt.Sprintf("10.0.0.%d", i), Token: fmt.Sprintf("%s%d", secret, i)}
}

// entries returns the state with entries 0..n-1.
func entries(n int) map[key]value {
	m := make(map[key]value, n)
	for i := range n {
		m[k(i)] = v(i)
	}
	return m
}

// result is what one run of the command did.
type result struct {
	stdout, stderr string
	code           int
}

// run runs the command and checks that its errors hold no value.
func run(t *testing.T, args ...string) result {
	t.Helper()
	return runAs(t, command(t), nil, args...)
}

// runIn runs the command with stdin, and checks that its errors hold no
// value.
func runIn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runWith(t, command(t), nil, strings.NewReader(stdin), args...)
}

// runAs runs bin with the credentials cred (nil: this process's).
func runAs(t *testing.T, bin string, cred *syscall.Credential, args ...string) result {
	t.Helper()
	return runWith(t, bin, cred, nil, args...)
}

// runWith runs bin with the credentials cred (nil: this process's) and
// stdin (nil: none).
func runWith(t *testing.T, bin string, cred *syscall.Credential, stdin io.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = stdin
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	r := result{}
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "running %v: %v", args, err)
		r.code = ee.ExitCode()
	}
	r.stdout, r.stderr = stdout.String(), stderr.String()
	assert.NotContains(t, r.stderr, secret, "an error message shows a value")
	return r
}

// save writes each state in turn with checkpoint.File, as a daemon does,
// into dir/state.json, and returns its path: the last state is the file,
// the one before it .prev. The File is opened WithoutJournal, so the file
// has format 1 (the journal's tests write journaled files themselves).
func save(t *testing.T, dir string, states ...map[key]value) string {
	t.Helper()
	path := filepath.Join(dir, "state.json")
	f, err := checkpoint.Open[key, value](context.Background(), path, append(checkpointtest.Schema(schema), checkpoint.WithoutJournal())...)
	require.NoError(t, err)
	defer f.Close()
	for _, s := range states {
		require.NoError(t, f.Save(context.Background(), checkpoint.Snapshot[key, value]{
			Meta: checkpoint.Meta{Phase: "migrate", Writer: "ipamd v1.8.0", BootID: "boot-1"}, Entries: s}))
	}
	return path
}

// load reads path as the daemon would.
func load(t *testing.T, path string) (checkpoint.Snapshot[key, value], error) {
	t.Helper()
	f, err := checkpoint.Open[key, value](context.Background(), path, append(checkpointtest.Schema(schema), checkpoint.WithLockWait(time.Second))...)
	require.NoError(t, err)
	defer f.Close()
	return f.Load(context.Background())
}

// mustLoad reads path as the daemon would and requires it to load.
func mustLoad(t *testing.T, path string) checkpoint.Snapshot[key, value] {
	t.Helper()
	s, err := load(t, path)
	require.NoError(t, err)
	return s
}

// edit replaces old with new in the file, as an operator's editor does:
// the checksum no longer holds.
func edit(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(data), old)
	require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o600))
}

// sealed returns data with a checksum that holds, computed here from the
// format's definition (CRC-32C of everything before the checksum line), not
// by the code under test.
func sealed(t *testing.T, data []byte) []byte {
	t.Helper()
	i := bytes.LastIndex(data, []byte("  \"checksum\": \"crc32c:"))
	require.Positive(t, i)
	sum := crc32.Checksum(data[:i], crc32.MakeTable(crc32.Castagnoli))
	b := []byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)}
	return append(data[:i:i], "  \"checksum\": \"crc32c:"+hex.EncodeToString(b)+"\"\n}\n"...)
}

// editSealed edits the file and gives it a checksum that holds, as a
// newer writer would have written it.
func editSealed(t *testing.T, path, old, new string) {
	t.Helper()
	edit(t, path, old, new)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, sealed(t, data), 0o600))
}

// decodeJSON parses the command's --json output.
func decodeJSON(t *testing.T, out string, into any) {
	t.Helper()
	require.NoError(t, json.Unmarshal([]byte(out), into), "output: %s", out)
}

// kept returns the copies kept beside path, the daemon's quarantined ones
// (path.corrupt-*) and those the repairs kept (path.before-*), journals
// included, sorted by name.
func kept(t *testing.T, path string) []string {
	t.Helper()
	q, err := filepath.Glob(path + ".corrupt-*")
	require.NoError(t, err)
	b, err := filepath.Glob(path + ".before-*")
	require.NoError(t, err)
	return append(q, b...)
}

func readBytes(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

// holdLock opens path with checkpoint.File, as a running daemon does, and
// keeps it open until the test ends. flock belongs to the open file
// description, so the command, another process, finds it held.
func holdLock(t *testing.T, path string) *checkpoint.File[key, value] {
	t.Helper()
	f, err := checkpoint.Open[key, value](context.Background(), path, checkpointtest.Schema(schema)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// repairOut is a repair's --json output.
type repairOut struct {
	Path, Action, From, Replaced, Kept string
	Key                                key
	Header                             struct{ Seq uint64 }
	Entries                            int
}
