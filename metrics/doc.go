// Package metrics exports a migrate.Store to Prometheus, and ships the
// rules that gate a fleet's rollout on what it exports.
//
// A [Collector] reads the Store's Stats, the Report its Restore returned
// and, with [WithCheckpoint], the checkpoint's journal, at every scrape:
//
//	report, err := store.Restore(ctx)
//	c, err := metrics.New(store, report, metrics.WithCheckpoint(file))
//	registry.MustRegister(c)
//
// # Metrics
//
// Gauges, then counters; labels in braces:
//
//	phaseshift_phase                          rollout phase: 0 legacy, 1 expand, 2 migrate, 3 contract
//	phaseshift_entries                        entries served
//	phaseshift_restore_entries{kind}          the last restore's entries, kind: restored, backfilled,
//	                                          dropped, orphaned, pruned, diverged, errors
//	phaseshift_restore_read_from{sides}       1 for the sides the last restore read from
//	phaseshift_restore_stale{side}            1 if it found the checkpoint or legacy stale
//	phaseshift_checkpoint_behind              1 if it left the checkpoint marked behind legacy
//	phaseshift_restore_quarantined            1 if it moved an unreadable checkpoint aside
//	phaseshift_restore_shadow_differs         1 if a side read only to compare differed
//	phaseshift_restore_timestamp_seconds      when it finished
//	phaseshift_checkpoint_bytes               size of the checkpoint and its journal
//	phaseshift_checkpoint_journal_enabled     1 if the checkpoint has a journal (WithCheckpoint)
//	phaseshift_checkpoint_journal_bytes       size of the journal
//	phaseshift_checkpoint_journal_records     commits in the journal, not yet in the file
//	phaseshift_scrapes_total                  scrapes since the restore, this one included
//	phaseshift_writes_total{kind,result}      writes: put, delete, update ok; any error
//	phaseshift_writes_outcome_unknown_total   writes whose undo failed too
//	phaseshift_commits_total                  group commits
//	phaseshift_committed_writes_total         writes the group commits carried
//	phaseshift_checkpoint_saves_total{result} checkpoint saves: ok, error
//	phaseshift_checkpoint_save_seconds_total  time spent in them
//	phaseshift_legacy_writes_total{result}    writes to legacy: ok, error
//
// The counts of phaseshift_restore_entries with kind backfilled, orphaned
// and diverged are current: of the entries the last restore reported so,
// those still served as it left them. A write or delete of such an entry
// settles it (its migrate.Origin becomes OriginWrite, or it is gone): the
// DEL the runtime retries for an orphan clears it from the gate without
// a restart. The other kinds, and the other restore metrics, are what the
// restore found; only the next restore changes them.
//
// # Rules
//
// phaseshift.rules.yml, beside this file, is the gate of a rollout as
// Prometheus recording and alerting rules: phaseshift:safe_to_move_to_phase
// is 1 when every node of the scrape job is ready for phase N, and
// phaseshift:node_blocks_phase, phaseshift:node_unreported and
// phaseshift:node_held_down say which node blocks it and why. Every phase
// is blocked while a node is down, exports none of these metrics, or has
// been scraped fewer than two times since its restore
// (phaseshift_scrapes_total: the hold-down, so that the gate never judges a
// node on what it said before it restarted), and while fewer nodes report
// than the operator's phaseshift:expected_nodes series says (or it is
// missing). phaseshift:node_unsafe_in_phase3 watches the nodes that run
// phase 3: a restore that found legacy differing, backfilled what the
// checkpoint lacked or served what it could read of an unreadable
// checkpoint. Alerts fire for each, naming the node (the label instance)
// and the reason. phaseshift.rules.test.yml tests them with promtool test
// rules, and rules_test.go holds that a change to any rule fails them. The
// phaseshift command's gate verb asks a Prometheus server the same
// question, waiting out the hold-down.
//
// # Caveats
//
//   - The Collector exports one Store. A daemon with several registers one
//     Collector each, with a label per Store (prometheus.WrapRegistererWith).
//   - New needs the Report of the Store's Restore, which the Store does not
//     keep; a Collector built before Restore would export a clean restore
//     that never ran, so New refuses.
//   - The journal's metrics read the checkpoint, which waits for a save in
//     progress; everything else reads atomic counters and the Store's read
//     lock, as Store.Stats and Store.Origin do.
//   - Stop serving the metrics (or unregister the Collector) before
//     Store.Close: a closed Store serves nothing, so its backfilled,
//     orphaned and diverged entries read 0, which the gate would take for
//     settled ones. examples/ipam stops its metrics server first.
//   - The rules select the nodes with job="ipamd": replace it with the
//     name of your scrape job. The label instance must name the node
//     (relabel it from the pod's node name), so that a replaced pod is
//     the same node. A node the job does not scrape at all (missing from
//     service discovery) is seen only through phaseshift:expected_nodes,
//     which the operator states (a static count, or kube-state-metrics'
//     kube_daemonset_status_desired_number_scheduled): without it every
//     phase is blocked.
//   - phaseshift_scrapes_total counts every Collect: a second scraper (a
//     pair of Prometheus servers, a curl) makes the hold-down shorter for
//     the other, down to one of its scrapes. The rules cannot see a
//     restart before its first scrape at all; phaseshift gate waits for
//     every node to be scraped after it starts.
package metrics
