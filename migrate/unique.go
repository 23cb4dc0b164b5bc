package migrate

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// With Config.Unique, the served state is checked once it is built: two
// entries whose values share a part (an address) cannot both be live, so
// one of them is stale, and the sides say which (rule 22). This is the
// evidence that lets a restore after the old binary, or over a partial
// listing, serve each address once: the old binary deleted an entry and
// handed its address to another; a partial listing kept an entry it could
// not see that the old binary had deleted.

// holder is an entry that holds a part, with what the sides say of it.
type holder[K comparable] struct {
	key    K
	listed bool // legacy lists it: live, as the runtime (or the registry) says
	held   bool // the checkpoint holds it: acknowledged by this library
}

// rank orders holders by how sure it is that they are live: listed and
// held, listed (a write the checkpoint never saw, or a DEL the runtime has
// not finished), held only (an orphan, or an entry a partial listing
// could not read).
func (h holder[K]) rank() int {
	r := 0
	if h.listed {
		r += 2
	}
	if h.held {
		r++
	}
	return r
}

// resolveUnique drops, from what build served, every entry another entry
// outranks on a part of its value (rule 22), and reports it (Dropped;
// Errors where the sides cannot tell). In phase 3 an entry legacy lists
// and the checkpoint lacks that outranks one the checkpoint holds shows a
// run that did not write the checkpoint (the old binary) came after it:
// Restore refuses (rule 10). Not with VolatileLegacy (legacy is never
// evidence), nor in phase 0, which serves legacy as it is, nor when legacy
// could not be listed.
func (s *Store[K, V]) resolveUnique(in *sides[K, V], held map[K]bool, out *built[K, V], r *Report[K]) error {
	if held == nil {
		return nil
	}
	groups := s.sharedParts(in, held, out.vals)
	dropped := map[K]bool{}
	for _, g := range groups {
		best := slices.MaxFunc(g, func(a, b holder[K]) int { return a.rank() - b.rank() })
		winners := 0
		for _, h := range g {
			if h.rank() == best.rank() {
				winners++
			}
		}
		if winners > 1 {
			r.Errors = append(r.Errors, fmt.Errorf("%s hold a part of their values that no two entries may share (Config.Unique), and neither side says which is stale: both are served", holderList(g)))
			continue
		}
		for _, h := range g {
			if h.rank() == best.rank() || dropped[h.key] {
				continue
			}
			if s.cfg.Phase == PhaseContract && best.listed && !best.held && h.held {
				return restoreErr("%w: legacy lists %v, which the checkpoint never held, with a part of its value the checkpoint gives %v (Config.Unique): a run that does not write the checkpoint (the old binary) came after it; phase 3 needs a checkpoint level with legacy: run phase 2 (migrate) once, which lets legacy decide", ErrStale, best.key, h.key)
			}
			dropped[h.key] = true
		}
	}
	if len(dropped) == 0 {
		return nil
	}
	s.dropConflicts(in, out, r, dropped)
	return nil
}

// heldIDs returns the identities of the entries the checkpoint holds, where
// resolveUnique applies, and nil where it does not.
func (s *Store[K, V]) heldIDs(in *sides[K, V]) map[K]bool {
	if s.cfg.Unique == nil || s.cfg.VolatileLegacy || s.cfg.Phase == PhaseLegacy || !in.lg.read {
		return nil
	}
	held := make(map[K]bool, len(in.ck.entries))
	if in.ck.usable {
		for k := range in.ck.entries {
			held[s.id(k)] = true
		}
	}
	return held
}

// sharedParts returns, for every part held by two served entries or more,
// its holders, in a deterministic order.
func (s *Store[K, V]) sharedParts(in *sides[K, V], held map[K]bool, served map[K]V) [][]holder[K] {
	by := map[string][]K{}
	for k, v := range served {
		for _, u := range s.cfg.Unique(v) {
			by[u] = append(by[u], k)
		}
	}
	lidx := s.index(in.lg.entries)
	var groups [][]holder[K]
	for _, u := range slices.Sorted(maps.Keys(by)) {
		ks := by[u]
		if len(ks) < 2 {
			continue
		}
		g := make([]holder[K], len(ks))
		for i, k := range ks {
			_, listed := find(lidx, in.lg.entries, s.id(k))
			g[i] = holder[K]{key: k, listed: listed, held: held[s.id(k)]}
		}
		slices.SortFunc(g, func(a, b holder[K]) int { return strings.Compare(fmt.Sprintf("%#v", a.key), fmt.Sprintf("%#v", b.key)) })
		groups = append(groups, g)
	}
	return groups
}

// dropConflicts removes the entries resolveUnique found stale from what is
// served and from the report's other lists, reports them dropped, and has
// an explicit legacy that lists one delete it (rule 23), so that the next
// restore does not find it again.
func (s *Store[K, V]) dropConflicts(in *sides[K, V], out *built[K, V], r *Report[K], dropped map[K]bool) {
	lidx := s.index(in.lg.entries)
	for k := range dropped {
		delete(out.vals, k)
		out.setOrigin(k, out.def)
		r.Dropped = append(r.Dropped, k)
		if lk, listed := find(lidx, in.lg.entries, s.id(k)); listed && s.explicit != nil {
			in.lg.dupes = append(in.lg.dupes, lk)
		}
	}
	gone := func(k K) bool { return dropped[k] }
	r.Orphaned = slices.DeleteFunc(r.Orphaned, gone)
	r.Backfilled = slices.DeleteFunc(r.Backfilled, gone)
	r.Diverged = slices.DeleteFunc(r.Diverged, gone)
	out.changed = true
	s.count(out, r)
	if r.Stale == "" {
		r.Stale = fmt.Sprintf("%s shared a part of their values with entries that outrank them (Config.Unique): stale, dropped", entries(len(dropped)))
	}
}

// holderList names the keys of g.
func holderList[K comparable](g []holder[K]) string {
	parts := make([]string, len(g))
	for i, h := range g {
		parts[i] = fmt.Sprintf("%v", h.key)
	}
	return "entries " + strings.Join(parts, ", ")
}
