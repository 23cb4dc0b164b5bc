package migrate_test

import (
	"encoding/json"
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/migrate"
)

func TestParsePhase(t *testing.T) {
	for in, want := range map[string]migrate.Phase{
		"0": migrate.PhaseLegacy, "legacy": migrate.PhaseLegacy, "LEGACY": migrate.PhaseLegacy,
		"1": migrate.PhaseExpand, "expand": migrate.PhaseExpand, " Expand ": migrate.PhaseExpand,
		"2": migrate.PhaseMigrate, "migrate": migrate.PhaseMigrate,
		"3": migrate.PhaseContract, "Contract": migrate.PhaseContract,
	} {
		got, err := migrate.ParsePhase(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "4", "-1", "phase1", "contracted", "1.0"} {
		_, err := migrate.ParsePhase(bad)
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "use 0 (legacy), 1 (expand), 2 (migrate) or 3 (contract)")
	}
}

func TestPhaseNamesAndSides(t *testing.T) {
	type sides struct{ writesLegacy, writesCheckpoint bool }
	for p, want := range map[migrate.Phase]struct {
		name string
		sides
	}{
		migrate.PhaseLegacy:   {"legacy", sides{true, false}},
		migrate.PhaseExpand:   {"expand", sides{true, true}},
		migrate.PhaseMigrate:  {"migrate", sides{true, true}},
		migrate.PhaseContract: {"contract", sides{false, true}},
	} {
		assert.Equal(t, want.name, p.String())
		assert.Equal(t, want.sides, sides{p.WritesLegacy(), p.WritesCheckpoint()}, p.String())
		b, err := p.MarshalText()
		require.NoError(t, err)
		var q migrate.Phase
		require.NoError(t, q.UnmarshalText(b))
		assert.Equal(t, p, q)
	}
	assert.Equal(t, "Phase(7)", migrate.Phase(7).String())
	_, err := migrate.Phase(7).MarshalText()
	assert.Error(t, err)
}

func TestPhaseAsFlagAndJSON(t *testing.T) {
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var p migrate.Phase
	fs.TextVar(&p, "phase", migrate.PhaseExpand, "rollout phase")
	require.NoError(t, fs.Parse([]string{"--phase", "migrate"}))
	assert.Equal(t, migrate.PhaseMigrate, p)
	require.Error(t, fs.Parse([]string{"--phase", "5"}))

	var cfg struct{ Phase migrate.Phase }
	require.NoError(t, json.Unmarshal([]byte(`{"Phase":"contract"}`), &cfg))
	assert.Equal(t, migrate.PhaseContract, cfg.Phase)
	out, err := json.Marshal(cfg)
	require.NoError(t, err)
	assert.JSONEq(t, `{"Phase":"contract"}`, string(out))
}
