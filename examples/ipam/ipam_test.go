package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/phaseshift/phaseshift/internal/testbin"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source/cri"
	"github.com/phaseshift/phaseshift/source/cri/critest"
)

// binDir is where the tests build binaries (testbin.Run's).
var binDir string

// The demo re-executes this binary as its daemon: in tests, that is the
// test binary, which then plays the daemon instead of running tests.
func TestMain(m *testing.M) {
	if os.Getenv("PHASESHIFT_IPAM_DAEMON") == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(testbin.Run(m, "phaseshift-ipam-test", &binDir))
}

func TestDemo(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, demo(context.Background(), &out), out.String())
	s := out.String()
	assert.Contains(t, s, "verdict: every check held")
	assert.Contains(t, s, "STALE: healed", "step 4 is the VPC CNI bug, caught")
	assert.Contains(t, s, "trusting it would have kept pod-b (deleted) holding 10.0.0.3: assigned twice", "and the demo says what it would have cost")
	assert.Regexp(t, `kill -9`, s)
	assert.NotContains(t, s, "FAILED")
	// Nothing is left behind.
	m := regexp.MustCompile(`checkpoint:\s+(\S+)`).FindStringSubmatch(s)
	require.Len(t, m, 2)
	_, err := os.Stat(filepath.Dir(filepath.Dir(m[1])))
	assert.ErrorIs(t, err, os.ErrNotExist, "the demo's temp dir is removed")
	assert.Equal(t, readmeDemo(t), normalizeDemo(s), "the README shows the demo's output as it is (update the README's block)")
}

// readmeDemo returns the demo's output as README.md shows it.
func readmeDemo(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	start := bytes.Index(readme, []byte("phaseshift demo: "))
	require.GreaterOrEqual(t, start, 0, "README.md shows the demo's output")
	end := bytes.Index(readme[start:], []byte("```"))
	require.Greater(t, end, 0)
	return normalizeDemo(string(readme[start : start+end]))
}

// normalizeDemo drops what differs between runs (the temporary
// directory's name) and the spaces the tabwriter leaves at line ends.
func normalizeDemo(s string) string {
	s = regexp.MustCompile(`phaseshift-demo-[0-9]+`).ReplaceAllString(s, "phaseshift-demo-N")
	return regexp.MustCompile(`(?m)[ \t]+$`).ReplaceAllString(s, "")
}

// runtimeFor starts a CRI runtime with sandboxes and returns a Lister on it.
func runtimeFor(t *testing.T, sandboxes ...critest.Sandbox) (*critest.Runtime, *cri.Lister) {
	t.Helper()
	rt := critest.New()
	rt.Add(sandboxes...)
	srv, err := rt.Serve("")
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	l, err := cri.NewLister(srv.Endpoint())
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return rt, l
}

func open(t *testing.T, p migrate.Phase, l *cri.Lister, state string) (*IPAM, migrate.Report[Key]) {
	t.Helper()
	m, rep, err := Open(context.Background(), Options{Phase: p, Lister: l, StatePath: state, Pool: netip.MustParsePrefix("10.0.0.0/29"), Logger: zap.NewNop(), LockWait: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m, rep
}

func realKey(id string) Key { return Key{Network: "net", ContainerID: id, IfName: "eth0"} }

func TestAllocator(t *testing.T) {
	ctx := context.Background()
	_, l := runtimeFor(t)
	m, _ := open(t, migrate.PhaseContract, l, filepath.Join(t.TempDir(), "ipam.json"))

	// 10.0.0.0/29: .0 network, .1 gateway, .7 broadcast: .2 to .6 are free.
	var got []netip.Addr
	for i := 0; i < 5; i++ {
		a, err := m.Add(ctx, realKey(fmt.Sprint("c", i)), PodRef{})
		require.NoError(t, err)
		got = append(got, a.IPs...)
	}
	assert.Equal(t, "[10.0.0.2 10.0.0.3 10.0.0.4 10.0.0.5 10.0.0.6]", fmt.Sprint(got))
	_, err := m.Add(ctx, realKey("c5"), PodRef{})
	require.ErrorIs(t, err, ErrPoolExhausted)

	again, err := m.Add(ctx, realKey("c2"), PodRef{})
	require.NoError(t, err)
	assert.Equal(t, got[2:3], again.IPs, "a repeated ADD returns the same address")

	require.NoError(t, m.Del(ctx, realKey("c1")))
	require.NoError(t, m.Del(ctx, realKey("c1")), "DEL is idempotent")
	a, err := m.Add(ctx, realKey("c9"), PodRef{})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.3", a.IPs[0].String(), "a released address is reused")

	_, err = m.Add(ctx, Key{Network: "net"}, PodRef{})
	require.Error(t, err)
}

func TestConcurrentAddsNeverShareAnAddress(t *testing.T) {
	ctx := context.Background()
	_, l := runtimeFor(t)
	m, _, err := Open(ctx, Options{Phase: migrate.PhaseMigrate, Lister: l, StatePath: filepath.Join(t.TempDir(), "ipam.json"), Pool: netip.MustParsePrefix("10.1.0.0/22"), Logger: zap.NewNop()})
	require.NoError(t, err)
	defer m.Close()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if _, err := m.Add(ctx, realKey(fmt.Sprintf("g%d-%d", g, i)), PodRef{}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	seen := map[netip.Addr]Key{}
	for k, v := range m.Entries() {
		for _, ip := range v.IPs {
			if other, dup := seen[ip]; dup {
				t.Errorf("%s assigned to %v and %v", ip, k, other)
			}
			seen[ip] = k
		}
	}
	assert.Len(t, seen, 160)
}

// TestDelWithRealKeyReleasesPlaceholderEntry is the VPC CNI's issue #1411:
// an entry learned from CRI has placeholders; the DEL carries the real key.
func TestDelWithRealKeyReleasesPlaceholderEntry(t *testing.T) {
	ctx := context.Background()
	rt, l := runtimeFor(t,
		critest.Sandbox{ID: "c1", Name: "p1", Namespace: "default", IPs: []string{"10.0.0.2"}},
		critest.Sandbox{ID: "c2", Name: "p2", Namespace: "default", IPs: []string{"10.0.0.3"}},
		critest.Sandbox{ID: "host", Name: "h", Namespace: "kube-system", IPs: []string{"192.168.1.10"}, HostNetwork: true},
	)
	_ = rt
	state := filepath.Join(t.TempDir(), "ipam.json")
	m, rep := open(t, migrate.PhaseMigrate, l, state)
	assert.Len(t, rep.Backfilled, 2, "both sandboxes learned from CRI; the host-network one is not ours")
	k, ok := m.store.Key(realKey("c1"))
	require.True(t, ok)
	assert.Equal(t, Key{Network: BackfillNetwork, ContainerID: "c1", IfName: BackfillIfName}, k)

	require.NoError(t, m.Del(ctx, realKey("c1")))
	_, ok = m.store.Get(realKey("c1"))
	assert.False(t, ok, "the DEL with the real key released the placeholder entry")
	a, err := m.Add(ctx, realKey("c2"), PodRef{})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.3", a.IPs[0].String(), "an ADD retried with the real key keeps the address")
	k, _ = m.store.Key(realKey("c2"))
	assert.Equal(t, realKey("c2"), k, "and records the real key")
	b, err := m.Add(ctx, realKey("c3"), PodRef{})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.2", b.IPs[0].String(), "c1's released address is free again; c2's is not")
}

func TestFlags(t *testing.T) {
	t.Setenv(envPhase, "")
	c, err := parseFlags([]string{"--cri", "unix:///x"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, migrate.PhaseLegacy, c.phase, "phase 0 by default: a DaemonSet that says no phase runs this library's phase 0")
	assert.Equal(t, zapcore.InfoLevel, c.logLevel, "logs at info by default")
	c, err = parseFlags([]string{"--cri", "unix:///x", "-v"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, zapcore.DebugLevel, c.logLevel)

	t.Setenv(envPhase, "migrate")
	c, err = parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, migrate.PhaseMigrate, c.phase, "the environment sets the phase")
	c, err = parseFlags([]string{"--cri", "unix:///x", "--phase", "1"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, migrate.PhaseExpand, c.phase, "the flag wins")

	var stderr bytes.Buffer
	assert.Equal(t, 2, run(context.Background(), []string{"--phase", "4"}, nil, &bytes.Buffer{}, &stderr))
	assert.Contains(t, stderr.String(), "use 0 (legacy), 1 (expand), 2 (migrate) or 3 (contract)")
	t.Setenv(envPhase, "sideways")
	stderr.Reset()
	assert.Equal(t, 2, run(context.Background(), nil, nil, &bytes.Buffer{}, &stderr))
	assert.Contains(t, stderr.String(), envPhase)
	t.Setenv(envPhase, "")
	assert.Equal(t, 2, run(context.Background(), []string{"--pool", "10.0.0.0"}, nil, &bytes.Buffer{}, &stderr))
	assert.Equal(t, 0, run(context.Background(), []string{"--help"}, nil, &bytes.Buffer{}, &stderr))
}

// TestOnANode runs the real-node mode against a runtime: restore, print,
// exit.
func TestOnANode(t *testing.T) {
	_, l := runtimeFor(t, critest.Sandbox{ID: "c1", Name: "p1", Namespace: "default", IPs: []string{"10.0.0.2"}})
	endpoint := l.Endpoint()
	require.NoError(t, l.Close())
	state := filepath.Join(t.TempDir(), "ipam.json")
	var out, stderr bytes.Buffer
	code := run(context.Background(), []string{"--cri", endpoint, "--state", state, "--phase", "expand"}, nil, &out, &stderr)
	require.Equal(t, 0, code, stderr.String())
	assert.Contains(t, out.String(), "phase 1 (expand): read legacy, restored 1")
	assert.Contains(t, out.String(), "c1")
	assert.Contains(t, out.String(), BackfillNetwork)
	_, err := os.Stat(state)
	require.NoError(t, err, "phase 1 wrote the checkpoint")

	code = run(context.Background(), []string{"--cri", "unix:///nonexistent/cri.sock", "--state", state}, nil, &out, &stderr)
	assert.Equal(t, 1, code)
	assert.True(t, strings.Contains(stderr.String(), "/nonexistent/cri.sock"), stderr.String())
}
