package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
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
)

// want is what one restore must do.
type want struct {
	err         error // nil, or what the error must match
	served      map[string]int
	readFrom    string
	stale       bool // Report.Stale set
	staleLegacy bool
	quarantined bool
	rewritten   bool
	backfilled  []string
	orphaned    []string
	diverged    []string
	shadowOnly  []string
	servedOnly  []string
	errors      int            // len(Report.Errors)
	ckptAfter   map[string]int // what the checkpoint holds afterwards; nil: as before
	ckptPhase   string         // its writer phase afterwards, when ckptAfter is set
	legacyAfter map[string]int // explicit legacy afterwards; nil: legacyL
}

type setup struct {
	name  string
	write func(t *testing.T, w *world)
	want  func(p migrate.Phase, explicit, strict bool) want
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

// fromLegacy is what phases 0 and 1 do with a checkpoint they do not serve:
// serve legacy; phase 1 rewrites the checkpoint, phase 0 marks it
// superseded.
func fromLegacy(p migrate.Phase, w want) want {
	w.served, w.readFrom = legacyL, migrate.ReadLegacy
	w.rewritten = true
	w.ckptAfter, w.ckptPhase = legacyL, p.String()
	return w
}

var restoreCases = []setup{
	{
		name:  "missing checkpoint",
		write: func(t *testing.T, w *world) {},
		want: func(p migrate.Phase, explicit, strict bool) want {
			switch p {
			case migrate.PhaseLegacy, migrate.PhaseExpand:
				return fromLegacy(p, want{})
			case migrate.PhaseMigrate:
				return want{served: legacyL, readFrom: migrate.ReadCheckpointAndLegacy, backfilled: keys(legacyL), rewritten: true, ckptAfter: legacyL, ckptPhase: "migrate"}
			default:
				return want{served: map[string]int{}, readFrom: migrate.ReadNothing, shadowOnly: keys(legacyL)}
			}
		},
	},
	{
		name:  "fresh checkpoint",
		write: func(t *testing.T, w *world) { w.saveCheckpoint(t, migrate.PhaseExpand, legacyL, "") },
		want: func(p migrate.Phase, explicit, strict bool) want {
			switch p {
			case migrate.PhaseLegacy, migrate.PhaseExpand:
				return fromLegacy(p, want{})
			case migrate.PhaseMigrate:
				return want{served: legacyL, readFrom: migrate.ReadCheckpointAndLegacy}
			default:
				return want{served: legacyL, readFrom: migrate.ReadCheckpoint}
			}
		},
	},
	{
		name:  "checkpoint stale by content",
		write: func(t *testing.T, w *world) { w.saveCheckpoint(t, migrate.PhaseMigrate, staleC, "") },
		want: func(p migrate.Phase, explicit, strict bool) want {
			switch p {
			case migrate.PhaseLegacy:
				return fromLegacy(p, want{})
			case migrate.PhaseExpand:
				return fromLegacy(p, want{stale: true, shadowOnly: []string{"d"}, servedOnly: []string{"c"}, diverged: []string{"b"}})
			case migrate.PhaseMigrate:
				served := map[string]int{"a": 1, "b": 20, "c": 3, "d": 4}
				return want{served: served, readFrom: migrate.ReadCheckpointAndLegacy, backfilled: []string{"c"}, orphaned: []string{"d"}, diverged: []string{"b"}, rewritten: true, ckptAfter: served, ckptPhase: "migrate"}
			default:
				return want{served: staleC, readFrom: migrate.ReadCheckpoint, shadowOnly: []string{"c"}, servedOnly: []string{"d"}, diverged: []string{"b"}}
			}
		},
	},
	{
		name:  "checkpoint from an earlier boot",
		write: func(t *testing.T, w *world) { w.saveCheckpoint(t, migrate.PhaseContract, staleC, "boot-0") },
		want: func(p migrate.Phase, explicit, strict bool) want {
			switch p {
			case migrate.PhaseLegacy:
				return fromLegacy(p, want{stale: true})
			case migrate.PhaseExpand:
				return fromLegacy(p, want{stale: true})
			case migrate.PhaseMigrate:
				return want{served: legacyL, readFrom: migrate.ReadCheckpointAndLegacy, stale: true, backfilled: keys(legacyL), rewritten: true, ckptAfter: legacyL, ckptPhase: "migrate"}
			default:
				return want{served: map[string]int{}, readFrom: migrate.ReadNothing, stale: true, rewritten: true, ckptAfter: map[string]int{}, ckptPhase: "contract", shadowOnly: keys(legacyL)}
			}
		},
	},
	{
		name:  "checkpoint written by phase 3",
		write: func(t *testing.T, w *world) { w.saveCheckpoint(t, migrate.PhaseContract, contractC, "") },
		want: func(p migrate.Phase, explicit, strict bool) want {
			if p == migrate.PhaseContract {
				return want{served: contractC, readFrom: migrate.ReadCheckpoint, servedOnly: []string{"e"}}
			}
			if explicit {
				// Legacy missed e: the checkpoint serves and legacy is healed.
				return want{served: contractC, readFrom: migrate.ReadCheckpoint, staleLegacy: true, rewritten: true, ckptAfter: contractC, ckptPhase: p.String(), legacyAfter: contractC}
			}
			// CRI-like legacy is never stale: e came and went outside.
			switch p {
			case migrate.PhaseLegacy:
				return fromLegacy(p, want{})
			case migrate.PhaseExpand:
				return fromLegacy(p, want{stale: true, shadowOnly: []string{"e"}})
			default:
				return want{served: contractC, readFrom: migrate.ReadCheckpointAndLegacy, orphaned: []string{"e"}}
			}
		},
	},
	{
		name:  "checkpoint superseded by a phase-0 run",
		write: func(t *testing.T, w *world) { w.saveCheckpoint(t, migrate.PhaseLegacy, staleC, "") },
		want: func(p migrate.Phase, explicit, strict bool) want {
			switch p {
			case migrate.PhaseLegacy:
				// Already marked: nothing to rewrite.
				return want{served: legacyL, readFrom: migrate.ReadLegacy}
			case migrate.PhaseExpand:
				return fromLegacy(p, want{stale: true, shadowOnly: []string{"d"}, servedOnly: []string{"c"}, diverged: []string{"b"}})
			case migrate.PhaseMigrate:
				return want{served: legacyL, readFrom: migrate.ReadCheckpointAndLegacy, stale: true, backfilled: keys(legacyL), rewritten: true, ckptAfter: legacyL, ckptPhase: "migrate"}
			default:
				return want{err: migrate.ErrStale, stale: true}
			}
		},
	},
	{
		name:  "corrupt checkpoint",
		write: func(t *testing.T, w *world) { w.saveCheckpoint(t, migrate.PhaseMigrate, staleC, ""); w.cp.Corrupt() },
		want: func(p migrate.Phase, explicit, strict bool) want {
			return unreadable(p, strict, checkpoint.ErrCorrupt)
		},
	},
	{
		name: "checkpoint with a newer schema",
		write: func(t *testing.T, w *world) {
			w.saveCheckpoint(t, migrate.PhaseMigrate, staleC, "")
			require.NoError(t, w.cp.SetSchema(2))
		},
		want: func(p migrate.Phase, explicit, strict bool) want {
			return unreadable(p, strict, checkpoint.ErrNewerSchema)
		},
	},
	{
		name: "checkpoint with a newer schema, written by phase 3",
		write: func(t *testing.T, w *world) {
			w.saveCheckpoint(t, migrate.PhaseContract, contractC, "")
			require.NoError(t, w.cp.SetSchema(2))
		},
		want: func(p migrate.Phase, explicit, strict bool) want {
			if explicit && p != migrate.PhaseContract {
				// Legacy is stale and the file that says so is unreadable.
				return want{err: migrate.ErrUnsafeRestore}
			}
			return unreadable(p, strict, checkpoint.ErrNewerSchema)
		},
	},
	{
		name: "checkpoint with an unreadable entry",
		write: func(t *testing.T, w *world) {
			w.cp.SetBytes(badEntryFile(t, migrate.PhaseMigrate, map[string]int{"a": 1, "d": 4}, "b"))
		},
		want: func(p migrate.Phase, explicit, strict bool) want {
			switch p {
			case migrate.PhaseLegacy, migrate.PhaseExpand:
				return fromLegacy(p, want{quarantined: true, errors: 1})
			case migrate.PhaseMigrate:
				if strict {
					return want{err: checkpoint.ErrBadEntry}
				}
				served := map[string]int{"a": 1, "b": 2, "c": 3, "d": 4}
				return want{served: served, readFrom: migrate.ReadCheckpointAndLegacy, quarantined: true, errors: 1, backfilled: []string{"b", "c"}, orphaned: []string{"d"}, rewritten: true, ckptAfter: served, ckptPhase: "migrate"}
			default:
				if strict {
					return want{err: checkpoint.ErrBadEntry}
				}
				served := map[string]int{"a": 1, "d": 4}
				return want{served: served, readFrom: migrate.ReadCheckpoint, quarantined: true, errors: 1, rewritten: true, ckptAfter: served, ckptPhase: "contract", shadowOnly: []string{"b", "c"}, servedOnly: []string{"d"}}
			}
		},
	},
}

// unreadable is the rule for a checkpoint that cannot be read at all:
// quarantine it and serve legacy where the phase allows; phase 3 fails when
// strict (leaving the file) and otherwise starts empty with the error.
func unreadable(p migrate.Phase, strict bool, cause error) want {
	switch p {
	case migrate.PhaseLegacy, migrate.PhaseExpand:
		return fromLegacy(p, want{quarantined: true, errors: 1})
	case migrate.PhaseMigrate:
		return want{served: legacyL, readFrom: migrate.ReadCheckpointAndLegacy, quarantined: true, errors: 1, backfilled: keys(legacyL), rewritten: true, ckptAfter: legacyL, ckptPhase: "migrate"}
	default:
		if strict {
			return want{err: cause}
		}
		return want{served: map[string]int{}, readFrom: migrate.ReadNothing, quarantined: true, errors: 1, rewritten: true, ckptAfter: map[string]int{}, ckptPhase: "contract", shadowOnly: keys(legacyL)}
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
					name := fmt.Sprintf("%s/phase%d/%s/strict=%v", c.name, p, map[bool]string{false: "implicit", true: "explicit"}[explicit], strict)
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

	cfg := migrate.Config[string, int]{Phase: p, Strict: strict, BootID: "boot-1"}
	cfg.Checkpoint = w.cp.Reopen() // phase 0 too: it marks the file superseded
	s := w.open(t, cfg)
	r, err := s.Restore(ctx)

	if want.err != nil {
		require.ErrorIs(t, err, want.err)
		assert.Equal(t, before, w.cp.Bytes(), "a refused restore leaves the checkpoint as it was")
		assert.Empty(t, w.cp.Quarantined())
		assert.Equal(t, 0, s.Len())
		require.ErrorIs(t, s.Put(ctx, "x", 1), migrate.ErrNotRestored)
		return
	}
	require.NoError(t, err)
	assert.Equal(t, want.served, collect(s), "served state")
	assert.Equal(t, len(want.served), r.Restored)
	assert.Equal(t, want.readFrom, r.ReadFrom)
	assert.Equal(t, p, r.Phase)
	assert.Equal(t, want.stale, r.Stale != "", "Stale: %q", r.Stale)
	assert.Equal(t, want.staleLegacy, r.StaleLegacy != "", "StaleLegacy: %q", r.StaleLegacy)
	assert.Equal(t, want.rewritten, r.CheckpointRewritten)
	assert.Equal(t, want.backfilled, sorted(r.Backfilled), "backfilled")
	assert.Equal(t, want.orphaned, sorted(r.Orphaned), "orphaned")
	assert.Equal(t, want.diverged, sorted(r.Diverged), "diverged")
	assert.Equal(t, want.shadowOnly, sorted(r.ShadowOnly), "shadow only")
	assert.Equal(t, want.servedOnly, sorted(r.ServedOnly), "served only")
	assert.Len(t, r.Errors, want.errors, "errors: %v", r.Errors)
	assert.Equal(t, len(r.Backfilled), r.FromLegacy-boolInt(r.ReadFrom == migrate.ReadLegacy)*len(want.served))
	assert.Equal(t, r.Restored, r.FromCheckpoint+r.FromLegacy)
	assert.NotEmpty(t, r.String())

	if want.quarantined {
		assert.NotEmpty(t, r.Quarantined)
		require.Len(t, w.cp.Quarantined(), 1, "the unreadable file is kept for inspection")
		assert.Equal(t, before, w.cp.Quarantined()[0])
	} else {
		assert.Empty(t, r.Quarantined)
		assert.Empty(t, w.cp.Quarantined())
	}
	if want.ckptAfter != nil {
		snap, err := w.checkpointEntries(t)
		require.NoError(t, err)
		assert.Equal(t, want.ckptAfter, snap.Entries, "checkpoint afterwards")
		assert.Equal(t, want.ckptPhase, snap.Meta.Phase)
		if cfg.BootID != "" {
			assert.Equal(t, cfg.BootID, snap.Meta.BootID)
		}
	} else if !want.quarantined {
		assert.Equal(t, before, w.cp.Bytes(), "the checkpoint is not rewritten")
	}
	if explicit {
		wantLegacy := want.legacyAfter
		if wantLegacy == nil {
			wantLegacy = legacyL
			if p == migrate.PhaseMigrate {
				wantLegacy = want.served // phase 2 brings an explicit legacy in line with what it serves
			}
		}
		assert.Equal(t, wantLegacy, w.impl.Snapshot(), "legacy afterwards")
		if want.staleLegacy {
			assert.Positive(t, r.LegacyHealed)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestRestoreLegacyFailures covers a legacy listing that fails entirely or
// in part, in every phase.
func TestRestoreLegacyFailures(t *testing.T) {
	boom := errors.New("runtime not answering")
	for _, p := range phases {
		for _, strict := range []bool{false, true} {
			t.Run(fmt.Sprintf("whole/phase%d/strict=%v", p, strict), func(t *testing.T) {
				ctx := context.Background()
				w := newWorld(false, legacyL)
				w.saveCheckpoint(t, migrate.PhaseMigrate, staleC, "")
				w.impl.FailList(-1, boom)
				s := w.open(t, migrate.Config[string, int]{Phase: p, Strict: strict, Checkpoint: w.cp.Reopen()})
				r, err := s.Restore(ctx)
				switch {
				case p.RestoresFromLegacy():
					require.ErrorIs(t, err, boom, "the side phase %d restores from cannot be read: fail in every mode", p)
					assert.Contains(t, err.Error(), "reading legacy")
				case p == migrate.PhaseMigrate && strict:
					require.ErrorIs(t, err, boom)
				default:
					require.NoError(t, err)
					assert.Equal(t, staleC, collect(s), "the checkpoint serves; nothing is backfilled")
					require.Len(t, r.Errors, 1)
					assert.ErrorIs(t, r.Errors[0], boom)
					assert.Empty(t, r.Backfilled)
					assert.Empty(t, r.Orphaned, "without legacy there is nothing to call an orphan")
				}
			})
			t.Run(fmt.Sprintf("partial/phase%d/strict=%v", p, strict), func(t *testing.T) {
				ctx := context.Background()
				w := newWorld(false, legacyL)
				w.saveCheckpoint(t, migrate.PhaseExpand, legacyL, "")
				w.impl.Remove("c") // the entry that could not be read
				w.impl.FailListPartly(errors.New("sandbox c: status: deadline exceeded"))
				s := w.open(t, migrate.Config[string, int]{Phase: p, Strict: strict, Checkpoint: w.cp.Reopen()})
				r, err := s.Restore(ctx)
				if strict && p != migrate.PhaseContract {
					require.Error(t, err)
					assert.Contains(t, err.Error(), "sandbox c")
					return
				}
				require.NoError(t, err)
				require.Len(t, r.Errors, 1)
				assert.Contains(t, r.Errors[0].Error(), "sandbox c")
				if p.RestoresFromLegacy() {
					assert.Equal(t, map[string]int{"a": 1, "b": 2}, collect(s), "the rest is restored")
				} else {
					assert.Equal(t, legacyL, collect(s), "the checkpoint still has c")
				}
			})
		}
	}
}

func TestRestoreCheckpointReadError(t *testing.T) {
	// A read error that says nothing about the content (EIO) fails restore
	// in every phase and mode: nothing may be served or overwritten.
	for _, p := range phases[1:] {
		t.Run(p.String(), func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(false, legacyL)
			w.saveCheckpoint(t, migrate.PhaseExpand, legacyL, "")
			cp := &failingLoad{Memory: w.cp.Reopen(), err: errors.New("input/output error")}
			s, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: w.impl, Checkpoint: cp})
			require.NoError(t, err)
			defer s.Close()
			_, err = s.Restore(ctx)
			require.ErrorIs(t, err, cp.err)
			assert.Contains(t, err.Error(), "reading the checkpoint")
			assert.Empty(t, w.cp.Quarantined())
		})
	}
}

type failingLoad struct {
	*checkpoint.Memory[string, int]
	err error
}

func (f *failingLoad) Load(context.Context) (checkpoint.Snapshot[string, int], error) {
	return checkpoint.Snapshot[string, int]{}, f.err
}

func TestRestoreRewriteFailureFailsRestore(t *testing.T) {
	ctx := context.Background()
	w := newWorld(false, legacyL)
	w.saveCheckpoint(t, migrate.PhaseMigrate, staleC, "")
	cp := w.cp.Reopen()
	cp.FailSaves(1, errors.New("disk full"))
	s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseExpand, Checkpoint: cp})
	_, err := s.Restore(ctx)
	require.Error(t, err, "phase 1 that cannot heal the checkpoint must not go on: its writes would build on a stale file")
	assert.Contains(t, err.Error(), "disk full")
	r, err := s.Restore(ctx)
	require.NoError(t, err, "Restore may be retried after it failed")
	assert.True(t, r.CheckpointRewritten)
	_, err = s.Restore(ctx)
	require.ErrorIs(t, err, migrate.ErrAlreadyRestored)
}

func TestRestoreHealFailure(t *testing.T) {
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
}

func TestPruneOrphans(t *testing.T) {
	ctx := context.Background()
	w := newWorld(false, legacyL)
	w.saveCheckpoint(t, migrate.PhaseMigrate, staleC, "")
	s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate, PruneOrphans: true})
	r, err := s.Restore(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"d"}, r.Pruned)
	assert.Empty(t, r.Orphaned)
	assert.Equal(t, map[string]int{"a": 1, "b": 20, "c": 3}, collect(s))
	snap, err := w.checkpointEntries(t)
	require.NoError(t, err)
	assert.NotContains(t, snap.Entries, "d", "the pruned entry is gone from the checkpoint too")
}

func TestMergePreferLegacy(t *testing.T) {
	ctx := context.Background()
	w := newWorld(true, legacyL)
	w.saveCheckpoint(t, migrate.PhaseMigrate, staleC, "")
	s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Merge: migrate.PreferLegacy[string, int]})
	r, err := s.Restore(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"b"}, r.Diverged)
	v, _ := s.Get("b")
	assert.Equal(t, 2, v, "legacy's value wins under PreferLegacy")
	assert.True(t, r.CheckpointRewritten, "the merged value is saved")
}

func TestVerifyInPhaseZero(t *testing.T) {
	ctx := context.Background()
	w := newWorld(false, legacyL)
	w.saveCheckpoint(t, migrate.PhaseExpand, staleC, "")
	s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseLegacy, Verify: true, Checkpoint: w.cp.Reopen()})
	r, err := s.Restore(ctx)
	require.NoError(t, err)
	assert.Equal(t, migrate.ReadCheckpoint, r.Shadow)
	assert.Equal(t, []string{"c"}, r.ServedOnly)
	assert.Equal(t, []string{"d"}, r.ShadowOnly)
	assert.Equal(t, []string{"b"}, r.Diverged)
	assert.Equal(t, legacyL, collect(s), "verify never changes what is served")
}

func TestPhaseZeroWithoutCheckpointLeavesNoTrace(t *testing.T) {
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
}
