package migrate

import (
	"fmt"
	"slices"
	"strings"
)

// The third step of Restore builds the state to serve on the chosen basis,
// entry by entry: what to do with an entry both sides hold, one only the
// checkpoint holds and one only legacy holds.

// built is the state restore serves and how it came about.
type built[K comparable, V any] struct {
	vals       map[K]V
	origin     map[K]Origin // entries whose origin is not def
	def        Origin
	changed    bool // vals differs from what the checkpoint holds
	onlyLegacy int  // entries only legacy had
}

func (b *built[K, V]) setOrigin(k K, o Origin) {
	if o == b.def {
		delete(b.origin, k)
		return
	}
	if b.origin == nil {
		b.origin = make(map[K]Origin)
	}
	b.origin[k] = o
}

// fromOneSide serves one side's entries as they are.
func fromOneSide[K comparable, V any](entries map[K]V, o Origin) built[K, V] {
	if entries == nil {
		entries = map[K]V{}
	}
	return built[K, V]{vals: entries, def: o}
}

// pick decides an entry both sides hold: the checkpoint's record (kc, vc)
// or legacy's (kl, vl). It returns the key and value to serve, whether they
// are the checkpoint's, and whether the values diverged.
//
// When the values agree (Config.Equal), an observing legacy loses to the
// checkpoint's richer key and value (CRI records no network or interface
// name), while a legacy the Store writes holds whole values and the keys an
// old binary wrote, so its key wins. When they diverge, Config.Merge picks
// the value, and the key comes with it: the checkpoint's if the merged
// value is the checkpoint's, legacy's otherwise. Over a checkpoint marked
// behind legacy (behind), legacy's record wins whatever Merge says: what the
// checkpoint holds differently is older than what a run that wrote legacy
// only acknowledged since.
func (s *Store[K, V]) pick(kc K, vc V, kl K, vl V, behind bool) (K, V, bool, bool) {
	if s.equal(vc, vl) {
		if s.explicit != nil && kl != kc {
			return kl, vl, false, false
		}
		return kc, vc, true, false
	}
	if behind {
		return kl, vl, false, true
	}
	v := s.merge(kc, vc, vl)
	if s.equal(v, vc) {
		return kc, v, true, true
	}
	return kl, v, false, true
}

// onlyCheckpoint is what becomes of an entry only the checkpoint holds.
type onlyCheckpoint int

const (
	keepQuietly onlyCheckpoint = iota // served, not reported
	keepOrphan                        // served, reported in Orphaned
	dropIt                            // not served, reported in Dropped
	pruneIt                           // not served, reported in Pruned
	skipIt                            // not served: its winning record could not be read
)

// checkpointOnly decides an entry only the checkpoint holds.
func (s *Store[K, V]) checkpointOnly(b basis, lg *legacyView[K, V]) onlyCheckpoint {
	switch {
	// A volatile legacy is empty after a restart: its silence proves
	// nothing.
	case b == basisVolatile:
		return keepQuietly
	// Nothing is dropped on the evidence of a partial listing: the entry
	// may be one legacy could not read. Where legacy's record would win (a
	// legacy the Store writes), the checkpoint's may be stale: it is not
	// served, and legacy, where the entry lives, stays the authority (the
	// checkpoint is marked behind it). Where the checkpoint's record would
	// win (a legacy that observes), it is kept.
	case !lg.complete && s.explicit != nil:
		return skipIt
	case !lg.complete:
		return keepOrphan
	// Phase 1 (and phase 2 over a checkpoint behind legacy) takes legacy's
	// word on which entries exist.
	case b == basisLegacyDecides:
		return dropIt
	// A legacy the Store writes holds every acknowledged write: an entry
	// only the checkpoint has was deleted by an old binary, or is a phase-2
	// write that crashed before reaching legacy and was never acknowledged.
	case s.explicit != nil:
		return dropIt
	// An observing legacy (CRI) can miss a live entry: keep it, unless the
	// user chose to prune.
	case s.cfg.PruneOrphans:
		return pruneIt
	}
	return keepOrphan
}

// combine builds the state from both sides on basis b (basisLegacyDecides,
// basisReconcile or basisVolatile), reporting in r what it did with each
// entry. It takes ownership of both maps.
func (s *Store[K, V]) combine(b basis, ck *ckptView[K, V], lg *legacyView[K, V], r *Report[K]) built[K, V] {
	if b == basisLegacyDecides {
		return s.legacyDecides(ck, lg, r)
	}
	out := fromOneSide(ck.entries, OriginCheckpoint)
	lidx := s.index(lg.entries)
	matched := make(map[K]struct{}, len(lg.entries))
	var fromLegacy []K // entries served with legacy's record, added after the loop
	for kc, vc := range out.vals {
		kl, ok := find(lidx, lg.entries, s.id(kc))
		if !ok {
			out.changed = s.applyOnlyCheckpoint(&out, kc, s.checkpointOnly(b, lg), r) || out.changed
			continue
		}
		matched[kl] = struct{}{}
		k, v, ours, diverged := s.pick(kc, vc, kl, lg.entries[kl], ck.behind)
		if diverged {
			r.Diverged = append(r.Diverged, k)
		}
		switch {
		case !ours:
			delete(out.vals, kc)
			lg.entries[kl] = v
			fromLegacy = append(fromLegacy, kl)
		case !s.equal(v, vc):
			out.vals[kc] = v
			out.changed = true
		}
	}
	for _, kl := range fromLegacy {
		out.vals[kl] = lg.entries[kl]
		out.setOrigin(kl, OriginLegacy)
		out.changed = true
	}
	for kl, vl := range lg.entries {
		if _, ok := matched[kl]; ok {
			continue
		}
		out.vals[kl] = vl
		out.setOrigin(kl, OriginBackfill)
		out.changed = true
		out.onlyLegacy++
		r.Backfilled = append(r.Backfilled, kl)
	}
	return out
}

// legacyDecides builds the state from legacy's entries, each with the
// checkpoint's record where pick prefers it. Entries only the checkpoint
// has are dropped, or, when the listing was partial, kept (a legacy that
// observes) or not served (a legacy the Store writes; see checkpointOnly).
// Entries only legacy
// has are reported as backfilled outside phase 1, whose basis is legacy.
func (s *Store[K, V]) legacyDecides(ck *ckptView[K, V], lg *legacyView[K, V], r *Report[K]) built[K, V] {
	onlyLegacy := OriginBackfill
	if s.cfg.Phase == PhaseExpand {
		onlyLegacy = OriginLegacy
	}
	out := fromOneSide(lg.entries, onlyLegacy) // adopts lg.entries: look at it first
	nLegacy := len(lg.entries)
	lidx := s.index(lg.entries)
	matched := 0
	var fromCkpt []K // entries served with the checkpoint's record, added after the loop
	for kc, vc := range ck.entries {
		kl, ok := find(lidx, lg.entries, s.id(kc))
		if !ok {
			if s.applyOnlyCheckpoint(&out, kc, s.checkpointOnly(basisLegacyDecides, lg), r) {
				out.changed = true
			} else {
				out.vals[kc] = vc
			}
			continue
		}
		matched++
		k, v, ours, diverged := s.pick(kc, vc, kl, lg.entries[kl], ck.behind)
		if diverged {
			r.Diverged = append(r.Diverged, k)
		}
		if !ours {
			out.vals[kl] = v
			out.setOrigin(kl, OriginLegacy)
			out.changed = true
			continue
		}
		if k != kl {
			delete(out.vals, kl)
		}
		ck.entries[kc] = v
		fromCkpt = append(fromCkpt, kc)
		out.changed = out.changed || !s.equal(v, vc)
	}
	for _, kc := range fromCkpt {
		out.vals[kc] = ck.entries[kc]
		out.setOrigin(kc, OriginCheckpoint)
	}
	out.onlyLegacy = nLegacy - matched
	if onlyLegacy == OriginBackfill && out.onlyLegacy > 0 {
		// Every entry served with a record of the checkpoint, or with
		// legacy's record of a matched entry, has its origin set.
		for k := range out.vals {
			if _, set := out.origin[k]; !set {
				r.Backfilled = append(r.Backfilled, k)
			}
		}
	}
	// Entries only legacy has are new to the checkpoint. (A checkpoint that
	// could not be used is replaced all the same: see needSave.)
	out.changed = out.changed || out.onlyLegacy > 0
	return out
}

// applyOnlyCheckpoint carries out what checkpointOnly decided for kc, and
// reports whether the served state now differs from the checkpoint.
func (s *Store[K, V]) applyOnlyCheckpoint(out *built[K, V], kc K, what onlyCheckpoint, r *Report[K]) bool {
	switch what {
	case keepOrphan:
		r.Orphaned = append(r.Orphaned, kc)
	case dropIt:
		r.Dropped = append(r.Dropped, kc)
	case pruneIt:
		r.Pruned = append(r.Pruned, kc)
	}
	if what == dropIt || what == pruneIt || what == skipIt {
		delete(out.vals, kc)
		out.setOrigin(kc, out.def)
		return true
	}
	out.setOrigin(kc, OriginCheckpoint)
	return false
}

// index maps identity to key for m, or returns nil when Match is nil and
// the identity is the key itself.
func (s *Store[K, V]) index(m map[K]V) map[K]K {
	if s.match == nil {
		return nil
	}
	idx := make(map[K]K, len(m))
	for k := range m {
		idx[s.match(k)] = k
	}
	return idx
}

// find returns the key of the entry of m with identity id; idx is
// s.index(m).
func find[K comparable, V any](idx map[K]K, m map[K]V, id K) (K, bool) {
	if idx != nil {
		k, ok := idx[id]
		return k, ok
	}
	_, ok := m[id]
	return id, ok
}

// dedupe removes from m every key whose identity another key of m has, and
// reports it: Match says they are one entry, so only one can be served. It
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
			r.Errors = append(r.Errors, fmt.Errorf("%s: keys %v and %v match the same entry; keeping %v", side, keep, k, keep))
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

// shadow compares the served entries with a side read only to compare, and
// records the differences in r.
func (s *Store[K, V]) shadow(r *Report[K], side Sides, served, other map[K]V) {
	sh := &Shadow[K]{Side: side}
	oidx := s.index(other)
	matched := make(map[K]struct{}, len(other))
	for k, v := range served {
		okey, ok := find(oidx, other, s.id(k))
		if !ok {
			sh.OnlyServed = append(sh.OnlyServed, k)
			continue
		}
		matched[okey] = struct{}{}
		if !s.equal(v, other[okey]) {
			sh.Diverged = append(sh.Diverged, k)
		}
	}
	for k := range other {
		if _, ok := matched[k]; !ok {
			sh.OnlyShadow = append(sh.OnlyShadow, k)
		}
	}
	r.Shadow = sh
}
