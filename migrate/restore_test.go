package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

var (
	phases = []migrate.Phase{migrate.PhaseLegacy, migrate.PhaseExpand, migrate.PhaseMigrate, migrate.PhaseContract}
	// legacyL is what legacy holds in every case below.
	legacyL = map[string]int{"a": 1, "b": 2, "c": 3}
	// staleC is a checkpoint that missed a phase-0 run: b changed, c was
	// added and d deleted behind its back.
	staleC = map[string]int{"a": 1, "b": 20, "d": 4}
	// contractC is a checkpoint phase 3 wrote after legacy stopped being
	// written: e is only there.
	contractC = map[string]int{"a": 1, "b": 2, "c": 3, "e": 5}
	// orphanC holds every entry legacy lists, b with another value, and d,
	// which legacy lacks: an orphan for an implicit legacy.
	orphanC = map[string]int{"a": 1, "b": 20, "c": 3, "d": 4}
)

// want is what one restore must do.
type want struct {
	err         error // nil, or what the error must match
	served      map[string]int
	readFrom    migrate.Sides
	stale       bool // Report.Stale set
	legacyStale bool
	quarantined bool
	rewritten   bool
	backfilled  []string
	dropped     []string
	orphaned    []string
	diverged    []string
	shadow      *shadowWant
	errors      int            // len(Report.Errors)
	ckptAfter   map[string]int // what the checkpoint holds afterwards; nil: as before
	ckptPhase   string         // its writer phase afterwards, when ckptAfter is set
	legacyAfter map[string]int // explicit legacy afterwards; nil: legacyL
}

type shadowWant struct {
	side                         migrate.Sides
	onlyShadow, onlyServed, divg []string
}

type setup struct {
	name  string
	rules []int // the rules of the package doc the case is about, besides the phase's own
	write func(t *testing.T, w *world)
	want  func(p migrate.Phase, explicit, strict bool) want
}

// phaseRule is the rule that builds on the checkpoint in phase p (or on
// legacy, in phases 0 and 1) when no other rule decides first.
var phaseRule = map[migrate.Phase]int{migrate.PhaseLegacy: 12, migrate.PhaseExpand: 13, migrate.PhaseMigrate: 16, migrate.PhaseContract: 17}

// ruleTag names a test by the rules it is about: "rule4,rule17", which
// go test -run '/rule17\b' finds.
func ruleTag(rules ...int) string {
	slices.Sort(rules)
	rules = slices.Compact(rules)
	tags := make([]string, len(rules))
	for i, r := range rules {
		tags[i] = fmt.Sprintf("rule%d", r)
	}
	return strings.Join(tags, ",")
}

func sorted(ks []string) []string {
	if len(ks) == 0 {
		return nil
	}
	out := slices.Clone(ks)
	slices.Sort(out)
	return out
}

func keys(m map[string]int) []string { return sorted(slices.Collect(maps.Keys(m))) }

// saved sets what the checkpoint holds after restore: served, recorded
// as written by phase p (phase 0 records its mark, "legacy").
func saved(p migrate.Phase, w want) want {
	w.rewritten = true
	w.ckptAfter, w.ckptPhase = w.served, p.String()
	return w
}

// phase0 is phase 0 with a checkpoint: it serves legacy. A file it can use
// (kept: its entries) it leaves as it is: a run that writes nothing leaves
// nothing to distrust, and one that writes marks the keys it writes. A
// file it cannot use (kept nil) or moves aside is replaced by one marked
// behind legacy as a whole, holding legacy's entries, or those it read.
func phase0(w want, kept map[string]int) want {
	w.served, w.readFrom = legacyL, migrate.ReadLegacy
	if kept != nil && !w.quarantined {
		return w
	}
	w = saved(migrate.PhaseLegacy, w)
	if kept != nil {
		w.ckptAfter = kept
	}
	return w
}

// fromLegacyOnly is phases 1 and 2 over a checkpoint they cannot use:
// legacy decides, and the file is rewritten.
func fromLegacyOnly(p migrate.Phase, w want) want {
	w.served, w.readFrom = legacyL, migrate.ReadLegacy
	if p == migrate.PhaseMigrate {
		w.backfilled = keys(legacyL)
	}
	return saved(p, w)
}

// phase3 is phase 3 over a checkpoint holding ck (nil: none it can use),
// written by ckPhase ("" for none): it serves ck and what legacy holds that
// ck lacks (in use: an observing legacy is never stale, and one the Store
// writes holds every write acknowledged until phase 3 ran), unless legacy
// is one the Store writes and the file says phase 3 wrote it or was moved
// aside; it cross-checks the rest, and saves when it added anything or the
// file does not record phase 3 yet.
func phase3(explicit bool, ck map[string]int, ckPhase string, w want) want {
	served := maps.Clone(ck)
	if served == nil {
		served = map[string]int{}
	}
	backfill := !explicit || (ckPhase != "contract" && !w.quarantined)
	var onlyShadow, onlyServed, divg []string
	for k, v := range legacyL {
		switch cv, ok := ck[k]; {
		case !ok && backfill:
			served[k] = v
			w.backfilled = append(w.backfilled, k)
		case !ok:
			onlyShadow = append(onlyShadow, k)
		case cv != v:
			divg = append(divg, k)
		}
	}
	for k := range ck {
		if _, ok := legacyL[k]; !ok {
			onlyServed = append(onlyServed, k)
		}
	}
	w.served, w.backfilled = served, sorted(w.backfilled)
	w.shadow = crossCheck(sorted(onlyShadow), sorted(onlyServed), sorted(divg))
	switch {
	case ck != nil && len(w.backfilled) > 0:
		w.readFrom = migrate.ReadCheckpointAndLegacy
	case ck != nil:
		w.readFrom = migrate.ReadCheckpoint
	case len(w.backfilled) > 0:
		w.readFrom = migrate.ReadLegacy
	default:
		w.readFrom = migrate.ReadNothing
	}
	if len(w.backfilled) > 0 || ckPhase != "contract" || w.quarantined || w.stale {
		return saved(migrate.PhaseContract, w)
	}
	return w
}

// crossCheck is phase 3's comparison with legacy.
func crossCheck(onlyShadow, onlyServed, divg []string) *shadowWant {
	return &shadowWant{side: migrate.ReadLegacy, onlyShadow: onlyShadow, onlyServed: onlyServed, divg: divg}
}

// staleByContent is what phases 1 and 2 make of staleC against legacyL:
// legacy decides which entries exist in phase 1 (d dropped, c added); phase
// 2 backfills c and keeps d as an orphan of an observing legacy, drops it
// for one the Store writes. b diverges: the default Merge keeps legacy's 2.
func staleByContent(p migrate.Phase, explicit bool, w want) want {
	b := 2 // legacy's value wins by default
	w.diverged = []string{"b"}
	w.readFrom = migrate.ReadCheckpointAndLegacy
	w.served = map[string]int{"a": 1, "b": b, "c": 3}
	switch {
	case p == migrate.PhaseExpand && explicit:
		w.dropped, w.stale = []string{"d"}, true
	case p == migrate.PhaseExpand:
		// The runtime's silence on d is no evidence that it is gone.
		w.orphaned, w.stale = []string{"d"}, true
		w.served = map[string]int{"a": 1, "b": b, "c": 3, "d": 4}
	case w.stale && explicit: // phase 2 over a file behind legacy restores as phase 1
		w.backfilled, w.dropped = []string{"c"}, []string{"d"}
	case w.stale:
		w.backfilled, w.orphaned = []string{"c"}, []string{"d"}
		w.served = map[string]int{"a": 1, "b": b, "c": 3, "d": 4}
	case explicit:
		// An explicit legacy holds every acknowledged write: legacy
		// decides which entries exist.
		w.backfilled, w.dropped = []string{"c"}, []string{"d"}
	default:
		// An implicit legacy lists c, which the checkpoint never held,
		// and not d: its listing lags both ways (an ADD not listed yet, a
		// DEL not finished), so neither is evidence of history. c is
		// backfilled, and d kept as an orphan (rule 21).
		w.backfilled, w.orphaned = []string{"c"}, []string{"d"}
		w.served = map[string]int{"a": 1, "b": b, "c": 3, "d": 4}
	}
	return saved(p, w)
}

var restoreCases = []setup{
	{
		name:  "missing checkpoint",
		rules: []int{1, 25},
		write: func(t *testing.T, w *world) {},
		want: func(p migrate.Phase, explicit, strict bool) want {
			switch p {
			case migrate.PhaseLegacy:
				return phase0(want{}, nil)
			case migrate.PhaseExpand, migrate.PhaseMigrate:
				return fromLegacyOnly(p, want{})
			default:
				return phase3(explicit, nil, "", want{})
			}
		},
	},
	{
		name:  "fresh checkpoint",
		rules: []int{18},
		write: func(t *testing.T, w *world) { w.saveCheckpoint(t, migrate.PhaseExpand, legacyL, "") },
		want: func(p migrate.Phase, explicit, strict bool) want {
			switch p {
			case migrate.PhaseLegacy:
				return phase0(want{}, legacyL)
			case migrate.PhaseExpand, migrate.PhaseMigrate:
				// Current: nothing to rewrite.
				return want{served: legacyL, readFrom: migrate.ReadCheckpointAndLegacy}
			default:
				return phase3(explicit, legacyL, "expand", want{})
			}
		},
	},
	{
		name:  "checkpoint stale by content",
		rules: []int{8, 19, 20, 21},
		write: func(t *testing.T, w *world) { w.saveCheckpoint(t, migrate.PhaseMigrate, staleC, "") },
		want: func(p migrate.Phase, explicit, strict bool) want {
			switch {
			case p == migrate.PhaseLegacy && explicit:
				// A durable legacy that differs from the file: a run that
				// does not write the file came after it. Phase 0 marks the
				// whole file (and keeps its entries).
				w := saved(migrate.PhaseLegacy, want{served: legacyL, readFrom: migrate.ReadLegacy})
				w.ckptAfter = staleC
				return w
			case p == migrate.PhaseLegacy:
				return phase0(want{}, staleC)
			case p == migrate.PhaseExpand, p == migrate.PhaseMigrate:
				return staleByContent(p, explicit, want{})
			default:
				return phase3(explicit, staleC, "migrate", want{})
			}
		},
	},
	{
		name:  "checkpoint from an earlier boot",
		rules: []int{3},
		write: func(t *testing.T, w *world) { w.saveCheckpoint(t, migrate.PhaseContract, staleC, "boot-0") },
		want: func(p migrate.Phase, explicit, strict bool) want {
			switch p {
			case migrate.PhaseLegacy:
				return phase0(want{stale: true}, nil)
			case migrate.PhaseExpand, migrate.PhaseMigrate:
				return fromLegacyOnly(p, want{stale: true})
			default:
				return phase3(explicit, nil, "contract", want{stale: true})
			}
		},
	},
	{
		name:  "checkpoint written by phase 3",
		rules: []int{9, 21, 23},
		write: func(t *testing.T, w *world) { w.saveCheckpoint(t, migrate.PhaseContract, contractC, "") },
		want: func(p migrate.Phase, explicit, strict bool) want {
			if p == migrate.PhaseContract {
				return phase3(explicit, contractC, "contract", want{})
			}
			if explicit {
				// Legacy missed e: the checkpoint serves and legacy is healed.
				return saved(p, want{served: contractC, readFrom: migrate.ReadCheckpoint, legacyStale: true, legacyAfter: contractC})
			}
			// An observing legacy is never stale: e came and went outside.
			switch p {
			case migrate.PhaseLegacy:
				return phase0(want{}, contractC)
			default:
				return want{served: contractC, readFrom: migrate.ReadCheckpointAndLegacy, orphaned: []string{"e"}}
			}
		},
	},
	{
		name:  "checkpoint behind legacy (marked by a phase-0 run)",
		rules: []int{7, 10, 14},
		write: func(t *testing.T, w *world) { w.saveCheckpoint(t, migrate.PhaseLegacy, staleC, "") },
		want: func(p migrate.Phase, explicit, strict bool) want {
			switch p {
			case migrate.PhaseLegacy:
				// Already marked: nothing to rewrite.
				return want{served: legacyL, readFrom: migrate.ReadLegacy}
			case migrate.PhaseExpand, migrate.PhaseMigrate:
				// Phase 2 restores as phase 1 does: legacy decides.
				return staleByContent(p, explicit, want{stale: true})
			default:
				return want{err: migrate.ErrStale}
			}
		},
	},
	{
		name:  "corrupt checkpoint",
		rules: []int{4, 5},
		write: func(t *testing.T, w *world) {
			w.saveCheckpoint(t, migrate.PhaseMigrate, staleC, "")
			checkpointtest.Corrupt(w.cp)
		},
		want: func(p migrate.Phase, explicit, strict bool) want {
			return unreadable(p, strict, checkpoint.ErrCorrupt)
		},
	},
	{
		name:  "checkpoint with a newer schema",
		rules: []int{4, 5},
		write: func(t *testing.T, w *world) {
			w.saveCheckpoint(t, migrate.PhaseMigrate, staleC, "")
			require.NoError(t, checkpointtest.SetSchema(w.cp, 2))
		},
		want: func(p migrate.Phase, explicit, strict bool) want {
			if p == migrate.PhaseContract {
				// The sole copy: a binary rollback must not replace it.
				return want{err: checkpoint.ErrNewerSchema}
			}
			return unreadable(p, strict, checkpoint.ErrNewerSchema)
		},
	},
	{
		name:  "checkpoint with a newer schema, written by phase 3",
		rules: []int{4, 5, 9},
		write: func(t *testing.T, w *world) {
			w.saveCheckpoint(t, migrate.PhaseContract, contractC, "")
			require.NoError(t, checkpointtest.SetSchema(w.cp, 2))
		},
		want: func(p migrate.Phase, explicit, strict bool) want {
			switch {
			case strict || p == migrate.PhaseContract:
				return want{err: checkpoint.ErrNewerSchema}
			case explicit:
				// Legacy is stale and the file that says so is unreadable.
				return want{err: migrate.ErrUnsafeRestore}
			}
			return unreadable(p, strict, checkpoint.ErrNewerSchema)
		},
	},
	{
		name:  "checkpoint with a newer schema, written by phase 3 in an earlier boot",
		rules: []int{3, 5},
		write: func(t *testing.T, w *world) {
			w.saveCheckpoint(t, migrate.PhaseContract, contractC, "boot-0")
			require.NoError(t, checkpointtest.SetSchema(w.cp, 2))
		},
		want: func(p migrate.Phase, explicit, strict bool) want {
			// Its state died with the reboot: nothing it says matters, and
			// it is moved aside like any file this binary cannot read, in
			// phase 3 too (it is no copy of any state that lives).
			if p == migrate.PhaseContract && !strict {
				return phase3(explicit, nil, "", want{quarantined: true, errors: 1, stale: true})
			}
			w := unreadable(p, strict, checkpoint.ErrNewerSchema)
			w.stale = !strict
			return w
		},
	},
	{
		name:  "checkpoint with an unreadable entry",
		rules: []int{4, 5, 14},
		write: func(t *testing.T, w *world) {
			checkpointtest.SetBytes(w.cp, badEntryFile(t, migrate.PhaseMigrate, map[string]int{"a": 1, "d": 4}, "b"))
		},
		want: func(p migrate.Phase, explicit, strict bool) want {
			if strict || p == migrate.PhaseContract {
				// Phase 3: the sole copy, left as it is.
				return want{err: checkpoint.ErrBadEntry}
			}
			w := want{quarantined: true, errors: 1}
			switch {
			case p == migrate.PhaseLegacy:
				return phase0(w, map[string]int{"a": 1, "d": 4})
			case p == migrate.PhaseExpand:
				w.served, w.readFrom, w.stale, w.dropped = legacyL, migrate.ReadCheckpointAndLegacy, true, []string{"d"}
			case p == migrate.PhaseMigrate:
				// A file moved aside is not trusted to hold every entry:
				// legacy decides, as in phase 1.
				w.served, w.readFrom, w.backfilled, w.dropped = legacyL, migrate.ReadCheckpointAndLegacy, []string{"b", "c"}, []string{"d"}
			}
			if !explicit && p != migrate.PhaseLegacy {
				// d, which only the file holds, may be an ADD the runtime
				// has not listed yet: kept and reported.
				w.served, w.dropped, w.orphaned = map[string]int{"a": 1, "b": 2, "c": 3, "d": 4}, nil, []string{"d"}
			}
			return saved(p, w)
		},
	},
}

// unreadable is the rule for a checkpoint that cannot be read at all:
// Strict refuses in every phase and leaves the file, and so does phase 3,
// where it is the only copy of the state; otherwise it is moved aside and
// legacy serves in phases 0 to 2.
func unreadable(p migrate.Phase, strict bool, cause error) want {
	if strict || p == migrate.PhaseContract {
		return want{err: cause}
	}
	w := want{quarantined: true, errors: 1}
	switch p {
	case migrate.PhaseLegacy:
		return phase0(w, nil)
	default:
		return fromLegacyOnly(p, w)
	}
}

// TestRestoreRules runs every phase against every checkpoint state, with an
// implicit and an explicit legacy, strict and not, and checks what is
// served, the report, and what both sides hold afterwards.
func TestRestoreRules(t *testing.T) {
	for _, c := range restoreCases {
		for _, p := range phases {
			for _, explicit := range []bool{false, true} {
				for _, strict := range []bool{false, true} {
					rules := append(slices.Clone(c.rules), phaseRule[p])
					if strict {
						rules = append(rules, 2)
					}
					name := fmt.Sprintf("%s/%s/phase%d/%s/strict=%v", ruleTag(rules...), c.name, p, map[bool]string{false: "implicit", true: "explicit"}[explicit], strict)
					t.Run(name, func(t *testing.T) {
						runRestoreCase(t, c, p, explicit, strict)
					})
				}
			}
		}
	}
}

func runRestoreCase(t *testing.T, c setup, p migrate.Phase, explicit, strict bool) {
	ctx := context.Background()
	w := newWorld(explicit, legacyL)
	c.write(t, w)
	before := w.cp.Bytes()
	want := c.want(p, explicit, strict)

	cfg := migrate.Config[string, int]{Phase: p, Strict: strict}
	// Phase 0 too: it marks the file behind legacy. The boot epoch is on.
	cfg.Checkpoint = checkpointtest.Reopen(t, w.cp, checkpoint.WithBootID(func() (string, error) { return "boot-1", nil }))
	s := w.open(t, cfg)
	r, err := s.Restore(ctx)

	if want.err != nil {
		require.ErrorIs(t, err, want.err)
		assert.Equal(t, before, w.cp.Bytes(), "a refused restore leaves the checkpoint as it was")
		assert.Empty(t, checkpointtest.Quarantined(w.cp))
		assert.Equal(t, legacyL, w.impl.Snapshot(), "a refused restore leaves legacy as it was")
		assert.Equal(t, 0, s.Len())
		assert.Contains(t, r.String(), "not restored")
		require.ErrorIs(t, s.Put(ctx, "x", 1), migrate.ErrNotRestored)
		return
	}
	require.NoError(t, err)
	assert.Equal(t, want.served, collect(s), "served state")
	assert.Equal(t, len(want.served), r.Restored)
	assert.Equal(t, want.readFrom, r.ReadFrom)
	assert.Equal(t, p, r.Phase)
	assert.Equal(t, want.stale, r.Stale != "", "Stale: %q", r.Stale)
	assert.Equal(t, want.legacyStale, r.LegacyStale != "", "LegacyStale: %q", r.LegacyStale)
	assert.Equal(t, want.rewritten, r.CheckpointRewritten)
	assert.Equal(t, want.backfilled, sorted(r.Backfilled), "backfilled")
	assert.Equal(t, want.dropped, sorted(r.Dropped), "dropped")
	assert.Equal(t, want.orphaned, sorted(r.Orphaned), "orphaned")
	assert.Equal(t, want.diverged, sorted(r.Diverged), "diverged")
	if want.shadow == nil {
		assert.Nil(t, r.Shadow)
	} else if assert.NotNil(t, r.Shadow) {
		assert.Equal(t, want.shadow.side, r.Shadow.Side)
		assert.Equal(t, want.shadow.onlyShadow, sorted(r.Shadow.OnlyShadow), "only in the shadow side")
		assert.Equal(t, want.shadow.onlyServed, sorted(r.Shadow.OnlyServed), "only served")
		assert.Equal(t, want.shadow.divg, sorted(r.Shadow.Diverged), "shadow diverged")
	}
	assert.Len(t, r.Errors, want.errors, "errors: %v", r.Errors)
	assert.Equal(t, r.Restored, r.FromCheckpoint+r.FromLegacy)
	assert.NotEmpty(t, r.String())

	if want.quarantined {
		assert.NotEmpty(t, r.Quarantined)
		require.Len(t, checkpointtest.Quarantined(w.cp), 1, "the unreadable file is kept for inspection")
		assert.Equal(t, before, checkpointtest.Quarantined(w.cp)[0])
	} else {
		assert.Empty(t, r.Quarantined)
		assert.Empty(t, checkpointtest.Quarantined(w.cp))
	}
	if want.ckptAfter != nil {
		snap, err := w.checkpointEntries(t)
		require.NoError(t, err)
		assert.Equal(t, want.ckptAfter, snap.Entries, "checkpoint afterwards")
		assert.Equal(t, want.ckptPhase, snap.Meta.Phase)
		assert.Equal(t, "boot-1", snap.Meta.BootID)
	} else if !want.quarantined {
		assert.Equal(t, before, w.cp.Bytes(), "the checkpoint is not rewritten")
	}
	if explicit {
		wantLegacy := want.legacyAfter
		if wantLegacy == nil {
			wantLegacy = legacyL
		}
		assert.Equal(t, wantLegacy, w.impl.Snapshot(), "legacy afterwards")
		if want.legacyStale {
			assert.Positive(t, r.LegacyWrites)
		}
	}
}

// TestRestoreLegacyFailures covers a legacy listing that fails entirely, in
// every phase.
func TestRestoreLegacyFailures(t *testing.T) {
	t.Run("rule6,rule15", func(t *testing.T) {
		boom := errors.New("runtime not answering")
		for _, p := range phases {
			for _, strict := range []bool{false, true} {
				t.Run(fmt.Sprintf("phase%d/strict=%v", p, strict), func(t *testing.T) {
					ctx := context.Background()
					w := newWorld(false, legacyL)
					w.saveCheckpoint(t, migrate.PhaseMigrate, staleC, "")
					w.impl.FailList(-1, boom)
					s := w.open(t, migrate.Config[string, int]{Phase: p, Strict: strict, Checkpoint: checkpointtest.Reopen(t, w.cp)})
					r, err := s.Restore(ctx)
					switch {
					case p == migrate.PhaseLegacy || p == migrate.PhaseExpand:
						require.ErrorIs(t, err, boom, "the side phase %d restores from cannot be read: fail in every mode", p)
						assert.Contains(t, err.Error(), "reading legacy")
					case strict:
						require.ErrorIs(t, err, boom, "Strict fails on any listing it cannot read, in every phase")
					default:
						require.NoError(t, err)
						assert.Equal(t, staleC, collect(s), "the checkpoint serves; nothing is backfilled")
						require.Len(t, r.Errors, 1)
						assert.ErrorIs(t, r.Errors[0], boom)
						assert.Empty(t, r.Backfilled)
						assert.Empty(t, r.Orphaned, "without legacy there is nothing to call an orphan")
						assert.Nil(t, r.Shadow)
					}
				})
			}
		}
	})
}

// TestRestorePartialListing: a listing that could not read every entry is
// never evidence that an entry is gone. Nothing is dropped, pruned or
// deleted on it, in any phase, with either kind of legacy, PruneOrphans or
// not; what it lacks is kept and reported; and the checkpoint is marked
// behind legacy, so that phase 3 refuses it until a run reads legacy in
// full (issue: prune on a listing legacy said was incomplete).
func TestRestorePartialListing(t *testing.T) {
	t.Run("rule21,rule26", func(t *testing.T) {
		for _, p := range phases {
			for _, explicit := range []bool{false, true} {
				for _, prune := range []bool{false, true} {
					name := fmt.Sprintf("phase%d/%s/prune=%v", p, map[bool]string{false: "implicit", true: "explicit"}[explicit], prune)
					t.Run(name, func(t *testing.T) { runPartialListing(t, p, explicit, prune) })
				}
			}
		}
		t.Run("strict refuses in every phase", func(t *testing.T) {
			for _, p := range phases {
				w := newWorld(false, legacyL)
				w.saveCheckpoint(t, migrate.PhaseMigrate, legacyL, "")
				before := w.cp.Bytes()
				w.impl.Remove("c")
				w.impl.FailListPartly(errors.New("sandbox c: status: deadline exceeded"))
				s := w.open(t, migrate.Config[string, int]{Phase: p, Strict: true, Checkpoint: checkpointtest.Reopen(t, w.cp)})
				_, err := s.Restore(context.Background())
				require.Error(t, err, "phase %d", p)
				assert.Contains(t, err.Error(), "sandbox c")
				assert.Equal(t, before, w.cp.Bytes())
			}
		})
	})
}

func runPartialListing(t *testing.T, p migrate.Phase, explicit, prune bool) {
	ctx := context.Background()
	w := newWorld(explicit, legacyL)
	w.saveCheckpoint(t, migrate.PhaseMigrate, legacyL, "")
	w.impl.Remove("c") // the entry that could not be read
	w.impl.FailListPartly(errors.New("sandbox c: status: deadline exceeded"))
	s := w.open(t, migrate.Config[string, int]{Phase: p, PruneOrphans: prune, Checkpoint: checkpointtest.Reopen(t, w.cp)})
	r, err := s.Restore(ctx)
	require.NoError(t, err)
	require.Len(t, r.Errors, 1)
	assert.Contains(t, r.Errors[0].Error(), "sandbox c")
	assert.Empty(t, r.Pruned, "never pruned on a partial listing")
	assert.Empty(t, r.Dropped, "never dropped on a partial listing")
	switch {
	case p == migrate.PhaseLegacy:
		assert.Equal(t, map[string]int{"a": 1, "b": 2}, collect(s), "phase 0 serves what legacy could read")
	case p == migrate.PhaseContract:
		assert.Equal(t, legacyL, collect(s))
		return
	default:
		assert.Equal(t, legacyL, collect(s), "the checkpoint still has c: kept and reported")
		assert.Equal(t, []string{"c"}, r.Orphaned)
	}
	if explicit {
		_, ok := w.exp.Get("c")
		assert.False(t, ok, "what only a partial listing lacks is not written to legacy")
	}
	snap, err := w.checkpointEntries(t)
	require.NoError(t, err)
	if p == migrate.PhaseLegacy {
		// Phase 0 serves legacy and leaves a file it can use as it is: it
		// wrote nothing, so there is nothing to distrust.
		assert.Equal(t, migrate.PhaseMigrate.String(), snap.Meta.Phase)
		assert.Empty(t, snap.Meta.Behind)
		require.NoError(t, s.Close())
		return
	}
	assert.Equal(t, p.String(), snap.Meta.Phase, "the checkpoint records the phase that ran")
	assert.Contains(t, snap.Meta.Behind, "could not read legacy in full", "and is marked behind legacy, saying why")
	if p != migrate.PhaseLegacy && !explicit {
		assert.Contains(t, snap.Entries, "c", "c stays in the checkpoint")
	}
	require.NoError(t, s.Close())

	// Phase 3 refuses the file until a run reads legacy in full.
	s3 := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseContract})
	_, err = s3.Restore(ctx)
	require.ErrorIs(t, err, migrate.ErrStale)
	require.NoError(t, s3.Close())
	w.impl.Set("c", 3)
	s2 := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate})
	r, err = s2.Restore(ctx)
	require.NoError(t, err)
	assert.Equal(t, legacyL, collect(s2))
	assert.True(t, r.CheckpointRewritten, "a complete listing clears the mark")
	require.NoError(t, s2.Close())
	s3 = w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseContract})
	_, err = s3.Restore(ctx)
	require.NoError(t, err)
	assert.Equal(t, legacyL, collect(s3))
}

func TestRestoreCheckpointReadError(t *testing.T) {
	t.Run("rule6", func(t *testing.T) {
		// A read error that says nothing about the content (EIO) fails restore
		// in every phase and mode: nothing may be served or overwritten.
		for _, p := range phases[1:] {
			t.Run(p.String(), func(t *testing.T) {
				ctx := context.Background()
				w := newWorld(false, legacyL)
				w.saveCheckpoint(t, migrate.PhaseExpand, legacyL, "")
				cp := &failingLoad{Memory: checkpointtest.Reopen(t, w.cp), err: errors.New("input/output error")}
				s, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: w.impl, Checkpoint: cp, Equal: sameInt})
				require.NoError(t, err)
				defer s.Close()
				_, err = s.Restore(ctx)
				require.ErrorIs(t, err, cp.err)
				assert.Contains(t, err.Error(), "reading the checkpoint")
				assert.Empty(t, checkpointtest.Quarantined(w.cp))
			})
		}
	})
}

type failingLoad struct {
	*checkpoint.Memory[string, int]
	err error
}

func (f *failingLoad) Load(context.Context) (checkpoint.Snapshot[string, int], error) {
	return checkpoint.Snapshot[string, int]{}, f.err
}

func TestRestoreRewriteFailureFailsRestore(t *testing.T) {
	t.Run("rule25", func(t *testing.T) {
		ctx := context.Background()
		w := newWorld(false, legacyL)
		w.saveCheckpoint(t, migrate.PhaseMigrate, staleC, "")
		cp := checkpointtest.Reopen(t, w.cp)
		checkpointtest.FailSaves(cp, 1, errors.New("disk full"))
		s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseExpand, Checkpoint: cp})
		_, err := s.Restore(ctx)
		require.Error(t, err, "phase 1 that cannot heal the checkpoint must not go on: its writes would build on a stale file")
		assert.Contains(t, err.Error(), "disk full")
		r, err := s.Restore(ctx)
		require.NoError(t, err, "Restore may be retried after it failed")
		assert.True(t, r.CheckpointRewritten)
		_, err = s.Restore(ctx)
		require.ErrorIs(t, err, migrate.ErrAlreadyRestored)
	})
}

func TestRestoreHealFailure(t *testing.T) {
	t.Run("rule9,rule23", func(t *testing.T) {
		ctx := context.Background()
		w := newWorld(true, legacyL)
		w.saveCheckpoint(t, migrate.PhaseContract, contractC, "")
		w.exp.FailWrites(0, -1, errors.New("registry read-only"))
		s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate})
		_, err := s.Restore(ctx)
		require.ErrorIs(t, err, migrate.ErrUnsafeRestore)
		snap, lerr := w.checkpointEntries(t)
		require.NoError(t, lerr)
		assert.Equal(t, "contract", snap.Meta.Phase, "the marker that says legacy is stale must survive a failed heal")
	})
}

func TestPruneOrphans(t *testing.T) {
	t.Run("rule21", func(t *testing.T) {
		ctx := context.Background()
		w := newWorld(false, legacyL)
		w.saveCheckpoint(t, migrate.PhaseMigrate, orphanC, "")
		s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate, PruneOrphans: true})
		r, err := s.Restore(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"d"}, r.Pruned)
		assert.Empty(t, r.Orphaned)
		assert.Equal(t, map[string]int{"a": 1, "b": 2, "c": 3}, collect(s))
		snap, err := w.checkpointEntries(t)
		require.NoError(t, err)
		assert.NotContains(t, snap.Entries, "d", "the pruned entry is gone from the checkpoint too")
	})
}

// TestMergeDefaults: for an entry both sides hold with different values,
// the default Merge keeps legacy's value, for both kinds of legacy; a Merge
// the user sets wins, and an explicit legacy is then brought in line
// with what is served.
func TestMergeDefaults(t *testing.T) {
	t.Run("rule19,rule23", func(t *testing.T) {
		for _, c := range []struct {
			name     string
			explicit bool
			merge    func(string, int, int) int
			want     int
		}{
			{"observing, default", false, nil, 2},
			{"explicit, default", true, nil, 2},
			{"observing, PreferCheckpoint", false, migrate.PreferCheckpoint[string, int], 20},
			{"explicit, PreferCheckpoint", true, migrate.PreferCheckpoint[string, int], 20},
		} {
			t.Run(c.name, func(t *testing.T) {
				ctx := context.Background()
				w := newWorld(c.explicit, legacyL)
				w.saveCheckpoint(t, migrate.PhaseMigrate, orphanC, "")
				s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Merge: c.merge})
				r, err := s.Restore(ctx)
				require.NoError(t, err)
				assert.Equal(t, []string{"b"}, r.Diverged)
				v, _ := s.Get("b")
				assert.Equal(t, c.want, v)
				// A merged value that is not the checkpoint's is saved (and
				// an explicit legacy drops d).
				assert.Equal(t, c.want != 20 || c.explicit, r.CheckpointRewritten, "rewritten")
				if c.explicit {
					lv, _ := w.exp.Get("b")
					assert.Equal(t, c.want, lv, "legacy holds what is served")
					assert.Equal(t, boolInt(c.want != 2), r.LegacyWrites)
				}
			})
		}
	})
}

func TestVerifyInPhaseZero(t *testing.T) {
	t.Run("rule12", func(t *testing.T) {
		ctx := context.Background()
		w := newWorld(false, legacyL)
		w.saveCheckpoint(t, migrate.PhaseExpand, staleC, "")
		s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseLegacy, Verify: true, Checkpoint: checkpointtest.Reopen(t, w.cp)})
		r, err := s.Restore(ctx)
		require.NoError(t, err)
		require.NotNil(t, r.Shadow)
		assert.Equal(t, migrate.ReadCheckpoint, r.Shadow.Side)
		assert.Equal(t, []string{"c"}, r.Shadow.OnlyServed)
		assert.Equal(t, []string{"d"}, r.Shadow.OnlyShadow)
		assert.Equal(t, []string{"b"}, r.Shadow.Diverged)
		assert.False(t, r.Shadow.Agrees())
		assert.Empty(t, r.Diverged, "a shadow comparison is not a reconcile")
		assert.Equal(t, legacyL, collect(s), "verify never changes what is served")
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestPhaseZeroWithoutCheckpointLeavesNoTrace(t *testing.T) {
	t.Run("rule12", func(t *testing.T) {
		ctx := context.Background()
		w := newWorld(true, legacyL)
		w.saveCheckpoint(t, migrate.PhaseExpand, staleC, "")
		before := w.cp.Bytes()
		s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseLegacy, Legacy: w.exp})
		require.NoError(t, err)
		defer s.Close()
		r, err := s.Restore(ctx)
		require.NoError(t, err)
		assert.Equal(t, migrate.ReadLegacy, r.ReadFrom)
		require.NoError(t, s.Put(ctx, "z", 26))
		assert.Equal(t, before, w.cp.Bytes())
		v, ok := w.exp.Get("z")
		assert.True(t, ok)
		assert.Equal(t, 26, v)
	})
}

// TestMergeChoiceReachesLegacyWhereLegacyDecides: where legacy decides which
// entries exist (phase 1, and phase 2 over a checkpoint it cannot trust), a
// value a Merge took from the checkpoint is written to an explicit legacy
// too (rule 23), as in phase 2's reconcile: legacy must hold what is
// served. (It did not: the served state was legacy's own listing, changed
// in place, and repair compared it with itself.)
func TestMergeChoiceReachesLegacyWhereLegacyDecides(t *testing.T) {
	t.Run("rule19,rule23", func(t *testing.T) {
		for _, c := range []struct {
			phase  migrate.Phase
			ckptAs migrate.Phase
		}{{migrate.PhaseExpand, migrate.PhaseExpand}, {migrate.PhaseMigrate, migrate.PhaseLegacy}} {
			t.Run(fmt.Sprintf("phase %d over a checkpoint of phase %d", c.phase, c.ckptAs), func(t *testing.T) {
				w := newWorld(true, legacyL)
				w.saveCheckpoint(t, c.ckptAs, map[string]int{"a": 1, "b": 20, "c": 3}, "")
				s := w.open(t, migrate.Config[string, int]{Phase: c.phase, Merge: migrate.PreferCheckpoint[string, int]})
				r, err := s.Restore(context.Background())
				require.NoError(t, err)
				v, _ := s.Get("b")
				want := 20
				if c.ckptAs == migrate.PhaseLegacy {
					want = 2 // over a checkpoint behind legacy, Merge is not asked (rule 19)
				}
				assert.Equal(t, want, v)
				lv, _ := w.exp.Get("b")
				assert.Equal(t, want, lv, "legacy holds what is served")
				assert.Equal(t, boolInt(want != 2), r.LegacyWrites)
			})
		}
	})
}

// TestUnsafeRestoreSaysHowToRecover: a file phase 3 wrote says legacy is
// stale; when this binary cannot read it in full, the refusal points to
// the binary that wrote a newer file, and to a repair of any other.
func TestUnsafeRestoreSaysHowToRecover(t *testing.T) {
	t.Run("rule9", func(t *testing.T) {
		ctx := context.Background()
		rejectAll := checkpoint.WithValidate(func(string, int) error { return errors.New("rejected") })
		for name, c := range map[string]struct {
			opts []checkpoint.Option
			says string
		}{
			"newer":              {checkpointtest.Schema(1), "roll forward to the binary that wrote it"},
			"unreadable entries": {[]checkpoint.Option{rejectAll}, "phaseshift restore-prev PATH"},
		} {
			t.Run(name, func(t *testing.T) {
				w := newWorld(true, legacyL)
				w.saveCheckpoint(t, migrate.PhaseContract, contractC, "")
				if name == "newer" {
					require.NoError(t, checkpointtest.SetSchema(w.cp, 2))
				}
				s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Checkpoint: checkpointtest.Reopen(t, w.cp, c.opts...)})
				_, err := s.Restore(ctx)
				require.ErrorIs(t, err, migrate.ErrUnsafeRestore)
				assert.Contains(t, err.Error(), c.says)
			})
		}
	})
}

// exclusive is an explicit legacy in which a value is held by one key at
// a time, as host-local's files hold an address for one container: a Put
// of a value another key holds is refused.
type exclusive struct{ source.Map[string, int] }

func (e *exclusive) Put(ctx context.Context, k string, v int) error {
	m, err := e.Map.List(ctx)
	if err != nil {
		return err
	}
	for hk, hv := range m {
		if hv == v && hk != k {
			return fmt.Errorf("%d is held by %s", v, hk)
		}
	}
	return e.Map.Put(ctx, k, v)
}

// TestHealRemovesBeforeItWrites: rolling back from phase 3, which reused
// a value an entry it deleted left in legacy (an address freed in phase 3
// and handed out again), the heal removes what legacy holds that is not
// served before it writes what is: otherwise a legacy that holds a value
// for one key at a time refuses, and every restore of phases 0 to 2 fails.
func TestHealRemovesBeforeItWrites(t *testing.T) {
	t.Run("rule23", func(t *testing.T) {
		ctx := context.Background()
		for _, p := range []migrate.Phase{migrate.PhaseLegacy, migrate.PhaseExpand, migrate.PhaseMigrate} {
			t.Run(p.String(), func(t *testing.T) {
				leg := &exclusive{}
				require.NoError(t, leg.Map.Put(ctx, "a", 2)) // deleted in phase 3, which does not write legacy
				cp := checkpoint.NewMemory[string, int]()
				require.NoError(t, cp.Save(ctx, checkpoint.Snapshot[string, int]{Meta: checkpoint.Meta{Phase: migrate.PhaseContract.String()}, Entries: map[string]int{"a0": 2, "b": 3}}))
				s, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: leg, Checkpoint: cp})
				require.NoError(t, err)
				defer s.Close()
				r, err := s.Restore(ctx)
				require.NoError(t, err)
				assert.NotEmpty(t, r.LegacyStale)
				got, err := leg.List(ctx)
				require.NoError(t, err)
				assert.Equal(t, map[string]int{"a0": 2, "b": 3}, got)
			})
		}
	})
}
