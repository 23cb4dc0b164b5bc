package main

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
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
	"github.com/phaseshift/phaseshift/source/cri"
)

// The rollout of this daemon's Store, proved with migratetest: every
// sequence of phases, with crashes, reboots and failed writes between, over
// exactly the configuration Open builds (storeConfig, checkpointOptions).
// This is the worked example of the README's "Prove it for your own
// adapters" for an implicit legacy with placeholder keys.

// rollout is the matrix over storeConfig as Open builds it (strict as
// --error-on-failure-to-restore says), with CRI's view of an entry as
// fromSandbox makes it.
func rollout(strict bool) migratetest.Config[Key, Alloc] {
	return migratetest.Config[Key, Alloc]{
		New: func(p migrate.Phase, legacy source.Reader[Key, Alloc], cp migrate.Checkpoint[Key, Alloc]) (migrate.Config[Key, Alloc], error) {
			return storeConfig(Options{Phase: p, Strict: strict}, legacy, cp), nil
		},
		// A CNI ADD: a fresh container on the demo's network.
		Key: func(i int) Key {
			return Key{Network: "demo-net", ContainerID: fmt.Sprintf("pod-%d", i), IfName: "eth0"}
		},
		// What the allocator hands out: no two pods hold one address.
		// The harness also hands a freed address to a later ADD, as the
		// allocator does.
		Unique: addresses,
		// One address per container, never another's, as the allocator
		// gives them; the pod when the runtime names it.
		Value: func(rng *rand.Rand, k Key) Alloc {
			i, _ := strconv.Atoi(strings.TrimPrefix(k.ContainerID, "pod-"))
			a := Alloc{
				IPs:       []netip.Addr{netip.AddrFrom4([4]byte{10, 0, byte(i / 250), byte(2 + i%250)})},
				Allocated: time.Unix(1_750_000_000+rng.Int64N(1_000_000), 0).UTC(),
			}
			if rng.IntN(2) == 0 {
				a.Pod = PodRef{Namespace: "default", Name: fmt.Sprintf("web-%d", i)}
			}
			return a
		},
		// CRI lists the sandbox with its address and when it was created
		// (its ADD's time, to the second), and fromSandbox makes it an
		// entry under placeholders, without the pod.
		View: func(k Key, v Alloc) (Key, Alloc) {
			ck, cv, _ := fromSandbox(cri.Sandbox{
				ID: k.ContainerID, Name: v.Pod.Name, Namespace: v.Pod.Namespace,
				CreatedAt: v.Allocated, IPs: v.IPs,
			})
			return ck, cv
		},
		// A sandbox keeps its address, and every ADD has a new container.
		Immutable: true,
		// This binary's schema (2, since Alloc has Pod), and for the
		// rollbacks of SchemaBumps the release before it, of schema 1.
		CheckpointOptions: func(older bool) []checkpoint.Option {
			if older {
				return nil
			}
			return checkpointOptions()
		},
		// The daemon opens its checkpoint with a boot ID, so a file that
		// outlives a reboot (--state on a disk) is discarded with the
		// pods: the matrix reboots with the file kept.
		EphemeralCheckpoint: false,
		Seed:                28,
	}
}

func matrixLen(t *testing.T) int {
	if testing.Short() {
		return 3
	}
	return 4
}

// TestRollout runs the daemon's configuration through every sequence of
// up to 4 phases (340 sequences; up to 3, 84 sequences, with -short) in the
// worlds it meets: the old binary in phase 0, CRI listings that miss
// sandboxes, rollbacks across its schema bump, a corrupt state file.
func TestRollout(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		cfg := rollout(false)
		cfg.PartialListings, cfg.SchemaBumps, cfg.Corruption = true, true, true
		cfg.MaxLen = matrixLen(t)
		res := migratetest.Matrix(t, cfg)
		assert.Positive(t, res.Crashes)
		assert.Positive(t, res.Reboots)
		assert.Positive(t, res.Refused["a newer checkpoint that is the sole copy"], "phase 3 of the schema-1 release refuses the schema-2 file")
	})
	t.Run("--error-on-failure-to-restore", func(t *testing.T) {
		cfg := rollout(true)
		cfg.PartialListings, cfg.Corruption, cfg.Seed = true, true, 29
		cfg.MaxLen = matrixLen(t)
		res := migratetest.Matrix(t, cfg)
		assert.Positive(t, res.Refused["under Strict, a partial listing"])
	})
}

// misconfigured is the matrix over storeConfig changed by change: what a
// user who copied Open's configuration and left something out would run.
func misconfigured(change func(*migrate.Config[Key, Alloc])) migratetest.Config[Key, Alloc] {
	cfg := rollout(false)
	inner := cfg.New
	cfg.New = func(p migrate.Phase, l source.Reader[Key, Alloc], cp migrate.Checkpoint[Key, Alloc]) (migrate.Config[Key, Alloc], error) {
		mc, err := inner(p, l, cp)
		change(&mc)
		return mc, err
	}
	return cfg
}

// shortest runs cfg, which must fail, and returns its shortest failing
// sequence and its first problem.
func shortest(t *testing.T, cfg migratetest.Config[Key, Alloc]) (string, string) {
	t.Helper()
	res, err := migratetest.Check(cfg)
	require.Error(t, err, "the misconfiguration must fail the matrix")
	v := res.Violations[0]
	t.Logf("shortest failing sequence:\n%v", v)
	var seq []string
	for _, p := range v.Sequence {
		seq = append(seq, strconv.Itoa(int(p)))
	}
	return strings.Join(seq, " "), v.Problems[0]
}

// TestRolloutCatchesMisconfiguration: each thing CRI needs said, left
// out, fails the matrix with a short sequence.
func TestRolloutCatchesMisconfiguration(t *testing.T) {
	t.Run("no Match", func(t *testing.T) {
		// A DEL with the real key misses the entry learned from CRI under
		// placeholders, and the address leaks (the VPC CNI's #1411).
		cfg := misconfigured(func(mc *migrate.Config[Key, Alloc]) { mc.Match = nil })
		cfg.MaxLen = 3
		seq, problem := shortest(t, cfg)
		assert.LessOrEqual(t, len(strings.Fields(seq)), 2)
		assert.Regexp(t, "^(INVENTED|KEY|STEADY STATE)", problem)
	})
	t.Run("an Equal that compares what CRI cannot see", func(t *testing.T) {
		// Every entry whose checkpoint record is richer than CRI's is
		// reported diverged at every restore: the README's old trap.
		cfg := misconfigured(func(mc *migrate.Config[Key, Alloc]) {
			mc.Equal = func(a, b Alloc) bool { return a.IPs[0] == b.IPs[0] && a.Allocated.Equal(b.Allocated) && a.Pod == b.Pod }
		})
		cfg.MaxLen = 2
		seq, problem := shortest(t, cfg)
		assert.LessOrEqual(t, len(strings.Fields(seq)), 2)
		assert.Regexp(t, "^(KEY|STALE|STEADY STATE)", problem)
	})
}
