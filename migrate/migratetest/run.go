package migratetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// What happens between two steps.
type transition int

const (
	restartClean  transition = iota // Close, start the next binary
	restartCrash                    // killed between writes
	crashMidWrite                   // killed during a write
	reboot                          // the node reboots
)

var transitionNames = [...]string{"restart", "crash", "crash mid-write", "reboot"}

// run plays one sequence.
type run[K comparable, V any] struct {
	cfg      *Config[K, V]
	a        adapters[K, V]
	seq      []migrate.Phase
	rng      *rand.Rand
	trans    []transition // trans[i]: what happens before step i (i > 0)
	builds   []build      // the build each step runs
	unjudged bool

	w    world[K, V]
	acks acked[K, V] // what was acknowledged

	nextKey int // the next fresh key, with Immutable
	freed   []V // values acknowledged deletes removed, for reuse (Config.Unique)
	// shared says the last restore reported entries that share a part of
	// their values (migrate.ErrValueShared): a part it serves to an entry
	// that is gone beside a live one is a leak it reported.
	shared bool
	// orphans is what the last restore reported as orphans, by identity:
	// a part served to one of them that is gone is a leak it reported.
	orphans map[K]bool
	// phase0Usable says the last start could use the checkpoint: this
	// package's phase 0 then marks only what it writes.
	phase0Usable bool
	noFree       int // writes whose value could not be drawn free (Config.Unique)

	trace                              []string
	restores, writes, crashes, reboots int
	refused                            map[string]int
}

func newRun[K comparable, V any](cfg *Config[K, V], a adapters[K, V], seq []migrate.Phase, seed uint64) *run[K, V] {
	r := &run[K, V]{
		cfg:     cfg,
		a:       a,
		seq:     seq,
		rng:     rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		acks:    newAcked[K, V](),
		refused: map[string]int{},
	}
	// The world's handle on the file only reads, damages and restores its
	// bytes; each binary opens the file with its own build's options.
	r.w.disk = checkpoint.NewMemory[K, V]()
	r.w.whole = cfg.WithoutJournal
	r.w.userOpts, r.w.schemas, r.w.bootEpoch = cfg.CheckpointOptions, a.schemas, a.bootEpoch
	r.w.storeMoved = true // the store holds what the last sequence left
	if cfg.Explicit {
		r.w.exp = &Explicit[K, V]{}
		r.w.imp = &r.w.exp.Implicit
	} else {
		r.w.imp = &Implicit[K, V]{}
	}
	r.trans = make([]transition, len(seq))
	r.builds = make([]build, len(seq))
	for i := range seq {
		if i > 0 {
			r.trans[i] = r.pickTransition()
		}
		if cfg.SchemaBumps && r.rng.IntN(3) == 0 {
			r.builds[i] = oldBuild
		}
	}
	r.unjudged = r.outsidePromise()
	return r
}

// outsidePromise reports whether the sequence has a transition the promise
// excludes. A reboot kills the node's state, so only adjacent steps without
// one between them can carry stale state across.
func (r *run[K, V]) outsidePromise() bool {
	oldBinary := func(p migrate.Phase) bool { return p == migrate.PhaseLegacy && !r.cfg.NewBinaryInPhase0 }
	for i := 1; i < len(r.seq); i++ {
		if r.trans[i] == reboot {
			continue
		}
		a, b := r.seq[i-1], r.seq[i]
		switch {
		case a == migrate.PhaseLegacy && b == migrate.PhaseContract && !r.cfg.NewBinaryInPhase0:
			return true
		case r.cfg.Explicit && a == migrate.PhaseContract && oldBinary(b):
			return true
		case r.a.volatile && oldBinary(a) && b != migrate.PhaseLegacy:
			return true
		}
	}
	return false
}

func (r *run[K, V]) pickTransition() transition {
	x := r.rng.IntN(100)
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

func (r *run[K, V]) count(res *Result) {
	res.Sequences++
	res.Restores += r.restores
	res.Writes += r.writes
	res.Crashes += r.crashes
	res.Reboots += r.reboots
	for why, n := range r.refused {
		res.Refused[why] += n
	}
}

// play runs the sequence, then restarts once more in the last phase to
// check that the last step's writes are durable. It returns the problems
// found.
func (r *run[K, V]) play() []string {
	var store *migrate.Store[K, V]
	defer func() {
		if store != nil {
			store.Close()
		}
		r.w.closeStore()
	}()
	for i := 0; i <= len(r.seq); i++ {
		last := i == len(r.seq)
		step := min(i, len(r.seq)-1)
		p := r.seq[step]
		if i > 0 {
			t := restartClean
			if !last {
				t = r.trans[i]
			}
			r.stop(store, r.seq[i-1], t)
			store = nil
		}
		if last {
			r.logf("verify: restart in phase %d (%s)", p, p)
		} else {
			r.logf("step %d: phase %d (%s)%s", i+1, p, p, r.buildNote(step))
		}
		s, problems := r.start(p, r.builds[step], true)
		if f := r.w.storeFault; f != "" {
			problems = append(problems, f)
		}
		if len(problems) > 0 {
			if s != nil {
				s.Close()
			}
			return problems
		}
		store = s
		if last {
			break
		}
		cut := i+1 < len(r.seq) && r.trans[i+1] == crashMidWrite
		r.work(store, p, cut)
		if f := r.w.storeFault; f != "" {
			return []string{f}
		}
		if problems := r.servedUnique(store); !cut && problems != nil {
			return problems
		}
	}
	return nil
}

func (r *run[K, V]) buildNote(step int) string {
	if !r.cfg.SchemaBumps {
		return ""
	}
	return ", " + r.w.name(r.builds[step])
}

// work makes the step's writes; with cut, the process dies during one.
func (r *run[K, V]) work(s *migrate.Store[K, V], p migrate.Phase, cut bool) {
	at := -1
	if cut {
		at = r.rng.IntN(r.cfg.OpsPerStep)
	}
	for op := 0; op < r.cfg.OpsPerStep; op++ {
		if op == at {
			r.w.cutting, r.w.cutAt, r.w.written, r.w.frozen = true, r.rng.IntN(4), 0, nil
			if r.w.cutAt == 0 {
				r.w.freeze()
			}
		}
		r.step(s, p)
		if op == at {
			return // the process is dead
		}
	}
}

// stop ends the running binary, which ran phase p, as t says.
func (r *run[K, V]) stop(s *migrate.Store[K, V], p migrate.Phase, t transition) {
	switch t {
	case restartClean:
		r.logf("  %s", transitionNames[t])
		s.Close()
	case restartCrash:
		r.crashes++
		r.logf("  %s (no Close)", transitionNames[t])
	case crashMidWrite:
		r.crashes++
		r.logf("  killed mid-write (after %d durable writes of the last write)", r.w.cutAt)
		if r.w.frozen != nil {
			r.w.thaw()
		}
		r.w.cutting, r.w.frozen = false, nil
	case reboot:
		r.reboots++
		r.w.boot++
		r.logf("  %s: the node's state dies with it%s", transitionNames[t], map[bool]string{true: ", and the checkpoint on tmpfs", false: ""}[r.cfg.EphemeralCheckpoint])
		r.acks.forget()
		r.acks.unmark()
		r.w.replaceLegacy(nil)
		if r.cfg.EphemeralCheckpoint {
			checkpointtest.Remove(r.w.disk)
			checkpointtest.SetJournal(r.w.disk, nil)
		}
	}
	if r.a.volatile && t != reboot {
		// The registry lived in memory, and so did everything phase 0
		// acknowledged.
		r.w.replaceLegacy(nil)
		switch {
		case p == migrate.PhaseLegacy && r.cfg.NewBinaryInPhase0 && !r.acks.wholeMarked(r.fileState()):
			// This package's phase 0 marked, in the checkpoint, what it
			// wrote to the registry: that much dies; the rest is the
			// checkpoint's.
			r.logf("  phase 0's writes die with it; the checkpoint names them")
			r.acks.phase0Died()
		case p == migrate.PhaseLegacy:
			r.logf("  phase 0's state dies with it, as the old binary's did")
			r.acks.forget()
		}
	}
}

// start runs the binary for phase p (built as b) and checks its Restore.
// When the promise says Restore must refuse, it checks that it did and
// changed nothing, does what an operator would, and starts again. With
// inject, the first attempt may meet an unreadable input. It returns the
// Store serving, or the problems found.
func (r *run[K, V]) start(p migrate.Phase, b build, inject bool) (*migrate.Store[K, V], []string) {
	for attempt := 0; attempt < 4; attempt++ {
		mc, err := r.configure(p, b)
		if err != nil {
			return nil, []string{err.Error()}
		}
		x := r.expect(p, b, mc, inject && attempt == 0)
		if r.a.volatile && p == migrate.PhaseLegacy && (mc.Checkpoint == nil || r.acks.wholeMarked(r.fileState())) {
			r.logf("  phase 0 restores from legacy only, which is empty after a restart: the state is gone, as it was with the old binary")
			r.acks.forget()
		}
		before, legacyBefore := r.w.image(), r.w.legacySnapshot()
		s, rep, err := r.restore(mc)
		switch {
		case s == nil && rep == nil:
			return nil, []string{err.Error()}
		case x.refusal == "" && err != nil:
			return nil, []string{fmt.Sprintf("phase %d (%s) refused to restore: %v", p, p, err)}
		case x.refusal == "":
			r.logf("  restore: %s", rep)
			if problems := r.verify(s, *rep, p, x); problems != nil {
				return s, problems
			}
			return r.steady(s, *rep, p, b)
		case err == nil:
			s.Close()
			return nil, []string{fmt.Sprintf("phase %d (%s) restored (%s), but must refuse: %s", p, p, rep, x.refusal)}
		}
		if problems := r.checkRefusal(err, x, before, legacyBefore); problems != nil {
			return nil, problems
		}
		r.refused[x.refusal]++
		r.logf("  restore refused, as promised (%s): %v", x.refusal, err)
		if b, err = r.remedy(x, p, b); err != nil {
			return nil, []string{err.Error()}
		}
	}
	return nil, []string{"the operator's remedies did not get the Store to start"}
}

// steady restarts the Store s, which restore rep just started in phase p,
// once more, cleanly and with nothing changed in between, and checks that
// the second restore finds the state as the first left it: a restore that
// healed what it found leaves nothing to reconcile. (A configuration that
// fails this reports the same divergence, backfill or staleness at every
// start, and keeps a fleet's gate red for good: an Equal that compares
// what legacy cannot see, say.) Phase 0 is left out: it serves legacy, and
// a volatile legacy's state dies at every restart. So is a restore that
// met a partial listing, whose next, complete, listing has more to say,
// or that served entries sharing a part of their values (undecided).
func (r *run[K, V]) steady(s *migrate.Store[K, V], rep migrate.Report[K], p migrate.Phase, b build) (*migrate.Store[K, V], []string) {
	if p == migrate.PhaseLegacy || len(r.w.hiddenIDs) > 0 || undecided(rep) {
		return s, nil
	}
	first := r.servedByID(s)
	r.stop(s, p, restartClean)
	mc, err := r.configure(p, b)
	if err != nil {
		return nil, []string{err.Error()}
	}
	s, again, err := r.restore(mc)
	if err != nil {
		return nil, []string{fmt.Sprintf("STEADY STATE: phase %d (%s) restored, then refused to restore again with nothing changed: %v", p, p, err)}
	}
	r.logf("  restore again: %s", again)
	problems := steadyProblems(rep, *again, r.a.match)
	if !maps.EqualFunc(first, r.servedByID(s), func(a, b entry[K, V]) bool { return same(a, b) }) {
		problems = append(problems, "STEADY STATE: a restore right after a restore, with no write between, serves another state")
	}
	for _, pr := range problems {
		r.logf("  %s", pr)
	}
	return s, problems
}

// undecided reports whether rep served entries that share a part of
// their values because the sides could not say which is stale: the entry
// that restore backfilled from legacy then stands in the checkpoint, and
// the next restore may decide (migrate.ErrValueShared).
func undecided[K comparable](rep migrate.Report[K]) bool {
	return slices.ContainsFunc(rep.Errors, func(err error) bool { return errors.Is(err, migrate.ErrValueShared) })
}

// steadyProblems compares the report of a restore right after a restore
// (again) with the first one's.
func steadyProblems[K comparable](first, again migrate.Report[K], match func(K) K) []string {
	var problems []string
	say := func(what string, n int) {
		if n > 0 {
			problems = append(problems, fmt.Sprintf("STEADY STATE: a restore right after a restore, with no write between, reported %d %s (the first restore left them, or Config.Equal compares what legacy cannot see)", n, what))
		}
	}
	say("entries diverged", len(again.Diverged))
	say("entries backfilled", len(again.Backfilled))
	say("entries dropped", len(again.Dropped)+len(again.Pruned))
	was := map[K]bool{}
	for _, k := range first.Orphaned {
		was[match(k)] = true
	}
	newOrphans := 0
	for _, k := range again.Orphaned {
		if !was[match(k)] {
			newOrphans++
		}
	}
	say("new orphans", newOrphans)
	if again.Stale != "" {
		problems = append(problems, "STEADY STATE: a restore right after a restore, with no write between, found the checkpoint stale: "+again.Stale)
	}
	return problems
}

// servedByID is what s serves, by identity.
func (r *run[K, V]) servedByID(s *migrate.Store[K, V]) map[K]entry[K, V] {
	served := map[K]entry[K, V]{}
	for k, v := range s.All() {
		served[r.a.match(k)] = entry[K, V]{k, v}
	}
	return served
}

// configure asks the factory for the configuration of the binary for phase
// p, built as b, over the world's sides.
func (r *run[K, V]) configure(p migrate.Phase, b build) (migrate.Config[K, V], error) {
	var cp migrate.Checkpoint[K, V]
	if p != migrate.PhaseLegacy || r.cfg.NewBinaryInPhase0 {
		m, err := r.w.disk.Reopen(r.w.options(b)...)
		if err != nil {
			return migrate.Config[K, V]{}, fmt.Errorf("opening the checkpoint as %v: %w", b, err)
		}
		cp = &checkpointSide[K, V]{w: &r.w, m: m}
	}
	var legacy source.Reader[K, V] = &implicitSide[K, V]{w: &r.w, match: r.a.match}
	if r.w.exp != nil {
		legacy = &explicitSide[K, V]{implicitSide[K, V]{w: &r.w, match: r.a.match}, r.cfg.Volatile}
	}
	if r.cfg.OpenLegacy != nil {
		if err := r.w.openStore(r.cfg.OpenLegacy); err != nil {
			return migrate.Config[K, V]{}, err
		}
	}
	mc, err := r.cfg.New(p, legacy, cp)
	if err != nil {
		return mc, fmt.Errorf("the factory failed for phase %d: %w", p, err)
	}
	mc.Phase = p
	return mc, nil
}

// restore builds the Store and restores it. It returns the Store and its
// report, or the report and Restore's error (the Store closed), or only an
// error when the Store could not be built.
func (r *run[K, V]) restore(mc migrate.Config[K, V]) (*migrate.Store[K, V], *migrate.Report[K], error) {
	s, err := migrate.New(mc)
	if err != nil {
		return nil, nil, fmt.Errorf("migrate.New failed for phase %d: %w", mc.Phase, err)
	}
	r.restores++
	r.w.hiddenIDs = map[K]bool{}
	rep, err := s.Restore(context.Background())
	r.w.hide = nil
	if err != nil {
		s.Close()
		return nil, &rep, err
	}
	return s, &rep, nil
}

// checkRefusal checks a refusal the promise asked for: the right error,
// and nothing changed on either side.
func (r *run[K, V]) checkRefusal(err error, x expectation, before string, legacyBefore map[K]V) []string {
	var problems []string
	if x.sentinel != nil && !errors.Is(err, x.sentinel) {
		problems = append(problems, fmt.Sprintf("restore refused (%s) with an error that does not match %v: %v", x.refusal, x.sentinel, err))
	}
	if r.w.image() != before {
		problems = append(problems, fmt.Sprintf("a refused restore (%s) changed the checkpoint", x.refusal))
	}
	if !sameMap(r.w.legacySnapshot(), legacyBefore) {
		problems = append(problems, fmt.Sprintf("a refused restore (%s) changed legacy", x.refusal))
	}
	return problems
}

// remedy does what an operator would after a refusal, and returns the
// build to start again with.
func (r *run[K, V]) remedy(x expectation, p migrate.Phase, b build) (build, error) {
	switch x.remedy {
	case rollForward:
		r.logf("  the operator rolls forward to %s", r.w.name(newBuild))
		return newBuild, nil
	case moveAside:
		where, _ := r.w.disk.Quarantine(context.Background())
		r.logf("  the operator moves the checkpoint aside (%s)", where)
		r.acks.checkpointLost(r, p)
	case runPhase2First:
		r.logf("  the operator runs phase 2 once first")
		s, problems := r.start(migrate.PhaseMigrate, newBuild, false)
		if problems != nil {
			return b, fmt.Errorf("phase 2, run first: %s", problems[0])
		}
		r.stop(s, migrate.PhaseMigrate, restartClean)
		r.logf("  phase %d (%s) again", p, p)
	}
	return b, nil
}
