package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source/cri/critest"
)

// scrape returns the /metrics page of m.
func scrape(t *testing.T, m *IPAM) string {
	t.Helper()
	srv := httptest.NewServer(metricsHandler(m.Stats))
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
	assert.Contains(t, page, "# HELP phaseshift_restore_entries ")
	assert.Contains(t, page, "go_goroutines", "Go's own metrics come along")
	// Every series the README's gate query names is there.
	for _, name := range []string{"phaseshift_phase", "phaseshift_restore_entries", "phaseshift_restore_stale", "phaseshift_restore_quarantined"} {
		assert.True(t, strings.Contains(page, "\n"+name), "%s is served", name)
	}
}

func TestMetricsFlag(t *testing.T) {
	c, err := parseFlags([]string{"--cri", "unix:///x", "--serve", "--metrics", "127.0.0.1:0"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:0", c.metrics)
	stop, err := serveMetrics("256.0.0.1:1", func() migrate.Stats { return migrate.Stats{} })
	require.Error(t, err)
	assert.Nil(t, stop)
}
