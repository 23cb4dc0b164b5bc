package migrate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"
)

// Phase 0 of this library marks what it writes, not the whole checkpoint
// (rule 26): before a write reaches legacy, the identities it touches are
// recorded in the checkpoint's Meta.Behind, as a keyed mark. A later phase
// takes legacy's word on those entries only, and the checkpoint's on the
// rest; a phase-0 run that wrote nothing leaves nothing to distrust.
//
// The keyed mark is JSON in Meta.Behind: {"kind":"phase0","text":...,
// "keys":[...]}, each key its identity (Config.Match) as JSON. A release
// that knows only the text marks reads it as a mark of the whole file (a
// repair's, by its text), which is what this library's phase 0 left
// before: more cautious, never less.

// keyedMark is the JSON form of a phase-0 mark that names its keys.
type keyedMark struct {
	Kind string            `json:"kind"`
	Text string            `json:"text"`
	Keys []json.RawMessage `json:"keys"`
}

// markKindPhase0 is the kind of a keyed phase-0 mark.
const markKindPhase0 = "phase0"

// parseKeyed returns the keyed phase-0 mark in behind, if it is one.
func parseKeyed(behind string) (keyedMark, bool) {
	var km keyedMark
	if !strings.HasPrefix(behind, "{") || json.Unmarshal([]byte(behind), &km) != nil || km.Kind != markKindPhase0 {
		return keyedMark{}, false
	}
	return km, true
}

// markText is what a report says of the mark behind: its text, or "" for
// a keyed mark that names nothing (a phase-0 run that wrote nothing).
func markText(behind string) string {
	if km, ok := parseKeyed(behind); ok {
		if len(km.Keys) == 0 {
			return ""
		}
		return km.Text
	}
	return behind
}

// markedIDs decodes the identities a keyed phase-0 mark names. A key that
// does not decode as K makes the mark one of the whole file: nothing is
// guessed.
func markedIDs[K comparable](km keyedMark) (map[K]bool, error) {
	ids := make(map[K]bool, len(km.Keys))
	for _, raw := range km.Keys {
		var k K
		if err := json.Unmarshal(raw, &k); err != nil {
			return nil, fmt.Errorf("a key of phase 0's mark does not decode as this binary's key type: %w", err)
		}
		ids[k] = true
	}
	return ids, nil
}

// encodeKeyed returns the keyed phase-0 mark naming ids, in a
// deterministic order.
func encodeKeyed[K comparable](ids map[K]bool) (string, error) {
	km := keyedMark{Kind: markKindPhase0, Text: fmt.Sprintf("%s, and wrote %s", markPhase0, entries(len(ids))), Keys: []json.RawMessage{}}
	for id := range ids {
		raw, err := json.Marshal(id)
		if err != nil {
			return "", err
		}
		km.Keys = append(km.Keys, raw)
	}
	slices.SortFunc(km.Keys, func(a, b json.RawMessage) int { return strings.Compare(string(a), string(b)) })
	b, err := json.Marshal(km)
	return string(b), err
}

// keyedPhase0 reports whether this Store, in phase 0, marks the keys it
// writes rather than the whole checkpoint: it needs a checkpoint it could
// read, and one that takes a commit without rewriting what it holds.
func (s *Store[K, V]) keyedPhase0() bool {
	return s.cfg.Phase == PhaseLegacy && s.commit != nil && s.marked != nil
}

// markWrites records in the checkpoint, before a phase-0 write reaches
// legacy, the identities its ops name (a Delete of an entry the Store
// does not hold included: its caller is told it is gone) and the keys
// plans move entries from, where it has not recorded them yet. A failure
// fails the write, with nothing written: a write the mark does not name
// could be lost to the next phase's restore.
func (s *Store[K, V]) markWrites(ctx context.Context, ops []op[K, V], plans []plan[K, V]) error {
	if !s.keyedPhase0() {
		return nil
	}
	var fresh []K
	add := func(k K) {
		if id := s.id(k); !s.marked[id] && !slices.Contains(fresh, id) {
			fresh = append(fresh, id)
		}
	}
	for _, o := range ops {
		add(o.key)
	}
	for _, p := range plans {
		if p.existed {
			add(p.oldKey)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	next := make(map[K]bool, len(s.marked)+len(fresh))
	for id := range s.marked {
		next[id] = true
	}
	for _, id := range fresh {
		next[id] = true
	}
	behind, err := encodeKeyed(next)
	if err != nil {
		return fmt.Errorf("migrate: %w: recording phase 0's mark: %w", ErrCheckpointWrite, err)
	}
	m := s.meta
	m.Behind = behind
	if err := s.timed(func() error { return s.commit.Commit(ctx, m, nil) }); err != nil {
		s.log.Warn("recording phase 0's mark in the checkpoint failed; the write is refused", zap.Int("keys", len(fresh)), zap.Error(err))
		return fmt.Errorf("migrate: %w: recording phase 0's mark before the write: %w", ErrCheckpointWrite, err)
	}
	s.marked, s.meta.Behind = next, behind
	return nil
}

// startMarks sets what phase 0 marks for this run, from the sides restore
// read: the keys an earlier phase-0 run marked are kept, and so is a mark
// of the whole file; a durable legacy that differs from the checkpoint
// shows that a run that does not write it (the old binary) came after it,
// which marks the whole file. It reports the mark every save of this run
// leaves.
func (s *Store[K, V]) startMarks(in *sides[K, V]) string {
	c := &in.ck
	switch {
	case s.cfg.Phase != PhaseLegacy || s.commit == nil:
		return markPhase0 // the whole file, as before: nothing to commit a keyed mark to
	case c.usable && c.aside != nil:
		return markPhase0 // what it could read, saved in its place, lacks the rest
	case !c.usable:
		// Missing, from an earlier boot or unreadable: restore saves
		// legacy's entries in its place, level with legacy.
		s.marked = map[K]bool{}
		none, _ := encodeKeyed(s.marked) // no key to encode: no error
		return none
	}
	found := c.meta.Behind
	switch {
	case c.marked != nil:
		s.marked = c.marked
		return found
	case behindMark(c.meta) != "":
		// A mark of the whole file stays one (a file phase 0 marked before
		// keyed marks, with Phase "legacy" and no Behind, included).
		return behindMark(c.meta)
	case s.explicit != nil && !s.cfg.VolatileLegacy && !s.legacyIsStale(c.meta) && s.differs(in):
		return markPhase0 // the old binary wrote legacy since: the whole file
	}
	s.marked = map[K]bool{}
	// A keyed mark that names nothing, not an empty Behind: a file whose
	// Phase is "legacy" and whose Behind is empty is one phase 0 marked as a
	// whole before keyed marks (behindMark).
	none, _ := encodeKeyed(s.marked) // no key to encode: no error
	return none
}

// differs reports whether a durable legacy, listed in full, holds other
// entries or values than the checkpoint: it holds every write this library
// acknowledged, so a difference is a write of a run that does not write
// the checkpoint. (A partial listing says nothing.)
func (s *Store[K, V]) differs(in *sides[K, V]) bool {
	if !in.lg.complete || len(in.lg.entries) != len(in.ck.entries) {
		return in.lg.complete
	}
	idx := s.index(in.ck.entries)
	for kl, vl := range in.lg.entries {
		kc, ok := find(idx, in.ck.entries, s.id(kl))
		if !ok || !s.equal(in.ck.entries[kc], vl) {
			return true
		}
	}
	return false
}

// isMarked reports whether phase 0 marked the entry of identity id: legacy
// decides it.
func (c *ckptView[K, V]) isMarked(id K) bool { return c.marked[id] }

// markedWhy says what a keyed phase-0 mark names.
func markedWhy[K comparable, V any](c *ckptView[K, V]) string {
	return fmt.Sprintf("seq %d: phase 0 (legacy) ran and wrote %s, which legacy decides", c.meta.Seq, entries(len(c.marked)))
}

// reportMarked reports, for a legacy that does not survive a restart,
// every entry phase 0 marked that is not served: phase 0 wrote it to a
// registry that died with it, so its last write is not known, and the
// checkpoint's record of it, if any, is older. It is named, not guessed.
func (s *Store[K, V]) reportMarked(c *ckptView[K, V], out *built[K, V], r *Report[K]) {
	if len(c.marked) == 0 || !s.cfg.VolatileLegacy {
		return
	}
	idx := s.index(out.vals)
	var lost []K
	for id := range c.marked {
		if _, ok := find(idx, out.vals, id); !ok {
			lost = append(lost, id)
		}
	}
	slices.SortFunc(lost, func(a, b K) int { return strings.Compare(keyText(a), keyText(b)) })
	for _, id := range lost {
		r.Errors = append(r.Errors, &LostError[K]{Key: id, Why: "phase 0 (legacy) wrote it to a legacy that does not survive a restart, and its last write died with it: not served (the checkpoint's record, if any, is older)"})
	}
}
