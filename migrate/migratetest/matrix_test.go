package migratetest_test

import (
	"context"
	"fmt"
	"math/rand"
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

// ipamKey, byContainer and fromCRI are the IPAM adapters of the VPC CNI
// case: CRI shows a sandbox under placeholder network and interface names.
type ipamKey struct {
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
}

type alloc struct {
	IP    string    `json:"ip"`
	Since time.Time `json:"since"`
}

func byContainer(k ipamKey) ipamKey { return ipamKey{ContainerID: k.ContainerID} }

func ipamConfig() migratetest.Config[ipamKey, alloc] {
	return migratetest.Config[ipamKey, alloc]{
		New: func(p migrate.Phase, legacy source.Reader[ipamKey, alloc], cp migrate.Checkpoint[ipamKey, alloc]) (*migrate.Store[ipamKey, alloc], error) {
			return migrate.New(migrate.Config[ipamKey, alloc]{
				Phase: p, Legacy: legacy, Checkpoint: cp, Match: byContainer,
				// CRI shows the IP only: the same IP is the same value.
				Equal: func(a, b alloc) bool { return a.IP == b.IP },
			})
		},
		Key: func(i int) ipamKey {
			return ipamKey{Network: "aws-cni", ContainerID: fmt.Sprintf("c%03d", i), IfName: "eth0"}
		},
		Value: func(rng *rand.Rand, _ ipamKey) alloc {
			return alloc{IP: fmt.Sprintf("10.0.%d.%d", rng.Intn(4), rng.Intn(250)), Since: time.Unix(rng.Int63n(1e9), 0).UTC()}
		},
		Match: byContainer,
		// CRI knows the sandbox and its IP, not the network, the interface
		// or when the IP was assigned.
		View: func(k ipamKey, v alloc) (ipamKey, alloc) {
			return ipamKey{Network: "_migrated-from-cri", ContainerID: k.ContainerID, IfName: "unknown"}, alloc{IP: v.IP}
		},
		Immutable: true,
		Seed:      1,
	}
}

// TestMatrixIPAM runs every phase sequence up to length 5 (1,364) over the
// library's own Store with the IPAM adapters: struct keys, Match by
// container ID, placeholders from CRI, crashes (some mid-write), reboots
// with a boot epoch, and injected write failures.
func TestMatrixIPAM(t *testing.T) {
	cfg := ipamConfig()
	if testing.Short() {
		cfg.MaxLen = 4
	}
	res := migratetest.Matrix(t, cfg)
	assert.Equal(t, map[bool]int{false: 1364, true: 340}[testing.Short()], res.Sequences)
	assert.Positive(t, res.Crashes)
	assert.Positive(t, res.Reboots)
	assert.Positive(t, res.Unsupported, "0 → 3 sequences are run and reported")
	assert.Equal(t, res.Unsupported, res.UnsupportedRefused+res.UnsupportedWrong+(res.Unsupported-res.UnsupportedRefused-res.UnsupportedWrong))
}

// TestMatrixIPAMEphemeral: the checkpoint on tmpfs (/var/run), gone at every
// reboot.
func TestMatrixIPAMEphemeral(t *testing.T) {
	cfg := ipamConfig()
	cfg.EphemeralCheckpoint = true
	cfg.MaxLen = 4
	cfg.Seed = 2
	migratetest.Matrix(t, cfg)
}

// registryConfig is a proxy-like case: an explicitly written registry whose
// values change.
func registryConfig(merge func(string, int, int) int) migratetest.Config[string, int] {
	return migratetest.Config[string, int]{
		New: func(p migrate.Phase, legacy source.Reader[string, int], cp migrate.Checkpoint[string, int]) (*migrate.Store[string, int], error) {
			return migrate.New(migrate.Config[string, int]{Phase: p, Legacy: legacy, Checkpoint: cp, Merge: merge})
		},
		Key:      func(i int) string { return fmt.Sprintf("vm-%d", i) },
		Value:    func(rng *rand.Rand, _ string) int { return rng.Intn(1000) },
		Explicit: true,
		Seed:     3,
	}
}

func TestMatrixExplicitLegacy(t *testing.T) {
	cfg := registryConfig(migrate.PreferLegacy[string, int])
	if testing.Short() {
		cfg.MaxLen = 4
	}
	res := migratetest.Matrix(t, cfg)
	assert.Positive(t, res.Unsupported, "3 → 0 with the old binary is reported, never silent")
}

// TestMatrixNewBinaryInPhaseZero: when phase 0 runs this library with the
// checkpoint, 0 → 3 is refused instead of serving stale state, and 3 → 0 is
// safe even for an explicit legacy.
func TestMatrixNewBinaryInPhaseZero(t *testing.T) {
	cfg := registryConfig(migrate.PreferLegacy[string, int])
	cfg.NewBinaryInPhase0 = true
	cfg.MaxLen = 4
	res := migratetest.Matrix(t, cfg)
	assert.Positive(t, res.UnsupportedRefused)
	if !assert.Zero(t, res.UnsupportedWrong, "with the mark of phase 0 in the checkpoint, phase 3 refuses rather than serve stale state") {
		t.Logf("%v", res.UnsupportedOutcomes[0])
	}
}

// TestMatrixCatchesBrokenRules: the harness must catch a store that breaks
// a restore rule, with a short, readable sequence.
func TestMatrixCatchesBrokenRules(t *testing.T) {
	t.Run("phase 1 does not rewrite the checkpoint", func(t *testing.T) {
		cfg := ipamConfig()
		inner := cfg.New
		cfg.New = func(p migrate.Phase, l source.Reader[ipamKey, alloc], cp migrate.Checkpoint[ipamKey, alloc]) (*migrate.Store[ipamKey, alloc], error) {
			if p == migrate.PhaseExpand {
				cp = &noRestoreSave{Checkpoint: cp}
			}
			return inner(p, l, cp)
		}
		cfg.MaxLen = 4
		res, err := migratetest.Check(cfg)
		require.Error(t, err)
		require.NotEmpty(t, res.Violations)
		shortest := res.Violations[0]
		t.Logf("caught:\n%v", err)
		assert.LessOrEqual(t, len(shortest.Sequence), 3, "the shortest failing sequence is short")
		assert.Contains(t, err.Error(), "expand")
		assert.Contains(t, err.Error(), "reproduce with Config.Sequences")
		assert.Regexp(t, "LOST|INVENTED|STALE", err.Error())
	})
	t.Run("phase 2 does not backfill", func(t *testing.T) {
		cfg := ipamConfig()
		inner := cfg.New
		cfg.New = func(p migrate.Phase, l source.Reader[ipamKey, alloc], cp migrate.Checkpoint[ipamKey, alloc]) (*migrate.Store[ipamKey, alloc], error) {
			if p == migrate.PhaseMigrate {
				// Reconciles against nothing.
				l = source.Func[ipamKey, alloc](func(context.Context) (map[ipamKey]alloc, error) { return nil, nil })
			}
			return inner(p, l, cp)
		}
		cfg.MaxLen = 3
		_, err := migratetest.Check(cfg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "LOST")
	})
	t.Run("checkpoint wins after a downgrade changed values", func(t *testing.T) {
		// The default Merge with a legacy whose values change: a phase-0
		// run changes a value the checkpoint keeps.
		cfg := registryConfig(nil)
		cfg.MaxLen = 3
		res, err := migratetest.Check(cfg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "STALE")
		assert.Contains(t, seqOf(res.Violations[0].Sequence), "0")
	})
	t.Run("no boot epoch", func(t *testing.T) {
		cfg := ipamConfig()
		inner := cfg.New
		cfg.New = func(p migrate.Phase, l source.Reader[ipamKey, alloc], cp migrate.Checkpoint[ipamKey, alloc]) (*migrate.Store[ipamKey, alloc], error) {
			if cp != nil {
				cp = &noBootID{cp}
			}
			return inner(p, l, cp)
		}
		cfg.MaxLen = 3
		cfg.NoCrashes = true
		_, err := migratetest.Check(cfg)
		require.Error(t, err, "state from before a reboot must not be served")
		assert.Contains(t, err.Error(), "reboot")
	})
}

func seqOf(seq []migrate.Phase) string {
	var b strings.Builder
	for _, p := range seq {
		fmt.Fprint(&b, int(p))
	}
	return b.String()
}

// noRestoreSave drops full saves: the rewrite of the checkpoint at restore.
type noRestoreSave struct {
	migrate.Checkpoint[ipamKey, alloc]
}

func (n *noRestoreSave) Save(context.Context, checkpoint.Snapshot[ipamKey, alloc]) error { return nil }

func (n *noRestoreSave) Commit(ctx context.Context, m checkpoint.Meta, chs []checkpoint.Change[ipamKey, alloc]) error {
	return n.Checkpoint.(interface {
		Commit(context.Context, checkpoint.Meta, []checkpoint.Change[ipamKey, alloc]) error
	}).Commit(ctx, m, chs)
}

// noBootID hides the checkpoint's boot ID: a Store without a boot epoch.
type noBootID struct {
	migrate.Checkpoint[ipamKey, alloc]
}

func TestCheckNeedsTheAdapters(t *testing.T) {
	_, err := migratetest.Check(migratetest.Config[string, int]{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Config.New, Config.Key and Config.Value are required")
}

func TestSequencesReproduce(t *testing.T) {
	cfg := registryConfig(nil)
	cfg.MaxLen = 3
	_, err := migratetest.Check(cfg)
	require.Error(t, err)
	full, _ := migratetest.Check(cfg)
	one := cfg
	one.Sequences = [][]migrate.Phase{full.Violations[0].Sequence}
	res, err := migratetest.Check(one)
	require.Error(t, err, "running the reported sequence alone fails the same way")
	assert.Equal(t, full.Violations[0].Trace, res.Violations[0].Trace)
}
