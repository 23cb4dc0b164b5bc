package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

// The rollout of the proxy's Store, proved with migratetest: every sequence
// of phases, with crashes, reboots and failed writes between, over exactly
// the configuration newProxy builds (storeConfig) on a checkpoint opened as
// openProxy opens it (checkpointOptions: the boot ID, validateVM). This is
// the worked example of the README's "Prove it for your own adapters" for a
// legacy that dies at every restart: the registry the old proxy kept in
// memory.

// rollout is the matrix over storeConfig as newProxy builds it, strict as
// --error-on-failure-to-restore says.
func rollout(strict bool) migratetest.Config[string, VM] {
	return migratetest.Config[string, VM]{
		New: func(p migrate.Phase, registry source.Reader[string, VM], cp migrate.Checkpoint[string, VM]) (migrate.Config[string, VM], error) {
			return storeConfig(proxyConfig{Phase: p, Strict: strict, Checkpoint: cp}, registry), nil
		},
		Key:   func(i int) string { return fmt.Sprintf("vm-%d", i) },
		Value: randomVM,
		// No two VMs share a console socket or an I/O token: the harness
		// checks that after every step.
		Unique: vmParts,
		// The Store writes the registry, which lives in the proxy's memory.
		Explicit: true,
		Volatile: true,
		// Without SchemaBumps, every step runs this proxy. With it, some
		// run this proxy rolled back from the next release, which bumps the
		// schema to 2 (a new field in VM, say) and upgrades files of 1.
		CheckpointOptions: func(older bool) []checkpoint.Option {
			if older {
				return checkpointOptions()
			}
			same := func(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }
			return append(checkpointOptions(), checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, same))
		},
		Seed: 28,
	}
}

// vmParts are what no two VMs may share: the console socket and the I/O
// tokens.
func vmParts(vm VM) []string {
	var parts []string
	if vm.Console != "" {
		parts = append(parts, "console "+vm.Console)
	}
	for tok := range vm.Tokens {
		parts = append(parts, "token "+tok)
	}
	return parts
}

// randomVM is a VM as the proxy would store it: one that passes validateVM,
// and comes back from JSON equal (no empty maps, times in UTC to the
// second).
func randomVM(rng *rand.Rand, id string) VM {
	at := func() time.Time { return time.Unix(1_750_000_000+rng.Int64N(1_000_000), 0).UTC() }
	vm := VM{Registered: at(), Attached: rng.IntN(3)}
	if rng.IntN(4) > 0 {
		vm.Console = "/run/vc/" + id + "/console.sock"
	}
	for i := range rng.IntN(3) {
		if vm.Tokens == nil {
			vm.Tokens = map[string]Token{}
		}
		tok := fmt.Sprintf("%s-token-%d-%d", id, i, rng.IntN(1000))
		vm.Tokens[tok] = Token{Created: at()}
		if rng.IntN(2) == 0 {
			if vm.Sessions == nil {
				vm.Sessions = map[string]Session{}
			}
			vm.Sessions["session-"+strconv.Itoa(i)] = Session{Token: tok, Opened: at()}
		}
	}
	return vm
}

func matrixLen(t *testing.T) int {
	if testing.Short() {
		return 3
	}
	return 4
}

// TestRollout runs the proxy's configuration through every sequence of up
// to 4 phases (340 sequences; up to 3, 84 sequences, with -short) in the
// worlds it meets: phase 0 of this proxy or the old one, which kept the
// registry in memory only; rollbacks across a schema bump; a corrupt state
// file, which by default is moved aside and with
// --error-on-failure-to-restore refused.
func TestRollout(t *testing.T) {
	t.Run("this proxy in phase 0, schema bumps, corruption", func(t *testing.T) {
		cfg := rollout(false)
		cfg.NewBinaryInPhase0, cfg.SchemaBumps, cfg.Corruption = true, true, true
		cfg.MaxLen = matrixLen(t)
		res := migratetest.Matrix(t, cfg)
		assert.Positive(t, res.Crashes)
		assert.Positive(t, res.Reboots)
		assert.Positive(t, res.Refused["a newer checkpoint that is the sole copy"], "this proxy refuses the next release's file")
		assert.Zero(t, res.Refused["a corrupt checkpoint that is the sole copy"], "DiscardUnreadableCheckpoint: moved aside, not refused")
	})
	t.Run("the old proxy in phase 0", func(t *testing.T) {
		cfg := rollout(false)
		cfg.MaxLen, cfg.Seed = matrixLen(t), 29
		res := migratetest.Matrix(t, cfg)
		assert.Positive(t, res.Unjudged, "this proxy after the old one, whose registry died with it, is outside the promise")
	})
	t.Run("--error-on-failure-to-restore, corruption", func(t *testing.T) {
		cfg := rollout(true)
		cfg.NewBinaryInPhase0, cfg.Corruption, cfg.Seed = true, true, 30
		cfg.MaxLen = matrixLen(t)
		res := migratetest.Matrix(t, cfg)
		assert.Positive(t, res.Refused["under Strict, a corrupt checkpoint"])
	})
}

// misconfigured is the matrix over storeConfig changed by change: what a
// user who copied newProxy's configuration and left something out would
// run.
func misconfigured(change func(*migrate.Config[string, VM])) migratetest.Config[string, VM] {
	cfg := rollout(false)
	inner := cfg.New
	cfg.New = func(p migrate.Phase, l source.Reader[string, VM], cp migrate.Checkpoint[string, VM]) (migrate.Config[string, VM], error) {
		mc, err := inner(p, l, cp)
		change(&mc)
		return mc, err
	}
	return cfg
}

// TestRolloutCatchesMisconfiguration: a registry in memory stated to be
// durable (Config.LegacyKind: source.Durable, which wins over what the
// source.Map says) makes the empty registry of a restarted proxy evidence
// that no VM exists, and the matrix fails with a short sequence. Leaving
// VolatileLegacy out is no longer a misconfiguration: a source.Map says it
// is volatile (source.Kinded), and the matrix passes.
func TestRolloutCatchesMisconfiguration(t *testing.T) {
	t.Run("VolatileLegacy left out: the Map says it", func(t *testing.T) {
		cfg := misconfigured(func(mc *migrate.Config[string, VM]) { mc.VolatileLegacy = false })
		cfg.NewBinaryInPhase0, cfg.MaxLen = true, 3
		_, err := migratetest.Check(cfg)
		require.NoError(t, err, "a source.Map is volatile by construction")
	})
	t.Run("LegacyKind: source.Durable", func(t *testing.T) {
		cfg := misconfigured(func(mc *migrate.Config[string, VM]) {
			mc.VolatileLegacy, mc.LegacyKind = false, source.Durable
		})
		cfg.NewBinaryInPhase0, cfg.MaxLen = true, 3
		res, err := migratetest.Check(cfg)
		require.Error(t, err, "the misconfiguration must fail the matrix")
		v := res.Violations[0]
		t.Logf("shortest failing sequence:\n%v", v)
		assert.LessOrEqual(t, len(v.Sequence), 2)
		assert.Regexp(t, "^LOST", v.Problems[0])
		assert.Contains(t, strings.Join(v.Problems, "\n"), "is not served")
	})
}
