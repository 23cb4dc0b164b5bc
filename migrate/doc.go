// Package migrate moves a daemon's state from a legacy source of truth to
// its own checkpoint file with an expand/contract rollout that survives
// every upgrade, downgrade, crash and reboot on the way.
//
// A [Store] composes a legacy reader (package source; for a CNI plugin the
// runtime's pod sandboxes, package source/cri) with a checkpoint (package
// checkpoint). Its [Phase], usually a flag, decides where [Store.Restore]
// reads from after a restart and where every write goes:
//
//	phase         restore reads                                  writes go to
//	0 legacy      legacy                                         legacy
//	1 expand      legacy, and rewrites the checkpoint from it    legacy, then the checkpoint
//	2 migrate     the checkpoint, reconciled against legacy      legacy, then the checkpoint
//	3 contract    the checkpoint                                 the checkpoint
//
// Phase 0 is what the old version did, so one binary ships with the phase
// as a flag. The promise holds with Config{Phase, Legacy, Checkpoint} and
// what the kind of legacy needs said (Equal for an implicit legacy, Match
// where its keys carry placeholders, VolatileLegacy for one that dies at
// every restart); every other option widens what is allowed.
//
// Legacy is explicit when the Store writes it (its Reader is also a
// source.Writer: a registry, an older file, host-local's files): it holds
// every write acknowledged by the old binary and by phases 0 to 2. It is
// implicit when someone else keeps it current (CRI, which learns of a
// sandbox from the runtime): never stale, but it records less than the
// checkpoint, can miss a live entry, and lists an entry only once the
// write that made it was acknowledged.
//
// # Restore rules
//
// Restore reads and judges both sides (rules 1 to 8, read.go), picks the
// basis of the served state by the first of rules 9 to 17 that applies
// (basis.go), builds it entry by entry (rules 18 to 22, build.go and
// build_duplicates.go), and only then repairs the sides (rules 23 to 26,
// repair.go). The code says "rule N" where it enforces one, and each rule's
// reason is on its function. Where a rule refuses, Restore fails and
// changes nothing; everything else is reported and Restore goes on.
//
//	    when                                     what Restore does                        reported in
//	 1  no checkpoint file                       an empty checkpoint                      -
//	 2  Strict, and anything unreadable          refuses                                  the error
//	 3  boot epoch on, file of an earlier boot   discards it, whatever it says            Stale
//	 4  the checkpoint is the only copy (phase   refuses (DiscardUnreadableCheckpoint:    the error, which
//	    3; VolatileLegacy unless marked) and     moves it aside, serves what it read;     names the recovery
//	    cannot be read in full                   never a newer schema's)                  that loses nothing
//	 5  elsewhere, unreadable in full            moves it aside, uses what it read;       Quarantined, Errors
//	                                             refuses if it says legacy is stale       ErrUnsafeRestore
//	 6  a side the phase must serve from         refuses, in every mode                   the error
//	    cannot be read at all
//	 7  Meta.Behind set (a phase-0 run, an       the checkpoint is behind legacy          Stale
//	    incomplete listing, restore-prev); or,
//	    in phase 2, an implicit legacy listed
//	    in full lists what it never held
//	 8  phase 1, and the file differs from       reports it                               Stale
//	    what legacy makes it
//	 9  file by phase 3, explicit legacy, a      serves the checkpoint, rewrites legacy;  LegacyStale
//	    phase that writes legacy                 refuses if a side is incomplete or the   ErrUnsafeRestore
//	                                             file is behind too
//	10  phase 3, checkpoint behind legacy, or    refuses                                  ErrStale
//	    (Config.Unique) contradicted by legacy
//	11  VolatileLegacy                           serves the checkpoint with what legacy   -
//	                                             holds, refills legacy (behind: 13's way)
//	12  phase 0                                  serves legacy                            -
//	13  phase 1                                  legacy decides which entries exist       Dropped
//	14  phase 2, checkpoint missing, moved       as phase 1                               Dropped, Backfilled
//	    aside, of an earlier boot or behind
//	15  phase 2, legacy not listed               serves the checkpoint                    Errors
//	16  phase 2 otherwise                        reconciles the checkpoint with legacy    -
//	17  phase 3                                  serves the checkpoint, and what a        Backfilled, Shadow
//	                                             configured legacy holds that it lacks
//	                                             (not an explicit one phase 3 may have
//	                                             left behind); compares the rest
//	18  both hold it, Equal says the same        the checkpoint's record (implicit), or   -
//	                                             legacy's key (explicit)
//	19  both hold it, values differ              Merge decides (default: legacy's);       Diverged
//	                                             behind: legacy's
//	20  only legacy holds it                     serves it                                Backfilled
//	21  only the checkpoint holds it             drops it where legacy decides, or for    Dropped, Orphaned,
//	                                             an explicit legacy; keeps it as an       Pruned
//	                                             orphan for an implicit one (PruneOrphans:
//	                                             drops it); never on a partial listing
//	22  two keys Match calls one entry; or       keeps one the same way at every          Errors, Dropped
//	    (Config.Unique) two entries sharing a    restore; drops the one the sides show
//	    part of their values                     stale (listed beats unlisted, held
//	                                             beats a DEL in flight)
//	23  an explicit legacy, a phase that         writes it in line with what is served:   LegacyWrites
//	    writes it                                all of it if stale or volatile
//	24  the checkpoint was moved aside           replaced by what is served               CheckpointRewritten
//	25  what the checkpoint should hold          saves it before Restore returns          CheckpointRewritten
//	    changed, or it does not record the
//	    phase where the next run must know it
//	26  every save                               records the phase, and a mark where the  Behind
//	                                             checkpoint may lack what legacy holds
//	                                             (phase 0; an incomplete listing)
//
// # What holds
//
// Any sequence of deployments over phases 0 to 3 (single steps, skipped
// steps, downgrades of any size, crashes and reboots in between) restores
// exactly the acknowledged state, keys and values included, or refuses with
// a clear error, provided that:
//
//   - phase 3 never directly follows the old binary's phase 0 (this
//     package's phase 0 marks the checkpoint, and phase 3 then refuses),
//     nor, with an explicit legacy, the old binary directly follows phase 3;
//   - with VolatileLegacy, the old binary is not followed by this package
//     in any phase (roll back to this package's phase 0 instead);
//   - a boot epoch (checkpoint.WithBootID) is on exactly when the state dies
//     with a reboot;
//   - every side restore reads can be read in full, or what cannot is
//     reported and skipped where another copy is current (rules 4, 5 and
//     21): an entry a partial listing missed is kept if the checkpoint has
//     it and legacy is implicit, and otherwise not served until a listing
//     finds it;
//   - a write that failed with ErrOutcomeUnknown may or may not be served,
//     until a later acknowledged write to the entry settles it.
//
// For an implicit legacy, an entry only legacy holds is served as legacy
// records it, and an orphan may be served until its DEL comes. With
// Config.Unique, a restore in phases 1 to 3 over a legacy it could list
// serves one part of a value (an address) to one entry where the sides can
// tell which is stale, and reports it (Report.Errors) where they cannot;
// phase 0, a volatile legacy and a listing that failed report it.
//
// Writes return nil only once every side their phase writes has them
// durably, and are group-committed; what a failed or panicking write leaves
// is on Store.
//
// # Testing
//
// Package migrate/migratetest runs a Store built on your own adapters
// through every sequence of phases, with writes, crashes and reboots
// between, and fails with the shortest sequence that lost, invented or
// changed an entry (or, with its Config.Unique, served a value twice). Its
// CheckCheckpoint checks a Checkpoint of your own. The design's history is
// in CHANGELOG.md.
//
// # Caveats
//
//   - The Store holds every entry in memory: node-local state (thousands
//     to a few hundred thousand entries), not a database. From the first
//     Update that ranges over Tx.All on, it holds a second copy of the keys
//     and values, as slices, for an allocator's scan.
//   - An Update is atomic on the checkpoint (one save) but not on an
//     explicit legacy that takes one write per key: a crash between those
//     writes leaves part of it in legacy, which phases 0 and 1 (and phase
//     2's backfill) can serve. A source.BatchWriter takes a commit in one
//     Write, atomic if the legacy's Write is.
//   - Compensation is best effort: if undoing also fails, the write's error
//     matches ErrOutcomeUnknown.
//   - A checkpoint that cannot be read at all cannot tell whether phase 3
//     wrote it; phases 0 to 2 then restore from legacy (rule 5).
//   - Match must map two keys to one identity only if they name one entry.
//   - An explicit legacy must list every entry under the key it was Put
//     with.
//   - For an implicit legacy whose values can change, a Merge that prefers
//     the checkpoint reports an entry diverged at every restore after a
//     crash cut its write short, until its next write.
//   - A DEL the Store acknowledged that the runtime has not finished when
//     the daemon restarts (CRI lists the sandbox ready until the DEL has
//     returned to it) looks like a write the checkpoint missed: phase 2
//     takes it as rule 7's evidence and lets legacy decide (an entry a
//     complete listing missed is then dropped, as in phase 1), and phases
//     1 to 3 serve the deleted entry again (phase 3 as a backfill, rule
//     17), so that its address leaks once the runtime removes the sandbox:
//     a phase-2 restart reports it as an orphan (prune it), phase 3 serves
//     it until a DEL with its key. With Config.Unique, an entry that took
//     its address meanwhile wins over it (rule 22). Telling the two apart
//     needs keys that are never reused, which the Store cannot know.
//   - Values are not copied; see Store. Report key lists are in no
//     particular order.
package migrate
