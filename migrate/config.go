package migrate

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/logbridge"
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
// A Checkpoint of your own (another storage, or a wrapper that does not
// embed a File) must keep what Restore's rules rely on:
//
//   - Load returns what the last Save or Commit that returned nil stored,
//     after a restart too: the entries, and of the Meta the Phase, Behind,
//     BootID and Writer exactly as given. Phase says whether phase 3 wrote
//     it, which makes an explicit legacy stale (rules 9, 17, 25); Behind is
//     rule 26's mark, without which phase 3 serves a checkpoint that a
//     phase-0 run left behind legacy; BootID is rule 3's epoch. Seq, Format,
//     Schema and SavedAt are the Checkpoint's own: every save must increase
//     Seq (Restore names it in its messages).
//   - Save and Commit are atomic and durable: nil only once the whole of it
//     is on stable storage, and after an error the previous checkpoint is
//     still there (the Store's memory and the checkpoint never part).
//   - Load of a checkpoint that was never saved, or was moved aside, returns
//     an error matching checkpoint.ErrNotExist (rule 1). One it cannot read
//     matches checkpoint.ErrCorrupt, ErrNewerSchema, ErrOlderSchema or
//     ErrTypeMismatch, with
//     what it could read of the Meta, or checkpoint.ErrBadEntry with the
//     entries it could read (rules 4 and 5); any other error is taken as a
//     read that may work if retried, and fails Restore (rule 6).
//   - Quarantine moves the checkpoint aside, returns where, and Load then
//     returns ErrNotExist; Save may create a new one.
//   - BootID returns the same value for the life of the handle, and every
//     handle opened in one boot returns the same ("" for none); Journal
//     returns the torn record the last Load discarded, if any, or the zero
//     JournalStatus.
//
// migratetest.CheckCheckpoint checks these of your implementation (all but
// the failures, which it does not inject).
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
// Legacy and Checkpoint are required where the phase uses them. The rules
// the fields take part in are numbered in the package documentation
// ("Restore rules"); a field's doc says what it is for and why its default
// is what it is, and points to the rules rather than restating them.
type Config[K comparable, V any] struct {
	// Phase decides where Restore reads from and where writes go (the
	// table is on Phase).
	Phase Phase

	// Legacy is what the previous version trusted. Required in phases 0
	// to 2; in phase 3 it is optional, and when set phase 3 serves what it
	// holds that the checkpoint lacks and compares the rest (rule 17). An
	// explicit legacy (one that also implements source.Writer) is written
	// in phases 0 to 2; an implicit one never is.
	Legacy source.Reader[K, V]

	// Checkpoint is the new source of truth, usually a checkpoint.File.
	// Required in phases 1 to 3. In phase 0 it is optional: when set,
	// phase 0 marks the file behind legacy (rule 26), so that a later
	// phase 3 refuses it instead of serving stale state, and restores from
	// it when it says legacy is stale (rule 9).
	Checkpoint Checkpoint[K, V]

	// Match maps a key to what identifies its entry across sources: keys
	// equal after Match are one entry. Get, Delete and Restore use it, so a
	// key learned from legacy with placeholder fields is found with the
	// real key (IPAM: match on the container ID only; rule 22 for two keys
	// of one entry). Two keys that name different entries must not match.
	// Nil means keys are compared as they are.
	Match func(K) K

	// Merge chooses the value of an entry both sides hold with values that
	// Equal calls different (rule 19); the key comes with the value chosen.
	// Nil means PreferLegacy, for both kinds of legacy, because what legacy
	// records differently is newer (a write an old binary or a phase-0 run
	// acknowledged since: an explicit legacy holds it, an implicit one sees
	// it) or the trace of a write a crash cut short, which may go either
	// way; and because the checkpoint, rewritten with legacy's record,
	// then agrees with legacy at the next restore. A Merge that prefers the
	// checkpoint keeps its richer record, lets an old binary's change lose,
	// and, for an implicit legacy, which cannot be written back in line,
	// reports the entry diverged at every restore until its next write.
	Merge func(key K, fromCheckpoint, fromLegacy V) V

	// Equal tells whether two values are the same (rules 18 and 19).
	// Required for an implicit legacy, which records less than the
	// checkpoint: compare what legacy records (CRI: the IP), so that its
	// poorer view of an entry agrees with the checkpoint's; with a
	// Checkpoint configured, New refuses one without it (reflect.DeepEqual would call every entry diverged, and
	// let the poorer record win). Nil, for an explicit legacy, which holds
	// whole values, means reflect.DeepEqual.
	Equal func(a, b V) bool

	// Unique returns the parts of a value that no two entries may hold at
	// once: an allocator's addresses. Restore then takes a part held by
	// an entry both sides show live (legacy lists it and the checkpoint
	// holds it) as evidence that another entry holding it is stale, and
	// drops that one (rule 22); where no holder is shown live by both
	// sides, all are served and reported (ErrValueShared), so that the
	// part stays taken. Nil: Restore knows nothing of what values may
	// share, and serves what the rules say. Restore only: a write is the
	// allocator's own business. The parts are never logged.
	Unique func(V) []string

	// Strict makes Restore fail, before it changes anything, on anything it
	// cannot read, in every phase (rule 2). By default Restore moves an
	// unreadable checkpoint aside where another copy of the state is
	// current (rule 5), skips what it cannot read, reports it in
	// Report.Errors and goes on in one call; it refuses only where going
	// on would serve stale state or lose the only copy (rules 4, 5, 6, 9
	// and 10).
	Strict bool

	// DiscardUnreadableCheckpoint lets Restore serve less than the only
	// copy of the state: where the checkpoint is that copy and cannot be
	// read in full, Restore moves it aside and serves what it could read,
	// and the entries it could not read are lost to the daemon until
	// someone puts the file back (rule 4). By default Restore fails and
	// leaves every file as it was, for an operator to repair (phaseshift
	// restore-prev) or to roll forward to. Strict takes precedence.
	DiscardUnreadableCheckpoint bool

	// PruneOrphans drops, in phase 2 and for an implicit legacy, entries
	// the checkpoint has and a complete listing lacks, instead of keeping
	// them as orphans (rule 21). Keeping may leak an entry (an IP nobody
	// uses); dropping may hand it out twice if legacy missed it, so keep is
	// the default. An explicit legacy needs no pruning, and nothing is ever
	// dropped on the evidence of a partial listing.
	PruneOrphans bool

	// LegacyKind says what legacy is where the source cannot say it
	// itself (source.Kinded): source.Durable (a file, a database: it
	// survives a restart), source.Volatile (a registry in memory: it is
	// empty after every restart, and its emptiness is never evidence; the
	// checkpoint is then the only copy of the state, rules 4 and 11) or
	// source.Observing (kept current by someone else; a Reader that takes
	// no writes is one already). Zero: the source says. A source.Map says
	// Volatile; a Reader that also implements source.Writer and says
	// nothing is refused by New, which does not guess. A stated kind wins
	// over the source's between Durable and Volatile (a Map the program
	// keeps on disk itself is durable); Observing for a source.Writer, or
	// Durable or Volatile for a Reader that takes no writes, is an error.
	LegacyKind source.Kind

	// VolatileLegacy is LegacyKind: source.Volatile, as earlier releases
	// spelled it.
	VolatileLegacy bool

	// ShortLived says the Store lives for one invocation: an exec'd CNI
	// plugin restores before every write and exits after it. Such a process
	// can only trust a legacy whose writes the next process sees: an
	// explicit one (host-local's files, a registry on disk). An implicit
	// legacy that is not volatile lags (CRI lists a sandbox only after the
	// ADD that created it returned), so in the phases that take its word on
	// which entries exist (0 to 2), every process would hand out again what
	// the previous one just acknowledged: New refuses that
	// (ErrInvalidConfig), and a VolatileLegacy in phase 0, which would
	// start empty at every exec. Run a daemon that restores once instead,
	// or use phase 3.
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

	// Slog is Logger for a program that logs through log/slog: the same
	// lines, with the same keys, go to its handler at the matching levels.
	// Set one of the two: both is ErrInvalidConfig.
	Slog *slog.Logger
}

// logger is the one logger every line goes through: Logger, or Slog's
// handler behind a zap core; nil when neither is set.
func (c *Config[K, V]) logger() *zap.Logger {
	if c.Slog != nil {
		return logbridge.New(c.Slog)
	}
	return c.Logger
}

// PreferCheckpoint is a Merge under which the checkpoint's value wins.
func PreferCheckpoint[K comparable, V any](_ K, fromCheckpoint, _ V) V { return fromCheckpoint }

// PreferLegacy is the default Merge: legacy's value wins.
func PreferLegacy[K comparable, V any](_ K, _, fromLegacy V) V { return fromLegacy }

// validate reports configuration mistakes with the fix in the message.
func (c *Config[K, V]) validate() error {
	if c.Logger != nil && c.Slog != nil {
		return fmt.Errorf("migrate: %w: Config.Logger and Config.Slog are both set, and every line would be logged twice: pick one", ErrInvalidConfig)
	}
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
	if err := c.resolveKind(); err != nil {
		return err
	}
	if err := c.validateShortLived(); err != nil {
		return err
	}
	return c.validateLegacyKind()
}

// resolveKind settles what legacy is, from the source and from
// Config.LegacyKind and VolatileLegacy, and writes it back to both fields
// (VolatileLegacy is set exactly when legacy is volatile). It refuses a
// legacy the Store writes whose kind nothing says, Observing stated for a
// legacy that takes writes, and Durable or Volatile stated for one that
// takes none; between Durable and Volatile the stated kind wins.
func (c *Config[K, V]) resolveKind() error {
	if c.Legacy == nil {
		return nil
	}
	stated := c.LegacyKind
	if c.VolatileLegacy {
		if stated != source.Unknown && stated != source.Volatile {
			return fmt.Errorf("migrate: %w: Config.VolatileLegacy is set and Config.LegacyKind is %s: set one of them", ErrInvalidConfig, stated)
		}
		stated = source.Volatile
	}
	own := source.KindOf(c.Legacy)
	_, writes := c.Legacy.(source.Writer[K, V])
	kind := own
	switch {
	case stated == source.Observing && writes, stated != source.Unknown && stated != source.Observing && !writes:
		return fmt.Errorf("migrate: %w: Config.LegacyKind is %s, but legacy (%T) %s", ErrInvalidConfig, stated, c.Legacy, takesWrites(writes))
	case stated != source.Unknown:
		kind = stated
	}
	if kind == source.Unknown {
		return fmt.Errorf("migrate: %w: legacy (%T) takes the Store's writes, and whether it survives a restart cannot be told: set Config.LegacyKind to source.Durable (a file or a database: it holds every acknowledged write after a restart) or source.Volatile (a registry in memory: empty after every restart), or have the type implement source.Kinded; the two are restored differently, and a wrong guess loses state", ErrInvalidConfig, c.Legacy)
	}
	c.LegacyKind, c.VolatileLegacy = kind, kind == source.Volatile
	return nil
}

// takesWrites says whether a legacy implements source.Writer.
func takesWrites(writes bool) string {
	if writes {
		return "takes the Store's writes (it implements source.Writer): durable or volatile"
	}
	return "takes no writes (it is not a source.Writer): observing"
}

// validateLegacyKind refuses what restore could only get wrong: an implicit
// legacy compared with the checkpoint without being told what it can see,
// and a key type the checkpoint cannot store.
func (c *Config[K, V]) validateLegacyKind() error {
	if c.Checkpoint == nil {
		return nil // nothing to compare, nothing to store (the old binary's phase 0)
	}
	if err := checkpoint.CheckKeyType[K](); err != nil {
		return fmt.Errorf("migrate: %w: %w", ErrInvalidConfig, err)
	}
	if _, writes := c.Legacy.(source.Writer[K, V]); c.Legacy != nil && !writes && c.Equal == nil {
		return fmt.Errorf("migrate: %w: Config.Equal is required for an implicit legacy (it is not a source.Writer, like CRI): such a legacy records less than the checkpoint (CRI: the sandbox's IP, not the interface or gateway), so the default, reflect.DeepEqual, would report every entry diverged at every restore and let its poorer records win; compare what legacy records, e.g. func(a, b Alloc) bool { return a.IP == b.IP }", ErrInvalidConfig)
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
		return fmt.Errorf("migrate: %w: Config.ShortLived with an implicit legacy, in phase %d (%s): every process restores from it, and its listing lags the writes the previous process acknowledged (CRI lists a sandbox after its ADD returned), so they would be handed out again; run a daemon that restores once, or use phase 3", ErrInvalidConfig, int(c.Phase), c.Phase)
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
