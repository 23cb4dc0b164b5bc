// Package migratetest proves an expand/contract rollout safe for your own
// adapters, and provides fakes for the legacy side, as net/http/httptest
// does for HTTP and testing/fstest for file systems.
//
// [Check] (or [Matrix], its *testing.T helper) drives a Store configured by
// your [Factory] - your key type, your Match, Merge and Strict - through
// every sequence of phases 0 to 3 up to a length (1,364 sequences for the
// default 5). Between steps it restarts cleanly, crashes (no Close, and
// sometimes in the middle of a write, keeping only what was durable at that
// instant) or reboots (the node's state dies, the boot ID changes, a tmpfs
// checkpoint is lost). In each step it makes seeded random writes, with
// injected failures of either side and of both (a write one side refuses
// whose undo on the other fails too).
//
// # The oracle
//
// After every restore, what is served must equal what was acknowledged,
// keys and values included (reflect.DeepEqual), or Restore must have
// refused where migrate's package documentation says it must; a refusal
// must change neither side. The exceptions are exactly the ones that
// documentation allows, each tracked by identity:
//
//   - a write whose outcome is not known (a crash cut it short, or it failed
//     with migrate.ErrOutcomeUnknown) leaves its entry in any of its states
//     before or after;
//   - an entry a partial listing hid may be missing until a listing reads it
//     in full;
//   - a legacy that observes (Config.View) shows an entry the checkpoint
//     never held as View shows it, and an orphan the Store kept and reported
//     may be served until its delete;
//   - a checkpoint moved aside (reported) takes with it what only it held.
//
// After a refusal the harness does what an operator would (rolls forward to
// the newer build, runs phase 2 once before phase 3, moves a corrupt file
// aside) and goes on; Result.Refused counts these by reason. A violation
// fails with the shortest failing sequence, its seed, and a trace of every
// step.
//
// # The world
//
// A phase-0 step is the old binary, which knows nothing of the checkpoint
// (unless Config.NewBinaryInPhase0). The sequences outside the promise -
// phase 3 directly after the old binary's phase 0, the old binary directly
// after phase 3 with a legacy the Store writes, and with a volatile legacy
// phases 1 to 3 directly after the old binary - run too, and are counted in
// Result.Unjudged, not judged.
//
// Config widens the world: an explicit legacy (Config.Explicit) changed by
// the old binary in between, partial listings (Config.PartialListings), a
// binary rollback across a schema bump (Config.SchemaBumps: some steps run
// an older build whose schema is 1 where the newer one's is 2), corrupt
// checkpoints (Config.Corruption), a legacy that does not survive a restart
// (Config.Volatile), a checkpoint on tmpfs (Config.EphemeralCheckpoint).
// Two fields bring in more of your binary: Config.CheckpointOptions, the
// options it opens its checkpoint with (a validation, a schema and its
// upgrades), and Config.OpenLegacy, your own legacy store (a directory, an
// older file format) in place of the Explicit fake, kept in step with it.
//
// The fakes: [Implicit] is a legacy source that changes only from outside,
// like CRI; [Explicit] is one the Store writes, like a proxy's registry.
// Both fail on demand. checkpoint.Memory is the checkpoint fake, and
// package checkpoint/checkpointtest injects its faults. Counts of injected
// failures mean the same everywhere (Implicit.FailList, Explicit.FailWrites,
// checkpointtest.FailSaves): n > 0 fails the next n calls, n < 0 every call
// from now on, n == 0 none.
//
// CheckCheckpoint checks a Checkpoint of your own against what
// migrate.Checkpoint says a Store relies on (that it keeps Meta.Behind, for
// one).
//
// # The node as oracle
//
// [Node] is an oracle that does not know the restore rules: it knows which
// holders exist on the node (pods, VMs), what each holds, which writes were
// acknowledged and which a crash left unsettled. [Node.Check] judges what a
// Store serves against it after every restore and every acknowledged
// write: no acknowledged entry whose holder exists is missing (unless
// Restore refused); with Node.Unique, no part of a value is served to two
// live holders, nor free while a live holder uses it; nothing is served
// that no acknowledged write or legacy record produced (nothing torn,
// nothing invented). An entry served for a holder that is gone is a leak,
// allowed only where the Report names it. Drive your own adapters through
// the events of your node (your runtime's listing lag, your legacy's torn
// writes) and tell the Node what happened; phaseshift's own node world is
// internal/robustness/node_world_test.go.
//
// # Caveats
//
//   - The workload is sequential: concurrency is covered by the migrate
//     package's own tests, not here.
//   - A crash mid-write is modelled at the boundaries between durable
//     writes of the fakes; what happens inside one save is the checkpoint
//     package's business (and its tests').
//   - With Config.OpenLegacy, a crash is played on the model: at the next
//     start the harness writes your store back to what the model held at
//     the crash instant, and it closes your store even after a crash. So
//     whether a write your store acknowledged is durable (a store that
//     saves only at Close passes here), and what it leaves after a real
//     crash inside one of its own writes, are for its own tests.
//   - The harness judges entries by your Config.Match: a Match that joins
//     entries that are distinct for you (two containers) is not caught
//     here, since what the Store serves and what the harness expects are
//     joined alike. Test Match on its own: keys of different entries must
//     not match.
//   - The Implicit fake lists an acknowledged write at once and a full
//     listing never misses a live entry. A real observing legacy may list
//     an entry only some time after the write that made it returned (CRI
//     lists a sandbox once its ADD returned), so what depends on that lag
//     is not tested here: an exec'd plugin over such a legacy needs
//     migrate.Config.ShortLived (which then refuses it in phases 0 to 2),
//     and migrate.Config.PruneOrphans drops what it has not listed yet.
//   - A legacy listing that fails entirely is not injected: phases 0 and 1
//     refuse it by design, and phase 2 serves the checkpoint as it is.
//   - Every run is deterministic for its seed; different seeds explore
//     different workloads (TestMatrixSeeds in this package's tests runs
//     many).
package migratetest
