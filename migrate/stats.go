package migrate

import (
	"sync/atomic"
	"time"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// Stats are a Store's cumulative counters since New, in the manner of
// database/sql's DBStats: cheap to read (atomic loads, and a read lock for
// Entries), so a metrics scrape can call Stats every time. Counts of
// writes count calls that returned; a group commit counts once, whatever
// it carried. Package github.com/phaseshift/phaseshift/metrics exports
// them, with what the Report of Restore still says, to Prometheus.
type Stats struct {
	Phase   Phase
	Entries int // entries served now

	// Writes that returned nil, by kind (Updates includes DeleteFunc and Replace).
	Puts, Deletes, Updates uint64
	// Writes that returned an error: the Store was closed or not restored,
	// the context ended before a commit took them, their function failed,
	// a side refused them (of those, OutcomeUnknown also matched
	// ErrOutcomeUnknown).
	WriteErrors, OutcomeUnknown uint64

	// Commits is the group commits that carried at least one write that
	// passed its checks; Committed the writes they carried (Committed/Commits is the group-commit effect).
	Commits, Committed uint64

	CheckpointSaves        uint64        // saves that succeeded, restore's included
	CheckpointSaveFailures uint64        // saves that failed
	CheckpointSaveTime     time.Duration // time spent in saves, failed ones included
	// CheckpointBytes is the size of the checkpoint file (with its
	// journal, if it has one) as last loaded or saved, when
	// the checkpoint can tell (a checkpoint.Sizer, as checkpoint.File and
	// checkpoint.Memory are); 0 otherwise.
	CheckpointBytes int64

	LegacyWrites        uint64 // calls that wrote an explicit legacy (Put, Delete, source.BatchWriter's Write), undo and repair included
	LegacyWriteFailures uint64

	// LastRestore is what the last successful Restore reported; zero
	// before one.
	LastRestore RestoreStats
}

// RestoreStats are a Report's counts.
type RestoreStats struct {
	At                                                      time.Time // when Restore returned
	ReadFrom                                                Sides
	Restored, FromCheckpoint, FromLegacy                    int
	Backfilled, Dropped, Orphaned, Pruned, Diverged, Errors int
	Stale, LegacyStale, Quarantined, CheckpointRewritten    bool
	Behind                                                  bool // Report.Behind is set: the checkpoint is marked behind legacy
	LegacyWrites                                            int
	// ShadowDiffers is whether a side read only to compare (Report.Shadow)
	// differs from what is served.
	ShadowDiffers bool
}

// counters are the Store's atomic counters.
type counters struct {
	puts, deletes, updates, writeErrors, outcomeUnknown    atomic.Uint64
	commits, committed                                     atomic.Uint64
	saves, saveFailures, legacyWrites, legacyWriteFailures atomic.Uint64
	saveNanos                                              atomic.Int64
	lastRestore                                            atomic.Pointer[RestoreStats]
}

// Stats returns the Store's counters. It is safe to call at any time,
// before Restore and after Close included.
func (s *Store[K, V]) Stats() Stats {
	c := &s.stats
	st := Stats{
		Phase:   s.cfg.Phase,
		Entries: s.Len(),
		Puts:    c.puts.Load(), Deletes: c.deletes.Load(), Updates: c.updates.Load(),
		WriteErrors: c.writeErrors.Load(), OutcomeUnknown: c.outcomeUnknown.Load(),
		Commits: c.commits.Load(), Committed: c.committed.Load(),
		CheckpointSaves: c.saves.Load(), CheckpointSaveFailures: c.saveFailures.Load(),
		CheckpointSaveTime: time.Duration(c.saveNanos.Load()),
		LegacyWrites:       c.legacyWrites.Load(), LegacyWriteFailures: c.legacyWriteFailures.Load(),
	}
	if sz, ok := s.cfg.Checkpoint.(checkpoint.Sizer); ok {
		st.CheckpointBytes = sz.Size()
	}
	if r := c.lastRestore.Load(); r != nil {
		st.LastRestore = *r
	}
	return st
}

// restoreStats turns a report into its counts.
func restoreStats[K comparable](r *Report[K]) *RestoreStats {
	return &RestoreStats{
		At: time.Now(), ReadFrom: r.ReadFrom,
		Restored: r.Restored, FromCheckpoint: r.FromCheckpoint, FromLegacy: r.FromLegacy,
		Backfilled: len(r.Backfilled), Dropped: len(r.Dropped), Orphaned: len(r.Orphaned), Pruned: len(r.Pruned),
		Diverged: len(r.Diverged), Errors: len(r.Errors),
		Stale: r.Stale != "", LegacyStale: r.LegacyStale != "", Quarantined: r.Quarantined != "", Behind: r.Behind != "",
		CheckpointRewritten: r.CheckpointRewritten, LegacyWrites: r.LegacyWrites,
		ShadowDiffers: r.Shadow != nil && !r.Shadow.Agrees(),
	}
}
