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
// where its keys carry placeholders); the kind itself comes from the
// source (source.Kind: a source.Map is volatile, a Reader that takes no
// writes observing), and New refuses a legacy whose kind it cannot tell
// (Config.LegacyKind says it). Every other option widens what is allowed.
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
// repair.go and marks.go). The code says "rule N" where it enforces one, and
// each rule's reason is on its function. Where a rule refuses, Restore fails
// and changes nothing; everything else is reported and Restore goes on.
//
// Evidence, not inference: a rule drops an entry the checkpoint holds only
// on positive evidence that its holder is gone (a durable legacy, listed in
// full, lacks it; phase 0 marked it and legacy lacks it) or that its value
// is held by an entry both sides show live (rule 22). A difference between
// the sides is not evidence of history: a runtime's listing lags both ways
// (a sandbox is listed only once its network is set up, and a stopped one
// until it is removed), and a registry in memory is empty after every
// restart. The kind of legacy (source.Kind) says what its word is worth.
// Each row names its evidence after "on:".
//
//	    when                                     what Restore does                        reported in
//	 1  no checkpoint file                       an empty checkpoint                      -
//	 2  Strict, and anything unreadable          refuses                                  the error
//	 3  boot epoch on, file of an earlier boot   discards it (on: its boot ID)            Stale
//	 4  the checkpoint is the only copy (phase   refuses (DiscardUnreadableCheckpoint:    the error, which
//	    3; a volatile legacy unless phase 0      moves it aside, serves what it read;     names the recovery
//	    marked the whole file) and cannot be     never a newer schema's, nor a file of    that loses nothing
//	    read in full                             another type)
//	 5  elsewhere, unreadable in full            moves it aside, uses what it read;       Quarantined, Errors
//	                                             refuses if it says legacy is stale       ErrUnsafeRestore
//	 6  a side the phase must serve from         refuses, in every mode                   the error
//	    cannot be read at all
//	 7  Meta.Behind marks the whole file (a      the checkpoint is behind legacy (on:     Stale
//	    phase-0 run over a durable legacy that   the mark)
//	    differed from it, an incomplete
//	    listing, a repair); or phase 0 marked
//	    the keys it wrote                        legacy decides those keys only (on: the
//	                                             keyed mark)
//	 8  phase 1, and the file differs from       reports it                               Stale
//	    what legacy makes it
//	 9  file by phase 3, explicit legacy, a      serves the checkpoint, rewrites legacy   LegacyStale
//	    phase that writes legacy                 (on: the header's phase); refuses if a   ErrUnsafeRestore
//	                                             side is incomplete or the file behind
//	10  phase 3, checkpoint marked (rule 7)      refuses (on: the mark)                   ErrStale
//	11  a volatile legacy                        serves the checkpoint with what legacy   -
//	                                             holds, refills legacy (whole-file
//	                                             phase-0 mark: rule 13's way)
//	12  phase 0                                  serves legacy                            -
//	13  phase 1                                  legacy decides which entries exist,      Dropped, Orphaned
//	                                             within rule 21
//	14  phase 2, checkpoint missing, moved       as phase 1                               Dropped, Backfilled
//	    aside, of an earlier boot or marked
//	15  phase 2, legacy not listed               serves the checkpoint                    Errors
//	16  phase 2 otherwise                        reconciles the checkpoint with legacy    -
//	17  phase 3                                  serves the checkpoint, and what a        Backfilled, Shadow
//	                                             configured legacy holds that it lacks
//	                                             (not an explicit one phase 3 may have
//	                                             left behind); compares the rest
//	18  both hold it, Equal says the same        the checkpoint's record (observing), or  -
//	                                             legacy's key (explicit)
//	19  both hold it, values differ              Merge decides (default: legacy's);       Diverged
//	                                             marked: legacy's
//	20  only legacy holds it                     serves it                                Backfilled
//	21  only the checkpoint holds it             drops it for a durable legacy listed in  Dropped, Orphaned,
//	                                             full, or where phase 0 marked it (on:    Pruned, Errors
//	                                             legacy holds every acknowledged write;
//	                                             a marked one a partial listing hides
//	                                             is not served, nor dropped);
//	                                             keeps it as an orphan for an observing
//	                                             legacy (PruneOrphans: drops it) and on a
//	                                             partial listing, quietly for a volatile
//	                                             one (on: nothing - silence is no
//	                                             evidence); a marked entry a volatile
//	                                             legacy lost is named (LostError)
//	22  two keys Match calls one entry; or       keeps one the same way at every          Errors, Dropped
//	    (Config.Unique) two entries sharing a    restore; drops an entry whose part an
//	    part of their values                     entry both sides show live holds (on:
//	                                             listed and held); otherwise serves all
//	                                             (ErrValueShared), the part stays taken
//	23  an explicit legacy, a phase that         writes it in line with what is served:   LegacyWrites
//	    writes it                                all of it if stale or volatile
//	24  the checkpoint was moved aside           replaced by what is served               CheckpointRewritten
//	25  what the checkpoint should hold          saves it before Restore returns          CheckpointRewritten
//	    changed, or it does not record the
//	    phase where the next run must know it
//	26  every save; every phase-0 write          records the phase, and a mark where the  Behind
//	                                             checkpoint may lack what legacy holds:
//	                                             the keys phase 0 writes (before legacy
//	                                             has them), the whole file after an
//	                                             incomplete listing or over a durable
//	                                             legacy phase 0 finds different
//
// # What holds
//
// Any sequence of deployments over phases 0 to 3 (single steps, skipped
// steps, downgrades of any size, crashes and reboots in between) restores
// exactly the acknowledged state, keys and values included, or refuses with
// a clear error, provided that:
//
//   - phase 3 never follows the old binary's phase 0 without a phase 1 or
//     2 run between (this package's phase 0 marks what it writes, and the
//     whole file over a durable legacy it finds different, and phase 3
//     then refuses), nor, with an explicit legacy, the old binary directly
//     follows phase 3;
//   - with a volatile legacy, the old binary is not followed by this
//     package in any phase (roll back to this package's phase 0 instead,
//     which loses only what it wrote, and names it: LostError);
//   - a boot epoch (checkpoint.WithBootID) is on exactly when the state dies
//     with a reboot;
//   - every side restore reads can be read in full, or what cannot is
//     reported and kept where the checkpoint holds it (rules 4, 5 and 21);
//   - a write that failed with ErrOutcomeUnknown may or may not be served,
//     until a later acknowledged write to the entry settles it;
//   - and save for the open gaps the Caveats name.
//
// For an observing legacy, an entry only legacy holds is served as legacy
// records it, and an orphan may be served until its DEL comes. With
// Config.Unique, a restore in phases 1 to 3 over a legacy it could list
// drops an entry whose part an entry both sides show live holds, and
// serves and reports the rest (ErrValueShared); phase 0, a volatile legacy
// and a listing that failed report it.
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
//   - A DEL the Store acknowledged whose sandbox the runtime still lists
//     when the daemon restarts is served again (a backfill, reported as
//     one) until a DEL with its key, or a prune: its address leaks, and is
//     never handed out twice. A key added again meanwhile is served with
//     the listed, older value (the default Merge), and an ADD not listed
//     yet that took its address can lose it at the restore after next, to
//     the backfilled entry, which then counts as held (rule 22). Keys and
//     addresses not reused while a DEL runs (CRI's sandbox IDs, an
//     allocator's cool-down, as the VPC CNI's) rule the last two out.
//     (containerd 1.6 lists a sandbox NOTREADY while its DEL runs, and
//     source/cri lists only READY ones.)
//   - Where Config.Unique finds an entry only the checkpoint holds and one
//     only legacy lists sharing a part (an ADD the runtime has not listed
//     yet beside a DEL it has not finished, or the old binary's reuse of a
//     deleted entry's address), both are served and reported
//     (ErrValueShared): the part stays taken. The next restore may decide,
//     once the one it backfilled stands in the checkpoint.
//   - Open gaps, found by the node-world checker (internal/robustness,
//     node_gaps_test.go) and left for a later change: a legacy written in
//     place and torn by a crash can be served (no intent is recorded
//     before a legacy write); a checkpoint this build cannot read is
//     rebuilt from a legacy that may not show everything (an ADD the
//     runtime has not listed yet, an entry a partial listing hid); phase 0
//     serves only what legacy shows, and its ADD over an observing legacy
//     is held by no side until the runtime lists it; an entry only legacy
//     holds that a partial listing hides is not served (Strict refuses);
//     a repaired file over a registry serves what a dropped record
//     deleted.
//   - Values are not copied; see Store. Report key lists are in no
//     particular order.
package migrate
