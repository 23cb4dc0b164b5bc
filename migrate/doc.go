// Package migrate moves a daemon's state from a legacy source of truth to
// its own checkpoint file with an expand/contract rollout that survives
// every upgrade, downgrade, crash and reboot on the way.
//
// A [Store] composes a legacy reader (package source; for a CNI plugin the
// container runtime's pod sandboxes, package source/cri) with a checkpoint
// (package checkpoint). Its [Phase], usually a flag of the daemon, decides
// where [Store.Restore] reads from after a restart and where every [Store.Put],
// [Store.Delete] and [Store.Update] goes (the table is on [Phase]). Phase 0
// is what the old version did, so one binary can ship with the phase as a
// flag.
//
// The promise holds with Config{Phase, Legacy, Checkpoint} and what the
// kind of legacy needs said (Equal for an implicit legacy, Match where its
// keys carry placeholders, VolatileLegacy for one that dies at every
// restart); every other option widens what is allowed, and none is needed
// for safety.
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
// An explicit legacy is one the Store writes: its Reader also implements
// source.Writer (a proxy's registry, an older file format, host-local's
// files). It holds every write acknowledged by the old binary and by phases
// 0 to 2; what it holds that the checkpoint lacks or holds differently was
// written by an old binary since, or is the trace of a write that a crash
// cut short between the two sides, which was never acknowledged.
//
// An implicit legacy is kept current by someone else and only read: a
// source.Reader without source.Writer, such as CRI, which learns of a
// sandbox from the runtime that created it. It is never stale, but it
// records less than the checkpoint (no network or interface name), its
// listing can miss a live entry, and it lists an entry only once the write
// that made it was acknowledged. With a Checkpoint configured, New requires
// Config.Equal for it: what it can see.
//
// # Restore rules
//
// This list is the statement of what Restore does; the code says "rule N"
// where it enforces one. Restore reads both sides and judges them (rules 1
// to 8), picks how to build the served state by the first of rules 9 to 17
// that applies, builds it entry by entry (rules 18 to 22), and only then
// repairs the sides (rules 23 to 26).
//
// Reading and judging the sides:
//
//  1. A missing checkpoint is an empty one.
//  2. With Config.Strict, anything that cannot be read (a corrupt or newer
//     checkpoint, an entry that does not decode, a damaged journal, a legacy
//     listing that failed or is partial) fails Restore in every phase, and
//     nothing is changed.
//  3. With a boot epoch (Checkpoint.BootID is not empty), a checkpoint
//     written in an earlier boot is stale and discarded (Report.Stale),
//     whatever else it says or whether it can be read: its state died with
//     the reboot. One that records no boot is judged as from this boot.
//  4. Where the checkpoint is the only copy of the state - phase 3, which
//     writes nothing else, and every phase with VolatileLegacy unless the
//     checkpoint is marked behind legacy (rule 7), whose state then died
//     with the run that marked it - a checkpoint that cannot be read in full
//     (corrupt, of another schema, with entries that do not decode or pass
//     checkpoint.WithValidate, a damaged journal) fails Restore and every
//     file is left as it was; the error matches what Load returned
//     (checkpoint.ErrCorrupt, ErrBadEntry, ErrNewerSchema, ErrOlderSchema)
//     and says how to recover. With
//     Config.DiscardUnreadableCheckpoint it is moved aside and what could be
//     read is served instead, except a checkpoint of a newer schema, which
//     a binary rollback must leave for the roll-forward in any case.
//  5. Elsewhere an unreadable checkpoint is never used silently and never
//     overwritten: it is moved aside (Report.Quarantined), its readable
//     entries still used, and the error reported - unless it says legacy is
//     stale (rule 9) and cannot be read in full: then neither side holds
//     everything, and Restore fails (ErrUnsafeRestore).
//  6. A side the phase must serve from that cannot be read at all fails
//     Restore in every mode: a checkpoint read that fails for a reason other
//     than its content (EIO), and a legacy listing that fails where legacy
//     decides (phase 0, phase 1, phase 2 over a checkpoint it cannot trust;
//     with VolatileLegacy, phases 1 and 2 only over a checkpoint behind
//     legacy, and phase 0 over one it cannot use or that is behind).
//  7. A checkpoint whose Meta.Behind is set is behind legacy (Report.Stale
//     says why): a phase-0 run, which writes legacy only, came after it, a
//     run that could not read legacy in full (rule 26), or it lacks
//     acknowledged commits (phaseshift restore-prev marks the file it puts
//     back so: it is the file before the last compaction). A file written
//     before Meta.Behind existed says the first by its phase alone. In
//     phase 2, a checkpoint that lacks an entry an implicit legacy lists
//     in full is behind legacy too: CRI lists a sandbox only once its ADD was
//     acknowledged, and phases 1 to 3 acknowledge only what the checkpoint
//     holds, so a run that does not write the checkpoint (the old binary,
//     which leaves no mark) came after it, and may have deleted what the
//     checkpoint still holds and handed its address on.
//  8. Phase 1, where legacy decides (rule 13), also reports an existing
//     checkpoint that differs from what it builds (Report.Stale): a phase-0
//     run of the old binary, or a crash, came after it.
//
// Choosing how to build the served state (the first rule that applies):
//
//  9. A checkpoint written by phase 3, which does not write legacy, makes
//     an explicit legacy stale (Report.LegacyStale): a phase that writes
//     legacy serves the checkpoint and rewrites legacy to match it. If
//     either side cannot be read in full, or the checkpoint is behind
//     legacy too (rule 7: a file phaseshift restore-prev put back, which
//     lacks every commit after it), Restore fails (ErrUnsafeRestore):
//     neither side holds every acknowledged write.
//  10. Phase 3 refuses a checkpoint behind legacy (ErrStale): only legacy
//     has what the run that marked it did. With Config.Unique it also
//     refuses one that an entry legacy lists contradicts (an entry it
//     lacks holding a part of the value of one it holds that legacy does
//     not list: the old binary ran since); phase 2 once resolves both.
//  11. With VolatileLegacy, phases 1 and 2 (and phase 0 with a checkpoint it
//     can use) serve the checkpoint with whatever legacy holds, and refill
//     legacy, even when the listing failed. Over a checkpoint behind legacy
//     they let legacy decide which entries exist, as phase 1 does (phase 0
//     serves legacy): the marking run's state died with it. Phase 3 serves
//     the checkpoint, and neither takes legacy as evidence nor compares
//     with it.
//  12. Phase 0 serves legacy, as the old binary did.
//  13. Phase 1 takes legacy's word on which entries exist.
//  14. Phase 2 does the same over a checkpoint it cannot trust to hold every
//     entry: missing, moved aside, from an earlier boot, or behind legacy.
//  15. Phase 2 whose legacy listing failed serves the checkpoint as it is,
//     and reports the failure.
//  16. Phase 2 otherwise serves the checkpoint reconciled with legacy.
//  17. Phase 3 serves the checkpoint and, when a legacy that is not
//     volatile is still configured, what legacy holds and the checkpoint
//     lacks (Report.Backfilled): it is in use, so handing it out as free
//     would hand it out twice. Not for an explicit legacy that may hold
//     what is no longer in use: the checkpoint says phase 3 wrote it
//     (phase 3 does not write legacy, so legacy still holds what phase 3
//     deleted), its header cannot be read to say which phase did, or it is
//     from an earlier boot (rule 3: legacy's state of then died with it
//     too). A file moved aside whose header says phase 1 or 2 wrote it can
//     say, and legacy then holds every acknowledged write. The rest is
//     compared with what is served and reported (Report.Shadow).
//
// Entry by entry, when both sides are used (rules 11, 13, 14 and 16):
//
//  18. An entry both sides hold with values Config.Equal calls the same is
//     served with the checkpoint's key and value for an implicit legacy
//     (its record is richer), and with legacy's key for an explicit one.
//  19. An entry both sides hold with values that differ (Report.Diverged)
//     is served with legacy's key and value over a checkpoint behind
//     legacy, whatever Config.Merge says: the checkpoint's record is older
//     than what a run that wrote legacy only acknowledged since. Otherwise
//     Config.Merge picks the value (by default legacy's, for both kinds: it
//     is newer, or a write a crash cut short), and the key comes with it.
//  20. An entry only legacy has is served (Report.Backfilled, except where
//     legacy is the basis: phase 1, rule 13).
//  21. An entry only the checkpoint has is dropped where legacy decides
//     which entries exist (rules 13 and 14) and, in phase 2, for an
//     explicit legacy (Report.Dropped): that legacy holds every
//     acknowledged write. For an implicit legacy, which can miss a live
//     entry, it is kept as an orphan (Report.Orphaned), or dropped with
//     Config.PruneOrphans (Report.Pruned). With VolatileLegacy it is kept
//     without a word. Nothing is dropped, pruned or deleted on the evidence
//     of a partial listing: an entry it lacks that the checkpoint holds is
//     kept as an orphan for an implicit legacy (whose record would lose to
//     the checkpoint's anyway); for an explicit one, whose record would win
//     and could not be read, it is not served this run and stays where it
//     lives, in legacy (the listing's error is in Report.Errors); with
//     VolatileLegacy it is kept, and legacy refilled with it.
//  22. Two keys of one side that Match calls one entry (a re-key cut
//     between its two legacy writes leaves legacy with both) are resolved
//     the same way at every restore: legacy keeps the key whose record the
//     checkpoint holds (key and value, then key alone: the acknowledged
//     write), otherwise the least key in the order of its text. The others
//     are reported (Report.Errors) and, in the phases that write an
//     explicit legacy, deleted from it (rule 23), so that a later write to
//     the entry always wins. Likewise, with Config.Unique, two served
//     entries whose values share a part (an address) cannot both be live:
//     the one legacy lists outranks one it does not list, and of two it
//     lists, the one the checkpoint holds outranks the other (a DEL the
//     runtime has not finished); the outranked one is dropped
//     (Report.Dropped, and deleted from an explicit legacy in the phases
//     that write it). Where neither side can tell, both are served and
//     reported (Report.Errors). Not in phase 0, nor with VolatileLegacy,
//     nor when legacy could not be listed.
//
// Repairing the sides, in this order:
//
//  23. An explicit legacy is brought in line with what is served, in the
//     phases that write it (Report.LegacyWrites): all of it when it is
//     stale (rule 9) or volatile; otherwise the second keys of rule 22 and
//     the entries whose served record is not legacy's (a Merge that chose
//     the checkpoint's value). An entry kept only because a listing was
//     partial is not written. When all of it is written, what legacy holds
//     that is not served is removed first: a legacy that holds a value for
//     one key at a time (an address file) would refuse a value that an
//     entry deleted meanwhile still holds there.
//  24. A checkpoint moved aside (rules 4 and 5) is replaced by what is
//     served.
//  25. Whenever restore changed what the checkpoint should hold, the
//     checkpoint is saved before Restore returns, so that the next phase
//     finds it current: phase 1's rebuild from legacy when it differs, a
//     backfill, a drop, a prune, a merged value, a file moved aside, a
//     legacy healed (rule 9, so that the next run does not heal it again
//     over what an old binary wrote since), a mark set, cleared or changed
//     (rule 26), the state of an earlier boot, a checkpoint
//     phases 1 and 2 find missing (so that the next start knows which
//     phase ran last), and a checkpoint that does not record phase 3 in
//     phase 3 (so that a rollback knows legacy no longer holds every
//     acknowledged write, a Delete of an entry only legacy held included).
//     A checkpoint already current is left alone.
//  26. Every save records the Store's phase (Meta.Phase). It also records a
//     mark (Meta.Behind, and Report.Behind says which this restore left)
//     where the checkpoint may lack what only legacy holds: phase 0 records
//     that it ran (when it has a Checkpoint, once per boot, keeping the
//     checkpoint's own entries, or legacy's when the checkpoint cannot be
//     used), and a phase 1 or 2 run that could not read legacy in full
//     records that (not with VolatileLegacy, whose legacy holds nothing the
//     checkpoint lacks). Phase 3 refuses a marked file (rule 10) until a
//     run that reads legacy in full clears the mark.
//
// Without Strict, what Restore refuses is what it must: rules 4, 5, 6, 9
// and 10. Everything else is logged, reported in Report.Errors and
// skipped, in one call: the caller never needs to Quarantine by hand and
// call Restore again.
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
//     and phase 3 then refuses), nor, with an explicit legacy, the old
//     binary directly follows phase 3 (it cannot see what phase 3 wrote);
//   - with VolatileLegacy, the old binary is not followed by this package in
//     any phase: its state died with it, and the checkpoint it did not mark
//     holds the state from before it ran (roll back to this package's phase
//     0, which marks the checkpoint, not to the old binary);
//   - with a boot epoch only when the state dies with a reboot: open the
//     checkpoint WithBootID where it lives on storage that outlives the
//     node's state (pods, VMs), and without it where the state survives;
//   - every side restore reads can be read in full. By default, what cannot
//     be read is reported (Report.Errors, Report.Quarantined) and skipped
//     where another copy of the state is current (rules 4 and 5); an entry a
//     partial listing missed is kept if the checkpoint has it and legacy is
//     implicit, and otherwise not served until a later listing finds it (a
//     write to it meanwhile replaces it, and a failed one that is undone
//     removes it); a checkpoint moved aside no longer enriches legacy's
//     entries, which are then served as legacy records them;
//   - a write that returned an error matching ErrOutcomeUnknown may or may
//     not be served, until a later acknowledged write to the entry settles
//     it.
//
// For an implicit legacy, an entry the checkpoint never held (one the old
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
//     checkpoint, and every node's last restore left no mark
//     (Report.Behind). Legacy stops being written (when it is written at
//     all).
//
// Rolling back is the same steps in reverse. With a legacy that does not
// survive a restart (VolatileLegacy), phases 1 to 3 all serve the
// checkpoint, so the order matters less; roll back to phase 0 of this
// package, which marks the checkpoint, rather than to the old binary.
//
// # Writes
//
// A write returns nil only once every side its phase writes has it
// durably; reads (Get, All, Len) see committed state only. Legacy is
// written first, then the checkpoint. If any side fails, memory is
// unchanged, the checkpoint holds the previous commit, an explicit legacy
// write already made is compensated, and the error says which side failed
// (ErrCheckpointWrite, ErrLegacyWrite). When undoing on the other side
// fails too, the error also matches ErrOutcomeUnknown and says that
// legacy may hold the write, or part of it (phases 0 to 2: phase 3 writes
// no legacy, and a failed checkpoint save leaves the previous commit);
// until the Store has written legacy back in line, a later write to that
// entry fails with ErrLegacyWrite rather than build on it.
//
// A legacy writer that panics fails the write it was making, with
// ErrLegacyWrite and ErrOutcomeUnknown (it may have written part of it;
// legacy is written back in line before the next commit touches that
// entry), and that write's caller panics with the same value, whichever
// writer led the commit; the rest of the batch commits. The same holds for
// a value whose MarshalJSON panics, which fails only its own write. A
// panic in other code a commit calls (a Checkpoint's own Commit or Save)
// panics in the writer that led it and fails the rest of its batch with
// ErrOutcomeUnknown. Either way the Store stays usable.
//
// A legacy that is a source.BatchWriter takes every change of a group
// commit in one Write, after each write of the commit has passed its own
// checks, and the undo of a failed checkpoint save in one Write too: a
// legacy that is one file is then rewritten once per commit, not once per
// key. The rules above hold with one difference: the Write carries the
// whole commit, so a Write that fails fails every write of the commit (with
// ErrLegacyWrite; it took none of them, by BatchWriter's contract), and one
// that panics fails them all with ErrOutcomeUnknown too, and each of their
// callers panics with the value.
//
// Concurrent writes are group-committed: one checkpoint save carries the
// writes that queued while the previous save ran (up to 1,024, oldest
// first; the rest go in the next), and each caller is released when its
// own change is durable. A lone writer does not wait for company.
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
// entry, or whose restores do not settle. It also provides fakes for both
// kinds of legacy.
//
// # Departures from the first design
//
// The project's first design fixed the names used here; three behaviours
// changed since, each for a defect the first one allowed:
//
//   - Checkpoint requires BootID and Journal. As optional capabilities, a
//     user's wrapper around a checkpoint.File (for metrics, say) silently
//     turned the boot epoch and torn-journal reports off.
//   - Config.Merge defaults to legacy's value for both kinds of legacy, not
//     the checkpoint's for an implicit one: where the two differ in what
//     legacy can see (Config.Equal), legacy's record is newer (a run that
//     wrote legacy only) or a write a crash cut short, and a checkpoint
//     that kept its own reported the entry diverged at every restore.
//   - An unreadable checkpoint that is the sole copy fails Restore by
//     default instead of being moved aside (rule 4):
//     Config.DiscardUnreadableCheckpoint is the opt-in to serve less.
//
// # Caveats
//
//   - The Store holds every entry in memory; it is for node-local state
//     (thousands to a few hundred thousand entries), not a database. From
//     the first Update that ranges over Tx.All on, it holds a second copy
//     of the keys and values (as slices, which an allocator's scan walks
//     faster than the map), and every commit keeps both up to date.
//   - An Update is atomic on the checkpoint (one save) but not on an
//     explicit legacy, which takes one write per key: a crash between those
//     writes leaves part of the Update in legacy, and the phases that
//     restore from legacy (0 and 1, and phase 2's backfill) can serve that
//     part. A source.BatchWriter takes the commit in one Write, atomic if
//     the legacy's Write is.
//   - Compensation is best effort: if undoing also fails, the write's error
//     matches ErrOutcomeUnknown, and a later Restore may serve it or not.
//   - A checkpoint that cannot be read at all cannot tell whether it was
//     written by phase 3; phases 0 to 2 then restore from legacy (rule 5),
//     which phase 3 may have left behind.
//   - Match must map two keys to the same identity only if they name the
//     same entry; a pod with two interfaces needs the interface in the
//     identity.
//   - An explicit legacy must list every entry under the key it was Put
//     with; the Store removes an entry's old key from it when the entry is
//     stored under a new one.
//   - For an implicit legacy whose values can change, a Merge that prefers
//     the checkpoint reports an entry diverged at every restore after a
//     crash cut its write short, until its next write: such a legacy
//     cannot be written back in line.
//   - Values are not copied; see Store.
//   - Report key lists are in no particular order.
package migrate
