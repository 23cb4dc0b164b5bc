// Package migrate moves a daemon's state from a legacy source of truth to
// its own checkpoint file with an expand/contract rollout that survives
// every upgrade, downgrade, crash and reboot on the way.
//
// A [Store] composes a legacy reader (package source; for a CNI plugin the
// container runtime's pod sandboxes, package source/cri) with a checkpoint
// (package checkpoint). Its [Phase], usually a flag of the daemon, decides
// where [Store.Restore] reads from after a restart and where every [Store.Put],
// [Store.Delete] and [Store.Update] goes:
//
//	phase  name      restore reads                              writes go to
//	0      legacy    legacy                                     legacy
//	1      expand    legacy, then rewrites the checkpoint       legacy + checkpoint
//	2      migrate   checkpoint, reconciled against legacy      checkpoint + legacy
//	3      contract  checkpoint                                 checkpoint
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
// # Restore rules
//
//   - Phase 1 rewrites the checkpoint from legacy at every start, which
//     heals a file left stale by any downgrade.
//   - Phase 2 trusts the checkpoint's values and reconciles against legacy:
//     entries only legacy has are backfilled (Report.Backfilled); entries
//     only the checkpoint has are kept and reported (Report.Orphaned), or
//     dropped with Config.PruneOrphans (Report.Pruned) - keeping leaks an
//     IP, dropping can hand one out twice. Entries both have with other
//     values are reported (Report.Diverged) and resolved by Config.Merge.
//     A legacy the Store writes is then brought in line with what is
//     served (Report.LegacyHealed): phase 2 writes the checkpoint first,
//     so a crash can leave legacy one write behind, and a later downgrade
//     must not serve an older value than this start did.
//   - A checkpoint written by phase 3, which does not write legacy, makes an
//     explicitly written legacy stale: a lower phase (0 included, when it
//     has a Checkpoint) restores from the checkpoint instead, writes legacy
//     until it is current again (Report.StaleLegacy, Report.LegacyHealed),
//     and says so.
//   - Whenever restore changed what the checkpoint should hold (phase 1's
//     rewrite, a backfill, a prune, a quarantined file replaced), the
//     checkpoint is saved before Restore returns, so that the next phase
//     finds it current.
//   - A missing checkpoint is an empty one in phases 0 to 2, and a fresh
//     start in phase 3.
//   - A corrupt checkpoint, or one with a newer schema than the binary
//     knows, is never used and never overwritten: it is moved aside
//     (Report.Quarantined) and legacy serves in phases 0 to 2. Phase 3 has
//     nothing else: it fails with Config.Strict (leaving the file in place)
//     and otherwise starts empty with the error in Report.Errors. A checkpoint
//     whose checksum holds but some entries cannot be decoded serves the
//     rest, unless Strict: the file is moved aside (Report.Quarantined) and
//     saved again without them, and Report.Errors names their keys.
//   - With a boot epoch (Config.BootID), a checkpoint from an earlier boot
//     is stale and discarded (Report.Stale).
//   - The side the phase restores from must be readable: a legacy listing
//     that fails in phases 0 and 1, or a checkpoint that cannot be read for
//     a reason other than its content (EIO), fails Restore in every mode.
//     Config.Strict also fails it on an unreadable entry of the side served
//     and on a failed reconcile read in phase 2; by default those are logged
//     and reported, and Restore goes on.
//
// # The one unsafe transition
//
// Phase 0 is the old binary, which knows nothing of the checkpoint, so it
// leaves no trace there: only legacy can reveal that it ran. Phase 3 reads
// only the checkpoint. So phase 3 is safe once a phase 1 or 2 run has
// followed the last phase 0 run; going from 0 straight to 3 serves a
// checkpoint that missed everything phase 0 did. When Legacy is still set
// in phase 3, Restore cross-checks it and reports what differs
// (Report.Shadow, ShadowOnly, ServedOnly, Diverged). When phase 0 runs this
// package (Config.Checkpoint set), Restore marks the checkpoint superseded,
// and phase 3 then refuses it with ErrStale. The mirror image holds for a
// legacy side the Store writes explicitly: the old binary in phase 0 cannot
// see what phase 3 wrote, so never roll back from 3 to the old binary
// without a phase 1 or 2 run between.
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
//     checkpoint. Legacy stops being written (when it is written at all).
//
// Rolling back is the same steps in reverse; any downgrade, of any size,
// with crashes and reboots in between, restores exactly the acknowledged
// state or refuses with a clear error, as long as phase 3 never directly
// follows phase 0 (nor, with a legacy the Store writes, the old binary
// directly follows phase 3).
//
// # Writes
//
// A write returns nil only once every side its phase writes has it
// durably; reads (Get, All, Len) see committed state only. The side the
// phase restores from is written first. If any side fails, memory is
// unchanged, the checkpoint holds the previous commit, an explicit legacy
// write already made is compensated, and the error says which side failed
// (ErrCheckpointWrite, ErrLegacyWrite). Concurrent writes are
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
//   - Compensation of an explicit legacy write is best effort: if undoing
//     also fails, legacy may keep a write that was not acknowledged. The
//     restore rules bound the damage (phase 1 rewrites the checkpoint from
//     legacy, phase 2 reports it as an orphan).
//   - A checkpoint that cannot be read at all cannot tell whether it was
//     written by phase 3; a lower phase then restores from legacy.
//   - Match must map two keys to the same identity only if they name the
//     same entry; a pod with two interfaces needs the interface in the
//     identity.
//   - Phase 1 trusts legacy completely: with a legacy source that is empty
//     after every restart (a registry kept only in memory), phase 1
//     rewrites the checkpoint empty. Such a daemon skips phase 1 (0 → 2 →
//     3); phase 2 keeps and reports what only the checkpoint has.
//   - Values are not copied; see Store.
//   - Report key lists are in no particular order.
package migrate
