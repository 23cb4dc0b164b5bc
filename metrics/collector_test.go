package metrics_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/metrics"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// node is a Store in phase 2 over a real checkpoint file (with its
// journal) and a legacy that only observes, restored once: what a CNI
// daemon runs.
type node struct {
	store  *migrate.Store[string, int]
	file   *checkpoint.File[string, int]
	report migrate.Report[string]
}

// observing is a legacy that only lists (no source.Writer), as CRI.
func observing(entries map[string]int) source.Func[string, int] {
	return func(context.Context) (map[string]int, error) { return entries, nil }
}

// partly is a legacy that only lists, and could not read one entry.
func partly(entries map[string]int) source.Func[string, int] {
	return func(context.Context) (map[string]int, error) {
		return entries, &source.ListError{Errs: []error{errors.New("one entry could not be read")}}
	}
}

// open opens the checkpoint at path and a Store in phase on legacy, and
// restores it.
func open(t *testing.T, path string, phase migrate.Phase, legacy map[string]int) node {
	t.Helper()
	return openOn(t, path, phase, observing(legacy))
}

// openPartly is open over a listing that could not read one entry.
func openPartly(t *testing.T, path string, phase migrate.Phase, legacy map[string]int) node {
	t.Helper()
	return openOn(t, path, phase, partly(legacy))
}

func openOn(t *testing.T, path string, phase migrate.Phase, legacy source.Reader[string, int]) node {
	t.Helper()
	ctx := context.Background()
	f, err := checkpoint.Open[string, int](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	s, err := migrate.New(migrate.Config[string, int]{Phase: phase, Legacy: legacy, Checkpoint: f, Equal: sameInt})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	rep, err := s.Restore(ctx)
	require.NoError(t, err)
	return node{store: s, file: f, report: rep}
}

// reconciled is a node whose phase-2 restore found, against what phase 1
// checkpointed (a=1, b=2, c=3, e=5), that legacy now holds a with another
// value (diverged), lacks b and c (orphaned: the listing could not read one
// entry, so nothing is dropped on its evidence) and holds d (backfilled).
func reconciled(t *testing.T) node {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.json")
	first := open(t, path, migrate.PhaseExpand, map[string]int{"a": 1, "b": 2, "c": 3, "e": 5})
	require.NoError(t, first.store.Close())
	n := openPartly(t, path, migrate.PhaseMigrate, map[string]int{"a": 10, "d": 4, "e": 5})
	require.ElementsMatch(t, []string{"b", "c"}, n.report.Orphaned)
	require.ElementsMatch(t, []string{"a"}, n.report.Diverged)
	require.ElementsMatch(t, []string{"d"}, n.report.Backfilled)
	return n
}

func collector(t *testing.T, n node) *metrics.Collector {
	t.Helper()
	c, err := metrics.New(n.store, n.report, metrics.WithCheckpoint(n.file))
	require.NoError(t, err)
	return c
}

const restoreEntriesHelp = `# HELP phaseshift_restore_entries The last restore's entries by kind: restored, dropped, pruned and errors (what it could not read) as it counted them; backfilled, orphaned and diverged as many of those as are still served as it left them (a later write or delete of one settles it).
# TYPE phaseshift_restore_entries gauge
`

// restoreEntries is the exposition of phaseshift_restore_entries, with one
// error (reconciled's partial listing).
func restoreEntries(restored, backfilled, orphaned, diverged int) string {
	var b strings.Builder
	b.WriteString(restoreEntriesHelp)
	for _, kv := range []struct {
		kind string
		n    int
	}{{"backfilled", backfilled}, {"diverged", diverged}, {"dropped", 0}, {"errors", 1}, {"orphaned", orphaned}, {"pruned", 0}, {"restored", restored}} {
		b.WriteString(`phaseshift_restore_entries{kind="` + kv.kind + `"} ` + strconv.Itoa(kv.n) + "\n")
	}
	return b.String()
}

// value returns the sample of the series name{labels} that c exports.
func value(t *testing.T, c prometheus.Collector, name string, labels ...string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m.GetLabel(), labels[i], labels[i+1]) {
					continue metrics
				}
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

func hasLabel[L interface {
	GetName() string
	GetValue() string
}](ls []L, name, val string) bool {
	for _, l := range ls {
		if l.GetName() == name && l.GetValue() == val {
			return true
		}
	}
	return false
}

// TestCollectorAfterRestore exports what the restore reported: the gate's
// series and the sides it read.
func TestCollectorAfterRestore(t *testing.T) {
	n := reconciled(t)
	c := collector(t, n)

	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(restoreEntries(5, 1, 2, 1)), "phaseshift_restore_entries"))
	assert.Equal(t, 2.0, value(t, c, "phaseshift_phase"))
	assert.Equal(t, 5.0, value(t, c, "phaseshift_entries"))
	assert.Equal(t, 1.0, value(t, c, "phaseshift_restore_read_from", "sides", "checkpoint+legacy"))
	assert.Equal(t, 0.0, value(t, c, "phaseshift_restore_stale", "side", "checkpoint"))
	assert.Equal(t, 0.0, value(t, c, "phaseshift_restore_stale", "side", "legacy"))
	assert.Equal(t, 0.0, value(t, c, "phaseshift_restore_quarantined"))
	assert.Equal(t, 1.0, value(t, c, "phaseshift_checkpoint_saves_total", "result", "ok"), "restore saved the backfill")
	assert.Equal(t, 1.0, value(t, c, "phaseshift_checkpoint_journal_enabled"))
	assert.Positive(t, value(t, c, "phaseshift_checkpoint_bytes"))
	assert.Positive(t, value(t, c, "phaseshift_restore_timestamp_seconds"))
}

// TestCollectorAfterWrites: the values follow the writes, not only the
// restore. An orphan deleted or replaced no longer counts, nor does a
// diverged or backfilled entry a write replaced or deleted; the counters
// count every write and save, and the journal its records.
func TestCollectorAfterWrites(t *testing.T) {
	ctx := context.Background()
	n := reconciled(t)
	c := collector(t, n)
	records := value(t, c, "phaseshift_checkpoint_journal_records")
	bytes := value(t, c, "phaseshift_checkpoint_journal_bytes")

	require.NoError(t, n.store.Delete(ctx, "b")) // the DEL of an orphan came
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(restoreEntries(5, 1, 1, 1)), "phaseshift_restore_entries"))

	require.NoError(t, n.store.Put(ctx, "c", 30)) // an orphan's key written again
	require.NoError(t, n.store.Update(ctx, func(tx *migrate.Tx[string, int]) error {
		tx.Put("a", 11) // a diverged entry written
		return nil
	}))
	require.NoError(t, n.store.Delete(ctx, "d")) // a backfilled entry deleted
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(restoreEntries(5, 0, 0, 0)), "phaseshift_restore_entries"),
		"restored stays what restore counted; the others are settled")

	assert.Equal(t, 3.0, value(t, c, "phaseshift_entries"), "a, c, e")
	assert.Equal(t, 1.0, value(t, c, "phaseshift_writes_total", "kind", "put", "result", "ok"))
	assert.Equal(t, 2.0, value(t, c, "phaseshift_writes_total", "kind", "delete", "result", "ok"))
	assert.Equal(t, 1.0, value(t, c, "phaseshift_writes_total", "kind", "update", "result", "ok"))
	assert.Equal(t, 0.0, value(t, c, "phaseshift_writes_total", "kind", "any", "result", "error"))
	assert.Equal(t, 4.0, value(t, c, "phaseshift_commits_total"))
	assert.Equal(t, 4.0, value(t, c, "phaseshift_committed_writes_total"))
	assert.Equal(t, 5.0, value(t, c, "phaseshift_checkpoint_saves_total", "result", "ok"), "restore's save and four commits")
	assert.Positive(t, value(t, c, "phaseshift_checkpoint_save_seconds_total"))
	assert.Equal(t, records+4, value(t, c, "phaseshift_checkpoint_journal_records"), "each commit appended a record")
	assert.Greater(t, value(t, c, "phaseshift_checkpoint_journal_bytes"), bytes)
	assert.Equal(t, 0.0, value(t, c, "phaseshift_legacy_writes_total", "result", "ok"), "an observing legacy is never written")
}

// TestCollectorSettlesByIdentity: with Config.Match, the DEL that settles
// an orphan carries the real key, not the one the entry was stored under.
func TestCollectorSettlesByIdentity(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	byID := func(k string) string { return strings.TrimPrefix(k, "placeholder/") }
	openMatched := func(phase migrate.Phase, legacy map[string]int) (*migrate.Store[string, int], migrate.Report[string]) {
		f, err := checkpoint.Open[string, int](ctx, path)
		require.NoError(t, err)
		s, err := migrate.New(migrate.Config[string, int]{Phase: phase, Legacy: observing(legacy), Checkpoint: f, Match: byID, Equal: sameInt})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		rep, err := s.Restore(ctx)
		require.NoError(t, err)
		return s, rep
	}
	s, _ := openMatched(migrate.PhaseExpand, map[string]int{"placeholder/c1": 1})
	require.NoError(t, s.Close())
	s, rep := openMatched(migrate.PhaseMigrate, map[string]int{})
	require.Equal(t, []string{"placeholder/c1"}, rep.Orphaned)
	c, err := metrics.New(s, rep)
	require.NoError(t, err)
	assert.Equal(t, 1.0, value(t, c, "phaseshift_restore_entries", "kind", "orphaned"))

	require.NoError(t, s.Delete(ctx, "c1")) // the runtime's DEL, with the real key
	assert.Equal(t, 0.0, value(t, c, "phaseshift_restore_entries", "kind", "orphaned"))
	assert.Equal(t, 0.0, value(t, c, "phaseshift_checkpoint_journal_enabled"), "no WithCheckpoint: no journal state")
}

// TestCollectorIsValid: a pedantic registry accepts it (what Collect sends
// matches what Describe says) and promlint finds nothing to fix.
func TestCollectorIsValid(t *testing.T) {
	c := collector(t, reconciled(t))
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	_, err := reg.Gather()
	require.NoError(t, err)
	problems, err := testutil.CollectAndLint(c)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// TestNewRefuses what cannot be exported truthfully.
func TestNewRefuses(t *testing.T) {
	ctx := context.Background()
	n := reconciled(t)

	t.Run("nil store", func(t *testing.T) {
		_, err := metrics.New[string, int](nil, n.report)
		require.ErrorIs(t, err, metrics.ErrInvalidArgument)
		assert.ErrorContains(t, err, "no Store")
	})
	t.Run("store not restored", func(t *testing.T) {
		f, err := checkpoint.Open[string, int](ctx, filepath.Join(t.TempDir(), "other.json"))
		require.NoError(t, err)
		s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: observing(nil), Checkpoint: f, Equal: sameInt})
		require.NoError(t, err)
		defer s.Close()
		_, err = metrics.New(s, n.report)
		require.ErrorIs(t, err, metrics.ErrNotRestored)
		assert.ErrorContains(t, err, "call Store.Restore")
	})
	t.Run("report of a failed restore", func(t *testing.T) {
		_, err := metrics.New(n.store, migrate.Report[string]{Phase: migrate.PhaseMigrate})
		require.ErrorIs(t, err, metrics.ErrNotRestored)
	})
	t.Run("report of another phase", func(t *testing.T) {
		r := n.report
		r.Phase = migrate.PhaseContract
		_, err := metrics.New(n.store, r)
		require.ErrorIs(t, err, metrics.ErrInvalidArgument)
		assert.ErrorContains(t, err, "phase contract")
	})
	t.Run("nil option", func(t *testing.T) {
		_, err := metrics.New(n.store, n.report, nil)
		require.ErrorIs(t, err, metrics.ErrInvalidArgument)
	})
	t.Run("nil checkpoint", func(t *testing.T) {
		_, err := metrics.New(n.store, n.report, metrics.WithCheckpoint(nil))
		require.ErrorIs(t, err, metrics.ErrInvalidArgument)
		_, err = metrics.New(n.store, n.report, metrics.WithCheckpoint((*checkpoint.File[string, int])(nil)))
		require.ErrorIs(t, err, metrics.ErrInvalidArgument)
		assert.ErrorContains(t, err, "WithCheckpoint")
	})
}

// sameInt is Config.Equal for an implicit legacy that records whole values.
func sameInt(a, b int) bool { return a == b }

// TestCollectorCheckpointBehind: a phase-2 restore during a runtime outage
// leaves the checkpoint marked behind legacy (phase 3 would refuse it), and
// the restart that reads the runtime in full clears the mark: one healing
// restart clears the gate, though that restart found the checkpoint stale.
func TestCollectorCheckpointBehind(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	first := open(t, path, migrate.PhaseMigrate, map[string]int{"a": 1})
	require.NoError(t, first.store.Close())

	f, err := checkpoint.Open[string, int](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	down := source.Func[string, int](func(context.Context) (map[string]int, error) {
		return nil, errors.New("connection refused")
	})
	s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: down, Checkpoint: f, Equal: sameInt})
	require.NoError(t, err)
	rep, err := s.Restore(ctx)
	require.NoError(t, err)
	c, err := metrics.New(s, rep)
	require.NoError(t, err)
	assert.Equal(t, 1.0, value(t, c, "phaseshift_checkpoint_behind"))
	require.NoError(t, s.Close())

	healed := open(t, path, migrate.PhaseMigrate, map[string]int{"a": 1})
	c = collector(t, healed)
	assert.Equal(t, 0.0, value(t, c, "phaseshift_checkpoint_behind"), "the mark is cleared by this restart")
	assert.Equal(t, 1.0, value(t, c, "phaseshift_restore_stale", "side", "checkpoint"), "which found it")
}
