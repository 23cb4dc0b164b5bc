package migratetest

import (
	"fmt"
	"slices"

	"github.com/phaseshift/phaseshift/migrate"
)

// What Config.Unique asks for: the workload writes as an allocator does,
// never taking a value part another entry of the node holds, and handing a
// part a delete freed to a later write of another key; the oracle fails
// every step after which two served entries share a part.

// freedMax is how many freed values the workload remembers for reuse.
const freedMax = 8

// value draws the value of a write to key k. With Config.Unique, its parts
// are free: held by no entry the Store serves (taken) nor by any the
// harness knows may be live; half the time it is a value an acknowledged
// delete freed, as an allocator reuses the lowest free address. It
// reports false when Value gave no free value in many draws: an allocator
// whose pool is exhausted fails the ADD, and the caller makes no write.
func (r *run[K, V]) value(k K, taken map[string]bool) (V, bool) {
	if r.cfg.Unique == nil {
		return r.cfg.Value(r.rng, k), true
	}
	known := r.knownParts()
	free := func(v V) bool {
		for _, u := range r.cfg.Unique(v) {
			if taken[u] || known[u] {
				return false
			}
		}
		return true
	}
	var v V
	found := false
	if len(r.freed) > 0 && r.rng.IntN(2) == 0 {
		for i := len(r.freed) - 1; i >= 0 && !found; i-- {
			v, found = r.freed[i], free(r.freed[i])
		}
	}
	for tries := 0; tries < 64 && !found; tries++ {
		v = r.cfg.Value(r.rng, k)
		found = free(v)
	}
	if !found {
		r.noFree++
		return v, false
	}
	for _, u := range r.cfg.Unique(v) {
		taken[u] = true
	}
	return v, true
}

// taken returns the parts of the values s serves, for value.
func (r *run[K, V]) taken(s *migrate.Store[K, V]) map[string]bool {
	t := map[string]bool{}
	if r.cfg.Unique == nil {
		return t
	}
	for _, v := range s.All() {
		for _, u := range r.cfg.Unique(v) {
			t[u] = true
		}
	}
	return t
}

// knownParts are the parts of every value the harness knows may be live:
// acknowledged, kept as an orphan, hidden by a partial listing, or the
// outcome of a write not known.
func (r *run[K, V]) knownParts() map[string]bool {
	known := map[string]bool{}
	add := func(v V) {
		for _, u := range r.cfg.Unique(v) {
			known[u] = true
		}
	}
	for _, m := range []map[K]entry[K, V]{r.acks.truth, r.acks.orphans, r.acks.hidden} {
		for _, e := range m {
			add(e.val)
		}
	}
	for _, m := range r.acks.uncertain {
		for _, st := range m.states {
			if st.present {
				add(st.e.val)
			}
		}
	}
	return known
}

// freeValue remembers the value of an entry an acknowledged delete
// removed.
func (r *run[K, V]) freeValue(v V) {
	if r.cfg.Unique == nil {
		return
	}
	r.freed = append(r.freed, v)
	if len(r.freed) > freedMax {
		r.freed = slices.Delete(r.freed, 0, len(r.freed)-freedMax)
	}
}

// checkUnique: no part of a value is served to two entries, unless the
// last restore reported that the sides could not say which was stale
// (rule 22) or reported one of them as an orphan, and then not to two that
// may both be live, as the world knows
// it (acknowledged, hidden by a partial listing, or the outcome of a write
// not known): a part still served to an entry that is gone beside a live
// one is then a leak the restore reported, not a part handed out twice. It
// stays taken.
func (r *run[K, V]) checkUnique(served map[K]entry[K, V]) []string {
	if r.cfg.Unique == nil {
		return nil
	}
	var problems []string
	holder := map[string]K{}
	for _, id := range sortedKeys(served) {
		e := served[id]
		if (r.shared || r.orphans[id]) && !r.mayBeLive(id) {
			continue
		}
		for _, u := range r.cfg.Unique(e.val) {
			if other, ok := holder[u]; ok && other != e.key {
				problems = append(problems, fmt.Sprintf("TWICE: %q is served under %v and under %v", u, other, e.key))
				continue
			}
			holder[u] = e.key
		}
	}
	return problems
}

// mayBeLive reports whether the entry with identity id may be live, as the
// world knows it.
func (r *run[K, V]) mayBeLive(id K) bool {
	if _, ok := r.acks.truth[id]; ok {
		return true
	}
	if _, ok := r.acks.hidden[id]; ok {
		return true
	}
	_, ok := r.acks.uncertain[id]
	return ok
}

// servedUnique checks what s serves now, after a step's writes.
func (r *run[K, V]) servedUnique(s *migrate.Store[K, V]) []string {
	if r.cfg.Unique == nil {
		return nil
	}
	problems := r.checkUnique(r.servedByID(s))
	for _, pr := range problems {
		r.logf("  after the writes: %s", pr)
	}
	return problems
}

// noFreeValue counts the writes whose value Config.Value could not draw
// free (Config.Unique), across the runs of a Check.
type noFreeValue struct{ n int }

func (f *noFreeValue) add(n int) { f.n += n }

// err says that Value could not draw free values, which turns the ADDs it
// could not serve into DELs and the workload into one that holds few
// entries: such a Check proves little, so it fails.
func (f *noFreeValue) err(writes int) error {
	if f.n == 0 {
		return nil
	}
	return fmt.Errorf("migratetest: Config.Value drew no value whose parts are free (Config.Unique) in 64 tries, for %d of %d writes, which became deletes: give Value a pool of values much larger than the entries a node holds", f.n, writes)
}
