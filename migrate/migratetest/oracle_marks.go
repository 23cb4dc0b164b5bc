package migratetest

import (
	"encoding/json"
	"slices"
)

// What the world knows of this package's phase-0 marks: the keys it wrote
// (a keyed mark) or the whole file, and what dies with a volatile legacy.

// wholeMarked reports whether the world's account says the checkpoint f
// is marked behind legacy as a whole: a mark phase 0 left over a file it
// could not use, or a partial listing's. A phase-0 run that wrote nothing
// leaves nothing to distrust, even where its restore saved the file (it
// healed legacy): the world does not read the file's header for that.
func (a *acked[K, V]) wholeMarked(fileState) bool {
	return a.behind
}

// mark records that phase 0 may have marked the entries chs change,
// before the write acknowledged (ok) or not: an acknowledged write that
// changed an entry surely reached legacy, so its mark went in first; one
// that failed, was cut short, or changed nothing (a Delete of an entry
// the Store does not hold writes nothing) may not have.
func (a *acked[K, V]) mark(chs []change[K, V], ok bool) {
	for _, c := range chs {
		old, had := a.truth[c.id]
		changes := (c.del && had) || (!c.del && (!had || !same(old, c.e)))
		a.marked[c.id] = a.marked[c.id] || (ok && changes)
	}
}

// startPhase0 records, as this package's phase 0 starts, what the
// checkpoint may hold of each entry: what was acknowledged, as far as it
// is known.
func (a *acked[K, V]) startPhase0() {
	a.beforePhase0 = map[K]maybeVal[K, V]{}
	for id, e := range a.truth {
		a.beforePhase0[id] = maybeVal[K, V]{states: []maybeState[K, V]{{e: e, present: true}}}
	}
	for id, e := range a.orphans {
		a.beforePhase0[id] = maybeVal[K, V]{states: []maybeState[K, V]{{e: e, present: true, optional: true}}}
	}
	for id, e := range a.hidden {
		a.beforePhase0[id] = maybeVal[K, V]{states: []maybeState[K, V]{{e: e, present: true, optional: true}}}
	}
	for id, m := range a.uncertain {
		a.beforePhase0[id] = maybeVal[K, V]{states: slices.Clone(m.states)}
	}
}

// keyedMarked reports whether the world's account says phase 0's keyed
// mark is in the checkpoint: a write it acknowledged proves it; one that
// failed or was cut short may have left it, which the file f then tells.
func (a *acked[K, V]) keyedMarked(f fileState) bool {
	if len(a.marked) == 0 {
		return false
	}
	for _, sure := range a.marked {
		if sure {
			return true
		}
	}
	if !f.readable {
		return false
	}
	var km struct {
		Kind string            `json:"kind"`
		Keys []json.RawMessage `json:"keys"`
	}
	return json.Unmarshal([]byte(f.meta.Behind), &km) == nil && km.Kind == "phase0" && len(km.Keys) > 0
}

// phase0Died is the death of what this package's phase 0 wrote to a
// volatile legacy, which its checkpoint does not hold: the entries its
// mark names are gone (the next restore drops them: legacy, which decides
// them, lacks them); one it may have marked is gone or as the checkpoint
// holds it, from before phase 0. The rest is the checkpoint's, and stays.
func (a *acked[K, V]) phase0Died() {
	for id, sure := range a.marked {
		delete(a.truth, id)
		delete(a.orphans, id)
		delete(a.hidden, id)
		delete(a.uncertain, id)
		if sure {
			continue
		}
		a.uncertain[id] = maybeVal[K, V]{states: append([]maybeState[K, V]{{}}, a.beforePhase0[id].states...)}
	}
	// The mark stays in the file, naming the same entries, until a
	// restore that reads legacy in full settles it.
}

// phase0WholeText is the text of phase 0's mark of the whole file.
const phase0WholeText = "phase 0 (legacy) ran, which writes legacy only"
