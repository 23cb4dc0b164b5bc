package migratetest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/testcni"
	"github.com/phaseshift/phaseshift/internal/testsize"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

// ipamKey and byContainer are the IPAM adapters of the VPC CNI case: CRI
// shows a sandbox under placeholder network and interface names.
type ipamKey = testcni.Key

type alloc struct {
	IP    string    `json:"ip"`
	Since time.Time `json:"since"`
}

var byContainer = testcni.ByContainer

// uniqueIP says that no two pods hold one address.
func uniqueIP(v alloc) []string { return []string{v.IP} }

func ipamConfig() migratetest.Config[ipamKey, alloc] {
	return migratetest.Config[ipamKey, alloc]{
		New: func(p migrate.Phase, legacy source.Reader[ipamKey, alloc], cp migrate.Checkpoint[ipamKey, alloc]) (migrate.Config[ipamKey, alloc], error) {
			return migrate.Config[ipamKey, alloc]{
				Legacy: legacy, Checkpoint: cp, Match: byContainer,
				// CRI shows the IP only: the same IP is the same value.
				Equal: func(a, b alloc) bool { return a.IP == b.IP },
				// An allocator's addresses: a restore that finds one held
				// twice drops the stale holder.
				Unique: uniqueIP,
			}, nil
		},
		Key: func(i int) ipamKey {
			return testcni.Real(fmt.Sprintf("c%03d", i))
		},
		Value: func(rng *rand.Rand, _ ipamKey) alloc {
			return alloc{IP: fmt.Sprintf("10.0.%d.%d", rng.IntN(4), rng.IntN(250)), Since: time.Unix(rng.Int64N(1e9), 0).UTC()}
		},
		// CRI knows the sandbox and its IP, not the network, the interface
		// or when the IP was assigned.
		View: func(k ipamKey, v alloc) (ipamKey, alloc) {
			return testcni.FromCRI(k.ContainerID), alloc{IP: v.IP}
		},
		Immutable: true,
		// An allocator's addresses: no two pods hold one.
		Unique: uniqueIP,
		Seed:   1,
	}
}

// registryConfig is a proxy-like case: a registry the Store writes, whose
// values change, with the default Merge.
func registryConfig() migratetest.Config[string, int] {
	return migratetest.Config[string, int]{
		New: func(p migrate.Phase, legacy source.Reader[string, int], cp migrate.Checkpoint[string, int]) (migrate.Config[string, int], error) {
			return migrate.Config[string, int]{Legacy: legacy, Checkpoint: cp}, nil
		},
		Key:      func(i int) string { return fmt.Sprintf("vm-%d", i) },
		Value:    func(rng *rand.Rand, _ string) int { return rng.IntN(1000) },
		Explicit: true,
		Seed:     3,
	}
}

// wrap changes a factory's configuration.
func wrap[K comparable, V any](cfg *migratetest.Config[K, V], change func(p migrate.Phase, mc *migrate.Config[K, V])) {
	inner := cfg.New
	cfg.New = func(p migrate.Phase, l source.Reader[K, V], cp migrate.Checkpoint[K, V]) (migrate.Config[K, V], error) {
		mc, err := inner(p, l, cp)
		if err == nil {
			change(p, &mc)
		}
		return mc, err
	}
}

// maxLen is the longest phase sequence of the worlds that run every
// sequence up to it: 4 (340 sequences) by default, 5 (1,364) with
// PHASESHIFT_LONG_TESTS=1, which .ci/run sets for a step of its own.
func maxLen() int { return testsize.Pick(4, 4, 5) }

// TestMatrix runs the worlds the harness models over the library's own
// Store, each with the defaults a user would write.
func TestMatrix(t *testing.T) {
	worlds := []struct {
		name string
		run  func(t *testing.T) migratetest.Result
	}{
		{"IPAM over CRI", func(t *testing.T) migratetest.Result {
			cfg := ipamConfig()
			cfg.MaxLen = maxLen()
			res := migratetest.Matrix(t, cfg)
			assert.Equal(t, map[int]int{4: 340, 5: 1364}[cfg.MaxLen], res.Sequences)
			return res
		}},
		{"IPAM over CRI, the defaults only (no Config.Unique)", func(t *testing.T) migratetest.Result {
			// Without partial listings, a restore after the old binary
			// serves each address once on the defaults alone: an entry
			// CRI lists that the checkpoint never held is the evidence
			// (rule 7).
			cfg := ipamConfig()
			wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[ipamKey, alloc]) { mc.Unique = nil })
			cfg.MaxLen, cfg.Seed = 4, 17
			return migratetest.Matrix(t, cfg)
		}},
		{"IPAM over CRI, checkpoint on tmpfs", func(t *testing.T) migratetest.Result {
			cfg := ipamConfig()
			cfg.EphemeralCheckpoint, cfg.MaxLen, cfg.Seed = true, 4, 2
			return migratetest.Matrix(t, cfg)
		}},
		{"IPAM over CRI, partial listings, schema bumps, corruption", func(t *testing.T) migratetest.Result {
			cfg := ipamConfig()
			cfg.PartialListings, cfg.SchemaBumps, cfg.Corruption, cfg.NewBinaryInPhase0 = true, true, true, true
			cfg.MaxLen, cfg.Seed = maxLen(), 4
			res := migratetest.Matrix(t, cfg)
			assert.Positive(t, res.Refused["phase 3 over a checkpoint behind legacy"])
			assert.Positive(t, res.Refused["a newer checkpoint that is the sole copy"])
			assert.Positive(t, res.Refused["a corrupt checkpoint that is the sole copy"])
			return res
		}},
		{"IPAM over CRI, partial listings, PruneOrphans", func(t *testing.T) migratetest.Result {
			cfg := ipamConfig()
			wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[ipamKey, alloc]) { mc.PruneOrphans = true })
			cfg.PartialListings, cfg.MaxLen, cfg.Seed = true, 4, 5
			return migratetest.Matrix(t, cfg)
		}},
		{"registry, old binary changing values", func(t *testing.T) migratetest.Result {
			cfg := registryConfig()
			cfg.MaxLen = maxLen()
			res := migratetest.Matrix(t, cfg)
			assert.Positive(t, res.Unjudged, "3 → 0 with the old binary is counted, not judged")
			return res
		}},
		{"registry, this library in phase 0", func(t *testing.T) migratetest.Result {
			cfg := registryConfig()
			cfg.NewBinaryInPhase0, cfg.MaxLen = true, 4
			res := migratetest.Matrix(t, cfg)
			assert.Zero(t, res.Unjudged, "with phase 0's mark every sequence is within the promise")
			assert.Positive(t, res.Refused["phase 3 over a checkpoint behind legacy"])
			return res
		}},
		{"registry, partial listings, schema bumps, corruption, Strict", func(t *testing.T) migratetest.Result {
			cfg := registryConfig()
			wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[string, int]) { mc.Strict = true })
			cfg.PartialListings, cfg.SchemaBumps, cfg.Corruption, cfg.NewBinaryInPhase0 = true, true, true, true
			cfg.MaxLen, cfg.Seed = 4, 6
			res := migratetest.Matrix(t, cfg)
			assert.Positive(t, res.Refused["under Strict, a corrupt checkpoint"])
			assert.Positive(t, res.Refused["under Strict, a partial listing"])
			return res
		}},
		{"IPAM over CRI, without the journal, partial listings, schema bumps, corruption", func(t *testing.T) migratetest.Result {
			cfg := ipamConfig()
			cfg.WithoutJournal, cfg.PartialListings, cfg.SchemaBumps, cfg.Corruption, cfg.NewBinaryInPhase0 = true, true, true, true, true
			cfg.MaxLen, cfg.Seed = 4, 10
			return migratetest.Matrix(t, cfg)
		}},
		{"registry, without the journal, schema bumps, corruption", func(t *testing.T) migratetest.Result {
			cfg := registryConfig()
			cfg.WithoutJournal, cfg.SchemaBumps, cfg.Corruption = true, true, true
			cfg.MaxLen, cfg.Seed = 4, 11
			return migratetest.Matrix(t, cfg)
		}},
		{"volatile registry, without the journal", func(t *testing.T) migratetest.Result {
			cfg := volatileConfig()
			cfg.WithoutJournal, cfg.MaxLen, cfg.Seed = true, 4, 12
			return migratetest.Matrix(t, cfg)
		}},
		{"volatile registry", func(t *testing.T) migratetest.Result {
			cfg := volatileConfig()
			cfg.MaxLen = maxLen()
			return migratetest.Matrix(t, cfg)
		}},
		{"volatile registry, this library in phase 0, schema bumps", func(t *testing.T) migratetest.Result {
			cfg := volatileConfig()
			cfg.NewBinaryInPhase0, cfg.SchemaBumps, cfg.MaxLen, cfg.Seed = true, true, 4, 8
			res := migratetest.Matrix(t, cfg)
			assert.Positive(t, res.Refused["a newer checkpoint that is the sole copy"], "phase 0 of the older build refuses the only copy it cannot read")
			return res
		}},
		{"registry, phase 3 without legacy, one write per run", func(t *testing.T) migratetest.Result {
			// One write per run, as an exec'd plugin makes: a phase-3 run
			// whose only write is a Delete of an entry it cannot see (a
			// write a crash cut short) commits nothing else, and must
			// still leave the mark that phase 3 ran.
			cfg := registryConfig()
			cfg.OpsPerStep = 1
			wrap(&cfg, func(p migrate.Phase, mc *migrate.Config[string, int]) {
				if p == migrate.PhaseContract {
					mc.Legacy = nil // contracted: the daemon no longer configures it
				}
			})
			cfg.NewBinaryInPhase0, cfg.MaxLen, cfg.Seed = true, maxLen(), 3
			return migratetest.Matrix(t, cfg)
		}},
		{"registry with re-keys, crashes between legacy writes", func(t *testing.T) migratetest.Result {
			cfg := rekeyConfig()
			cfg.NewBinaryInPhase0, cfg.MaxLen, cfg.Seed = true, maxLen(), 13
			return migratetest.Matrix(t, cfg)
		}},
		{"CRI-like legacy whose values change, old binary", func(t *testing.T) migratetest.Result {
			cfg := ipamConfig()
			cfg.Immutable, cfg.Corruption = false, true
			cfg.MaxLen, cfg.Seed = 4, 16
			return migratetest.Matrix(t, cfg)
		}},
		{"CRI-like legacy whose values change only where it cannot see, old binary", func(t *testing.T) migratetest.Result {
			// A container keeps its IP and the rest of the value changes:
			// the old binary's write is, as CRI shows it, the checkpoint's
			// richer record, which is served (rule 18) and must not be
			// reported under the key CRI shows.
			cfg := ipamConfig()
			cfg.Value = func(rng *rand.Rand, k ipamKey) alloc {
				return alloc{IP: "10.0.0." + strings.TrimPrefix(k.ContainerID, "c"), Since: time.Unix(rng.Int64N(1e9), 0).UTC()}
			}
			// The IP is the container's own: no address passes from one
			// key to another.
			cfg.Unique = nil
			cfg.Immutable, cfg.Corruption = false, true
			cfg.MaxLen, cfg.Seed = 4, 17
			return migratetest.Matrix(t, cfg)
		}},
		{"CRI-like legacy whose values change, Merge prefers the checkpoint, this library in phase 0, no crashes", func(t *testing.T) migratetest.Result {
			// A Merge that keeps the checkpoint's richer record: over a
			// checkpoint marked behind legacy it is not asked. Without
			// crashes: a write a crash cut short after its save leaves the
			// checkpoint and a legacy that only observes apart until the
			// entry's next write, which such a Merge keeps and the
			// steady-state check reports (see Config.Merge).
			cfg := ipamConfig()
			wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[ipamKey, alloc]) {
				mc.Merge = migrate.PreferCheckpoint[ipamKey, alloc]
			})
			cfg.Immutable, cfg.NewBinaryInPhase0, cfg.Corruption, cfg.NoCrashes = false, true, true, true
			cfg.MaxLen, cfg.Seed = 4, 14
			return migratetest.Matrix(t, cfg)
		}},
	}
	for _, w := range worlds {
		t.Run(w.name, func(t *testing.T) {
			res := w.run(t)
			if !strings.HasSuffix(w.name, "no crashes") {
				assert.Positive(t, res.Crashes)
			}
			assert.Positive(t, res.Reboots)
			assert.NotContains(t, res.String(), "wrong", "a passing run says what was refused and why, nothing alarming")
		})
	}
}

// rekeyConfig is a registry the Store writes whose entries are matched by
// a part of their key (a pod, whatever its interface): a Put under another
// key of an entry moves it, a legacy Put then a legacy Delete.
func rekeyConfig() migratetest.Config[string, int] {
	cfg := registryConfig()
	byPod := func(k string) string { pod, _, _ := strings.Cut(k, "/"); return pod }
	wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[string, int]) { mc.Match = byPod })
	// Two pods of three interfaces: most writes move an entry to another
	// key, and a move cut between its two legacy writes leaves legacy with
	// two keys of one entry for a third key's write to find.
	cfg.Key = func(i int) string { return fmt.Sprintf("pod-%d/eth%d", i/3, i%3) }
	cfg.Keys = 6
	return cfg
}

// volatileConfig is a proxy whose registry lives in memory.
func volatileConfig() migratetest.Config[string, int] {
	cfg := registryConfig()
	cfg.Volatile = true
	wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[string, int]) { mc.VolatileLegacy = true })
	cfg.Seed = 9
	return cfg
}

// caughtBy is what caught found: the shortest violation, and all of them.
type caughtBy struct {
	migratetest.Violation
	all []migratetest.Violation
}

// caught checks that Check fails cfg with a short sequence and one of the
// problem kinds.
func caught[K comparable, V any](t *testing.T, cfg migratetest.Config[K, V], maxLen int, kinds string) caughtBy {
	t.Helper()
	res, err := migratetest.Check(cfg)
	require.Error(t, err, "the broken rule must be caught")
	require.NotEmpty(t, res.Violations)
	v := res.Violations[0]
	t.Logf("caught:\n%v", v)
	assert.LessOrEqual(t, len(v.Sequence), maxLen, "the shortest failing sequence is short")
	assert.Regexp(t, kinds, strings.Join(v.Problems, "\n"))
	assert.Contains(t, err.Error(), "reproduce with Config.Sequences")
	return caughtBy{v, res.Violations}
}

// TestMatrixCatchesBrokenRules: the harness catches each default path on
// which the promise once failed, reintroduced by a wrapper around the
// library's own Store, with a short sequence.
func TestMatrixCatchesBrokenRules(t *testing.T) {
	t.Run("pruning on a partial listing", func(t *testing.T) {
		cfg := ipamConfig()
		wrap(&cfg, func(p migrate.Phase, mc *migrate.Config[ipamKey, alloc]) {
			mc.PruneOrphans = true
			if p == migrate.PhaseMigrate {
				mc.Legacy = completeListing[ipamKey, alloc]{mc.Legacy}
			}
		})
		cfg.PartialListings, cfg.MaxLen, cfg.NoCrashes, cfg.NoFaults = true, 4, true, true
		res := caught(t, cfg, 4, "REPORT|DROPPED ON A PARTIAL LISTING|must refuse")
		assert.True(t, slices.ContainsFunc(res.all, func(v migratetest.Violation) bool {
			return strings.Contains(strings.Join(v.Problems, "\n"), "DROPPED ON A PARTIAL LISTING")
		}), "the prune itself is caught")
	})
	t.Run("the checkpoint wins over the old binary's values", func(t *testing.T) {
		cfg := registryConfig()
		wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[string, int]) {
			mc.Merge = migrate.PreferCheckpoint[string, int]
		})
		cfg.MaxLen = 4
		caught(t, cfg, 4, "STALE|STEADY STATE")
	})
	t.Run("the old binary's delete is undone", func(t *testing.T) {
		cfg := registryConfig()
		inner := cfg.New
		cfg.New = func(p migrate.Phase, l source.Reader[string, int], cp migrate.Checkpoint[string, int]) (migrate.Config[string, int], error) {
			mc, err := inner(p, l, cp)
			if p == migrate.PhaseMigrate {
				mc.Legacy = keepOrphans[string, int]{explicitLegacy: l.(explicitLegacy[string, int]), cp: cp}
			}
			return mc, err
		}
		cfg.MaxLen, cfg.NoFaults = 3, true
		caught(t, cfg, 3, "INVENTED")
	})
	t.Run("phase 1 rewrites the checkpoint from CRI's view", func(t *testing.T) {
		cfg := ipamConfig()
		wrap(&cfg, func(p migrate.Phase, mc *migrate.Config[ipamKey, alloc]) {
			if p == migrate.PhaseExpand {
				mc.Checkpoint = blindLoad[ipamKey, alloc]{full(mc.Checkpoint)}
			}
		})
		cfg.MaxLen, cfg.NoFaults = 3, true
		caught(t, cfg, 3, "KEY|STALE")
	})
	t.Run("phase 3 starts empty over a newer checkpoint", func(t *testing.T) {
		cfg := ipamConfig()
		wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[ipamKey, alloc]) {
			if mc.Checkpoint != nil {
				mc.Checkpoint = newerIsCorrupt[ipamKey, alloc]{full(mc.Checkpoint)}
			}
		})
		cfg.SchemaBumps, cfg.MaxLen, cfg.NoFaults = true, 4, true
		caught(t, cfg, 4, "must refuse|LOST|does not match")
	})
	t.Run("Strict moves an unreadable checkpoint aside", func(t *testing.T) {
		cfg := registryConfig()
		wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[string, int]) {
			mc.Strict = true
			if mc.Checkpoint != nil {
				mc.Checkpoint = &selfQuarantine[string, int]{full(mc.Checkpoint)}
			}
		})
		cfg.Corruption, cfg.MaxLen, cfg.NoFaults = true, 4, true
		caught(t, cfg, 4, "must refuse")
	})
	t.Run("a volatile legacy taken as evidence", func(t *testing.T) {
		cfg := registryConfig()
		cfg.Volatile, cfg.MaxLen = true, 3
		// The legacy says it is volatile; a factory that says otherwise
		// takes its emptiness as evidence.
		wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[string, int]) { mc.LegacyKind = source.Durable })
		caught(t, cfg, 3, "LOST")
	})
	t.Run("a failed undo reported as a plain failure", func(t *testing.T) {
		cfg := registryConfig()
		inner := cfg.New
		cfg.New = func(p migrate.Phase, l source.Reader[string, int], cp migrate.Checkpoint[string, int]) (migrate.Config[string, int], error) {
			mc, err := inner(p, l, cp)
			if cp != nil && mc.Legacy != nil {
				watch := &saveWatch[string, int]{fullCheckpoint: full(cp)}
				mc.Checkpoint = watch
				mc.Legacy = &ignoreUndoFailure[string, int]{explicitLegacy: l.(explicitLegacy[string, int]), saves: watch}
			}
			return mc, err
		}
		cfg.MaxLen, cfg.NoCrashes, cfg.Seed = 4, true, 11
		caught(t, cfg, 4, "INVENTED|LOST|STALE|CUT")
	})
	t.Run("phase 1 does not rewrite the checkpoint", func(t *testing.T) {
		cfg := ipamConfig()
		wrap(&cfg, func(p migrate.Phase, mc *migrate.Config[ipamKey, alloc]) {
			if p == migrate.PhaseExpand {
				mc.Checkpoint = noRestoreSave[ipamKey, alloc]{full(mc.Checkpoint)}
			}
		})
		cfg.MaxLen = 4
		caught(t, cfg, 4, "LOST|INVENTED|STALE|KEY|STEADY STATE")
	})
	t.Run("phase 2 does not backfill", func(t *testing.T) {
		cfg := ipamConfig()
		wrap(&cfg, func(p migrate.Phase, mc *migrate.Config[ipamKey, alloc]) {
			if p == migrate.PhaseMigrate {
				mc.Legacy = source.Func[ipamKey, alloc](func(context.Context) (map[ipamKey]alloc, error) { return nil, nil })
			}
		})
		cfg.MaxLen = 3
		caught(t, cfg, 3, "LOST")
	})
	t.Run("an Equal that compares what CRI cannot see", func(t *testing.T) {
		cfg := ipamConfig()
		wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[ipamKey, alloc]) {
			mc.Equal = func(a, b alloc) bool { return a == b } // DeepEqual, the default before issue 21
		})
		cfg.MaxLen, cfg.NoCrashes, cfg.NoFaults, cfg.NoReboots = 2, true, true, true
		caught(t, cfg, 2, "KEY|STEADY STATE: a restore right after a restore, with no write between, reported [0-9]+ entries diverged")
	})
	t.Run("an implicit legacy without Equal", func(t *testing.T) {
		// The README's CRI configuration before issue 21: migrate.New
		// refuses it; were it accepted, the DeepEqual default would be
		// caught as above.
		cfg := ipamConfig()
		wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[ipamKey, alloc]) { mc.Equal = nil })
		cfg.MaxLen, cfg.NoCrashes, cfg.NoFaults, cfg.NoReboots = 2, true, true, true
		caught(t, cfg, 2, "Config.Equal is required|KEY|STEADY STATE")
	})
	t.Run("no boot epoch", func(t *testing.T) {
		cfg := ipamConfig()
		wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[ipamKey, alloc]) {
			if mc.Checkpoint != nil {
				mc.Checkpoint = noBootID[ipamKey, alloc]{mc.Checkpoint}
			}
		})
		cfg.MaxLen, cfg.NoCrashes = 3, true
		v := caught(t, cfg, 3, "INVENTED|STALE")
		assert.Contains(t, v.Trace, "reboot")
	})
}

func seqOf(seq []migrate.Phase) string {
	var b strings.Builder
	for _, p := range seq {
		fmt.Fprint(&b, int(p))
	}
	return b.String()
}

// fullCheckpoint is what the harness gives a factory: a checkpoint with
// Commit and a boot ID. Wrappers embed it, so that they change only what
// they mean to.
type fullCheckpoint[K comparable, V any] interface {
	migrate.Checkpoint[K, V]
	Commit(context.Context, checkpoint.Meta, []checkpoint.Change[K, V]) error
	BootID() string
}

func full[K comparable, V any](c migrate.Checkpoint[K, V]) fullCheckpoint[K, V] {
	return c.(fullCheckpoint[K, V])
}

type explicitLegacy[K comparable, V any] interface {
	source.Reader[K, V]
	source.Writer[K, V]
	source.Kinded
}

// completeListing hides that a listing was partial.
type completeListing[K comparable, V any] struct{ source.Reader[K, V] }

func (c completeListing[K, V]) List(ctx context.Context) (map[K]V, error) {
	m, err := c.Reader.List(ctx)
	if source.Partial(err) {
		return m, nil
	}
	return m, err
}

// keepOrphans lists, besides legacy, every entry only the checkpoint has:
// the Store then keeps what an old binary deleted.
type keepOrphans[K comparable, V any] struct {
	explicitLegacy[K, V]
	cp migrate.Checkpoint[K, V]
}

func (k keepOrphans[K, V]) List(ctx context.Context) (map[K]V, error) {
	m, err := k.explicitLegacy.List(ctx)
	if err != nil {
		return m, err
	}
	if snap, err := k.cp.Load(ctx); err == nil {
		for key, v := range snap.Entries {
			if _, ok := m[key]; !ok {
				m[key] = v
			}
		}
	}
	return m, nil
}

// blindLoad shows the Store no checkpoint: phase 1 then rebuilds it from
// legacy's view alone.
type blindLoad[K comparable, V any] struct{ fullCheckpoint[K, V] }

func (b blindLoad[K, V]) Load(context.Context) (checkpoint.Snapshot[K, V], error) {
	return checkpoint.Snapshot[K, V]{}, checkpoint.ErrNotExist
}

// newerIsCorrupt turns a newer schema into a corrupt file: the Store moves it
// aside and starts over.
type newerIsCorrupt[K comparable, V any] struct{ fullCheckpoint[K, V] }

func (n newerIsCorrupt[K, V]) Load(ctx context.Context) (checkpoint.Snapshot[K, V], error) {
	s, err := n.fullCheckpoint.Load(ctx)
	if errors.Is(err, checkpoint.ErrNewerSchema) {
		return s, fmt.Errorf("%w (was: %v)", checkpoint.ErrCorrupt, err)
	}
	return s, err
}

// selfQuarantine moves an unreadable file aside itself and reports none:
// Strict then cannot refuse.
type selfQuarantine[K comparable, V any] struct{ fullCheckpoint[K, V] }

func (q *selfQuarantine[K, V]) Load(ctx context.Context) (checkpoint.Snapshot[K, V], error) {
	s, err := q.fullCheckpoint.Load(ctx)
	if err != nil && !errors.Is(err, checkpoint.ErrNotExist) {
		if _, qerr := q.fullCheckpoint.Quarantine(ctx); qerr == nil {
			return checkpoint.Snapshot[K, V]{}, checkpoint.ErrNotExist
		}
	}
	return s, err
}

// saveWatch remembers whether the last save failed.
type saveWatch[K comparable, V any] struct {
	fullCheckpoint[K, V]
	failed bool
}

func (w *saveWatch[K, V]) Commit(ctx context.Context, m checkpoint.Meta, chs []checkpoint.Change[K, V]) error {
	err := w.fullCheckpoint.Commit(ctx, m, chs)
	w.failed = err != nil
	return err
}

func (w *saveWatch[K, V]) Save(ctx context.Context, s checkpoint.Snapshot[K, V]) error {
	err := w.fullCheckpoint.Save(ctx, s)
	w.failed = err != nil
	return err
}

// ignoreUndoFailure reports success for a legacy write that undoes a write
// whose save failed, whether or not it happened: the Store then says the
// write failed when legacy still holds it.
type ignoreUndoFailure[K comparable, V any] struct {
	explicitLegacy[K, V]
	saves *saveWatch[K, V]
}

func (i *ignoreUndoFailure[K, V]) Put(ctx context.Context, k K, v V) error {
	if err := i.explicitLegacy.Put(ctx, k, v); err != nil && !i.saves.failed {
		return err
	}
	return nil
}

func (i *ignoreUndoFailure[K, V]) Delete(ctx context.Context, k K) error {
	if err := i.explicitLegacy.Delete(ctx, k); err != nil && !i.saves.failed {
		return err
	}
	return nil
}

// noRestoreSave drops full saves: the rewrite of the checkpoint at restore.
type noRestoreSave[K comparable, V any] struct{ fullCheckpoint[K, V] }

func (n noRestoreSave[K, V]) Save(context.Context, checkpoint.Snapshot[K, V]) error { return nil }

// noBootID hides the checkpoint's boot ID: a Store without a boot epoch.
type noBootID[K comparable, V any] struct {
	migrate.Checkpoint[K, V]
}

func (noBootID[K, V]) BootID() string { return "" }

func TestCheckNeedsTheAdapters(t *testing.T) {
	_, err := migratetest.Check(migratetest.Config[string, int]{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Config.New, Config.Key and Config.Value are required")
}

func TestSequencesReproduce(t *testing.T) {
	cfg := registryConfig()
	wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[string, int]) {
		mc.Merge = migrate.PreferCheckpoint[string, int]
	})
	cfg.MaxLen = 4
	full, err := migratetest.Check(cfg)
	require.Error(t, err)
	one := cfg
	one.Sequences = [][]migrate.Phase{full.Violations[0].Sequence}
	res, err := migratetest.Check(one)
	require.Error(t, err, "running the reported sequence alone fails the same way")
	assert.Equal(t, full.Violations[0].Trace, res.Violations[0].Trace)
}
