package migratetest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
)

// The workload: the writes a step makes, the faults injected into them, and
// the unreadable inputs injected before a start.

// change is one entry a write changes.
type change[K comparable, V any] struct {
	id  K
	e   entry[K, V]
	del bool
}

// step makes one random write (sometimes with a fault injected) and
// records what was acknowledged.
func (r *run[K, V]) step(s *migrate.Store[K, V], p migrate.Phase) {
	fault := r.injectFault(p)
	chs, desc, err := r.write(s, p)
	r.writes++
	if fault != "" {
		r.w.saveOK, r.w.saveFail = 0, 0
		if r.w.exp != nil {
			r.w.exp.FailWrites(0, 0, nil)
		}
		desc += " [" + fault + "]"
	}
	// The crash instant came before the caller heard back if the world
	// froze during the write.
	cut := r.w.cutting && r.w.frozen != nil
	defer func() {
		if r.w.cutting && r.w.frozen == nil {
			// The write finished, and the world learned of it, before the
			// crash instant.
			r.w.freeze()
		}
	}()
	if p == migrate.PhaseLegacy && r.cfg.NewBinaryInPhase0 {
		r.acks.mark(chs, !cut && err == nil)
	}
	switch {
	case cut:
		r.logf("  %s: cut short by the crash (returned %v)", desc, err)
		r.unsure(chs)
	case errors.Is(err, migrate.ErrOutcomeUnknown):
		r.logf("  %s: failed, outcome unknown: %v", desc, err)
		r.unsure(chs)
	case err != nil:
		r.logf("  %s: failed: %v", desc, err)
		r.failedOnHidden(chs)
	default:
		r.logf("  %s: ok", desc)
		r.acknowledge(chs, p)
	}
}

// injectFault sometimes makes the next save or legacy write fail, or both:
// a write one side refuses, whose undo on the other side fails too.
func (r *run[K, V]) injectFault(p migrate.Phase) string {
	if r.cfg.NoFaults || r.rng.IntN(8) != 0 {
		return ""
	}
	legacyErr := errors.New("injected legacy write failure")
	switch x := r.rng.IntN(3); {
	case x == 0 && r.w.exp != nil && (p == migrate.PhaseExpand || p == migrate.PhaseMigrate):
		r.w.saveFail = 1
		r.w.exp.FailWrites(1, 1, legacyErr)
		return "checkpoint save fails, and the legacy write that undoes it too"
	case x == 1 && r.w.exp != nil:
		r.w.exp.FailWrites(0, 1, legacyErr)
		return "legacy write fails"
	}
	r.w.saveFail = 1
	return "checkpoint save fails"
}

// write makes a Put, a Delete or an Update of two or three entries.
func (r *run[K, V]) write(s *migrate.Store[K, V], p migrate.Phase) ([]change[K, V], string, error) {
	ctx := context.Background()
	taken := r.taken(s)
	x := r.rng.IntN(10)
	var k K
	var v V
	if x < 5 {
		var ok bool
		k = r.putKey()
		if v, ok = r.value(k, taken); !ok {
			x = 5 // no free value: the ADD fails; a DEL instead
		}
	}
	switch {
	case x < 5: // Put: a CNI ADD, or an update of an existing entry
		return []change[K, V]{{id: r.a.match(k), e: entry[K, V]{k, v}}}, fmt.Sprintf("put %v = %v", k, v), s.Put(ctx, k, v)
	case x < 8: // Delete: a CNI DEL with the real key
		k := r.deleteKey()
		return []change[K, V]{{id: r.a.match(k), e: entry[K, V]{key: k}, del: true}}, fmt.Sprintf("delete %v", k), s.Delete(ctx, k)
	}
	chs := r.updateChanges(taken)
	parts := make([]string, len(chs))
	for i, c := range chs {
		if c.del {
			parts[i] = fmt.Sprintf("delete %v", c.e.key)
		} else {
			parts[i] = fmt.Sprintf("put %v = %v", c.e.key, c.e.val)
		}
	}
	err := s.Update(ctx, func(tx *migrate.Tx[K, V]) error {
		for _, c := range chs {
			if c.del {
				tx.Delete(c.e.key)
			} else {
				tx.Put(c.e.key, c.e.val)
			}
		}
		return nil
	})
	return chs, "update {" + strings.Join(parts, "; ") + "}", err
}

// updateChanges draws the changes of an Update, on distinct entries.
func (r *run[K, V]) updateChanges(taken map[string]bool) []change[K, V] {
	var chs []change[K, V]
	seen := map[K]bool{}
	for n := 2 + r.rng.IntN(2); n > 0; n-- {
		del := r.rng.IntN(3) == 0
		k := r.putKey()
		if del {
			k = r.deleteKey()
		}
		id := r.a.match(k)
		if seen[id] {
			continue
		}
		seen[id] = true
		if del {
			chs = append(chs, change[K, V]{id: id, e: entry[K, V]{key: k}, del: true})
		} else if v, ok := r.value(k, taken); ok {
			chs = append(chs, change[K, V]{id: id, e: entry[K, V]{k, v}})
		}
	}
	return chs
}

// unsure records changes whose outcome is not known: each entry is as it
// was before or as the write made it.
func (r *run[K, V]) unsure(chs []change[K, V]) {
	a := &r.acks
	for _, c := range chs {
		m := a.uncertain[c.id]
		if len(m.states) == 0 {
			m.states = []maybeState[K, V]{{}} // absent, unless below
		}
		if before, ok := a.truth[c.id]; ok {
			m.states = []maybeState[K, V]{{e: before, present: true}}
		} else if o, ok := a.orphans[c.id]; ok {
			m.states = []maybeState[K, V]{{e: o, present: true, optional: true}}
		} else if h, ok := a.hidden[c.id]; ok {
			m.states = []maybeState[K, V]{{e: h, present: true, optional: true}}
		}
		m.states = append(m.states, maybeState[K, V]{e: c.e, present: !c.del})
		delete(a.truth, c.id)
		delete(a.orphans, c.id)
		delete(a.hidden, c.id)
		a.uncertain[c.id] = m
	}
}

// failedOnHidden: a write that failed on one side, to an entry a partial
// listing kept from the Store, may have left it alone, replaced it in
// legacy, or replaced it and then been undone there, which removes it: the
// Store treats it as new.
func (r *run[K, V]) failedOnHidden(chs []change[K, V]) {
	for _, c := range chs {
		old, ok := r.acks.hidden[c.id]
		if !ok || r.w.exp == nil {
			continue
		}
		delete(r.acks.hidden, c.id)
		r.acks.uncertain[c.id] = maybeVal[K, V]{states: []maybeState[K, V]{{e: old, present: true}, {}, {e: c.e, present: !c.del}}}
	}
}

// acknowledge records changes the caller was told are durable. A legacy
// that observes learns of them from the outside world (the runtime ran the
// ADD), and shows them as View does; phase 0 writes no checkpoint, so what
// it acknowledged is known only as legacy shows it.
func (r *run[K, V]) acknowledge(chs []change[K, V], p migrate.Phase) {
	a := &r.acks
	for _, c := range chs {
		old, had := a.truth[c.id]
		// An acknowledged write settles its entry for good, whatever the
		// Store served before it: an orphan it kept, an entry a partial
		// listing hid, a write whose outcome was unknown. (A Delete of an
		// entry only legacy holds, acknowledged in phase 3, which does not
		// write legacy, must survive a rollback all the same.)
		delete(a.orphans, c.id)
		delete(a.hidden, c.id)
		delete(a.uncertain, c.id)
		e := c.e
		if p == migrate.PhaseLegacy && r.w.exp == nil && !c.del {
			e = r.expected(e, p)
		}
		if c.del {
			if had {
				r.freeValue(old.val)
			}
			delete(a.truth, c.id)
		} else {
			a.truth[c.id] = e
		}
		if r.w.exp != nil {
			continue
		}
		if had {
			vk, _ := r.cfg.View(old.key, old.val)
			r.w.imp.Remove(vk)
		}
		r.removeLegacyID(c.id)
		if !c.del {
			vk, vv := r.cfg.View(c.e.key, c.e.val)
			r.w.imp.Set(vk, vv)
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
	return r.cfg.Key(r.rng.IntN(r.cfg.Keys))
}

// deleteKey picks the key of a delete: mostly an entry the node has, by the
// key it was written with (a DEL carries the ADD's key); while some entry's
// fate is open (a write a crash cut short, an orphan), half the time that
// one, as the DEL a runtime retries after a failed ADD; sometimes any key.
func (r *run[K, V]) deleteKey() K {
	if open := r.openKeys(); len(open) > 0 && r.rng.IntN(2) == 0 {
		return open[r.rng.IntN(len(open))]
	}
	if len(r.acks.truth) > 0 && r.rng.IntN(5) > 0 {
		keys := make([]K, 0, len(r.acks.truth))
		for _, id := range sortedKeys(r.acks.truth) {
			keys = append(keys, r.acks.truth[id].key)
		}
		return keys[r.rng.IntN(len(keys))]
	}
	if r.cfg.Immutable {
		return r.cfg.Key(r.rng.IntN(r.nextKey + 1))
	}
	return r.cfg.Key(r.rng.IntN(r.cfg.Keys))
}

// openKeys are the keys of the entries whose fate is open: written by a
// write whose outcome is not known, or kept as orphans.
func (r *run[K, V]) openKeys() []K {
	var keys []K
	for _, id := range sortedKeys(r.acks.uncertain) {
		st := r.acks.uncertain[id].states
		keys = append(keys, st[len(st)-1].e.key)
	}
	for _, id := range sortedKeys(r.acks.orphans) {
		keys = append(keys, r.acks.orphans[id].key)
	}
	return keys
}

func (r *run[K, V]) removeLegacyID(id K) {
	for k := range r.w.imp.Snapshot() {
		if r.a.match(k) == id {
			r.w.imp.Remove(k)
		}
	}
}

// expect decides what the promise says a start of phase p with build b
// must do, from what the world knows: the file as the newer build reads
// it, and its own account of history. On the first attempt, it may inject
// an unreadable input first: a corrupt checkpoint, a partial listing.
func (r *run[K, V]) expect(p migrate.Phase, b build, mc migrate.Config[K, V], inject bool) expectation {
	if inject {
		r.inject(mc.Checkpoint != nil, mc.Legacy != nil)
	}
	sit := r.situation(p, b, mc)
	for _, rule := range refusals {
		if rule.when(sit) {
			return expectation{refusal: rule.why, sentinel: rule.sentinel, remedy: rule.remedy}
		}
	}
	return expectation{unreadable: sit.corrupt || sit.newer}
}

// situation is what a start meets, as the world sees it.
type situation struct {
	phase        migrate.Phase
	strict       bool
	discard      bool // Config.DiscardUnreadableCheckpoint
	corrupt      bool // the checkpoint is corrupt, and this binary reads it
	newer        bool // the checkpoint's schema is newer than this build's
	partial      bool // the listing will be partial
	usable       bool // this build can read the checkpoint, from this boot
	bootOld      bool // the checkpoint is from an earlier boot
	soleCopy     bool // nothing but the checkpoint holds the state
	staleLegacy  bool // phase 3 wrote the checkpoint last, and this phase writes legacy
	behind       bool // the world's account: the checkpoint may lack what legacy holds
	writesLegacy bool
}

func (r *run[K, V]) situation(p migrate.Phase, b build, mc migrate.Config[K, V]) situation {
	f := r.fileState()
	hasCkpt := mc.Checkpoint != nil
	sit := situation{
		phase:        p,
		strict:       mc.Strict,
		discard:      mc.DiscardUnreadableCheckpoint,
		corrupt:      hasCkpt && f.corrupt,
		newer:        hasCkpt && f.readable && f.meta.Schema > r.w.schemas[b],
		partial:      len(r.w.hide) > 0 && mc.Legacy != nil,
		bootOld:      f.readable && f.meta.BootID != "" && f.meta.BootID != r.w.bootID(),
		writesLegacy: r.w.exp != nil && mc.Legacy != nil && p != migrate.PhaseContract,
		behind:       r.acks.wholeMarked(f) || r.acks.keyedMarked(f),
	}
	sit.soleCopy = hasCkpt && soleCopy(p, mc.VolatileLegacy, f)
	sit.usable = hasCkpt && f.readable && !sit.newer && !sit.bootOld
	r.phase0Usable = sit.usable // over a file it cannot use, phase 0 marks the whole file
	sit.staleLegacy = f.readable && !sit.bootOld && sit.writesLegacy && f.meta.Phase == migrate.PhaseContract.String()
	return sit
}

// refusals are the restores the promise says must refuse, in the order the
// rules apply, each with what the error must match and what an operator
// does next.
var refusals = []struct {
	why      string
	sentinel error
	remedy   remedyKind
	when     func(situation) bool
}{
	{"under Strict, a corrupt checkpoint", checkpoint.ErrCorrupt, moveAside,
		func(s situation) bool { return s.strict && s.corrupt }},
	{"under Strict, a checkpoint of a newer schema", checkpoint.ErrNewerSchema, rollForward,
		func(s situation) bool { return s.strict && s.newer }},
	{"under Strict, a partial listing", nil, retry,
		func(s situation) bool { return s.strict && s.partial }},
	{"a newer checkpoint that is the sole copy", checkpoint.ErrNewerSchema, rollForward,
		func(s situation) bool { return s.newer && s.soleCopy && !s.bootOld }},
	{"a corrupt checkpoint that is the sole copy", checkpoint.ErrCorrupt, moveAside,
		func(s situation) bool { return s.corrupt && s.soleCopy && !s.discard }},
	{"a newer checkpoint that says legacy is stale", migrate.ErrUnsafeRestore, rollForward,
		func(s situation) bool { return s.newer && s.staleLegacy }},
	{"stale legacy that cannot be read in full", migrate.ErrUnsafeRestore, retry,
		func(s situation) bool { return s.usable && s.staleLegacy && s.partial }},
	{"phase 3 over a checkpoint behind legacy", migrate.ErrStale, runPhase2First,
		func(s situation) bool { return s.phase == migrate.PhaseContract && s.usable && s.behind }},
}

// inject may make the next restore meet a corrupt checkpoint or a partial
// listing.
func (r *run[K, V]) inject(hasCkpt, hasLegacy bool) {
	if r.cfg.Corruption && hasCkpt && r.w.disk.Bytes() != nil && r.rng.IntN(6) == 0 {
		checkpointtest.Corrupt(r.w.disk)
		r.logf("  the checkpoint is found corrupt")
	}
	if !r.cfg.PartialListings || !hasLegacy || r.rng.IntN(4) != 0 {
		return
	}
	listed := sortedKeys(r.w.imp.Snapshot())
	if len(listed) == 0 {
		return
	}
	r.w.hide = map[K]bool{}
	for n := 1 + r.rng.IntN(2); n > 0; n-- {
		k := listed[r.rng.IntN(len(listed))]
		r.w.hide[r.a.match(k)] = true
	}
	r.logf("  the next listing cannot read %d entries", len(r.w.hide))
}

// soleCopy reports whether the checkpoint f is the only copy of the state:
// in phase 3, and with a volatile legacy in every phase that reads it
// (phase 0 of this package included) unless a phase-0 run marked the
// whole file behind, whose state then died with that run. A keyed mark
// names the entries phase 0 wrote: the file is the sole copy of the rest.
// A repair's mark, or a partial listing's, says the file may lack
// commits, not that a registry held them.
func soleCopy(p migrate.Phase, volatile bool, f fileState) bool {
	marked := f.readable && (f.meta.Behind == phase0WholeMark || (f.meta.Behind == "" && f.meta.Phase == migrate.PhaseLegacy.String()))
	return p == migrate.PhaseContract || (volatile && !marked)
}

// phase0WholeMark is the mark of a phase-0 run over the whole file: one
// that started over a file it could not use, or one of a release before
// keyed marks.
const phase0WholeMark = "phase 0 (legacy) ran, which writes legacy only"

// fileState reads the checkpoint as the newer build would.
func (r *run[K, V]) fileState() fileState {
	snap, err := r.w.peek()
	switch {
	case err == nil:
		return fileState{readable: true, meta: snap.Meta}
	case errors.Is(err, checkpoint.ErrNotExist):
		return fileState{}
	}
	return fileState{corrupt: true}
}
