// Package robustness holds phaseshift's crash, power-loss, fault-injection
// and bad-input tests, and PowerFS, the file system that models a power
// cut under a real checkpoint.File (through the internal/fsys seam).
//
// The tests drive the real packages end to end: writer processes killed
// with SIGKILL and restarted (TestKillWriter, TestLockOneOwner, with and
// without the checkpoint's journal), power cut before every file-system
// call of a save, of a journal append and of a compaction (TestPowerCut),
// faults on each step of Save and Load under a Store
// (TestSaveFaultsThroughTheStore, TestLoadFaultsThroughTheStore,
// TestJournalFaultsThroughTheStore), configuration mistakes, values that
// cannot be encoded, random operation sequences against a map model
// (FuzzStoreOps), arbitrary checkpoint bytes, legacy lists and options at
// Restore against a model of the restore rules written from migrate's docs
// (FuzzRestore), random rollouts of up to eight steps (this library in
// phases 0 to 3 and the old binary, over an explicit, an observing and a
// volatile legacy, with Match re-keys, crashes between a step's durable
// writes, reboots, the journal and the schema going up and down, injected
// faults and a corrupt checkpoint) against a model of the acknowledged
// state written from the docs, shrunk to the shortest failing rollout
// (TestRollout), file permissions, symlinks and secrets in logs, keys
// that do not read back from JSON (TestStoreRefusesKeysThatDoNotReadBack),
// values in every encode and decode error (TestNoValueInStoreErrors),
// entries with fields the binary does not know
// (TestStoreTreatsUnknownFieldsAsANewerSchema), and a checkpoint or its
// directory removed under an open File (power-cut scenarios). Each
// test's comment says how it was checked to fail when the property it
// guards is broken. Long variants run behind flags (-robustness.seed
// repeats a logged seed):
//
//	go test ./internal/robustness -run TestKillWriter -robustness.kills=5000
//	go test ./internal/robustness -run TestStoreOps -robustness.seeds=5000
//	go test ./internal/robustness -run 'TestRollout$' -robustness.rollouts=1500
//	go test ./internal/robustness -run 'TestRollout$' -robustness.rollout.seed=N -v
//	go test ./internal/robustness -run '^$' -fuzz FuzzStoreOps
//	go test ./internal/robustness -run '^$' -fuzz FuzzRestore
//
// By default the package runs 60 kills, 300 op sequences and 150
// rollouts in about 15 seconds on 2 cores; -short cuts that to 32 kills,
// 60 sequences and 50 rollouts, and PHASESHIFT_LONG_TESTS=1 (package
// internal/testsize; .ci/run sets it for a step of its own) raises it to
// 300 kills, 3,000 sequences and 1,500 rollouts. TestRollout reports the
// first failure of each rule and legacy kind, shrunk;
// -robustness.rollout.all shrinks and reports every failing rollout.
//
// # Caveats
//
// What is proven, and what is not:
//
//   - Power loss is simulated, not real: PowerFS models what a file system
//     may keep of unsynced data and directory entries (drop everything,
//     keep everything, keep the first half in order, or any per-entry
//     combination), which covers POSIX's promises and ext4/xfs journaling;
//     it does not model disks that lie about fsync, bit rot, or a file
//     system that loses an fsynced file.
//   - Crash tests kill processes, so the page cache survives them: they
//     prove the write protocol and group commit (nothing acknowledged
//     before it is on the file system, never a torn file), not fsync; the
//     power-cut tests prove fsync ordering.
//   - Kill instants are random (seeded, but timing makes runs
//     unrepeatable); a pass says nothing was found in that many kills.
//   - An Update is atomic on the checkpoint only: an explicit legacy takes
//     one write per key, so after a crash it may hold part of one. And in
//     phase 2 an in-flight write that reached only the checkpoint is served
//     after a restart while legacy keeps the old value, which a later
//     restore (a downgrade, or a backfill after an in-flight delete) can
//     serve again: the crash test checks phase 2 and phase changes with
//     "the last acknowledged write wins, an in-flight one may or may not",
//     and phases 1 and 3 with the stricter "what a restore served stays".
//   - TestRollout plays a seed the same way every time, except for the
//     order in which package migrate ranges over maps (which of two legacy
//     keys of one entry it keeps, which key of an Update it writes
//     first): a failure that hangs on such a choice may take a few runs to
//     come back, so the shrinker plays each candidate six times.
//   - Security checks cover the files phaseshift creates and the symlinks
//     it may meet at the names it uses; the directory itself is trusted
//     (its owner and mode are not checked), as package checkpoint says.
package robustness
