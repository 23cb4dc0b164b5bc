package migrate

import "errors"

// Errors returned by New.
var (
	// ErrInvalidConfig is returned by New when the Config cannot work: a
	// phase that is not one, a side the phase needs that is missing, or,
	// with ShortLived, a legacy a one-invocation process cannot trust. The
	// message says what to set.
	ErrInvalidConfig = errors.New("invalid configuration")
)

// Errors returned by writes (Put, Delete, Update, DeleteFunc, Replace).
var (
	// ErrCheckpointWrite is returned by a write when the checkpoint could
	// not be saved. Memory is unchanged, the checkpoint holds the previous
	// commit, and an explicit legacy write already made was compensated
	// (unless the error also matches ErrOutcomeUnknown).
	ErrCheckpointWrite = errors.New("checkpoint write failed")

	// ErrLegacyWrite is returned by a write when the legacy source refused
	// it. Memory is unchanged and the checkpoint holds the previous commit
	// (unless the error also matches ErrOutcomeUnknown).
	ErrLegacyWrite = errors.New("legacy write failed")

	// ErrOutcomeUnknown is returned by a write, together with
	// ErrCheckpointWrite or ErrLegacyWrite, when one side failed and undoing
	// what the write had already made on the other side failed too. The
	// write was not applied to memory, but the error says which side may
	// still hold it: a later Restore may serve it or not, and a later write
	// to the same key settles it.
	ErrOutcomeUnknown = errors.New("outcome unknown")

	// ErrNotRestored is returned by writes before Restore has succeeded:
	// a write before restore could be overwritten by it.
	ErrNotRestored = errors.New("store not restored: call Restore first")

	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("store is closed")
)

// Errors returned by Restore.
var (
	// ErrAlreadyRestored is returned by a second Restore: restore runs once,
	// at start.
	ErrAlreadyRestored = errors.New("store already restored")

	// ErrStale is returned by Restore when the side the phase must serve
	// from is known to be stale and the phase has nowhere else to restore
	// from: phase 3 on a checkpoint that a phase-0 run has superseded.
	ErrStale = errors.New("state is stale")

	// ErrUnsafeRestore is returned by Restore when serving either side
	// would risk serving stale state: legacy is stale (the checkpoint was
	// written by phase 3) but it cannot be read or brought current, or the
	// checkpoint that knows this cannot be read.
	ErrUnsafeRestore = errors.New("restore would serve stale state")
)

// ErrValueShared is matched (errors.Is) by a Report.Errors entry that names
// entries served with a part of their values that Config.Unique says no two
// may share, where the sides do not say which is stale (rule 22): every one
// is served, so the part stays taken, and a later restore, once the
// runtime's listing has settled, may decide.
var ErrValueShared = errors.New("entries share a part of their values that no two may share (Config.Unique)")

// ErrWriteLost is matched (errors.Is) by a Report.Errors entry that names
// an entry whose last acknowledged write is known to be lost, so that
// Restore does not serve it: a *LostError. Nothing else is lost silently.
var ErrWriteLost = errors.New("an acknowledged write is lost")

// LostError names an entry whose last acknowledged write is lost, and why:
// phase 0 of this library wrote it to a legacy that does not survive a
// restart (Config.VolatileLegacy), which died with it. The checkpoint's
// older record of it is not served: the entry is reported, not guessed.
type LostError[K comparable] struct {
	Key K      // the entry's identity (Config.Match)
	Why string // what lost it
}

// Error names the key and why its write is lost; never a value.
func (e *LostError[K]) Error() string { return keyText(e.Key) + ": " + e.Why }

// Is reports whether target is ErrWriteLost.
func (e *LostError[K]) Is(target error) bool { return target == ErrWriteLost }
