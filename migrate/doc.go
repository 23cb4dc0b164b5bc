// Package migrate moves a daemon's state from a legacy source of truth to
// its own checkpoint file with an expand/contract rollout that survives
// every upgrade, downgrade, crash and reboot on the way.
//
// A [Store] composes a legacy reader (package source; for a CNI plugin the
// container runtime's pod sandboxes, package source/cri) with a checkpoint
// (package checkpoint). Its [Phase], usually a flag of the daemon, decides
// where [Store.Restore] reads from after a restart and where every [Store.Put],
// [Store.Delete] and [Store.Update] goes (the table is on [Phase]).
//
// Phase 0 is what the old version did, so one binary can ship with the
// phase as a flag. A legacy source that takes no explicit writes (a
// source.Reader without source.Writer, such as CRI, which learns of a
// sandbox from the runtime that created it) is never written: it is never
// stale, and phases 2 and 3 then differ only in restore.
//
// # Why phases
//
// Switching from legacy to a checkpoint in one release is unsafe. The AWS
// VPC CNI found out: version N+1 wrote a checkpoint, a downgrade to N
// ignored the file and let it go stale, and the next upgrade trusted it -
// leaked or doubly assigned IPs. Each phase here keeps the next one's source
// fresh, and Restore checks what it reads.
//
// # Two kinds of legacy
//
// A legacy the Store writes (its Reader also implements source.Writer: a
// proxy's registry, an older file format) holds every write acknowledged by
// the old binary and by phases 0 to 2. What it holds that the checkpoint
// lacks or holds differently was written by an old binary since, or is the
// trace of a phase-2 write that crashed between the two sides and so was
// never acknowledged: in both cases legacy is right. A legacy that only
// observes (CRI, which learns of sandboxes from the runtime) is never
// stale, but it records less (no network or interface name) and its
// listing can miss a live entry.
//
// # Restore rules
//
// Restore first reads both sides and judges them, then picks how to build
// the served state by the first rule that applies, builds it entry by
// entry, and only then repairs the sides: it moves an unreadable checkpoint
// aside, brings a legacy it writes in line, and saves the checkpoint. Each
// rule is one function in rules.go, with the rule as its comment.
//
// Judging the checkpoint:
//
//   - A missing checkpoint is an empty one.
//   - With Config.Strict, anything that cannot be read (a corrupt or newer
//     file, an entry that does not decode, a legacy listing that failed or
//     is partial) fails Restore in every phase, and nothing is changed.
//   - A corrupt checkpoint, one with a newer schema than the binary knows
//     (or entries with fields it does not know), or entries that do not
//     decode, is never used silently and never overwritten: it is moved
//     aside (Report.Quarantined), its readable entries (if any) still used,
//     and the error reported. Except: where the checkpoint is the sole copy
//     of the state (phase 3, or phases 1 and 2 with VolatileLegacy), a
//     newer file fails Restore whatever Strict says (a binary rollback must
//     not replace good data it cannot read); and a file that says legacy is
//     stale (below) and cannot be read in full fails with ErrUnsafeRestore.
//   - With a boot epoch, a checkpoint from an earlier boot is stale and
//     discarded (Report.Stale): its state died with the reboot. Whatever
//     else it says (a newer schema, phase 3 as its writer) no longer
//     matters. A checkpoint that records no boot (written before the epoch
//     was turned on) is judged as if from this boot.
//   - A checkpoint that carries the mark of phase 0 is behind legacy
//     (Report.Stale): a phase-0 run, which writes legacy only, came after
//     it, or a run that could not read legacy in full (see below).
//   - Phase 1, where legacy decides (rule 5), also reports an existing
//     checkpoint that differs from what it builds (Report.Stale): a phase-0
//     run of the old binary, or a crash, came after it.
//
// Building the state (the first rule that applies decides):
//
//  1. A checkpoint written by phase 3, which does not write legacy, makes a
//     legacy the Store writes stale (Report.LegacyStale): a phase that
//     writes legacy serves the checkpoint and rewrites legacy to match it.
//     If either side cannot be read in full, Restore fails (ErrUnsafeRestore).
//  2. Phase 3 refuses a checkpoint behind legacy (ErrStale).
//  3. With VolatileLegacy, phases 1 and 2 (and phase 0 with a checkpoint it
//     can use) serve the checkpoint with whatever legacy holds, and refill legacy,
//     even when the listing failed: legacy is not the side they serve from.
//     Over a checkpoint behind legacy they let legacy decide which entries
//     exist, as phase 1 does (phase 0 serves legacy), because the phase-0
//     run's state died with it. Phase 3 serves the checkpoint, and neither
//     takes legacy as evidence nor compares with it.
//  4. Phase 0 serves legacy, as the old binary did.
//  5. Phase 1 takes legacy's word on which entries exist.
//  6. Phase 2 does the same over a checkpoint it cannot trust to hold every
//     entry (missing, moved aside, from an earlier boot, or behind legacy).
//  7. Phase 2 whose legacy listing failed serves the checkpoint as it is,
//     and reports the failure.
//  8. Phase 2 otherwise serves the checkpoint reconciled with legacy.
//  9. Phase 3 serves the checkpoint; a legacy still configured is read only
//     to compare (Report.Shadow).
//
// Entry by entry, when both sides are used (rules 3, 5, 6 and 8):
//
//   - An entry both sides hold with values Config.Equal calls the same is
//     served with the checkpoint's key and value; for a legacy the Store
//     writes, with legacy's key if it differs. With values that differ
//     (Report.Diverged), Config.Merge picks the value and the key comes with
//     it; by default legacy's value for a legacy the Store writes, the
//     checkpoint's for one that observes.
//   - An entry only legacy has is served (Report.Backfilled, except where
//     legacy is the basis: phase 1 by rule 5).
//   - An entry only the checkpoint has is dropped where legacy decides which
//     entries exist (rules 5 and 6) and, in phase 2, for a legacy the Store
//     writes (Report.Dropped). For a legacy that observes it is kept as an
//     orphan (Report.Orphaned), or dropped with Config.PruneOrphans
//     (Report.Pruned). With VolatileLegacy it is kept without a word.
//   - Nothing is dropped, pruned or deleted on the evidence of a partial
//     listing. An entry it lacks that the checkpoint holds is kept and
//     reported as an orphan for a legacy that observes (whose record would
//     lose to the checkpoint's anyway); for a legacy the Store writes, whose
//     record would win and could not be read, it is not served this run,
//     and stays where it lives, in legacy (the listing's error is in
//     Report.Errors). With VolatileLegacy the entry is kept without a word,
//     and legacy is refilled with it, like every entry served.
//
// Repairing the sides:
//
//   - A legacy the Store writes is brought in line with what is served, in
//     the phases that write it (Report.LegacyWrites): all of it when it is
//     stale or volatile, otherwise the entries whose served record is not
//     legacy's (a Merge that chose the checkpoint's value). An entry kept
//     only because a listing was partial is not written.
//   - Whenever restore changed what the checkpoint should hold (phase 1's
//     rebuild from legacy when it differs; a backfill, a drop, a prune, a
//     merged value, a file moved aside, a mark set or cleared, the state of
//     an earlier boot, a checkpoint phase 1 or 2 finds missing), the
//     checkpoint is saved before Restore returns, so that the next phase
//     finds it current. A checkpoint already current is left alone.
//   - Every save records the Store's phase, with two exceptions that record
//     phase 0's mark: phase 0 itself (when it has a Checkpoint, once per
//     boot; it keeps the checkpoint's own entries, or saves legacy's when
//     the checkpoint cannot be used), and a phase 1 or 2 run that could not
//     read legacy in full, which may have missed an entry only legacy
//     holds (not with VolatileLegacy, whose legacy holds nothing the
//     checkpoint lacks). Phase 3 then refuses the file until a run reads
//     legacy in full.
//
// The side the phase must serve from has to be readable: a legacy listing
// that fails where legacy decides (phase 0, phase 1, phase 2 over a
// checkpoint it cannot trust; with VolatileLegacy, only over a checkpoint
// behind legacy), or a checkpoint that cannot be read for a reason other
// than its content (EIO), fails Restore in every mode. With Strict, even a
// checkpoint from an earlier boot that cannot be read is refused: Strict
// refuses before it judges what a file says. Without Strict, these
// refusals remain: ErrStale, ErrUnsafeRestore, checkpoint.ErrNewerSchema
// where the checkpoint is the sole copy, and a side the phase must serve
// from that cannot be read at all. Everything else is logged, reported in
// Report.Errors and skipped, in one call: the caller never needs to
// Quarantine by hand and call Restore again.
//
// # What holds
//
// Any sequence of deployments over phases 0 to 3 (single steps, skipped
// steps, downgrades of any size, crashes and reboots in between) restores
// exactly the acknowledged state, keys and values included, or refuses with
// a clear error, provided that:
//
//   - phase 3 never directly follows phase 0 run by the old binary (which
//     leaves no trace in the checkpoint; this package's phase 0 marks it,
//     and phase 3 then refuses), nor, with a legacy the Store writes, the
//     old binary directly follows phase 3 (it cannot see what phase 3
//     wrote);
//   - with VolatileLegacy, the old binary is not followed by phases 1 to 3
//     over a checkpoint it did not mark: roll back to this package's phase
//     0, not to the old binary;
//   - every side restore reads can be read in full. By default, what cannot
//     be read is reported (Report.Errors, Report.Quarantined) and skipped
//     (Strict refuses instead): an entry a partial listing missed is kept
//     if the checkpoint has it and legacy only observes, and otherwise not
//     served until a later listing finds it (a write to it meanwhile
//     replaces it, and a failed one that is undone removes it); a checkpoint
//     moved aside no longer enriches legacy's entries, which are then served
//     as legacy records them;
//   - a write that returned an error matching ErrOutcomeUnknown may or may
//     not be served.
//
// For an observing legacy, an entry the checkpoint never held (one the old
// binary wrote) is served as legacy records it, placeholders included, and
// an orphan may be served until its DEL comes. Package migratetest checks
// these claims for your own adapters.
//
// # Rolling a fleet forward and back
//
// Ship the phase as configuration (a flag, or an environment variable in
// the DaemonSet) and move one step at a time across the fleet:
//
//  1. 0 → 1: deploy phase 1 and wait until every node runs it. Every node
//     now writes the checkpoint while still trusting legacy, and a rollback
//     to the old binary is safe.
//  2. 1 → 2: deploy phase 2 and let it soak. Nodes trust their checkpoint;
//     legacy is still written, so going back to 1 or to the old binary is
//     safe.
//  3. 2 → 3: only when no node can go back to a version without the
//     checkpoint, and every node's last restore read legacy in full.
//     Legacy stops being written (when it is written at all).
//
// Rolling back is the same steps in reverse. With a legacy that does not
// survive a restart (VolatileLegacy), phases 1 to 3 all serve the
// checkpoint, so the order matters less; roll back to phase 0 of this
// package, which marks the checkpoint, rather than to the old binary.
//
// # Writes
//
// A write returns nil only once every side its phase writes has it
// durably; reads (Get, All, Len) see committed state only. The side the
// phase restores from is written first. If any side fails, memory is
// unchanged, the checkpoint holds the previous commit, an explicit legacy
// write already made is compensated, and the error says which side failed
// (ErrCheckpointWrite, ErrLegacyWrite). When undoing on the other side
// fails too, the error also matches ErrOutcomeUnknown and names the side
// that may still hold the write: the checkpoint until the next successful
// save (phases 2 and 3), or legacy (phases 0 and 1). Concurrent writes are
// group-committed: one checkpoint save carries every write that queued while
// the previous save ran, and each caller is released when its own change is
// durable. A lone writer does not wait for company.
//
// # Keys, placeholders and provenance
//
// Config.Match maps a key to what identifies its entry across sources. An
// entry learned from legacy may carry placeholder fields (IPAM: network
// "_migrated-from-cri", interface "unknown", because CRI does not record
// them); Get, Delete and Put with the real key still find it through Match -
// the VPC CNI lost IPs when a DEL never matched a migrated key. The Store
// remembers where each entry came from (Store.Origin) and which key it is
// stored under (Store.Key).
//
// # Testing
//
// Package migrate/migratetest runs a Store built on your own adapters
// through every sequence of phases, with writes, crashes and reboots
// between, and fails with the shortest sequence that lost or invented an
// entry. It also provides fakes for the legacy side.
//
// # Caveats
//
//   - The Store holds every entry in memory; it is for node-local state
//     (thousands to a few hundred thousand entries), not a database.
//   - Every write saves the whole checkpoint file (only changed entries are
//     re-encoded), so its cost grows with the size of the state; group
//     commit shares that cost among concurrent writers.
//   - An Update is atomic on the checkpoint (one save) but not on an
//     explicit legacy source, which takes one write per key: a crash
//     between those writes leaves part of the Update in legacy, and the
//     phases that restore from legacy (0 and 1, and phase 2's backfill)
//     can serve that part.
//   - Compensation is best effort: if undoing also fails, the write's error
//     matches ErrOutcomeUnknown, and a later Restore may serve it or not.
//   - A checkpoint that cannot be read at all cannot tell whether it was
//     written by phase 3; a lower phase then restores from legacy.
//   - Match must map two keys to the same identity only if they name the
//     same entry; a pod with two interfaces needs the interface in the
//     identity.
//   - A legacy that is empty after every restart (a registry kept only in
//     memory) must be declared with Config.VolatileLegacy; otherwise phase 1
//     takes its emptiness as the truth and rewrites the checkpoint empty.
//   - A legacy the Store writes must list every entry under the key it was
//     Put with; the Store removes an entry's old key from it when the entry
//     is stored under a new one.
//   - Values are not copied; see Store.
//   - Report key lists are in no particular order.
package migrate
