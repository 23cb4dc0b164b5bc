package metrics

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
)

// Collector is a prometheus.Collector over a migrate.Store: its Stats, the
// Report of its Restore and, with WithCheckpoint, its checkpoint's journal.
// It reads them at every scrape, so what it exports is current after every
// write. Register it with a prometheus.Registry.
//
// All methods are safe for concurrent use, as a registry requires.
type Collector struct {
	stats   func() migrate.Stats
	open    func() openCounts          // the report's entries still open; reads the Store
	journal checkpoint.JournalReporter // nil: no journal state known
	descs   [numMetrics]*prometheus.Desc
	scrapes atomic.Uint64 // Collect calls, for phaseshift_scrapes_total
}

// openCounts are the Report's backfilled, orphaned and diverged entries
// that are still served as the restore left them.
type openCounts struct{ backfilled, orphaned, diverged int }

// New returns a Collector over s, whose Restore returned r. s must have
// been restored (r is the Report of that Restore, which the Store does
// not keep): New fails with ErrNotRestored otherwise, and with
// ErrInvalidArgument for a nil Store, a Report of another phase or a bad
// option. The Collector keeps r's key lists (Backfilled, Orphaned,
// Diverged) to tell at each scrape which of those entries a later write
// or delete has settled.
func New[K comparable, V any](s *migrate.Store[K, V], r migrate.Report[K], opts ...Option) (*Collector, error) {
	if s == nil {
		return nil, fmt.Errorf("metrics: %w: no Store given", ErrInvalidArgument)
	}
	if s.Stats().LastRestore.At.IsZero() || r.ReadFrom == "" {
		return nil, fmt.Errorf("metrics: %w: call Store.Restore, and give New the Report it returned without an error", ErrNotRestored)
	}
	if r.Phase != s.Phase() {
		return nil, fmt.Errorf("metrics: %w: the Report is of phase %s, the Store runs phase %s: give New the Report of this Store's Restore", ErrInvalidArgument, r.Phase, s.Phase())
	}
	c := &Collector{stats: s.Stats, open: openOf(s, r)}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("metrics: %w: option %d is nil", ErrInvalidArgument, i)
		}
		if err := o.apply(c); err != nil {
			return nil, err
		}
	}
	for m, sp := range specs {
		c.descs[m] = prometheus.NewDesc(sp.name, sp.help, sp.labels, nil)
	}
	return c, nil
}

// openOf returns what counts, at the time of the call, the entries of r's
// Backfilled, Orphaned and Diverged lists that s still serves as restore
// left them. A write or delete of such an entry settles it: the entry's
// origin is then a write (migrate.OriginWrite), or it is gone. An orphan a
// DEL removed no longer waits for its DEL; a diverged entry a write
// replaced holds an acknowledged value.
func openOf[K comparable, V any](s *migrate.Store[K, V], r migrate.Report[K]) func() openCounts {
	backfilled, orphaned, diverged := slices.Clone(r.Backfilled), slices.Clone(r.Orphaned), slices.Clone(r.Diverged)
	stillRestored := func(keys []K) int {
		n := 0
		for _, k := range keys {
			if o, ok := s.Origin(k); ok && o != migrate.OriginWrite {
				n++
			}
		}
		return n
	}
	return func() openCounts {
		return openCounts{backfilled: stillRestored(backfilled), orphaned: stillRestored(orphaned), diverged: stillRestored(diverged)}
	}
}

// Describe sends the description of every metric the Collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect reads the Store's Stats and the checkpoint's journal once, and
// the origin of each of the Report's open entries, and sends every metric.
// The journal's state waits for a checkpoint save in progress. Each call
// counts as a scrape (phaseshift_scrapes_total, this one included).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	scrapes := c.scrapes.Add(1)
	st := c.stats()
	send := func(m metric, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[m], specs[m].kind, v, labels...)
	}
	send(mPhase, float64(st.Phase))
	send(mScrapes, float64(scrapes))
	send(mEntries, float64(st.Entries))
	c.collectRestore(st.LastRestore, send)
	c.collectWrites(st, send)
	c.collectJournal(send)
}

// collectRestore sends what the last restore reported (the Store's
// Stats.LastRestore, which no write changes), with its open entries as
// they are now.
func (c *Collector) collectRestore(last migrate.RestoreStats, send func(metric, float64, ...string)) {
	open := c.open()
	for _, kv := range []struct {
		kind string
		n    int
	}{
		{"restored", last.Restored}, {"backfilled", open.backfilled}, {"dropped", last.Dropped},
		{"orphaned", open.orphaned}, {"pruned", last.Pruned}, {"diverged", open.diverged}, {"errors", last.Errors},
	} {
		send(mRestoreEntries, float64(kv.n), kv.kind)
	}
	send(mRestoreReadFrom, 1, string(last.ReadFrom))
	send(mRestoreStale, b2f(last.Stale), "checkpoint")
	send(mRestoreStale, b2f(last.LegacyStale), "legacy")
	send(mCheckpointBehind, b2f(last.Behind))
	send(mRestoreQuarantined, b2f(last.Quarantined))
	send(mRestoreShadowDiffers, b2f(last.ShadowDiffers))
	send(mRestoreTimestamp, float64(last.At.UnixNano())/1e9)
}

// collectWrites sends the write, commit and save counters.
func (c *Collector) collectWrites(st migrate.Stats, send func(metric, float64, ...string)) {
	send(mWrites, float64(st.Puts), "put", "ok")
	send(mWrites, float64(st.Deletes), "delete", "ok")
	send(mWrites, float64(st.Updates), "update", "ok")
	send(mWrites, float64(st.WriteErrors), "any", "error")
	send(mWritesOutcomeUnknown, float64(st.OutcomeUnknown))
	send(mCommits, float64(st.Commits))
	send(mCommittedWrites, float64(st.Committed))
	send(mCheckpointSaves, float64(st.CheckpointSaves), "ok")
	send(mCheckpointSaves, float64(st.CheckpointSaveFailures), "error")
	send(mCheckpointSaveSeconds, st.CheckpointSaveTime.Seconds())
	send(mCheckpointBytes, float64(st.CheckpointBytes))
	send(mLegacyWrites, float64(st.LegacyWrites), "ok")
	send(mLegacyWrites, float64(st.LegacyWriteFailures), "error")
}

// collectJournal sends the journal's state, zero without WithCheckpoint.
func (c *Collector) collectJournal(send func(metric, float64, ...string)) {
	var j checkpoint.JournalStatus
	if c.journal != nil {
		j = c.journal.Journal()
	}
	send(mJournalEnabled, b2f(j.Enabled))
	send(mJournalBytes, float64(j.Bytes))
	send(mJournalRecords, float64(j.Records))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
