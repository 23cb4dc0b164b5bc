package migrate

import (
	"fmt"
	"maps"
)

// The third step of Restore builds the state to serve on the chosen basis,
// entry by entry (rules 18 to 22 of the package documentation): what to do
// with an entry both sides hold, one only the checkpoint holds and one only
// legacy holds; what is one entry twice is in build_duplicates.go.

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

// build makes the state to serve on basis b and fills in the report.
func (s *Store[K, V]) build(b basis, in *sides[K, V], r *Report[K]) built[K, V] {
	var out built[K, V]
	switch b {
	case basisLegacy:
		out = fromOneSide(in.lg.entries, OriginLegacy)
		if s.cfg.Verify && in.ck.usable {
			s.shadow(r, ReadCheckpoint, out.vals, in.ck.entries)
		}
	case basisHeal, basisCheckpoint:
		out = fromOneSide(in.ck.entries, OriginCheckpoint)
		if s.cfg.Phase == PhaseContract && in.lg.read && !s.cfg.VolatileLegacy {
			// Phase 3 serves what a legacy still configured holds and the
			// checkpoint lacks, and cross-checks the rest.
			s.backfillContract(&out, in, r)
			s.shadow(r, ReadLegacy, out.vals, in.lg.entries)
		}
	default:
		// combine adopts and changes the maps it is given; the sides stay
		// what was read, for repair to compare what is served with (rule
		// 23), and phase 0's mark-save to keep the checkpoint's own
		// entries (rule 26).
		ck, lg := in.ck, in.lg
		ck.entries, lg.entries = maps.Clone(ck.entries), maps.Clone(lg.entries)
		out = s.combine(b, &ck, &lg, r)
	}
	if in.lg.err != nil {
		r.Errors = append(r.Errors, in.lg.err)
	}
	s.count(&out, r)
	r.ReadFrom = readFrom(b, in, &out)
	// Rule 8: phase 1 reports a checkpoint that differs from what it built.
	if b == basisLegacyDecides && s.cfg.Phase == PhaseExpand && in.ck.usable && r.Stale == "" && out.changed {
		r.Stale = fmt.Sprintf("it differs from legacy (%s dropped, %s with other values, %s only in legacy): a phase-0 run or a crash since seq %d",
			entries(len(r.Dropped)), entries(len(r.Diverged)), entries(out.onlyLegacy), in.ck.meta.Seq)
	}
	return out
}

// readFrom says which sides restore built the served state from (see
// Report.ReadFrom).
func readFrom[K comparable, V any](b basis, in *sides[K, V], out *built[K, V]) Sides {
	ck, lg := in.ck.usable, len(in.lg.entries) > 0
	switch b {
	case basisLegacy:
		return ReadLegacy
	case basisReconcile:
		return ReadCheckpointAndLegacy
	case basisLegacyDecides:
		lg = true
	case basisHeal, basisCheckpoint:
		lg = out.onlyLegacy > 0 // phase 3's backfill
	}
	switch {
	case ck && lg:
		return ReadCheckpointAndLegacy
	case ck:
		return ReadCheckpoint
	case lg:
		return ReadLegacy
	}
	return ReadNothing
}

// count sets the report's counts of what is served: by the record served,
// the checkpoint's or legacy's (a backfill included).
func (s *Store[K, V]) count(out *built[K, V], r *Report[K]) {
	r.Restored = len(out.vals)
	fromCkpt := 0
	if out.def == OriginCheckpoint {
		fromCkpt = r.Restored
	}
	for k, o := range out.origin {
		if _, ok := out.vals[k]; !ok || o == out.def {
			continue
		}
		switch {
		case o == OriginCheckpoint:
			fromCkpt++
		case out.def == OriginCheckpoint:
			fromCkpt--
		}
	}
	r.FromCheckpoint, r.FromLegacy = fromCkpt, r.Restored-fromCkpt
}

// entries says "1 entry" or "n entries".
func entries(n int) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}

// backfillContract is rule 17's second half: it serves, in phase 3, what a
// legacy still configured holds and the checkpoint lacks: it is in use (an
// implicit legacy is never stale: the runtime still has the sandbox; an
// explicit one holds every write acknowledged until phase 3 ran), so
// handing it out as free would hand it out twice. Not for a volatile
// legacy, which holds nothing after a restart, nor for an explicit legacy
// that may hold what phase 3 deleted or what died with a reboot
// (explicitMayBeBehind).
func (s *Store[K, V]) backfillContract(out *built[K, V], in *sides[K, V], r *Report[K]) {
	if s.explicit != nil && explicitMayBeBehind(in) {
		return
	}
	idx := s.index(out.vals)
	var add []K
	for kl := range in.lg.entries {
		if _, ok := find(idx, out.vals, s.id(kl)); !ok {
			add = append(add, kl)
		}
	}
	for _, kl := range add {
		out.vals[kl] = in.lg.entries[kl]
		out.setOrigin(kl, OriginBackfill)
		r.Backfilled = append(r.Backfilled, kl)
	}
	out.onlyLegacy += len(add)
	out.changed = out.changed || len(add) > 0
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
			out.changed = s.applyOnlyCheckpoint(&out, kc, s.onlyCheckpointOf(b, ck, lg, kc), r) || out.changed
			continue
		}
		matched[kl] = struct{}{}
		k, v, ours, diverged := s.pick(kc, vc, kl, lg.entries[kl], ck.behind || ck.isMarked(s.id(kc)))
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
// has are dropped, or, when the listing was partial, kept (an implicit
// legacy) or not served (an explicit one; see checkpointOnly). Entries only
// legacy has are reported as backfilled outside phase 1, whose basis is
// legacy (rule 20).
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
			if s.applyOnlyCheckpoint(&out, kc, s.onlyCheckpointOf(basisLegacyDecides, ck, lg, kc), r) {
				out.changed = true
			} else {
				out.vals[kc] = vc
			}
			continue
		}
		matched++
		k, v, ours, diverged := s.pick(kc, vc, kl, lg.entries[kl], ck.behind || ck.isMarked(s.id(kc)))
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

// pick decides an entry both sides hold (rules 18 and 19): the checkpoint's record (kc, vc)
// or legacy's (kl, vl). It returns the key and value to serve, whether they
// are the checkpoint's, and whether the values diverged.
//
// When the values agree (Config.Equal), an implicit legacy loses to the
// checkpoint's richer key and value (CRI records no network or interface
// name), while an explicit legacy holds whole values and the keys an
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
	skipIt                            // not served until a listing in full decides it, reported in Errors
)

// onlyCheckpointOf decides the entry kc only the checkpoint ck holds: an
// entry phase 0 marked is legacy's to decide, and legacy lacks it (phase
// 0 deleted it, wrote it to a registry that died, or a partial listing
// hides what it wrote), so it is not served, and reported; any other as
// checkpointOnly says.
func (s *Store[K, V]) onlyCheckpointOf(b basis, ck *ckptView[K, V], lg *legacyView[K, V], kc K) onlyCheckpoint {
	switch {
	case ck.isMarked(s.id(kc)) && lg.complete:
		return dropIt // phase 0 deleted it (or, volatile, its registry died)
	case ck.isMarked(s.id(kc)):
		// A partial listing may hide a value phase 0 gave it since: the
		// checkpoint's older record could hand its part to two live
		// holders (Config.Unique). Not served, not dropped: a listing in
		// full decides it.
		return skipIt
	}
	return s.checkpointOnly(b, lg)
}

// checkpointOnly decides an entry only the checkpoint holds (rule 21).
// Its evidence is what legacy's kind lets its silence say: nothing, for a
// volatile legacy (empty after a restart), for a listing that is partial
// (the entry may be what it could not read) and for an observing legacy
// (a runtime lists a sandbox only once its network is set up); that it is
// gone, for a durable explicit legacy listed in full, which holds every
// write this library acknowledged (it is written before the write is
// acknowledged) and every one the old binary did.
func (s *Store[K, V]) checkpointOnly(b basis, lg *legacyView[K, V]) onlyCheckpoint {
	switch {
	case b == basisVolatile:
		return keepQuietly
	case !lg.complete:
		return keepOrphan
	case s.explicit != nil:
		return dropIt
	// An observing legacy can miss a live entry: keep it, unless the user
	// chose to prune, which phase 2 does (Config.PruneOrphans).
	case s.cfg.PruneOrphans && s.cfg.Phase == PhaseMigrate:
		return pruneIt
	}
	return keepOrphan
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
	case skipIt:
		r.Errors = append(r.Errors, fmt.Errorf("%s: phase 0 (legacy) wrote it, so legacy decides it, and the listing could not read it in full: not served until a listing in full decides it (the checkpoint's record is older)", keyText(kc)))
	}
	if what == dropIt || what == pruneIt || what == skipIt {
		delete(out.vals, kc)
		out.setOrigin(kc, out.def)
		return true
	}
	out.setOrigin(kc, OriginCheckpoint)
	return false
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

// explicitMayBeBehind reports whether an explicit legacy may hold, in
// phase 3, what is no longer in use (rule 17): the checkpoint says phase 3
// wrote it (phase 3 does not write legacy, so legacy still holds what it
// deleted), its header cannot be read to say which phase did, or it is
// from an earlier boot (rule 3: its state, and legacy's of then, died with
// the reboot). A file whose entries cannot all be read but whose header
// says phase 1 or 2 wrote it can say: legacy then holds every acknowledged
// write. With no file at all nothing says otherwise.
func explicitMayBeBehind[K comparable, V any](in *sides[K, V]) bool {
	m := in.ck.meta
	switch {
	case in.ck.bootOld:
		return true
	case in.ck.aside != nil && m.Phase == "":
		return true
	}
	return in.ck.exists && m.Phase == PhaseContract.String()
}
