package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/phaseshift/phaseshift/migrate"
)

// The daemon's Prometheus metrics, read from the Store's Stats at every
// scrape. They are what an operator gates a fleet's rollout on (see the
// README's "Rolling it out"): before moving from phase 2 to 3, this query
// must return nothing for every node of the DaemonSet:
//
//	phaseshift_phase != 2
//	  or phaseshift_restore_entries{kind=~"diverged|orphaned|errors"} > 0
//	  or phaseshift_restore_stale > 0
//	  or phaseshift_restore_quarantined > 0

// metric names, kept in one place: the README and the tests quote them.
const (
	mPhase           = "phaseshift_phase"
	mEntries         = "phaseshift_entries"
	mRestoreEntries  = "phaseshift_restore_entries"
	mRestoreReadFrom = "phaseshift_restore_read_from"
	mRestoreStale    = "phaseshift_restore_stale"
	mRestoreQuar     = "phaseshift_restore_quarantined"
	mRestoreTime     = "phaseshift_restore_timestamp_seconds"
	mShadowDiffers   = "phaseshift_restore_shadow_differs"
	mWrites          = "phaseshift_writes_total"
	mOutcomeUnknown  = "phaseshift_writes_outcome_unknown_total"
	mCommits         = "phaseshift_commits_total"
	mCommitted       = "phaseshift_committed_writes_total"
	mSaves           = "phaseshift_checkpoint_saves_total"
	mSaveSeconds     = "phaseshift_checkpoint_save_seconds_total"
	mCkptBytes       = "phaseshift_checkpoint_bytes"
	mLegacyWrites    = "phaseshift_legacy_writes_total"
)

// statsCollector exports a Store's Stats.
type statsCollector struct {
	stats func() migrate.Stats
	descs map[string]*prometheus.Desc
}

func newStatsCollector(stats func() migrate.Stats) *statsCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &statsCollector{stats: stats, descs: map[string]*prometheus.Desc{
		mPhase:           d(mPhase, "The rollout phase the daemon runs in: 0 legacy, 1 expand, 2 migrate, 3 contract."),
		mEntries:         d(mEntries, "Entries the daemon serves."),
		mRestoreEntries:  d(mRestoreEntries, "What the last restore did, by kind of entry (restored, backfilled, dropped, orphaned, pruned, diverged) and the problems it skipped (errors).", "kind"),
		mRestoreReadFrom: d(mRestoreReadFrom, "1 for the sides the last restore built the state from.", "sides"),
		mRestoreStale:    d(mRestoreStale, "1 if the last restore found a side stale.", "side"),
		mRestoreQuar:     d(mRestoreQuar, "1 if the last restore moved an unreadable checkpoint aside."),
		mRestoreTime:     d(mRestoreTime, "When the last restore finished, in seconds since the epoch."),
		mShadowDiffers:   d(mShadowDiffers, "1 if a side read only to compare differed from what the last restore served."),
		mWrites:          d(mWrites, "Writes that returned, by kind and result.", "kind", "result"),
		mOutcomeUnknown:  d(mOutcomeUnknown, "Writes that failed on one side and whose undo failed on the other."),
		mCommits:         d(mCommits, "Group commits that carried at least one write that passed its checks."),
		mCommitted:       d(mCommitted, "Writes the group commits carried."),
		mSaves:           d(mSaves, "Checkpoint saves, by result.", "result"),
		mSaveSeconds:     d(mSaveSeconds, "Time spent in checkpoint saves."),
		mCkptBytes:       d(mCkptBytes, "Size of the checkpoint (and its journal) as last loaded or saved."),
		mLegacyWrites:    d(mLegacyWrites, "Writes to legacy, by result.", "result"),
	}}
}

// Describe sends every metric's description.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect reads the Stats once and sends every metric.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	gauge := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.GaugeValue, v, labels...)
	}
	counter := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.CounterValue, v, labels...)
	}
	gauge(mPhase, float64(st.Phase))
	gauge(mEntries, float64(st.Entries))
	c.collectRestore(st.LastRestore, gauge)
	counter(mWrites, float64(st.Puts), "put", "ok")
	counter(mWrites, float64(st.Deletes), "delete", "ok")
	counter(mWrites, float64(st.Updates), "update", "ok")
	counter(mWrites, float64(st.WriteErrors), "any", "error")
	counter(mOutcomeUnknown, float64(st.OutcomeUnknown))
	counter(mCommits, float64(st.Commits))
	counter(mCommitted, float64(st.Committed))
	counter(mSaves, float64(st.CheckpointSaves), "ok")
	counter(mSaves, float64(st.CheckpointSaveFailures), "error")
	counter(mSaveSeconds, st.CheckpointSaveTime.Seconds())
	gauge(mCkptBytes, float64(st.CheckpointBytes))
	counter(mLegacyWrites, float64(st.LegacyWrites), "ok")
	counter(mLegacyWrites, float64(st.LegacyWriteFailures), "error")
}

func (c *statsCollector) collectRestore(r migrate.RestoreStats, gauge func(string, float64, ...string)) {
	if r.At.IsZero() {
		return // not restored yet: no restore to report
	}
	for kind, n := range map[string]int{
		"restored": r.Restored, "backfilled": r.Backfilled, "dropped": r.Dropped, "orphaned": r.Orphaned,
		"pruned": r.Pruned, "diverged": r.Diverged, "errors": r.Errors,
	} {
		gauge(mRestoreEntries, float64(n), kind)
	}
	gauge(mRestoreReadFrom, 1, string(r.ReadFrom))
	gauge(mRestoreStale, b2f(r.Stale), "checkpoint")
	gauge(mRestoreStale, b2f(r.LegacyStale), "legacy")
	gauge(mRestoreQuar, b2f(r.Quarantined))
	gauge(mShadowDiffers, b2f(r.ShadowDiffers))
	gauge(mRestoreTime, float64(r.At.UnixNano())/1e9)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// metricsHandler serves the Store's metrics (and Go's process metrics) on
// /metrics.
func metricsHandler(stats func() migrate.Stats) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newStatsCollector(stats), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	return mux
}

// serveMetrics serves /metrics on addr until stop is called.
func serveMetrics(addr string, stats func() migrate.Stats) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	srv := &http.Server{Handler: metricsHandler(stats), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
