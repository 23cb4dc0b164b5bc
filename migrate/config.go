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
// checkpoint.Memory provide.
//
// BootID and Journal are what two of Restore's safety checks read, so they
// are part of the interface rather than optional: a wrapper around a File
// (for metrics, a fake) that did not forward them would silently turn the
// checks off, so it does not compile instead.
//
//   - BootID gives the boot the checkpoint runs in (checkpoint.WithBootID);
//     when it is not empty the boot epoch is on: a checkpoint written in
//     another boot is stale and discarded (its state died with the reboot),
//     one that records no boot is kept. "" turns the epoch off, for state
//     that survives a reboot.
//   - Journal tells Restore of a torn journal record that Load discarded
//     (checkpoint.WithJournal), which it reports in Report.Errors; a
//     checkpoint without a journal returns the zero JournalStatus.
//
// A Store also uses these optional capabilities, which package checkpoint
// defines, when the value has them (File and Memory have all three):
// checkpoint.Committer saves only what a write changed, instead of building
// a whole Snapshot per write; checkpoint.Sizer gives Stats.CheckpointBytes;
// io.Closer is called by Store.Close (for a File, it releases the lock). A
// wrapper that does not forward one loses only what it gives; assert the
// ones it must keep, as var _ checkpoint.Committer[K, V] = (*myCheckpoint)(nil).
type Checkpoint[K comparable, V any] interface {
	Load(ctx context.Context) (checkpoint.Snapshot[K, V], error)
	Save(ctx context.Context, s checkpoint.Snapshot[K, V]) error
	Quarantine(ctx context.Context) (string, error)
	BootID() string
	Journal() checkpoint.JournalStatus
}

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

	// Merge chooses the value of an entry both sides hold with values that
	// Equal calls different, in phases 1 and 2 alike; the key comes with
	// the value chosen. Nil means PreferLegacy, for both kinds of legacy:
	// what legacy records differently from the checkpoint is newer (a
	// write an old binary or a phase-0 run acknowledged since, which a
	// legacy the Store writes holds and one that observes sees), or the
	// trace of a write a crash cut short, which was never acknowledged and
	// may go either way. Legacy's record wins, placeholders and all, and
	// the checkpoint is rewritten with it, so that the next restore finds
	// the two agreeing. A Merge that prefers the checkpoint keeps its richer
	// record but lets an old binary's change lose, and, for a legacy the
	// Store cannot write, reports the entry diverged at every restore. Over
	// a checkpoint marked behind legacy Merge is not asked: legacy's record
	// wins (see the package documentation).
	//
	// An entry whose values agree is served with the checkpoint's key and
	// value for an observing legacy (its record is richer: CRI knows no
	// interface name), and with legacy's key for one the Store writes.
	Merge func(key K, fromCheckpoint, fromLegacy V) V

	// Equal tells whether two values are the same, to report divergence.
	// For a legacy that only observes it is required (New refuses one
	// without it): compare what legacy records (CRI: the IP), so that its
	// poorer view of an entry agrees with the checkpoint's. Nil, for a
	// legacy the Store writes, which holds whole values, means
	// reflect.DeepEqual.
	Equal func(a, b V) bool

	// Strict makes Restore fail on anything it cannot read, in every
	// phase, before it changes anything: a corrupt or newer checkpoint, an
	// entry that does not decode, a legacy listing that fails or is
	// partial. By default Restore moves an unreadable checkpoint aside
	// (Report.Quarantined), skips what it cannot read, reports it in
	// Report.Errors and goes on; it never needs a second call.
	//
	// Either way Restore refuses where going on would serve state it knows
	// to be stale or would destroy the only copy: ErrStale (phase 3 on a
	// checkpoint behind legacy), ErrUnsafeRestore (legacy is stale and
	// cannot be read or healed in full, or the checkpoint that says so
	// cannot be read in full), checkpoint.ErrNewerSchema where the
	// checkpoint is the only copy (phase 3, or VolatileLegacy), and a side
	// the phase must serve from that cannot be read at all (legacy in
	// phases 0 and 1, a checkpoint read failing with an I/O error).
	Strict bool

	// DiscardUnreadableCheckpoint lets Restore serve less than the only
	// copy of the state. Where the checkpoint is that copy (phase 3, and
	// every phase with VolatileLegacy), a checkpoint that cannot be read in
	// full (corrupt, of another schema, with entries that do not decode, a
	// damaged journal) fails Restore by default and is left as it is, for
	// an operator to repair (phaseshift restore-prev) or to roll forward
	// to. With this option Restore moves it aside instead and serves what
	// it could read: the entries it could not read are lost to the daemon
	// until someone puts the file back. Strict takes precedence.
	DiscardUnreadableCheckpoint bool

	// PruneOrphans drops, in phase 2 and for a legacy that only observes,
	// entries the checkpoint has and a complete legacy listing lacks,
	// instead of keeping them (Report.Pruned instead of Report.Orphaned).
	// Keeping may leak an entry (an IP nobody uses); dropping may hand it
	// out twice if legacy missed it. Keep is the default. A legacy the
	// Store writes needs no pruning: what only the checkpoint has is
	// dropped (Report.Dropped), because that legacy holds every
	// acknowledged write. Nothing is ever dropped on the evidence of a
	// partial listing.
	PruneOrphans bool

	// VolatileLegacy says legacy does not survive a restart (a registry
	// kept in memory): after one it is empty, so Restore never takes its
	// emptiness as evidence. Phases 1 and 2 serve the checkpoint (with
	// whatever legacy holds) and, for a legacy the Store writes, refill it
	// with what is served (Report.LegacyWrites); nothing is reported as
	// orphaned. Phase 3 serves the checkpoint and does not compare it with
	// legacy. Phase 0 with a Checkpoint does as phases 1 and 2 at restore,
	// then writes legacy only, as the old binary did: its state dies with
	// it, so the next start lets legacy (empty) decide which entries exist
	// (Report.Stale).
	VolatileLegacy bool

	// ShortLived says the Store lives for one invocation: an exec'd CNI
	// plugin restores before every write and exits after it. Such a process
	// can only trust a legacy whose writes the next process sees: one the
	// Store writes (host-local's files, a registry on disk). A legacy that
	// observes lags (CRI lists a sandbox only after the ADD that created it
	// returned), so in the phases that take its word on which entries
	// exist, every process would hand out again what the previous one just
	// acknowledged; New refuses that (ErrInvalidConfig), and a
	// VolatileLegacy in phase 0, which would start empty at every exec.
	// Run a daemon that restores once instead, or use phase 3.
	ShortLived bool

	// Verify makes phase 0 read the checkpoint too and report how it
	// differs from legacy (Report.Shadow), without changing what is served.
	// (Phase 3 compares with legacy whenever Legacy is set.)
	Verify bool

	// Version is the program's version, recorded in the checkpoint as
	// Meta.Writer, so that an operator can tell which build wrote it.
	Version string

	// Logger receives the restore report and write failures: keys, counts
	// and paths, never values. Nil means no logging.
	Logger *zap.Logger
}

// PreferCheckpoint is a Merge under which the checkpoint's value wins.
func PreferCheckpoint[K comparable, V any](_ K, fromCheckpoint, _ V) V { return fromCheckpoint }

// PreferLegacy is the default Merge: legacy's value wins.
func PreferLegacy[K comparable, V any](_ K, _, fromLegacy V) V { return fromLegacy }

// validate reports configuration mistakes with the fix in the message.
func (c *Config[K, V]) validate() error {
	if !c.Phase.valid() {
		return fmt.Errorf("migrate: %w: Config.Phase %d is not a phase: use 0 (legacy), 1 (expand), 2 (migrate) or 3 (contract); ParsePhase reads one from a flag", ErrInvalidConfig, int(c.Phase))
	}
	if isNil(c.Checkpoint) {
		c.Checkpoint = nil
		if c.Phase.WritesCheckpoint() {
			return fmt.Errorf("migrate: %w: phase %d (%s) needs Config.Checkpoint: open one with checkpoint.Open, or run phase 0 to use legacy only", ErrInvalidConfig, int(c.Phase), c.Phase)
		}
	}
	if isNil(c.Legacy) {
		c.Legacy = nil
		if c.Phase != PhaseContract {
			return fmt.Errorf("migrate: %w: phase %d (%s) needs Config.Legacy, the source the previous version restored from: only phase 3 (contract) runs without it", ErrInvalidConfig, int(c.Phase), c.Phase)
		}
	}
	if err := c.validateShortLived(); err != nil {
		return err
	}
	return c.validateLegacyKind()
}

// validateLegacyKind refuses what restore could only get wrong: a legacy
// that only observes, compared with the checkpoint without being told what
// it can see, and a key type the checkpoint cannot store.
func (c *Config[K, V]) validateLegacyKind() error {
	if c.Checkpoint == nil {
		return nil // nothing to compare, nothing to store (the old binary's phase 0)
	}
	if err := checkpoint.CheckKeyType[K](); err != nil {
		return fmt.Errorf("migrate: %w: %w", ErrInvalidConfig, err)
	}
	if _, writes := c.Legacy.(source.Writer[K, V]); c.Legacy != nil && !writes && c.Equal == nil {
		return fmt.Errorf("migrate: %w: Config.Equal is required for a legacy that only observes (it is not a source.Writer, like CRI): such a legacy records less than the checkpoint (CRI: the sandbox's IP, not the interface or gateway), so the default, reflect.DeepEqual, would report every entry diverged at every restore and let its poorer records win; compare what legacy records, e.g. func(a, b Alloc) bool { return a.IP == b.IP }", ErrInvalidConfig)
	}
	return nil
}

// validateShortLived refuses a legacy a process that lives for one
// invocation cannot trust (see ShortLived).
func (c *Config[K, V]) validateShortLived() error {
	if !c.ShortLived || c.Phase == PhaseContract || c.Legacy == nil {
		return nil
	}
	if _, writes := c.Legacy.(source.Writer[K, V]); !writes && !c.VolatileLegacy {
		return fmt.Errorf("migrate: %w: Config.ShortLived with a legacy that only observes, in phase %d (%s): every process restores from it, and its listing lags the writes the previous process acknowledged (CRI lists a sandbox after its ADD returned), so they would be handed out again; run a daemon that restores once, or use phase 3", ErrInvalidConfig, int(c.Phase), c.Phase)
	}
	if c.VolatileLegacy && c.Phase == PhaseLegacy {
		return fmt.Errorf("migrate: %w: Config.ShortLived with a VolatileLegacy in phase 0: every process would start with an empty legacy; use phase 1 or later", ErrInvalidConfig)
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
