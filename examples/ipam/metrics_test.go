package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source/cri/critest"
)

// scrape returns the /metrics page of m.
func scrape(t *testing.T, m *IPAM) string {
	t.Helper()
	srv := httptest.NewServer(metricsHandler(m.Metrics()))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// metric returns the value of the sample line that starts with series.
func metric(t *testing.T, page, series string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(page)
	require.NotNil(t, m, "no sample %s in:\n%s", series, page)
	return m[1]
}

// TestMetrics serves a node's metrics after a restore that backfilled
// from CRI and reported an orphan, and after writes: the gate's series say
// so, and the counters count.
func TestMetrics(t *testing.T) {
	ctx := context.Background()
	rt, l := runtimeFor(t, critest.Sandbox{ID: "c1", Name: "p1", Namespace: "default", IPs: []string{"10.0.0.2"}}, critest.Sandbox{ID: "c2", Name: "p2", Namespace: "default", IPs: []string{"10.0.0.3"}})
	state := filepath.Join(t.TempDir(), "ipam.json")
	m, _ := open(t, migrate.PhaseMigrate, l, state)
	_, err := m.Add(ctx, realKey("c3"), PodRef{})
	require.NoError(t, err)
	require.NoError(t, m.Close())
	rt.Remove("c1") // gone from the runtime while the daemon was down

	m, _ = open(t, migrate.PhaseMigrate, l, state)
	_, err = m.Add(ctx, realKey("c4"), PodRef{})
	require.NoError(t, err)
	require.NoError(t, m.Del(ctx, realKey("c2")))
	page := scrape(t, m)
	require.NoError(t, m.Del(ctx, realKey("c1"))) // the runtime's DEL for the pod it lost
	after := scrape(t, m)

	assert.Equal(t, "2", metric(t, page, "phaseshift_phase"))
	assert.Equal(t, "3", metric(t, page, "phaseshift_entries"))
	assert.Equal(t, "3", metric(t, page, `phaseshift_restore_entries{kind="restored"}`))
	assert.Equal(t, "2", metric(t, page, `phaseshift_restore_entries{kind="orphaned"}`), "c1 is gone from CRI, c3 never reached it")
	assert.Equal(t, "0", metric(t, page, `phaseshift_restore_entries{kind="diverged"}`))
	assert.Equal(t, "0", metric(t, page, `phaseshift_restore_stale{side="checkpoint"}`))
	assert.Equal(t, "1", metric(t, page, `phaseshift_restore_read_from{sides="checkpoint+legacy"}`))
	assert.Equal(t, "1", metric(t, page, `phaseshift_writes_total{kind="update",result="ok"}`), "Add is an Update")
	assert.Equal(t, "1", metric(t, page, `phaseshift_writes_total{kind="delete",result="ok"}`))
	assert.Equal(t, "2", metric(t, page, `phaseshift_commits_total`))
	assert.Equal(t, "2", metric(t, page, `phaseshift_checkpoint_saves_total{result="ok"}`))
	assert.NotEqual(t, "0", metric(t, page, "phaseshift_checkpoint_save_seconds_total"))
	assert.Equal(t, "1", metric(t, after, `phaseshift_restore_entries{kind="orphaned"}`), "c1's DEL settled its orphan, without a restart")
	assert.Equal(t, "2", metric(t, after, `phaseshift_writes_total{kind="delete",result="ok"}`))
	assert.Contains(t, page, "# HELP phaseshift_restore_entries ")
	assert.Contains(t, page, "go_goroutines", "Go's own metrics come along")
	// Every series the README's gate query names is there.
	for _, name := range []string{"phaseshift_phase", "phaseshift_restore_entries", "phaseshift_restore_stale", "phaseshift_restore_quarantined"} {
		assert.True(t, strings.Contains(page, "\n"+name), "%s is served", name)
	}
}

// TestFlagsThatWouldBeIgnored: a flag the chosen mode would ignore is an
// error at start, before anything runs.
func TestFlagsThatWouldBeIgnored(t *testing.T) {
	for _, c := range []struct {
		args []string
		say  string
	}{
		{[]string{"--metrics", ":9100"}, "--metrics: only with --cri"},
		{[]string{"--serve"}, "--serve: only with --cri"},
		{[]string{"--serve", "--metrics", ":9100"}, "--metrics, --serve: only with --cri"},
		{[]string{"--phase", "contract"}, "--phase: only with --cri"},
		{[]string{"--cri", ""}, "--cri: no endpoint given"},
		{[]string{"--cri", "unix:///x", "--metrics", ":9100"}, "--metrics: only with --serve"},
		{[]string{"--cri", "unix:///x", "--old-binary", "--phase", "expand"}, "--old-binary: the release before phaseshift runs phase 0 only"},
		{[]string{"--cri", "unix:///x", "--old-binary", "--serve", "--control-socket"}, "--control-socket: not with --old-binary"},
		{[]string{"--old-binary"}, "--old-binary: only with --cri"},
		{[]string{"--cri", "unix:///x", "--log-level", "loud"}, "--log-level"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			assert.Equal(t, 2, run(context.Background(), c.args, nil, io.Discard, &stderr))
			assert.Contains(t, stderr.String(), c.say)
		})
	}
	c, err := parseFlags([]string{"--cri", "unix:///x", "--serve", "--metrics", "127.0.0.1:0"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:0", c.metrics)
	stop, err := serveMetrics("256.0.0.1:1", prometheus.NewGauge(prometheus.GaugeOpts{Name: "unused"}), io.Discard)
	require.ErrorContains(t, err, "--metrics")
	assert.Nil(t, stop)
}

// readmeMetrics returns the metrics the README's table lists.
func readmeMetrics(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "gate.md"))
	require.NoError(t, err, "docs/gate.md, the README's reference for the metrics, is at the root of the repository")
	var names []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(phaseshift_[a-z_]+)`").FindAllStringSubmatch(string(b), -1) {
		names = append(names, m[1])
	}
	require.NotEmpty(t, names, "no metric table in docs/gate.md")
	slices.Sort(names)
	return names
}

// TestMetricsServesWhatTheREADMEDocuments runs the daemon as a user does
// (--cri, --serve, --metrics) and scrapes it: its phaseshift_ metrics are
// exactly the README's table, and every other one is Go's runtime or
// process metrics, as the README says.
func TestMetricsServesWhatTheREADMEDocuments(t *testing.T) {
	_, l := runtimeFor(t, critest.Sandbox{ID: "c1", Name: "p1", Namespace: "default", IPs: []string{"10.0.0.2"}})
	stdin, feed := io.Pipe()
	logs, logw := io.Pipe()
	var stdout bytes.Buffer
	args := []string{"--cri", l.Endpoint(), "--state", filepath.Join(t.TempDir(), "ipam.json"), "--phase", "migrate", "--serve", "--metrics", "127.0.0.1:0"}
	done := make(chan int, 1)
	go func() {
		code := run(context.Background(), args, stdin, &stdout, logw)
		logw.Close()
		done <- code
	}()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "ipam: serving metrics on "); ok {
				addr <- a
			}
		}
		close(addr)
	}()
	url, ok := <-addr
	require.True(t, ok, "the daemon ended without serving metrics")

	resp, err := http.Get(url)
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.NoError(t, feed.Close()) // end of commands: the daemon exits
	require.Equal(t, 0, <-done)

	var served, others []string
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllStringSubmatch(string(page), -1) {
		if strings.HasPrefix(m[1], "phaseshift_") {
			served = append(served, m[1])
		} else if !strings.HasPrefix(m[1], "go_") && !strings.HasPrefix(m[1], "process_") {
			others = append(others, m[1])
		}
	}
	slices.Sort(served)
	assert.Equal(t, readmeMetrics(t), served)
	assert.Empty(t, others, "only Go's runtime and process metrics come along")
}
