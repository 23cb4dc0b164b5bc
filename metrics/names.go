package metrics

import "github.com/prometheus/client_golang/prometheus"

// metric is one of the metrics a Collector exports: an index into specs.
type metric int

// The metrics, in the order Describe sends them and the package doc lists
// them.
const (
	mPhase metric = iota
	mEntries
	mRestoreEntries
	mRestoreReadFrom
	mRestoreStale
	mCheckpointBehind
	mRestoreQuarantined
	mRestoreShadowDiffers
	mRestoreTimestamp
	mScrapes
	mWrites
	mWritesOutcomeUnknown
	mCommits
	mCommittedWrites
	mCheckpointSaves
	mCheckpointSaveSeconds
	mCheckpointBytes
	mJournalEnabled
	mJournalBytes
	mJournalRecords
	mLegacyWrites
	numMetrics
)

// spec is a metric's name, type, variable labels and help: the one home of
// each. The package doc, the README and the rules file name these; tests
// hold them to this table.
type spec struct {
	name   string
	kind   prometheus.ValueType
	labels []string
	help   string
}

var specs = [numMetrics]spec{
	mPhase:   {"phaseshift_phase", prometheus.GaugeValue, nil, "The rollout phase the Store runs in: 0 legacy, 1 expand, 2 migrate, 3 contract."},
	mEntries: {"phaseshift_entries", prometheus.GaugeValue, nil, "Entries the Store serves."},
	mRestoreEntries: {"phaseshift_restore_entries", prometheus.GaugeValue, []string{"kind"},
		"The last restore's entries by kind: restored, dropped, pruned and errors (what it could not read) as it counted them; backfilled, orphaned and diverged as many of those as are still served as it left them (a later write or delete of one settles it)."},
	mRestoreReadFrom: {"phaseshift_restore_read_from", prometheus.GaugeValue, []string{"sides"},
		"1 for the sides the last restore built the served state from: legacy, checkpoint, checkpoint+legacy or nothing."},
	mRestoreStale: {"phaseshift_restore_stale", prometheus.GaugeValue, []string{"side"},
		"1 if the last restore found the side (checkpoint or legacy) stale, and did not trust it as it was."},
	mCheckpointBehind: {"phaseshift_checkpoint_behind", prometheus.GaugeValue, nil,
		"1 if the checkpoint, as the last restore left it, is marked behind legacy (a phase-0 run, or a run that could not read legacy in full): phase 3 refuses it until a run reads legacy in full."},
	mRestoreQuarantined: {"phaseshift_restore_quarantined", prometheus.GaugeValue, nil,
		"1 if the last restore moved an unreadable checkpoint aside."},
	mRestoreShadowDiffers: {"phaseshift_restore_shadow_differs", prometheus.GaugeValue, nil,
		"1 if a side the last restore read only to compare (legacy in phase 3, the checkpoint in phase 0 with Verify) differed from what it served."},
	mRestoreTimestamp: {"phaseshift_restore_timestamp_seconds", prometheus.GaugeValue, nil,
		"When the last restore finished, in seconds since the epoch."},
	mScrapes: {"phaseshift_scrapes_total", prometheus.CounterValue, nil,
		"Scrapes of this Collector since the restore it reports (its Collect calls, this one included): the gate holds a node until it is 2, so that it is not judged on what a scrape before its restart said."},
	mWrites: {"phaseshift_writes_total", prometheus.CounterValue, []string{"kind", "result"},
		"Writes that returned: put, delete and update (DeleteFunc included) that succeeded, and any that failed."},
	mWritesOutcomeUnknown: {"phaseshift_writes_outcome_unknown_total", prometheus.CounterValue, nil,
		"Writes that failed on one side and whose undo failed on the other: they may or may not survive a restart."},
	mCommits: {"phaseshift_commits_total", prometheus.CounterValue, nil,
		"Group commits that carried at least one write."},
	mCommittedWrites: {"phaseshift_committed_writes_total", prometheus.CounterValue, nil,
		"Writes the group commits carried (divided by commits: the group-commit effect)."},
	mCheckpointSaves: {"phaseshift_checkpoint_saves_total", prometheus.CounterValue, []string{"result"},
		"Checkpoint saves (restore's included), by result: ok or error."},
	mCheckpointSaveSeconds: {"phaseshift_checkpoint_save_seconds_total", prometheus.CounterValue, nil,
		"Time spent in checkpoint saves, failed ones included."},
	mCheckpointBytes: {"phaseshift_checkpoint_bytes", prometheus.GaugeValue, nil,
		"Size of the checkpoint file and its journal as last loaded or saved; 0 when the checkpoint cannot tell."},
	mJournalEnabled: {"phaseshift_checkpoint_journal_enabled", prometheus.GaugeValue, nil,
		"1 if the checkpoint (given with WithCheckpoint) was opened with a journal."},
	mJournalBytes: {"phaseshift_checkpoint_journal_bytes", prometheus.GaugeValue, nil,
		"Size of the checkpoint's journal as last loaded or written; 0 with none."},
	mJournalRecords: {"phaseshift_checkpoint_journal_records", prometheus.GaugeValue, nil,
		"Commits the journal holds that the checkpoint file does not: the next compaction folds them in."},
	mLegacyWrites: {"phaseshift_legacy_writes_total", prometheus.CounterValue, []string{"result"},
		"Writes to a legacy the Store writes, undo and repair included, by result: ok or error."},
}
