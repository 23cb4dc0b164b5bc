package migrate

import (
	"context"
	"fmt"
	"reflect"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/source"
)

// Checkpoint is the checkpoint side of a Store: what checkpoint.File and
// checkpoint.Memory provide. A Store uses these optional methods when they
// are there:
//
//   - Commit(ctx, checkpoint.Meta, []checkpoint.Change[K, V]) error saves only
//     what a write changed, instead of building a whole Snapshot per write;
//   - BootID() string gives the current boot for the boot epoch when
//     Config.BootID is empty;
//   - Close() error is called by Store.Close.
type Checkpoint[K comparable, V any] interface {
	Load(ctx context.Context) (checkpoint.Snapshot[K, V], error)
	Save(ctx context.Context, s checkpoint.Snapshot[K, V]) error
	Quarantine(ctx context.Context) (string, error)
}

// committer is the optional incremental save of checkpoint.File and
// checkpoint.Memory.
type committer[K comparable, V any] interface {
	Commit(ctx context.Context, m checkpoint.Meta, changes []checkpoint.Change[K, V]) error
}

type bootIDer interface{ BootID() string }

// Config configures a Store. Its zero values are the defaults, except that
// Legacy and Checkpoint are required where the phase uses them.
type Config[K comparable, V any] struct {
	// Phase decides where Restore reads from and where writes go.
	Phase Phase

	// Legacy is what the previous version trusted. Required in phases 0
	// to 2; in phase 3 it is optional and, when set, Restore cross-checks
	// the checkpoint against it and reports differences. If it also
	// implements source.Writer, the Store writes it in phases 0 to 2.
	Legacy source.Reader[K, V]

	// Checkpoint is the new source of truth, usually a checkpoint.File.
	// Required in phases 1 to 3. In phase 0 it is optional: when set,
	// Restore marks the file as superseded by a phase-0 run, so that a
	// later phase 3 refuses it instead of serving stale state, and it
	// restores from it when it says legacy is stale.
	Checkpoint Checkpoint[K, V]

	// Match maps a key to what identifies its entry across sources: keys
	// equal after Match are one entry. Get, Delete and Restore use it, so a
	// key learned from legacy with placeholder fields is found with the
	// real key (IPAM: match on the container ID only). Two keys that name
	// different entries must not match. Nil means keys are compared as
	// they are.
	Match func(K) K

	// Merge chooses the value when the checkpoint and legacy both hold an
	// entry in phase 2. Nil means PreferCheckpoint. A legacy side that the
	// Store writes explicitly and that holds whole values is better served
	// by PreferLegacy: a downgrade to phase 0 may have changed values that
	// the checkpoint never saw.
	Merge func(key K, fromCheckpoint, fromLegacy V) V

	// Equal tells whether two values are the same, to report divergence.
	// Nil means reflect.DeepEqual.
	Equal func(a, b V) bool

	// Strict makes Restore fail on anything it cannot read: an unreadable
	// checkpoint or entry, a partial or failed legacy listing. By default
	// Restore logs the problem, reports it in Report.Errors, skips what it
	// cannot read and goes on. Either way Restore refuses (ErrStale,
	// ErrUnsafeRestore) when every side it could serve is known to be
	// stale, and fails when the side its phase restores from cannot be
	// read at all.
	Strict bool

	// PruneOrphans drops, in phase 2, entries the checkpoint has and legacy
	// does not, instead of keeping them (Report.Pruned instead of
	// Report.Orphaned). Keeping may leak an entry (an IP nobody uses);
	// dropping may hand it out twice if legacy is incomplete. Keep is the
	// default.
	PruneOrphans bool

	// Verify makes phase 0 read the checkpoint too and report how it
	// differs from legacy, without changing what is served (phase 1
	// always compares, phase 3 whenever Legacy is set).
	Verify bool

	// Writer is the version of the program, recorded in the checkpoint.
	Writer string

	// BootID enables the boot epoch: a checkpoint written in another boot
	// is stale and discarded (its state died with the reboot). Use
	// checkpoint.KernelBootID. When empty, the boot ID of the Checkpoint
	// is used if it has one: opening a checkpoint.File with
	// checkpoint.WithBootID is enough to turn the epoch on.
	BootID string

	// Logger receives the restore report and write failures: keys, counts
	// and paths, never values. Nil means no logging.
	Logger *zap.Logger
}

// PreferCheckpoint is the default Merge: the checkpoint's value wins.
func PreferCheckpoint[K comparable, V any](_ K, fromCheckpoint, _ V) V { return fromCheckpoint }

// PreferLegacy is a Merge under which legacy's value wins.
func PreferLegacy[K comparable, V any](_ K, _, fromLegacy V) V { return fromLegacy }

// validate reports configuration mistakes with the fix in the message.
func (c *Config[K, V]) validate() error {
	if !c.Phase.valid() {
		return fmt.Errorf("migrate: Config.Phase %d is not a phase: use 0 (legacy), 1 (expand), 2 (migrate) or 3 (contract); ParsePhase reads one from a flag", int(c.Phase))
	}
	if isNil(c.Checkpoint) {
		c.Checkpoint = nil
		if c.Phase.WritesCheckpoint() {
			return fmt.Errorf("migrate: phase %d (%s) needs Config.Checkpoint: open one with checkpoint.Open, or run phase 0 to use legacy only", int(c.Phase), c.Phase)
		}
	}
	if isNil(c.Legacy) {
		c.Legacy = nil
		if c.Phase != PhaseContract {
			return fmt.Errorf("migrate: phase %d (%s) needs Config.Legacy, the source the previous version restored from: only phase 3 (contract) runs without it", int(c.Phase), c.Phase)
		}
	}
	return nil
}

// isNil catches both a nil interface and one holding a nil pointer, which
// would otherwise panic at the first call.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Slice, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}
