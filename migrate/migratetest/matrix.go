package migratetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"strings"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// Factory builds the Store under test for phase, over the legacy source and
// checkpoint the harness gives it, with the user's own Config (Match,
// Merge, Strict ...). cp is nil for a phase-0 step unless
// Config.NewBinaryInPhase0: the old binary knows nothing of the checkpoint.
// Leave migrate.Config.BootID empty: each simulated boot has its own ID,
// which the Store reads from cp.
type Factory[K comparable, V any] func(phase migrate.Phase, legacy source.Reader[K, V], cp migrate.Checkpoint[K, V]) (*migrate.Store[K, V], error)

// Config describes the rollouts to check and the user's adapters.
type Config[K comparable, V any] struct {
	// New builds the Store under test. Required.
	New Factory[K, V]
	// Key returns the i-th key of the workload's key pool (i < Keys), as a
	// CNI ADD would give it. Required.
	Key func(i int) K
	// Value returns a value to store under key. Required.
	Value func(rng *rand.Rand, key K) V
	// Match is the Match the factory configures (nil: keys as they are).
	Match func(K) K
	// Equal compares values (nil: reflect.DeepEqual).
	Equal func(a, b V) bool

	// Explicit selects a legacy source the Store writes (an Explicit fake,
	// like a proxy's registry); otherwise it is Implicit, learning of every
	// acknowledged write from the outside world, like CRI.
	Explicit bool
	// View is how an implicit legacy shows an acknowledged entry: CRI
	// knows a sandbox under placeholder fields. Nil: as it was written. A
	// restored entry may hold the view's value.
	View func(K, V) (K, V)

	// Immutable says an entry's value never changes once written, so a
	// write never reuses a key: a CNI ADD comes with a fresh container ID,
	// and a sandbox keeps its IP. Without it, writes overwrite entries of
	// a small key pool, which needs a Merge that prefers legacy in phase
	// 2 (a downgrade may change values behind the checkpoint's back).
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
	Seed int64
	// Sequences, when set, runs only these phase sequences (to reproduce
	// a failure); the transitions between steps are still drawn from Seed.
	Sequences [][]migrate.Phase

	// NoCrashes, NoReboots and NoFaults leave those out. Crashes stop a
	// Store without Close, some in the middle of a write (the durable
	// state is what the fakes held at that instant). Reboots also change
	// the boot ID and kill the node's state, legacy included.
	NoCrashes, NoReboots, NoFaults bool
	// EphemeralCheckpoint says the checkpoint lives on tmpfs: a reboot
	// removes it.
	EphemeralCheckpoint bool
	// NewBinaryInPhase0 runs phase-0 steps with the checkpoint, as a
	// binary built on this library with the phase set to 0 does; by
	// default a phase-0 step is the old binary.
	NewBinaryInPhase0 bool
}

// TestingT is the part of *testing.T that Matrix needs.
type TestingT interface {
	Helper()
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// Violation is one rollout that lost, invented or corrupted acknowledged
// state, or refused to start where DESIGN promises it works.
type Violation struct {
	Sequence []migrate.Phase
	Seed     int64  // the seed of this sequence's workload
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
	Sequences   int // phase sequences run
	Restores    int // restores checked
	Writes      int // writes made
	Crashes     int // restarts without Close (some mid-write)
	Reboots     int
	Unsupported int // sequences with a transition DESIGN does not promise (0→3; 3→0 for an explicit legacy and the old binary)
	// Of those, how many the Store refused with an error, and how many it
	// served wrongly (as DESIGN predicts).
	UnsupportedRefused int
	UnsupportedWrong   int
	// UnsupportedOutcomes are the unsupported sequences that served wrong
	// state, for the curious: not failures.
	UnsupportedOutcomes []Violation
	Violations          []Violation // in promised sequences, shortest first
}

// String summarises the result on one line.
func (r Result) String() string {
	return fmt.Sprintf("%d sequences, %d restores checked, %d writes, %d crashes, %d reboots; %d unsupported sequences (%d refused, %d served wrong state, as predicted); %d violations",
		r.Sequences, r.Restores, r.Writes, r.Crashes, r.Reboots, r.Unsupported, r.UnsupportedRefused, r.UnsupportedWrong, len(r.Violations))
}

// Check runs every sequence of phases up to cfg.MaxLen and returns what it
// ran, and an error listing every violation (shortest sequences first), or
// nil. It needs no *testing.T.
func Check[K comparable, V any](cfg Config[K, V]) (Result, error) {
	if cfg.New == nil || cfg.Key == nil || cfg.Value == nil {
		return Result{}, errors.New("migratetest: Config.New, Config.Key and Config.Value are required")
	}
	if cfg.MaxLen <= 0 {
		cfg.MaxLen = 5
	}
	if cfg.Keys <= 0 {
		cfg.Keys = 10
	}
	if cfg.OpsPerStep <= 0 {
		cfg.OpsPerStep = 6
	}
	if cfg.Match == nil {
		cfg.Match = func(k K) K { return k }
	}
	if cfg.Equal == nil {
		cfg.Equal = func(a, b V) bool { return reflect.DeepEqual(a, b) }
	}
	if cfg.View == nil {
		cfg.View = func(k K, v V) (K, V) { return k, v }
	}
	seqs := cfg.Sequences
	if seqs == nil {
		seqs = allSequences(cfg.MaxLen)
	}
	var res Result
	for i, seq := range seqs {
		seed := cfg.Seed*1_000_003 + int64(i)
		if cfg.Sequences != nil {
			seed = cfg.Seed*1_000_003 + int64(indexOf(seq))
		}
		run := newRun(&cfg, seq, seed)
		problems := run.play()
		res.Sequences++
		res.Restores += run.restores
		res.Writes += run.writes
		res.Crashes += run.crashes
		res.Reboots += run.reboots
		if run.unsupported {
			res.Unsupported++
			switch {
			case run.refused:
				res.UnsupportedRefused++
			case len(problems) > 0:
				res.UnsupportedWrong++
				res.UnsupportedOutcomes = append(res.UnsupportedOutcomes, Violation{Sequence: seq, Seed: seed, Trace: strings.Join(run.trace, "\n"), Problems: problems})
			}
			continue
		}
		if len(problems) > 0 {
			res.Violations = append(res.Violations, Violation{Sequence: seq, Seed: seed, Trace: strings.Join(run.trace, "\n"), Problems: problems})
		}
	}
	slices.SortStableFunc(res.Violations, func(a, b Violation) int { return len(a.Sequence) - len(b.Sequence) })
	if len(res.Violations) == 0 {
		return res, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "migratetest: %d of %d rollouts lost, invented or refused state (%s); the shortest:\n%s",
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
	return res, errors.New(b.String())
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

func seqString(seq []migrate.Phase) string {
	parts := make([]string, len(seq))
	for i, p := range seq {
		parts[i] = fmt.Sprintf("%d(%s)", int(p), p)
	}
	return strings.Join(parts, " → ")
}

func seqGo(seq []migrate.Phase) string {
	parts := make([]string, len(seq))
	for i, p := range seq {
		parts[i] = fmt.Sprint(int(p))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// What happens between two steps.
type transition int

const (
	restartClean  transition = iota // Close, start the next binary
	restartCrash                    // killed between writes
	crashMidWrite                   // killed during a write
	reboot                          // the node reboots
)

var transitionNames = [...]string{"restart", "crash", "crash mid-write", "reboot"}

// entry is an acknowledged entry: the key it was written under and its
// value.
type entry[K comparable, V any] struct {
	key K
	val V
}

// maybeVal is what an entry may be after a write that a crash cut short:
// its state before the write or after it.
type maybeVal[K comparable, V any] struct {
	before, after       entry[K, V]
	hadBefore, hasAfter bool
	beforeOptional      bool // before was an orphan, which may be gone
}

// run plays one sequence.
type run[K comparable, V any] struct {
	cfg         *Config[K, V]
	seq         []migrate.Phase
	rng         *rand.Rand
	trans       []transition // trans[i]: what happens before step i (i > 0)
	unsupported bool
	refused     bool

	disk *checkpoint.Memory[K, V] // the checkpoint file, surviving restarts
	imp  *Implicit[K, V]
	exp  *Explicit[K, V] // nil for an implicit legacy
	boot int

	truth     map[K]entry[K, V]    // identity -> acknowledged entry
	orphans   map[K]entry[K, V]    // identities the Store kept and reported: may be served, as they were
	uncertain map[K]maybeVal[K, V] // identities a cut write left undecided

	// The crash instant of a crashMidWrite: after the cutAt-th durable
	// write of the current op (0: before any).
	cutting bool
	cutAt   int
	written int
	frozen  *frozenWorld[K, V]

	nextKey int // the next fresh key, with Immutable

	trace                              []string
	restores, writes, crashes, reboots int
}

// frozenWorld is the durable state at a crash instant.
type frozenWorld[K comparable, V any] struct {
	disk   []byte
	legacy map[K]V
}

func newRun[K comparable, V any](cfg *Config[K, V], seq []migrate.Phase, seed int64) *run[K, V] {
	r := &run[K, V]{
		cfg:       cfg,
		seq:       seq,
		rng:       rand.New(rand.NewSource(seed)),
		truth:     map[K]entry[K, V]{},
		orphans:   map[K]entry[K, V]{},
		uncertain: map[K]maybeVal[K, V]{},
	}
	r.disk = checkpoint.NewMemory[K, V](checkpoint.WithBootID(func() (string, error) { return "boot-0", nil }))
	if cfg.Explicit {
		r.exp = &Explicit[K, V]{}
		r.imp = &r.exp.Implicit
	} else {
		r.imp = &Implicit[K, V]{}
	}
	r.trans = make([]transition, len(seq))
	for i := 1; i < len(seq); i++ {
		r.trans[i] = r.pickTransition()
	}
	// A reboot kills the node's state, so only adjacent steps without one
	// between them can carry stale state across.
	for i := 1; i < len(seq); i++ {
		if r.trans[i] == reboot {
			continue
		}
		a, b := seq[i-1], seq[i]
		if a == migrate.PhaseLegacy && b == migrate.PhaseContract {
			r.unsupported = true
		}
		if cfg.Explicit && !cfg.NewBinaryInPhase0 && a == migrate.PhaseContract && b == migrate.PhaseLegacy {
			r.unsupported = true
		}
	}
	return r
}

func (r *run[K, V]) pickTransition() transition {
	x := r.rng.Intn(100)
	switch {
	case x < 15 && !r.cfg.NoReboots:
		return reboot
	case x < 35 && !r.cfg.NoCrashes:
		return crashMidWrite
	case x < 55 && !r.cfg.NoCrashes:
		return restartCrash
	}
	return restartClean
}

func (r *run[K, V]) logf(format string, args ...any) {
	r.trace = append(r.trace, fmt.Sprintf(format, args...))
}

// play runs the sequence, then restarts once more in the last phase to
// check that the last step's writes are durable. It returns the problems
// found.
func (r *run[K, V]) play() []string {
	var problems []string
	var store *migrate.Store[K, V]
	for i := 0; i <= len(r.seq); i++ {
		last := i == len(r.seq)
		p := r.seq[min(i, len(r.seq)-1)]
		if i > 0 {
			t := restartClean
			if !last {
				t = r.trans[i]
			}
			r.stop(store, t)
		}
		if last {
			r.logf("verify: restart in phase %d (%s)", p, p)
		} else {
			r.logf("step %d: phase %d (%s)", i+1, p, p)
		}
		s, probs, ok := r.start(p)
		problems = append(problems, probs...)
		store = s
		if !ok || len(problems) > 0 {
			if store != nil {
				store.Close()
			}
			return problems
		}
		if last {
			break
		}
		cut := -1
		if i+1 < len(r.seq) && r.trans[i+1] == crashMidWrite {
			cut = r.rng.Intn(r.cfg.OpsPerStep)
		}
		for op := 0; op < r.cfg.OpsPerStep; op++ {
			if op == cut {
				r.cutting, r.cutAt, r.written, r.frozen = true, r.rng.Intn(4), 0, nil
				if r.cutAt == 0 {
					r.freeze()
				}
			}
			r.step(store, p)
			if op == cut {
				break // the process is dead
			}
		}
	}
	if store != nil {
		store.Close()
	}
	return problems
}

// stop ends the running binary as t says.
func (r *run[K, V]) stop(s *migrate.Store[K, V], t transition) {
	switch t {
	case restartClean:
		r.logf("  %s", transitionNames[t])
		s.Close()
	case restartCrash:
		r.crashes++
		r.logf("  %s (no Close)", transitionNames[t])
	case crashMidWrite:
		r.crashes++
		r.logf("  killed mid-write (after %d durable writes of the last write)", r.cutAt)
		if r.frozen != nil {
			r.thaw()
		}
		r.cutting, r.frozen = false, nil
	case reboot:
		r.reboots++
		r.boot++
		r.logf("  %s: the node's state dies with it%s", transitionNames[t], map[bool]string{true: ", and the checkpoint on tmpfs", false: ""}[r.cfg.EphemeralCheckpoint])
		clear(r.truth)
		clear(r.orphans)
		clear(r.uncertain)
		r.imp.Replace(nil)
		if r.cfg.EphemeralCheckpoint {
			r.disk.Remove()
		}
	}
}

// start runs the binary for phase p and checks what its Restore serves.
func (r *run[K, V]) start(p migrate.Phase) (*migrate.Store[K, V], []string, bool) {
	var cp migrate.Checkpoint[K, V]
	if p != migrate.PhaseLegacy || r.cfg.NewBinaryInPhase0 {
		cp = &checkpointSide[K, V]{r: r, m: r.disk.ReopenWithBootID(fmt.Sprintf("boot-%d", r.boot))}
	}
	var legacy source.Reader[K, V] = &implicitSide[K, V]{r: r}
	if r.exp != nil {
		legacy = &explicitSide[K, V]{implicitSide[K, V]{r: r}}
	}
	s, err := r.cfg.New(p, legacy, cp)
	if err != nil {
		return nil, []string{fmt.Sprintf("the factory failed for phase %d: %v", p, err)}, false
	}
	r.restores++
	rep, err := s.Restore(context.Background())
	if err != nil {
		// A daemon would restart; a second attempt must not change the
		// verdict.
		_, err2 := s.Restore(context.Background())
		if err2 != nil {
			r.refused = true
			r.logf("  restore refused: %v", err)
			s.Close()
			return nil, []string{fmt.Sprintf("phase %d (%s) refused to restore: %v", p, p, err)}, false
		}
	}
	r.logf("  restore: %s", rep)
	return s, r.verify(s, rep), true
}

// verify compares what s serves with what was acknowledged, and adopts
// what a crash left undecided.
func (r *run[K, V]) verify(s *migrate.Store[K, V], rep migrate.Report[K]) []string {
	served := map[K]entry[K, V]{}
	for k, v := range s.All() {
		served[r.cfg.Match(k)] = entry[K, V]{k, v}
	}
	reported := map[K]bool{}
	for _, k := range rep.Orphaned {
		reported[r.cfg.Match(k)] = true
	}
	var problems []string
	for id, want := range r.truth {
		got, ok := served[id]
		if !ok {
			problems = append(problems, fmt.Sprintf("LOST: %v (acknowledged %v = %v) is not served", id, want.key, want.val))
			continue
		}
		if !r.sameValue(want, got.val) {
			problems = append(problems, fmt.Sprintf("STALE: %v is served as %v, acknowledged %v", id, got.val, want.val))
		}
	}
	for id, m := range r.uncertain {
		got, ok := served[id]
		switch {
		case ok && m.hasAfter && r.sameValue(m.after, got.val):
		case ok && m.hadBefore && r.sameValue(m.before, got.val):
		case !ok && (!m.hadBefore || !m.hasAfter || m.beforeOptional):
		default:
			problems = append(problems, fmt.Sprintf("CUT WRITE: %v is served as %v (present: %v), but the write a crash cut short leaves only %v (present: %v) or %v (present: %v)",
				id, got.val, ok, m.before.val, m.hadBefore, m.after.val, m.hasAfter))
			continue
		}
		delete(r.uncertain, id)
		// Whatever survived is now the node's state if legacy agrees. If
		// not, legacy and the checkpoint disagree about a write nobody
		// acknowledged (an ADD that reached only the checkpoint, a DEL the
		// runtime will retry): the entry may be served or not until the
		// next acknowledged write to it.
		_, inLegacy := r.legacyHas(id)
		switch {
		case ok && inLegacy:
			r.truth[id] = got
		case ok:
			r.orphans[id] = got
		case inLegacy:
			r.orphans[id] = m.after
			if !m.hasAfter {
				r.orphans[id] = m.before
			}
		}
	}
	for id, got := range served {
		if _, ok := r.truth[id]; ok {
			continue
		}
		if _, known := r.orphans[id]; reported[id] || known {
			r.orphans[id] = got
			continue
		}
		if _, ok := r.uncertain[id]; ok {
			continue
		}
		problems = append(problems, fmt.Sprintf("INVENTED: %v is served as %v = %v, but was never acknowledged (or was deleted)", id, got.key, got.val))
	}
	for id := range r.orphans {
		if _, ok := served[id]; !ok {
			if _, inLegacy := r.legacyHas(id); !inLegacy {
				delete(r.orphans, id) // dropped: fine, and gone for good
			}
		}
	}
	slices.Sort(problems)
	for _, pr := range problems {
		r.logf("  %s", pr)
	}
	return problems
}

// sameValue accepts the acknowledged value or, for an implicit legacy,
// what legacy shows of it.
func (r *run[K, V]) sameValue(want entry[K, V], got V) bool {
	if r.cfg.Equal(want.val, got) {
		return true
	}
	_, view := r.cfg.View(want.key, want.val)
	return r.exp == nil && r.cfg.Equal(view, got)
}

func (r *run[K, V]) legacyHas(id K) (K, bool) {
	for k := range r.imp.Snapshot() {
		if r.cfg.Match(k) == id {
			return k, true
		}
	}
	var zero K
	return zero, false
}

// step makes one random write (sometimes with a fault injected) and
// records what was acknowledged.
func (r *run[K, V]) step(s *migrate.Store[K, V], p migrate.Phase) {
	ctx := context.Background()
	fault := ""
	if !r.cfg.NoFaults && r.rng.Intn(8) == 0 {
		if r.exp != nil && r.rng.Intn(2) == 0 {
			fault = "legacy write fails"
			r.exp.FailWrites(0, 1, errors.New("injected legacy write failure"))
		} else {
			fault = "checkpoint save fails"
			r.disk.FailSaves(1, errors.New("injected checkpoint failure"))
		}
	}
	type change struct {
		id  K
		e   entry[K, V]
		del bool
	}
	var chs []change
	var desc string
	var err error
	switch x := r.rng.Intn(10); {
	case x < 5: // Put: a CNI ADD, or an update of an existing entry
		k := r.putKey()
		v := r.cfg.Value(r.rng, k)
		chs = []change{{id: r.cfg.Match(k), e: entry[K, V]{k, v}}}
		desc = fmt.Sprintf("put %v = %v", k, v)
		err = s.Put(ctx, k, v)
	case x < 8: // Delete: a CNI DEL with the real key
		k := r.deleteKey()
		chs = []change{{id: r.cfg.Match(k), e: entry[K, V]{key: k}, del: true}}
		desc = fmt.Sprintf("delete %v", k)
		err = s.Delete(ctx, k)
	default: // Update of two or three entries
		seen := map[K]bool{}
		for n := 2 + r.rng.Intn(2); n > 0; n-- {
			del := r.rng.Intn(3) == 0
			k := r.putKey()
			if del {
				k = r.deleteKey()
			}
			id := r.cfg.Match(k)
			if seen[id] {
				continue
			}
			seen[id] = true
			if del {
				chs = append(chs, change{id: id, e: entry[K, V]{key: k}, del: true})
			} else {
				chs = append(chs, change{id: id, e: entry[K, V]{k, r.cfg.Value(r.rng, k)}})
			}
		}
		parts := make([]string, len(chs))
		for i, c := range chs {
			if c.del {
				parts[i] = fmt.Sprintf("delete %v", c.e.key)
			} else {
				parts[i] = fmt.Sprintf("put %v = %v", c.e.key, c.e.val)
			}
		}
		desc = "update {" + strings.Join(parts, "; ") + "}"
		err = s.Update(ctx, func(tx *migrate.Tx[K, V]) error {
			for _, c := range chs {
				if c.del {
					tx.Delete(c.e.key)
				} else {
					tx.Put(c.e.key, c.e.val)
				}
			}
			return nil
		})
	}
	r.writes++
	if fault != "" {
		r.disk.FailSaves(0, nil)
		if r.exp != nil {
			r.exp.FailWrites(0, 0, nil)
		}
		desc += " [" + fault + "]"
	}
	// The crash instant came before the caller heard back if the world
	// froze during the write.
	cut := r.cutting && r.frozen != nil
	defer func() {
		if r.cutting && r.frozen == nil {
			// The write finished, and the world learned of it, before the
			// crash instant.
			r.freeze()
		}
	}()
	switch {
	case cut:
		r.logf("  %s: cut short by the crash (returned %v)", desc, err)
		for _, c := range chs {
			m := maybeVal[K, V]{after: c.e, hasAfter: !c.del}
			if before, ok := r.truth[c.id]; ok {
				m.before, m.hadBefore = before, true
			} else if o, ok := r.orphans[c.id]; ok {
				m.before, m.hadBefore, m.beforeOptional = o, true, true
			} else if u, ok := r.uncertain[c.id]; ok {
				m.before, m.hadBefore = u.after, u.hasAfter
			}
			delete(r.truth, c.id)
			delete(r.orphans, c.id)
			r.uncertain[c.id] = m
		}
	case err != nil:
		r.logf("  %s: failed: %v", desc, err)
	default:
		r.logf("  %s: ok", desc)
		for _, c := range chs {
			old, had := r.truth[c.id]
			delete(r.orphans, c.id)
			delete(r.uncertain, c.id)
			if c.del {
				delete(r.truth, c.id)
			} else {
				r.truth[c.id] = c.e
			}
			if r.exp == nil {
				// The outside world (the runtime) knows what was acknowledged.
				if had {
					vk, _ := r.cfg.View(old.key, old.val)
					r.imp.Remove(vk)
				}
				r.removeLegacyID(c.id)
				if !c.del {
					vk, vv := r.cfg.View(c.e.key, c.e.val)
					r.imp.Set(vk, vv)
				}
			}
		}
	}
}

// putKey picks the key of a write: a fresh one with Immutable, else one of
// the pool.
func (r *run[K, V]) putKey() K {
	if r.cfg.Immutable {
		r.nextKey++
		return r.cfg.Key(r.nextKey - 1)
	}
	return r.cfg.Key(r.rng.Intn(r.cfg.Keys))
}

// deleteKey picks the key of a delete: mostly an entry the node has, by the
// key it was written with (a DEL carries the ADD's key), sometimes any key.
func (r *run[K, V]) deleteKey() K {
	if len(r.truth) > 0 && r.rng.Intn(5) > 0 {
		keys := make([]K, 0, len(r.truth))
		for _, e := range r.truth {
			keys = append(keys, e.key)
		}
		// Sorted, so the choice depends on the seed only.
		slices.SortFunc(keys, func(a, b K) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		return keys[r.rng.Intn(len(keys))]
	}
	if r.cfg.Immutable {
		return r.cfg.Key(r.rng.Intn(r.nextKey + 1))
	}
	return r.cfg.Key(r.rng.Intn(r.cfg.Keys))
}

func (r *run[K, V]) removeLegacyID(id K) {
	for k := range r.imp.Snapshot() {
		if r.cfg.Match(k) == id {
			r.imp.Remove(k)
		}
	}
}

// wrote is called after every durable write of the fakes; it freezes the
// world at the crash instant.
func (r *run[K, V]) wrote() {
	if !r.cutting || r.frozen != nil {
		return
	}
	r.written++
	if r.written == r.cutAt {
		r.freeze()
	}
}

func (r *run[K, V]) freeze() {
	r.frozen = &frozenWorld[K, V]{disk: r.disk.Bytes(), legacy: r.imp.Snapshot()}
}

// thaw brings the durable state back to the crash instant: what the dead
// process did afterwards never happened.
func (r *run[K, V]) thaw() {
	r.disk.SetBytes(r.frozen.disk)
	r.imp.Replace(r.frozen.legacy)
}

// checkpointSide is the Store's view of the checkpoint; it reports durable
// writes to the run.
type checkpointSide[K comparable, V any] struct {
	r *run[K, V]
	m *checkpoint.Memory[K, V]
}

func (c *checkpointSide[K, V]) Load(ctx context.Context) (checkpoint.Snapshot[K, V], error) {
	return c.m.Load(ctx)
}

func (c *checkpointSide[K, V]) Save(ctx context.Context, s checkpoint.Snapshot[K, V]) error {
	err := c.m.Save(ctx, s)
	if err == nil {
		c.r.wrote()
	}
	return err
}

func (c *checkpointSide[K, V]) Commit(ctx context.Context, m checkpoint.Meta, chs []checkpoint.Change[K, V]) error {
	err := c.m.Commit(ctx, m, chs)
	if err == nil {
		c.r.wrote()
	}
	return err
}

func (c *checkpointSide[K, V]) Quarantine(ctx context.Context) (string, error) {
	return c.m.Quarantine(ctx)
}

func (c *checkpointSide[K, V]) BootID() string { return c.m.BootID() }

func (c *checkpointSide[K, V]) Close() error { return c.m.Close() }

// implicitSide is an implicit legacy as the Store sees it: no Writer.
type implicitSide[K comparable, V any] struct{ r *run[K, V] }

func (l *implicitSide[K, V]) List(ctx context.Context) (map[K]V, error) { return l.r.imp.List(ctx) }

// explicitSide is an explicit legacy as the Store sees it; it reports
// durable writes to the run.
type explicitSide[K comparable, V any] struct{ implicitSide[K, V] }

func (l *explicitSide[K, V]) Put(ctx context.Context, k K, v V) error {
	err := l.r.exp.Put(ctx, k, v)
	if err == nil {
		l.r.wrote()
	}
	return err
}

func (l *explicitSide[K, V]) Delete(ctx context.Context, k K) error {
	err := l.r.exp.Delete(ctx, k)
	if err == nil {
		l.r.wrote()
	}
	return err
}
