package migrate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

// The promise: any sequence of deployments restores exactly what was
// acknowledged, keys and values included, or refuses with a clear error.
// Each test below is a default path on which the promise once failed; each
// failed on the code before the restore rules were rewritten.

// TestPromisePartialListingNeverPrunes: phase 2 with PruneOrphans, a
// checkpoint {a, b}, and a legacy listing {a} that says it could not read
// b. Pruning b would hand its IP out twice.
func TestPromisePartialListingNeverPrunes(t *testing.T) {
	t.Run("rule21", func(t *testing.T) {
		ctx := context.Background()
		cri := &migratetest.Implicit[string, int]{}
		cri.Set("a", 1)
		cp := checkpoint.NewMemory[string, int]()
		require.NoError(t, cp.Save(ctx, checkpoint.Snapshot[string, int]{Meta: checkpoint.Meta{Phase: "migrate"}, Entries: map[string]int{"a": 1, "b": 2}}))
		cri.FailListPartly(errors.New("sandbox b: status: context deadline exceeded"))

		s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: cri, Checkpoint: checkpointtest.Reopen(t, cp), PruneOrphans: true, Equal: sameInt})
		require.NoError(t, err)
		defer s.Close()
		r, err := s.Restore(ctx)
		require.NoError(t, err)
		assert.Empty(t, r.Pruned)
		assert.Equal(t, []string{"b"}, r.Orphaned, "kept and reported")
		require.Len(t, r.Errors, 1)
		assert.Contains(t, r.Errors[0].Error(), "sandbox b")
		v, ok := s.Get("b")
		assert.True(t, ok)
		assert.Equal(t, 2, v)
		snap, err := checkpointtest.Reopen(t, cp).Load(ctx)
		require.NoError(t, err)
		assert.Equal(t, map[string]int{"a": 1, "b": 2}, snap.Entries, "b is still in the checkpoint")
	})
}

// registryNode is a proxy's node with a registry that survives restarts
// (an explicit legacy the Store writes, kept across restarts), a
// checkpoint, and binaries started in any phase. Phase 0 is the old binary,
// which knows nothing of the checkpoint.
type registryNode struct {
	t   *testing.T
	reg *source.Map[string, int]
	cp  *checkpoint.Memory[string, int]
	s   *migrate.Store[string, int]
	cfg func(*migrate.Config[string, int])
	// newPhase0 runs phase 0 as this library with the checkpoint, not as
	// the old binary.
	newPhase0 bool
}

func newRegistryNode(t *testing.T) *registryNode {
	n := &registryNode{t: t, reg: &source.Map[string, int]{}, cp: checkpoint.NewMemory[string, int]()}
	t.Cleanup(func() {
		if n.s != nil {
			n.s.Close()
		}
	})
	return n
}

func (n *registryNode) start(p migrate.Phase) (migrate.Report[string], error) {
	n.t.Helper()
	if n.s != nil {
		require.NoError(n.t, n.s.Close())
		n.s = nil
	}
	cfg := migrate.Config[string, int]{Phase: p, Legacy: n.reg, LegacyKind: source.Durable}
	if p != migrate.PhaseLegacy || n.newPhase0 {
		cfg.Checkpoint = checkpointtest.Reopen(n.t, n.cp)
	}
	if n.cfg != nil {
		n.cfg(&cfg)
	}
	s, err := migrate.New(cfg)
	require.NoError(n.t, err)
	r, err := s.Restore(context.Background())
	if err != nil {
		s.Close()
		return r, err
	}
	n.s = s
	return r, nil
}

func (n *registryNode) mustStart(p migrate.Phase) migrate.Report[string] {
	n.t.Helper()
	r, err := n.start(p)
	require.NoError(n.t, err)
	return r
}

func (n *registryNode) put(k string, v int) {
	n.t.Helper()
	require.NoError(n.t, n.s.Put(context.Background(), k, v))
}

func (n *registryNode) del(k string) {
	n.t.Helper()
	require.NoError(n.t, n.s.Delete(context.Background(), k))
}

func (n *registryNode) serves(want map[string]int) {
	n.t.Helper()
	got := map[string]int{}
	for k, v := range n.s.All() {
		got[k] = v
	}
	assert.Equal(n.t, want, got, "served")
}

// TestPromiseOldBinaryWritesWin: with a legacy the Store writes, what an old
// binary acknowledged in between (a changed value, a delete) is what a
// later phase 2 serves, and the checkpoint is brought in line with it.
func TestPromiseOldBinaryWritesWin(t *testing.T) {
	t.Run("rule19", func(t *testing.T) {
		t.Run("a changed value", func(t *testing.T) {
			n := newRegistryNode(t)
			n.mustStart(migrate.PhaseMigrate)
			n.put("vm-1", 1)
			n.mustStart(migrate.PhaseLegacy)
			n.put("vm-1", 2) // acknowledged by the old binary
			r := n.mustStart(migrate.PhaseMigrate)
			n.serves(map[string]int{"vm-1": 2})
			assert.Equal(t, []string{"vm-1"}, r.Diverged, "reported, never silent")
			v, _ := n.reg.Get("vm-1")
			assert.Equal(t, 2, v, "the registry keeps what the old binary acknowledged")
			snap, err := checkpointtest.Reopen(t, n.cp).Load(context.Background())
			require.NoError(t, err)
			assert.Equal(t, map[string]int{"vm-1": 2}, snap.Entries)
		})
		t.Run("a delete", func(t *testing.T) {
			n := newRegistryNode(t)
			n.mustStart(migrate.PhaseMigrate)
			n.put("a", 1)
			n.put("b", 2)
			n.mustStart(migrate.PhaseLegacy)
			require.NoError(t, n.s.Delete(context.Background(), "a"))
			r := n.mustStart(migrate.PhaseMigrate)
			n.serves(map[string]int{"b": 2})
			assert.Equal(t, []string{"a"}, r.Dropped)
			assert.Empty(t, r.Orphaned)
			_, ok := n.reg.Get("a")
			assert.False(t, ok, "a is not written back into the registry")
		})
		t.Run("phase 1 too", func(t *testing.T) {
			n := newRegistryNode(t)
			n.mustStart(migrate.PhaseExpand)
			n.put("vm-1", 1)
			n.mustStart(migrate.PhaseLegacy)
			n.put("vm-1", 2)
			n.mustStart(migrate.PhaseExpand)
			n.serves(map[string]int{"vm-1": 2})
		})
	})
}

// allocation is an IPAM value CRI knows only part of: the IP, not the
// gateway.
type allocation struct {
	IP      string `json:"ip"`
	Gateway string `json:"gateway,omitempty"`
}

// TestPromisePhase1KeepsTheCheckpointsRecord: phase 2 → 1 → 2 with CRI as
// legacy keeps the real key and the whole value of an entry CRI agrees on.
func TestPromisePhase1KeepsTheCheckpointsRecord(t *testing.T) {
	t.Run("rule13,rule18", func(t *testing.T) {
		ctx := context.Background()
		cri := &migratetest.Implicit[ipamKey, allocation]{}
		cp := checkpoint.NewMemory[ipamKey, allocation]()
		var s *migrate.Store[ipamKey, allocation]
		start := func(p migrate.Phase) {
			if s != nil {
				require.NoError(t, s.Close())
			}
			var err error
			s, err = migrate.New(migrate.Config[ipamKey, allocation]{
				Phase: p, Legacy: cri, Checkpoint: checkpointtest.Reopen(t, cp), Match: byContainer,
				Equal: func(a, b allocation) bool { return a.IP == b.IP }, // what CRI records
			})
			require.NoError(t, err)
			_, err = s.Restore(ctx)
			require.NoError(t, err)
		}
		defer func() { s.Close() }()
		start(migrate.PhaseMigrate)
		require.NoError(t, s.Put(ctx, real("c1"), allocation{IP: "10.0.0.1", Gateway: "10.0.0.254"}))
		cri.Set(fromCRI("c1"), allocation{IP: "10.0.0.1"})
		start(migrate.PhaseExpand)
		start(migrate.PhaseMigrate)
		k, ok := s.Key(real("c1"))
		require.True(t, ok)
		assert.Equal(t, real("c1"), k, "the real key, not CRI's placeholder")
		v, _ := s.Get(real("c1"))
		assert.Equal(t, allocation{IP: "10.0.0.1", Gateway: "10.0.0.254"}, v, "the whole value")
	})
}

// TestPromiseBinaryRollbackInPhase3: v2 (schema 2) runs phase 3; the fleet
// rolls back to v1 (schema 1), still phase 3, default options, CRI
// configured. v1 must refuse and leave the file, so that v2 finds it.
func TestPromiseBinaryRollbackInPhase3(t *testing.T) {
	t.Run("rule4", func(t *testing.T) {
		ctx := context.Background()
		path := filepath.Join(t.TempDir(), "ipam.json")
		cri := &migratetest.Implicit[string, int]{}
		open := func(schema int) *migrate.Store[string, int] {
			opts := []checkpoint.Option{checkpoint.WithSchema(schema)}
			if schema > 1 {
				opts = append(opts, checkpoint.WithUpgrade(1, func(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }))
			}
			f, err := checkpoint.Open[string, int](ctx, path, opts...)
			require.NoError(t, err)
			s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseContract, Legacy: cri, Checkpoint: f, Equal: sameInt})
			require.NoError(t, err)
			return s
		}
		v2 := open(2)
		_, err := v2.Restore(ctx)
		require.NoError(t, err)
		for k, v := range map[string]int{"a": 1, "b": 2, "c": 3} {
			require.NoError(t, v2.Put(ctx, k, v))
			cri.Set(k, v)
		}
		require.NoError(t, v2.Close())
		before := readFile(t, path)

		for _, strict := range []bool{false, true} {
			v1 := open(1)
			_, err = v1.Restore(ctx)
			require.ErrorIs(t, err, checkpoint.ErrNewerSchema, "strict=%v", strict)
			assert.Contains(t, err.Error(), "roll forward")
			assert.Equal(t, 0, v1.Len())
			require.NoError(t, v1.Close())
			assert.Equal(t, before, readFile(t, path), "the file is untouched")
		}

		v2 = open(2)
		defer v2.Close()
		r, err := v2.Restore(ctx)
		require.NoError(t, err)
		assert.Equal(t, 3, r.Restored, "rolling forward finds it intact")
	})
}

// TestPromiseVolatileLegacy: a proxy whose registry lives in memory follows
// the README's rollout 0 → 1 → 2 → 3 with restarts in every phase; no
// restart loses a VM, none reports orphans, and the registry is refilled.
func TestPromiseVolatileLegacy(t *testing.T) {
	t.Run("rule11", func(t *testing.T) {
		n := newRegistryNode(t)
		n.cfg = func(c *migrate.Config[string, int]) { c.LegacyKind = source.Volatile }
		restart := func(p migrate.Phase) migrate.Report[string] {
			n.reg.Replace(nil) // the registry dies with the process
			return n.mustStart(p)
		}
		restart(migrate.PhaseLegacy)
		n.put("vm-0", 0)
		restart(migrate.PhaseExpand) // phase 0's state died with it, as it always did
		n.serves(map[string]int{})
		n.put("vm-1", 1)
		n.put("vm-2", 2)
		for _, p := range []migrate.Phase{migrate.PhaseExpand, migrate.PhaseMigrate, migrate.PhaseMigrate, migrate.PhaseContract, migrate.PhaseMigrate} {
			r := restart(p)
			n.serves(map[string]int{"vm-1": 1, "vm-2": 2})
			assert.Empty(t, r.Orphaned, "phase %d: an empty registry is no evidence", p)
			assert.Empty(t, r.Dropped, "phase %d", p)
			assert.Equal(t, migrate.ReadCheckpoint, r.ReadFrom, "phase %d", p)
			if p.WritesLegacy() {
				assert.Equal(t, 2, r.LegacyWrites, "phase %d refills the registry", p)
				assert.Equal(t, map[string]int{"vm-1": 1, "vm-2": 2}, n.reg.Snapshot())
			}
		}
		// A rollback to phase 0 of this binary (issue 41, path 6). A run
		// that writes nothing leaves nothing to distrust: the next phase
		// serves every VM.
		n.newPhase0 = true
		restart(migrate.PhaseLegacy)
		r := restart(migrate.PhaseMigrate)
		n.serves(map[string]int{"vm-1": 1, "vm-2": 2})
		assert.Empty(t, r.Stale)
		// A run that writes marks what it writes: the next phase serves
		// every VM it did not write, never brings back what it deleted, and
		// reports what it wrote to the registry that died with it.
		restart(migrate.PhaseLegacy)
		n.put("vm-3", 3)
		n.del("vm-1")
		r = restart(migrate.PhaseMigrate)
		n.serves(map[string]int{"vm-2": 2})
		assert.NotEmpty(t, r.Stale)
		text := fmt.Sprint(r.Errors)
		assert.Contains(t, text, `"vm-3"`, "vm-3, written to the registry that died, is reported")
		assert.Contains(t, text, `"vm-1"`, "and so is vm-1, whose last write is not known")
	})
}

// TestPromiseDoubleFault: a write that one side refuses, and whose undo on
// the other side fails too, says that its outcome is unknown and which side
// may hold it.
func TestPromiseDoubleFault(t *testing.T) {
	ctx := context.Background()
	t.Run("phase 2: the checkpoint refuses, legacy cannot take it back", func(t *testing.T) {
		reg := &migratetest.Explicit[string, int]{}
		cp := checkpoint.NewMemory[string, int]()
		flaky := &flakySaves{Memory: checkpointtest.Reopen(t, cp), okLeft: -1}
		s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: reg, Checkpoint: flaky})
		require.NoError(t, err)
		defer s.Close()
		_, err = s.Restore(ctx)
		require.NoError(t, err)
		flaky.okLeft = 0                                     // the write's save fails
		reg.FailWrites(1, 1, errors.New("registry refused")) // the put succeeds, its undo fails
		err = s.Put(ctx, "vm-1", 1)
		require.ErrorIs(t, err, migrate.ErrCheckpointWrite)
		require.ErrorIs(t, err, migrate.ErrOutcomeUnknown)
		assert.Contains(t, err.Error(), "legacy may hold it")
		_, ok := s.Get("vm-1")
		assert.False(t, ok, "memory is unchanged")

		// The next write brings legacy back in line with memory first.
		flaky.okLeft = -1
		require.NoError(t, s.Put(ctx, "vm-2", 2))
		assert.Equal(t, map[string]int{"vm-2": 2}, reg.Snapshot(), "the stray is gone from legacy")
	})
	t.Run("phase 1: the checkpoint refuses, legacy cannot take it back", func(t *testing.T) {
		reg := &migratetest.Explicit[string, int]{}
		cp := checkpoint.NewMemory[string, int]()
		s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseExpand, Legacy: reg, Checkpoint: cp})
		require.NoError(t, err)
		defer s.Close()
		_, err = s.Restore(ctx)
		require.NoError(t, err)
		checkpointtest.FailSaves(cp, 1, errors.New("disk full"))
		reg.FailWrites(1, 1, errors.New("registry refused")) // the put succeeds, its undo fails
		err = s.Put(ctx, "vm-1", 1)
		require.ErrorIs(t, err, migrate.ErrCheckpointWrite)
		require.ErrorIs(t, err, migrate.ErrOutcomeUnknown)
		assert.Contains(t, err.Error(), "legacy may hold it")
	})
	t.Run("a single fault is not unknown", func(t *testing.T) {
		reg := &migratetest.Explicit[string, int]{}
		cp := checkpoint.NewMemory[string, int]()
		s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: reg, Checkpoint: cp})
		require.NoError(t, err)
		defer s.Close()
		_, err = s.Restore(ctx)
		require.NoError(t, err)
		reg.FailWrites(0, 1, errors.New("registry refused"))
		err = s.Put(ctx, "vm-1", 1)
		require.ErrorIs(t, err, migrate.ErrLegacyWrite)
		assert.NotErrorIs(t, err, migrate.ErrOutcomeUnknown)
		snap, err := checkpointtest.Reopen(t, cp).Load(ctx)
		require.NoError(t, err)
		assert.Empty(t, snap.Entries, "the checkpoint holds the previous commit")
	})
}

// flakySaves lets okLeft saves succeed and fails the ones after (okLeft < 0:
// every one succeeds), as a disk that fills up between two saves would.
type flakySaves struct {
	*checkpoint.Memory[string, int]
	okLeft int
}

func (f *flakySaves) fail() bool {
	if f.okLeft < 0 {
		return false
	}
	if f.okLeft == 0 {
		return true
	}
	f.okLeft--
	return false
}

func (f *flakySaves) Commit(ctx context.Context, m checkpoint.Meta, chs []checkpoint.Change[string, int]) error {
	if f.fail() {
		return errors.New("disk full")
	}
	return f.Memory.Commit(ctx, m, chs)
}

func (f *flakySaves) Save(ctx context.Context, s checkpoint.Snapshot[string, int]) error {
	if f.fail() {
		return errors.New("disk full")
	}
	return f.Memory.Save(ctx, s)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// TestReportAfterFailedRestore says what happened, not "read , restored 0".
func TestReportAfterFailedRestore(t *testing.T) {
	cri := &migratetest.Implicit[string, int]{}
	cri.FailList(-1, errors.New("runtime down"))
	s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseExpand, Legacy: cri, Checkpoint: checkpoint.NewMemory[string, int](), Equal: sameInt})
	require.NoError(t, err)
	defer s.Close()
	r, err := s.Restore(context.Background())
	require.Error(t, err)
	assert.Equal(t, "phase 1 (expand): not restored", r.String())
}
