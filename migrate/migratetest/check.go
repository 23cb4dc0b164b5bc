package migratetest

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// Factory returns the configuration of the binary under test in phase,
// over the legacy source and checkpoint the harness gives it: set Legacy
// and Checkpoint to them (or to adapters around them) and the rest as the
// daemon does (Match, Equal, Merge, Strict, PruneOrphans, VolatileLegacy,
// Logger). The harness sets Phase and builds the Store with migrate.New.
// cp is nil for a phase-0 step of the old binary, which knows nothing of the
// checkpoint (see Config.NewBinaryInPhase0). cp carries the boot epoch:
// each simulated boot has its own ID, which the Store reads from it. Match,
// Equal and VolatileLegacy must not depend on the phase.
type Factory[K comparable, V any] func(phase migrate.Phase, legacy source.Reader[K, V], cp migrate.Checkpoint[K, V]) (migrate.Config[K, V], error)

// Config describes the rollouts to check and the user's adapters.
type Config[K comparable, V any] struct {
	// New returns the Store's configuration for a step. Required.
	New Factory[K, V]
	// Key returns the i-th key of the workload's key pool (i < Keys), as a
	// CNI ADD would give it. Required.
	Key func(i int) K
	// Value returns a value to store under key. It must come back from a
	// JSON round trip equal under reflect.DeepEqual. Required.
	Value func(rng *rand.Rand, key K) V

	// Explicit selects a legacy source the Store writes (an Explicit fake,
	// like a proxy's registry); otherwise it is Implicit, learning of every
	// acknowledged write from the outside world, like CRI.
	Explicit bool
	// Volatile says legacy does not survive a restart (a registry kept in
	// memory): the harness empties it whenever a binary stops, and what a
	// phase-0 run acknowledged dies with it. The factory should then set
	// migrate.Config.VolatileLegacy.
	Volatile bool
	// View is how a legacy that observes shows an acknowledged entry: CRI
	// knows a sandbox under placeholder fields and only its IP. Nil: as it
	// was written. An entry only legacy knows (one the old binary wrote, or
	// one whose checkpoint record was set aside) is expected as View shows
	// it; every other entry exactly as written. So View must give back
	// what it returns as it is (Check refuses one that does not): legacy
	// shows what it shows, however often it is listed.
	View func(K, V) (K, V)

	// Immutable says an entry's value never changes once written, so a
	// write never reuses a key: a CNI ADD comes with a fresh container ID,
	// and a sandbox keeps its IP. Without it, writes overwrite and delete
	// entries of a small key pool, and phase-0 runs change values behind
	// the checkpoint's back.
	Immutable bool

	// MaxLen is the longest phase sequence; every sequence of phases 0 to
	// 3 up to it runs (1,364 for the default 5).
	MaxLen int
	// Keys is the size of the key pool (default 10): small, so that writes
	// overwrite and delete what earlier steps wrote. Unused with
	// Immutable.
	Keys int
	// OpsPerStep is the number of writes in each step (default 6).
	OpsPerStep int
	// Seed makes the workload, the restarts and the faults reproducible.
	Seed uint64
	// Sequences, when set, runs only these phase sequences (to reproduce
	// a failure); the transitions between steps are still drawn from Seed.
	Sequences [][]migrate.Phase

	// NoCrashes, NoReboots and NoFaults leave those out. Crashes stop a
	// Store without Close, some in the middle of a write (the durable
	// state is what the fakes held at that instant). Reboots also change
	// the boot ID and kill the node's state, legacy included. Faults fail
	// a write on one side.
	NoCrashes, NoReboots, NoFaults bool
	// EphemeralCheckpoint says the checkpoint lives on tmpfs: a reboot
	// removes it.
	EphemeralCheckpoint bool
	// NewBinaryInPhase0 runs phase-0 steps with the checkpoint, as a
	// binary built on this library with the phase set to 0 does; by
	// default a phase-0 step is the old binary.
	NewBinaryInPhase0 bool

	// PartialListings makes some restores' legacy listing partial: an
	// entry or two cannot be read, and List says so with a
	// *source.ListError.
	PartialListings bool
	// SchemaBumps runs some steps with an older build of the binary, whose
	// checkpoint schema (1) is older than the newer build's (2): a binary
	// rollback across a schema bump. A phase-0 step of the old binary is
	// unaffected.
	SchemaBumps bool
	// Corruption makes some restarts find the checkpoint corrupt (a
	// flipped byte), as bit rot would leave it.
	Corruption bool
	// WithoutJournal opens the checkpoint of every build
	// checkpoint.WithoutJournal(), so that every write replaces the whole
	// file. By default, as with checkpoint.Open's defaults, writes go to
	// the checkpoint's journal and restores replay it (a crash freezes the
	// file and the journal together).
	WithoutJournal bool

	// CheckpointOptions, when set, returns the options your binary opens
	// its checkpoint with (checkpoint.WithValidate, WithSchema and its
	// WithUpgrade chain, ...): those of the newer build, and with older
	// those of the older build of SchemaBumps (the release before your
	// last schema bump). The harness applies them to the in-memory
	// checkpoint of every step, followed by its own: where yours ask for
	// a boot epoch (checkpoint.WithBootID), the simulated boot's ID in
	// place of yours, and with WithoutJournal,
	// checkpoint.WithoutJournal(). Without WithBootID the checkpoint has no
	// boot epoch, as yours would not: a reboot then leaves it as it was,
	// unless EphemeralCheckpoint says it lives on tmpfs. With SchemaBumps, the older build's schema must be below the
	// newer one's. Nil: the newer build writes schema 2 and upgrades
	// schema 1 as it is, the older one writes schema 1, both with a boot
	// epoch, and nothing else is set.
	CheckpointOptions func(older bool) []checkpoint.Option

	// Unique, when set, returns the parts of a value that two entries
	// must never share: an allocator's addresses. The harness then
	// fails any step after which two served entries share a part
	// (TWICE), and writes as an allocator does: a write's value shares no
	// part with any entry the node holds, and half the time it is the
	// value of an entry an acknowledged delete removed, as an allocator
	// hands a freed address to the next ADD. Value must be able to draw
	// values whose parts are free (a pool much larger than the entries):
	// a write for which 64 draws find none becomes a delete, and Check
	// fails, saying how many.
	Unique func(V) []string

	// OpenLegacy, with Explicit, stands your own legacy store in for the
	// Explicit fake as what the Store reads and writes: an older file
	// format, a directory of files like host-local's, kept in a scratch
	// location. It is called at every start of a binary, as each process
	// opens its store anew, and must return a source.Reader that is also
	// a source.Writer; what it returned is closed (if it is an io.Closer)
	// before the next start, the process that opened it being gone, by a
	// crash too.
	//
	// The fake remains the harness's model of legacy: write faults and
	// crash instants are injected there, a crash rewinds it to what was
	// durable at that instant and a reboot or a volatile legacy's restart
	// empties it. So before every start the harness makes the store hold
	// exactly what the fake holds, through the store's Delete and Put,
	// and lists it back; each write of the Store goes to the fake first,
	// then to the store; a partial listing (PartialListings) hides
	// entries of the store's own listing. It is a violation for the store
	// to list anything else than what was put, to fail a write the fake
	// took, or, across a restart that changed nothing behind its back, to
	// list other than what the Store's writes left.
	OpenLegacy func() (source.Reader[K, V], error)
}

// TestingT is the part of *testing.T that Matrix needs.
type TestingT interface {
	Helper()
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// Violation is one rollout that lost, invented or changed acknowledged
// state, or refused where the promise says it works (or went on where it
// must refuse).
type Violation struct {
	Sequence []migrate.Phase
	Seed     uint64 // the seed of this sequence's workload
	Trace    string // what happened, step by step
	Problems []string
}

// String tells what went wrong and how to run it again.
func (v Violation) String() string {
	return fmt.Sprintf("sequence %s (seed %d):\n  %s\n  trace:\n    %s\n  reproduce with Config.Sequences = [][]migrate.Phase{%s} and Config.Seed as before",
		seqString(v.Sequence), v.Seed, strings.Join(v.Problems, "\n  "), strings.ReplaceAll(v.Trace, "\n", "\n    "), seqGo(v.Sequence))
}

// Result counts what Check ran.
type Result struct {
	Sequences int // phase sequences run
	Restores  int // restores checked
	Writes    int // writes made
	Crashes   int // restarts without Close (some mid-write)
	Reboots   int
	// Refused counts the restores the Store refused where the promise says
	// it must, by reason; after each, the harness did what an operator
	// would (rolled forward, ran phase 2 first, moved a corrupt file
	// aside) and went on.
	Refused map[string]int
	// Unjudged counts the sequences outside the promise, whose outcome is
	// not judged: phase 3 right after the old binary's phase 0, which
	// leaves no trace (with a legacy that observes or is written); the old
	// binary right after phase 3 (with a legacy the Store writes); and, with
	// VolatileLegacy, phases 1 to 3 right after the old binary.
	Unjudged   int
	Violations []Violation // shortest first
}

// String summarises the result on one line.
func (r Result) String() string {
	refused := "none refused"
	if len(r.Refused) > 0 {
		var parts []string
		for _, why := range slices.Sorted(maps.Keys(r.Refused)) {
			parts = append(parts, fmt.Sprintf("%d %s", r.Refused[why], why))
		}
		refused = "refused as promised: " + strings.Join(parts, ", ")
	}
	return fmt.Sprintf("%d sequences, %d restores checked (%s), %d writes, %d crashes, %d reboots; %d sequences outside the promise not judged; %d violations",
		r.Sequences, r.Restores, refused, r.Writes, r.Crashes, r.Reboots, r.Unjudged, len(r.Violations))
}

// Check runs every sequence of phases up to cfg.MaxLen and returns what it
// ran, and an error listing every violation (shortest sequences first), or
// nil. It needs no *testing.T.
func Check[K comparable, V any](cfg Config[K, V]) (Result, error) {
	if cfg.New == nil || cfg.Key == nil || cfg.Value == nil {
		return Result{}, errors.New("migratetest: Config.New, Config.Key and Config.Value are required")
	}
	adapters, err := probe(&cfg)
	if err != nil {
		return Result{}, err
	}
	seqs := cfg.Sequences
	if seqs == nil {
		seqs = allSequences(cfg.MaxLen)
	}
	res := Result{Refused: map[string]int{}}
	var noFree noFreeValue
	for _, seq := range seqs {
		seed := cfg.Seed*1_000_003 + uint64(indexOf(seq))
		run := newRun(&cfg, adapters, seq, seed)
		problems := run.play()
		run.count(&res)
		noFree.add(run.noFree)
		if run.unjudged {
			res.Unjudged++
			continue
		}
		if len(problems) > 0 {
			res.Violations = append(res.Violations, Violation{Sequence: seq, Seed: seed, Trace: strings.Join(run.trace, "\n"), Problems: problems})
		}
	}
	slices.SortStableFunc(res.Violations, func(a, b Violation) int { return len(a.Sequence) - len(b.Sequence) })
	var errs []error
	if len(res.Violations) > 0 {
		errs = append(errs, errors.New(violationsText(res)))
	}
	if err := noFree.err(res.Writes); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

// probe fills in the defaults and learns the adapters' Match from the
// factory.
func probe[K comparable, V any](cfg *Config[K, V]) (adapters[K, V], error) {
	if cfg.MaxLen <= 0 {
		cfg.MaxLen = 5
	}
	if cfg.Keys <= 0 {
		cfg.Keys = 10
	}
	if cfg.OpsPerStep <= 0 {
		cfg.OpsPerStep = 6
	}
	if cfg.View == nil {
		cfg.View = func(k K, v V) (K, V) { return k, v }
	}
	if err := checkView(cfg); err != nil {
		return adapters[K, V]{}, err
	}
	if cfg.OpenLegacy != nil && !cfg.Explicit {
		return adapters[K, V]{}, errors.New("migratetest: Config.OpenLegacy needs Config.Explicit: the harness keeps your store in step with its model through the Store's writes, and a Store does not write an implicit legacy")
	}
	a, err := learnBuilds(cfg)
	if err != nil {
		return adapters[K, V]{}, err
	}
	// A throwaway world, so that the factory sees what it always sees.
	a.match = func(k K) K { return k }
	scratch := newRun(cfg, a, []migrate.Phase{migrate.PhaseMigrate}, 0)
	mc, err := scratch.configure(migrate.PhaseMigrate, newBuild)
	scratch.w.closeStore()
	if err != nil {
		return adapters[K, V]{}, fmt.Errorf("migratetest: %w", err)
	}
	a.match, a.volatile = mc.Match, cfg.Volatile
	if a.match == nil {
		a.match = func(k K) K { return k }
	}
	return a, nil
}

// checkView checks on a few of the workload's entries that View gives back
// what it returns as it is: an entry that phase 0 of the old binary
// acknowledged is known only as legacy shows it.
func checkView[K comparable, V any](cfg *Config[K, V]) error {
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	for i := range min(cfg.Keys, 5) {
		k, v := cfg.View(cfg.Key(i), cfg.Value(rng, cfg.Key(i)))
		if k2, v2 := cfg.View(k, v); k2 != k || !reflect.DeepEqual(v2, v) {
			return fmt.Errorf("migratetest: Config.View changes what it returned: %v = %v shows as %v = %v; legacy must show its own record as it is", k, v, k2, v2)
		}
	}
	return nil
}

// adapters is what the harness takes from the user's configuration.
type adapters[K comparable, V any] struct {
	match     func(K) K
	volatile  bool
	schemas   [2]int // the schema each build writes, by build
	bootEpoch bool   // the checkpoint has a boot epoch
}

// learnBuilds learns from the checkpoint options (Config.CheckpointOptions)
// the schema each build writes, and whether they ask for a boot epoch.
func learnBuilds[K comparable, V any](cfg *Config[K, V]) (adapters[K, V], error) {
	a := adapters[K, V]{schemas: [2]int{newBuild: 2, oldBuild: 1}, bootEpoch: true}
	if cfg.CheckpointOptions == nil {
		return a, nil
	}
	m, err := checkpoint.NewMemory[K, V]().Reopen(cfg.CheckpointOptions(false)...)
	if err != nil {
		return a, fmt.Errorf("migratetest: Config.CheckpointOptions(false): %w", err)
	}
	a.bootEpoch = m.BootID() != ""
	w := world[K, V]{userOpts: cfg.CheckpointOptions, bootEpoch: a.bootEpoch}
	for _, b := range []build{newBuild, oldBuild} {
		n, err := schemaOf[K, V](w.options(b))
		if err != nil {
			return a, fmt.Errorf("migratetest: Config.CheckpointOptions(%v): %w", b == oldBuild, err)
		}
		a.schemas[b] = n
	}
	if cfg.SchemaBumps && a.schemas[oldBuild] >= a.schemas[newBuild] {
		return a, fmt.Errorf("migratetest: with SchemaBumps, Config.CheckpointOptions(true) must give the older build a lower schema than CheckpointOptions(false) gives the newer one; they give %d and %d", a.schemas[oldBuild], a.schemas[newBuild])
	}
	return a, nil
}

func violationsText(res Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "migratetest: %d of %d rollouts lost, invented or changed acknowledged state, or refused where they must not (%s); the shortest:\n%s",
		len(res.Violations), res.Sequences, res, res.Violations[0])
	if len(res.Violations) > 1 {
		b.WriteString("\nother failing sequences:")
		for i, v := range res.Violations[1:] {
			if i == 10 {
				fmt.Fprintf(&b, "\n  ... and %d more", len(res.Violations)-11)
				break
			}
			fmt.Fprintf(&b, "\n  %s: %s", seqString(v.Sequence), v.Problems[0])
		}
	}
	return b.String()
}

// Matrix runs Check and fails t with its error. It logs the summary.
func Matrix[K comparable, V any](t TestingT, cfg Config[K, V]) Result {
	t.Helper()
	res, err := Check(cfg)
	if err != nil {
		t.Errorf("%v", err)
	}
	t.Logf("migratetest: %s", res)
	return res
}

// allSequences lists every sequence of phases 0..3 of length 1 to n,
// shortest first.
func allSequences(n int) [][]migrate.Phase {
	var out [][]migrate.Phase
	cur := [][]migrate.Phase{{}}
	for l := 1; l <= n; l++ {
		var next [][]migrate.Phase
		for _, s := range cur {
			for p := migrate.PhaseLegacy; p <= migrate.PhaseContract; p++ {
				next = append(next, append(slices.Clone(s), p))
			}
		}
		out = append(out, next...)
		cur = next
	}
	return out
}

// indexOf gives a sequence the index allSequences gives it, so that a
// sequence run alone draws the same workload as in the full matrix.
func indexOf(seq []migrate.Phase) int {
	i := 0
	for l := 1; l < len(seq); l++ {
		i += 1 << (2 * l)
	}
	n := 0
	for _, p := range seq {
		n = n*4 + int(p)
	}
	return i + n
}
