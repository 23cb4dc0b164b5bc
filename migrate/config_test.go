package migrate_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

func TestNewCatchesConfigurationMistakes(t *testing.T) {
	legacy := &migratetest.Implicit[string, int]{}
	cp := checkpoint.NewMemory[string, int]()
	var nilFile *checkpoint.File[string, int]
	var nilLegacy *migratetest.Explicit[string, int]
	for _, tc := range []struct {
		name string
		cfg  migrate.Config[string, int]
		want string
	}{
		{"unknown phase", migrate.Config[string, int]{Phase: 4, Legacy: legacy, Checkpoint: cp}, "Config.Phase 4 is not a phase: use 0 (legacy), 1 (expand), 2 (migrate) or 3 (contract)"},
		{"negative phase", migrate.Config[string, int]{Phase: -1, Legacy: legacy, Checkpoint: cp}, "is not a phase"},
		{"phase 1 without checkpoint", migrate.Config[string, int]{Phase: migrate.PhaseExpand, Legacy: legacy}, "phase 1 (expand) needs Config.Checkpoint: open one with checkpoint.Open"},
		{"phase 3 without checkpoint", migrate.Config[string, int]{Phase: migrate.PhaseContract}, "phase 3 (contract) needs Config.Checkpoint"},
		{"typed nil checkpoint", migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: legacy, Checkpoint: nilFile}, "needs Config.Checkpoint"},
		{"phase 0 without legacy", migrate.Config[string, int]{Phase: migrate.PhaseLegacy}, "phase 0 (legacy) needs Config.Legacy"},
		{"phase 2 without legacy", migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Checkpoint: cp}, "only phase 3 (contract) runs without it"},
		{"typed nil legacy", migrate.Config[string, int]{Phase: migrate.PhaseExpand, Legacy: nilLegacy, Checkpoint: cp}, "needs Config.Legacy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := migrate.New(tc.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	for _, ok := range []migrate.Config[string, int]{
		{Phase: migrate.PhaseLegacy, Legacy: legacy},
		{Phase: migrate.PhaseContract, Checkpoint: cp},
		{Phase: migrate.PhaseContract, Checkpoint: cp, Legacy: legacy, Equal: sameInt},
		{Phase: migrate.PhaseMigrate, Checkpoint: cp, Legacy: legacy, Equal: sameInt, Match: func(k string) string { return strings.ToLower(k) }},
	} {
		s, err := migrate.New(ok)
		require.NoError(t, err, "phase %v", ok.Phase)
		require.NoError(t, s.Close())
	}
}

// TestLogsNeverCarryValues: values may be secrets (a proxy's tokens); the
// log has keys, counts and paths only.
func TestLogsNeverCarryValues(t *testing.T) {
	ctx := context.Background()
	core, logs := observer.New(zapcore.DebugLevel)
	var buf bytes.Buffer
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	tee := zapcore.NewTee(core, zapcore.NewCore(enc, zapcore.AddSync(&buf), zapcore.DebugLevel))
	log := zap.New(tee)

	const secret = "tok-5ecret-value"
	reg := &migratetest.Explicit[string, string]{}
	reg.Set("vm-legacy", secret+"-legacy")
	cp := checkpoint.NewMemory[string, string]()
	require.NoError(t, cp.Save(ctx, checkpoint.Snapshot[string, string]{Meta: checkpoint.Meta{Phase: "migrate"}, Entries: map[string]string{"vm-1": secret, "vm-2": secret + "-2"}}))
	s, err := migrate.New(migrate.Config[string, string]{Phase: migrate.PhaseMigrate, Legacy: reg, Checkpoint: cp, Logger: log})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Restore(ctx)
	require.NoError(t, err)
	reg.FailWrites(0, 1, errors.New("registry refused"))
	require.Error(t, s.Put(ctx, "vm-3", secret+"-3"))
	checkpointtest.FailSaves(cp, 1, errors.New("disk full"))
	require.Error(t, s.Put(ctx, "vm-4", secret+"-4"))

	require.NotZero(t, logs.Len())
	assert.NotContains(t, buf.String(), secret, "a value reached the log")
	restored := logs.FilterMessage("restored").All()
	require.Len(t, restored, 1)
	fields, ok := restored[0].ContextMap()["report"].(map[string]any)
	require.True(t, ok, "the report is logged as an object")
	// Legacy is the registry the Store writes: what only the checkpoint
	// holds is dropped, what only legacy holds is backfilled.
	assert.EqualValues(t, 1, fields["restored"])
	assert.EqualValues(t, 2, fields["dropped"])
	assert.EqualValues(t, 1, fields["backfilled"])
	assert.Equal(t, []any{"vm-legacy"}, fields["backfilledKeys"])
	assert.Contains(t, buf.String(), "vm-legacy", "keys may be logged")
	assert.NotZero(t, logs.FilterMessage("legacy write failed").Len())
	assert.NotZero(t, logs.FilterMessage("checkpoint write failed").Len())
}

func TestReportString(t *testing.T) {
	r := migrate.Report[string]{
		Phase: migrate.PhaseMigrate, ReadFrom: migrate.ReadCheckpointAndLegacy, Restored: 5, FromCheckpoint: 3, FromLegacy: 2,
		Backfilled: []string{"a", "b"}, Orphaned: []string{"c"}, CheckpointRewritten: true,
		Stale: "written in boot x", Quarantined: "/var/run/x.json.corrupt-1", Errors: []error{errors.New("boom")},
	}
	assert.Equal(t, "phase 2 (migrate): read checkpoint+legacy, restored 5 (3 from checkpoint, 2 from legacy), backfilled 2, orphaned 1 [\"c\"], checkpoint rewritten, stale checkpoint: written in boot x, quarantined to /var/run/x.json.corrupt-1, 1 error: boom", r.String())
	assert.NotContains(t, r.String(), "\n")
}

func TestConfigMistakesMatchErrInvalidConfig(t *testing.T) {
	for _, cfg := range []migrate.Config[string, int]{
		{Phase: 7},
		{Phase: migrate.PhaseExpand, Legacy: &migratetest.Implicit[string, int]{}},
		{Phase: migrate.PhaseMigrate, Checkpoint: checkpoint.NewMemory[string, int]()},
	} {
		_, err := migrate.New(cfg)
		require.ErrorIs(t, err, migrate.ErrInvalidConfig, "%+v", cfg)
	}
}

// TestShortLivedRefusesALegacyThatLags: an exec'd process restores before
// every write, so it cannot trust a legacy whose listing lags (CRI).
func TestShortLivedRefusesALegacyThatLags(t *testing.T) {
	observing := source.Func[string, int](func(context.Context) (map[string]int, error) { return nil, nil })
	written := &source.Map[string, int]{}
	for _, p := range []migrate.Phase{migrate.PhaseLegacy, migrate.PhaseExpand, migrate.PhaseMigrate, migrate.PhaseContract} {
		cp := checkpoint.NewMemory[string, int]()
		_, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: observing, Checkpoint: cp, ShortLived: true, Equal: sameInt})
		if p == migrate.PhaseContract {
			assert.NoError(t, err, "phase 3 serves the checkpoint and only adds what legacy lists")
		} else {
			require.ErrorIs(t, err, migrate.ErrInvalidConfig, "phase %d", p)
			assert.Contains(t, err.Error(), "run a daemon that restores once")
		}
		_, err = migrate.New(migrate.Config[string, int]{Phase: p, Legacy: written, LegacyKind: source.Durable, Checkpoint: cp, ShortLived: true})
		assert.NoError(t, err, "a legacy the Store writes is fine in phase %d", p)
		_, err = migrate.New(migrate.Config[string, int]{Phase: p, Legacy: observing, Checkpoint: cp, Equal: sameInt})
		assert.NoError(t, err, "without ShortLived, a daemon may observe")
	}
	_, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseLegacy, Legacy: written, ShortLived: true, VolatileLegacy: true})
	require.ErrorIs(t, err, migrate.ErrInvalidConfig)
}
