package migrate

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Building entry by entry, rule 22: what is one entry twice. Two keys of
// one side that Match calls one entry are resolved before the state is
// built (dedupe), the same way at every restore. And, with Config.Unique,
// the served state is checked once it is built: two entries whose values
// share a part (an address) cannot both be live, so one of them is stale
// where the sides show the other live, listed and held (resolveUnique);
// where they show neither, both are served and reported, and the part
// stays taken: an address leaked is pruned later, an address handed out
// twice is an outage.

// holder is an entry that holds a part, with what the sides say of it.
type holder[K comparable] struct {
	key    K
	listed bool // legacy lists it: live, as the runtime (or the registry) says
	held   bool // the checkpoint holds it: acknowledged by this library
}

// live reports whether both sides show the holder live: legacy lists it
// and the checkpoint holds it. Only such a holder is evidence against
// another: one side alone is no evidence of which is stale, since a
// runtime's listing lags both ways (an ADD acknowledged and not listed
// yet, a DEL acknowledged and still listed) and the old binary's writes
// look the same from here.
func (h holder[K]) live() bool { return h.listed && h.held }

// resolveUnique drops, from what build served, every entry that shares a
// part of its value (an address) with an entry the sides show live, and
// reports it (rule 22: Dropped; Errors where the sides cannot tell, and
// both are served, so that the part stays taken). A dropped entry is
// evidence against nothing: it holds no part any more. With VolatileLegacy
// (legacy is never evidence), in phase 0, which serves legacy as it is,
// and when legacy could not be listed, what is served twice is only
// reported (Errors).
func (s *Store[K, V]) resolveUnique(in *sides[K, V], held map[K]bool, out *built[K, V], r *Report[K]) error {
	if s.cfg.Unique == nil {
		return nil
	}
	groups := s.sharedParts(in, held, out.vals)
	if held == nil {
		// The sides are no evidence here (phase 0 serves legacy as it is;
		// a volatile legacy, or one that could not be listed, says nothing
		// of what is live): what is served twice is reported, not resolved.
		for _, g := range groups {
			r.Errors = append(r.Errors, fmt.Errorf("%s: %w, and phase %d (%s) cannot tell which is stale: all are served", holderList(g), ErrValueShared, int(s.cfg.Phase), s.cfg.Phase))
		}
		return nil
	}
	dropped := map[K]bool{}
	for _, g := range groups {
		if !slices.ContainsFunc(g, holder[K].live) {
			continue
		}
		for _, h := range g {
			if !h.live() {
				dropped[h.key] = true
			}
		}
	}
	for _, g := range groups {
		s.reportUndecided(g, dropped, r)
	}
	if len(dropped) > 0 {
		s.dropConflicts(in, out, r, dropped)
	}
	return nil
}

// reportUndecided reports a part that entries still share once the
// entries a live holder outranks are dropped: the sides cannot tell which
// is stale, so every one is served and the part stays taken (a leak until
// the gone one's delete, or a prune, at worst; never a part handed out
// twice).
func (s *Store[K, V]) reportUndecided(g []holder[K], dropped map[K]bool, r *Report[K]) {
	left := slices.DeleteFunc(slices.Clone(g), func(h holder[K]) bool { return dropped[h.key] })
	if len(left) < 2 {
		return
	}
	r.Errors = append(r.Errors, fmt.Errorf("%s: %w, and the sides do not say which is stale (%s): all are served, so the part stays taken; the one that is gone is freed by its delete or by `phaseshift prune-orphans`", holderList(left), ErrValueShared, holderEvidence(left)))
}

// holderEvidence says what the sides show of each holder.
func holderEvidence[K comparable](g []holder[K]) string {
	parts := make([]string, len(g))
	for i, h := range g {
		what := "only the checkpoint holds it"
		switch {
		case h.live():
			what = "listed and held"
		case h.listed:
			what = "only legacy lists it"
		}
		parts[i] = keyText(h.key) + ": " + what
	}
	return strings.Join(parts, "; ")
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
		parts := slices.Clone(s.cfg.Unique(v)) // the caller's slice is not sorted in place
		slices.Sort(parts)
		for _, u := range slices.Compact(parts) { // a value naming a part twice holds it once
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
			g[i] = holder[K]{key: k, listed: listed && in.lg.read, held: held[s.id(k)]}
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
		parts[i] = keyText(h.key)
	}
	return "entries " + strings.Join(parts, ", ")
}

// dedupe removes from m every key whose identity another key of m has, and
// reports it (rule 22): Match says they are one entry, so only one can be served. It
// keeps, deterministically, the key whose record the reference side ref
// holds (its key and value, then its key; for legacy, the checkpoint: the
// write it acknowledged), and otherwise the least key in the order of its
// text. It returns the keys it removed.
func (s *Store[K, V]) dedupe(m, ref map[K]V, side string, r *Report[K]) []K {
	if s.match == nil || len(m) == 0 {
		return nil
	}
	byID := make(map[K][]K, len(m))
	dup := false
	for k := range m {
		id := s.match(k)
		byID[id] = append(byID[id], k)
		dup = dup || len(byID[id]) > 1
	}
	if !dup {
		return nil
	}
	var refIdx map[K]K
	if len(ref) > 0 {
		refIdx = s.index(ref)
	}
	var removed []K
	for id, ks := range byID {
		if len(ks) < 2 {
			continue
		}
		keep := s.keepOf(ks, m, ref, refIdx, id)
		for _, k := range ks {
			if k == keep {
				continue
			}
			r.Errors = append(r.Errors, fmt.Errorf("%s: keys %s and %s match the same entry; keeping %s", side, keyText(keep), keyText(k), keyText(keep)))
			delete(m, k)
			removed = append(removed, k)
		}
	}
	return removed
}

// keepOf picks the key of ks (keys of m with identity id) that dedupe keeps.
func (s *Store[K, V]) keepOf(ks []K, m, ref map[K]V, refIdx map[K]K, id K) K {
	if rk, ok := refIdx[id]; ok {
		for _, k := range ks {
			if k == rk && s.equal(m[k], ref[rk]) {
				return k
			}
		}
		for _, k := range ks {
			if k == rk {
				return k
			}
		}
	}
	return slices.MinFunc(ks, func(a, b K) int { return strings.Compare(fmt.Sprintf("%#v", a), fmt.Sprintf("%#v", b)) })
}
