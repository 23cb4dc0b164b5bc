// Package migratetest proves an expand/contract rollout safe for your own
// adapters, and provides fakes for the legacy side, as net/http/httptest
// does for HTTP and testing/fstest for file systems.
//
// [Check] (or [Matrix], its *testing.T helper) drives a Store that your
// [Factory] builds - your key type, your Match and Merge, your legacy
// adapter's behaviour - through every sequence of phases 0 to 3 up to a
// length (1,364 sequences for the default 5). Between steps it restarts
// cleanly, crashes (no Close, and sometimes in the middle of a write, keeping
// only what was durable at that instant) or reboots (the node's state dies,
// the boot ID changes, a tmpfs checkpoint is lost). In each step it makes
// seeded random writes, with injected failures of either side. After every
// restore it checks that what is served is exactly what was acknowledged:
// nothing lost, nothing invented, no stale value. An entry the Store kept
// and reported as an orphan counts as kept. It fails with the shortest
// failing sequence, its seed, and a trace of every step.
//
// The world is modelled as DESIGN.md describes it: a phase-0 step is the
// old binary, which knows nothing of the checkpoint (unless
// Config.NewBinaryInPhase0). The transitions DESIGN.md does not promise - phase 3
// directly after phase 0, and for a legacy the Store writes, phase 0 (the
// old binary) directly after phase 3 - run too, and are counted as refused
// or as served wrong state in Result, never reported as silent successes.
//
// The fakes: [Implicit] is a legacy source that changes only from outside,
// like CRI; [Explicit] is one the Store writes, like a proxy's registry.
// Both fail on demand. checkpoint.Memory is the checkpoint fake.
//
// # Caveats
//
//   - The workload is sequential: concurrency is covered by the migrate
//     package's own tests, not here.
//   - A crash mid-write is modelled at the boundaries between durable
//     writes of the fakes; what happens inside one save is the checkpoint
//     package's business (and its tests').
//   - Restore faults (a legacy listing that fails) are not injected: their
//     outcome depends on Config.Strict by design.
//   - Values are compared with Config.Equal; for an implicit legacy, the
//     value legacy shows (Config.View) is accepted too.
package migratetest
