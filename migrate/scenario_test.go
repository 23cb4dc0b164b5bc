package migrate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/internal/testcni"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

// ipamKey is the CNI spec's key for IPAM state.
type ipamKey = testcni.Key

type ipamVal struct {
	IP string `json:"ip"`
}

// sameIPVal is Config.Equal for CRI, which records the IP.
func sameIPVal(a, b ipamVal) bool { return a.IP == b.IP }

var (
	byContainer = testcni.ByContainer
	real        = testcni.Real
	fromCRI     = testcni.FromCRI
)

// node is a node in the VPC CNI story: the runtime (CRI, an implicit
// legacy), a checkpoint that survives restarts, and the daemon's Store,
// restarted at will in any phase.
type node struct {
	t   *testing.T
	cri *migratetest.Implicit[ipamKey, ipamVal]
	cp  *checkpoint.Memory[ipamKey, ipamVal]
	s   *migrate.Store[ipamKey, ipamVal]
	// unique sets Config.Unique on the IP.
	unique bool
}

func newNode(t *testing.T) *node {
	n := &node{t: t, cri: &migratetest.Implicit[ipamKey, ipamVal]{}, cp: checkpoint.NewMemory[ipamKey, ipamVal]()}
	t.Cleanup(func() {
		if n.s != nil {
			n.s.Close()
		}
	})
	return n
}

// start restarts the daemon in phase p. Phase 0 is the old binary: it
// knows nothing of the checkpoint.
func (n *node) start(p migrate.Phase) migrate.Report[ipamKey] {
	n.t.Helper()
	if n.s != nil {
		require.NoError(n.t, n.s.Close())
	}
	cfg := migrate.Config[ipamKey, ipamVal]{Phase: p, Legacy: n.cri, Match: byContainer, Equal: sameIPVal}
	if n.unique {
		cfg.Unique = func(v ipamVal) []string { return []string{v.IP} }
	}
	if p != migrate.PhaseLegacy {
		cfg.Checkpoint = checkpointtest.Reopen(n.t, n.cp)
	}
	s, err := migrate.New(cfg)
	require.NoError(n.t, err)
	n.s = s
	r, err := s.Restore(context.Background())
	require.NoError(n.t, err)
	return r
}

// add is a CNI ADD: the daemon stores the allocation, and the runtime has
// the sandbox because the ADD succeeded.
func (n *node) add(id, ip string) {
	n.t.Helper()
	require.NoError(n.t, n.s.Put(context.Background(), real(id), ipamVal{IP: ip}))
	n.cri.Set(fromCRI(id), ipamVal{IP: ip})
}

// del is a CNI DEL with the real key, whatever key the entry was learned
// under.
func (n *node) del(id string) {
	n.t.Helper()
	require.NoError(n.t, n.s.Delete(context.Background(), real(id)))
	n.cri.Remove(fromCRI(id))
}

// serves checks that the daemon serves exactly the sandboxes ids, found by
// their real key, with their IPs.
func (n *node) serves(ips map[string]string) {
	n.t.Helper()
	assert.Equal(n.t, len(ips), n.s.Len(), "entries served")
	for id, ip := range ips {
		v, ok := n.s.Get(real(id))
		if assert.True(n.t, ok, "sandbox %s is not served", id) {
			assert.Equal(n.t, ip, v.IP, "sandbox %s", id)
		}
	}
	// No IP is assigned twice.
	seen := map[string]ipamKey{}
	for k, v := range n.s.All() {
		if other, dup := seen[v.IP]; dup {
			n.t.Errorf("IP %s is assigned to %v and %v", v.IP, other, k)
		}
		seen[v.IP] = k
	}
}

// servesAtLeast checks that the daemon serves the sandboxes ids, found by
// their real key, with their IPs: what the node holds. It may serve more
// (an entry it kept and reported).
func (n *node) servesAtLeast(ips map[string]string) {
	n.t.Helper()
	for id, ip := range ips {
		v, ok := n.s.Get(real(id))
		if assert.True(n.t, ok, "sandbox %s is not served", id) {
			assert.Equal(n.t, ip, v.IP, "sandbox %s", id)
		}
	}
}

// TestSeedUpgradeDowngradeUpgrade is the VPC CNI bug, spelled out: phase 1
// with pods, a downgrade to phase 0 where pods churn, and phase 1 again.
// The first phase-1 checkpoint is stale by then; nothing of it may be
// served, and the file must be healed.
func TestSeedUpgradeDowngradeUpgrade(t *testing.T) {
	t.Run("rule8,rule13,rule21,rule22", func(t *testing.T) {
		n := newNode(t)
		n.start(migrate.PhaseExpand)
		n.add("A", "10.0.0.2")
		n.add("B", "10.0.0.3")

		n.start(migrate.PhaseLegacy) // downgrade: the old binary ignores the file
		n.del("A")
		n.add("C", "10.0.0.2") // A's IP, reused
		n.serves(map[string]string{"B": "10.0.0.3", "C": "10.0.0.2"})

		// Phase 1 again. The runtime lists B and C. Nothing but the
		// listing's silence says A is gone, and a runtime lists a sandbox
		// only once its network is set up, so A could be an ADD not
		// listed yet: it is kept and reported, and its IP is not handed
		// out again. Without Config.Unique the Store cannot see that C
		// holds it: an IP leaked, the report says which.
		r := n.start(migrate.PhaseExpand)
		n.servesAtLeast(map[string]string{"B": "10.0.0.3", "C": "10.0.0.2"})
		assert.Equal(t, migrate.ReadCheckpointAndLegacy, r.ReadFrom)
		assert.Equal(t, []ipamKey{real("A")}, r.Orphaned, "A is reported")
		assert.NotEmpty(t, r.Stale, "the checkpoint is seen to differ from legacy")

		// With Config.Unique, C, which both sides now show live, holds
		// A's IP: that is evidence A is gone, and it is dropped.
		n.unique = true
		r = n.start(migrate.PhaseMigrate)
		n.serves(map[string]string{"B": "10.0.0.3", "C": "10.0.0.2"})
		assert.Equal(t, []ipamKey{real("A")}, r.Dropped)
		snap, err := checkpointtest.Reopen(t, n.cp).Load(context.Background())
		require.NoError(t, err)
		assert.NotContains(t, snap.Entries, real("A"), "A's stale allocation is gone from the file")
	})
}

func TestSeedMoreRollouts(t *testing.T) {
	t.Run("rule13,rule16/2 → 1 → 2", func(t *testing.T) {
		n := newNode(t)
		n.start(migrate.PhaseMigrate)
		n.add("A", "10.0.0.2")
		n.start(migrate.PhaseExpand)
		n.add("B", "10.0.0.3")
		n.del("A")
		r := n.start(migrate.PhaseMigrate)
		n.serves(map[string]string{"B": "10.0.0.3"})
		assert.Empty(t, r.Orphaned)
		assert.Empty(t, r.Backfilled)
	})
	t.Run("rule20,rule21/2 → 0 → 2", func(t *testing.T) {
		n := newNode(t)
		n.start(migrate.PhaseMigrate)
		n.add("A", "10.0.0.2")
		n.add("B", "10.0.0.3")
		n.start(migrate.PhaseLegacy)
		n.del("A")
		n.add("C", "10.0.0.4")
		r := n.start(migrate.PhaseMigrate)
		// C was added behind the checkpoint's back: backfilled. A, which
		// the runtime no longer lists, may be an ADD it has not listed
		// yet as far as the sides can tell (a listing lags both ways): it
		// is kept and reported as an orphan, its address leaked until a
		// prune, never handed out while it may be in use. (With
		// Config.Unique, an entry the sides show live that took A's
		// address drops it: TestUniqueResolvesAnAddressHeldTwice.)
		assert.Equal(t, []ipamKey{fromCRI("C")}, r.Backfilled)
		assert.Empty(t, r.Dropped)
		assert.Equal(t, []ipamKey{real("A")}, r.Orphaned)
		n.serves(map[string]string{"A": "10.0.0.2", "B": "10.0.0.3", "C": "10.0.0.4"})
	})
	t.Run("rule13/3 → 1", func(t *testing.T) {
		n := newNode(t)
		n.start(migrate.PhaseMigrate)
		n.add("A", "10.0.0.2")
		n.start(migrate.PhaseContract)
		n.add("B", "10.0.0.3")
		n.del("A")
		r := n.start(migrate.PhaseExpand)
		n.serves(map[string]string{"B": "10.0.0.3"})
		assert.Empty(t, r.LegacyStale, "CRI is never stale")
		assert.Equal(t, migrate.ReadCheckpointAndLegacy, r.ReadFrom, "phase 1 reads legacy, and the checkpoint's records")
	})
	t.Run("rule10,rule26/0 → 3 is refused when phase 0 ran this library", func(t *testing.T) {
		n := newNode(t)
		n.start(migrate.PhaseMigrate)
		n.add("A", "10.0.0.2")
		// A phase-0 run of the new binary, with the checkpoint configured.
		s, err := migrate.New(migrate.Config[ipamKey, ipamVal]{Phase: migrate.PhaseLegacy, Legacy: n.cri, Match: byContainer, Equal: sameIPVal, Checkpoint: checkpointtest.Reopen(t, n.cp)})
		require.NoError(t, err)
		_, err = s.Restore(context.Background())
		require.NoError(t, err)
		require.NoError(t, s.Delete(context.Background(), real("A"))) // marks A
		require.NoError(t, s.Close())
		n.s.Close()
		n.s = nil

		s, err = migrate.New(migrate.Config[ipamKey, ipamVal]{Phase: migrate.PhaseContract, Checkpoint: checkpointtest.Reopen(t, n.cp)})
		require.NoError(t, err)
		defer s.Close()
		_, err = s.Restore(context.Background())
		require.ErrorIs(t, err, migrate.ErrStale)
		assert.Contains(t, err.Error(), "run phase 1 (expand) or 2 (migrate) first")
	})
}

// TestMatchFindsPlaceholderEntries: an entry learned from CRI under
// placeholder fields is found, replaced and deleted with the real key.
func TestMatchFindsPlaceholderEntries(t *testing.T) {
	t.Run("rule18", func(t *testing.T) {
		ctx := context.Background()
		n := newNode(t)
		n.cri.Set(fromCRI("A"), ipamVal{IP: "10.0.0.2"})
		n.cri.Set(fromCRI("B"), ipamVal{IP: "10.0.0.3"})
		r := n.start(migrate.PhaseMigrate)
		assert.ElementsMatch(t, []ipamKey{fromCRI("A"), fromCRI("B")}, r.Backfilled)

		v, ok := n.s.Get(real("A"))
		require.True(t, ok, "Get with the real key finds the placeholder entry")
		assert.Equal(t, "10.0.0.2", v.IP)
		k, _ := n.s.Key(real("A"))
		assert.Equal(t, fromCRI("A"), k)
		o, _ := n.s.Origin(real("A"))
		assert.Equal(t, migrate.OriginBackfill, o)

		// DEL with the real key releases it (the VPC CNI's issue #1411).
		require.NoError(t, n.s.Delete(ctx, real("A")))
		_, ok = n.s.Get(fromCRI("A"))
		assert.False(t, ok)
		// A re-ADD with the real key replaces the placeholder key.
		require.NoError(t, n.s.Put(ctx, real("B"), ipamVal{IP: "10.0.0.3"}))
		k, _ = n.s.Key(fromCRI("B"))
		assert.Equal(t, real("B"), k)
		o, _ = n.s.Origin(real("B"))
		assert.Equal(t, migrate.OriginWrite, o)
		assert.Equal(t, 1, n.s.Len())

		snap, err := checkpointtest.Reopen(t, n.cp).Load(ctx)
		require.NoError(t, err)
		assert.Equal(t, map[ipamKey]ipamVal{real("B"): {IP: "10.0.0.3"}}, snap.Entries, "the checkpoint holds the real key only")
	})
}

// TestMatchWithExplicitLegacyPlaceholders: legacy that stores entries
// under other keys has them removed when the entry is written with the
// real key, so a downgrade cannot resurrect them.
func TestMatchWithExplicitLegacyPlaceholders(t *testing.T) {
	t.Run("rule18", func(t *testing.T) {
		ctx := context.Background()
		reg := &migratetest.Explicit[ipamKey, ipamVal]{}
		reg.Set(fromCRI("A"), ipamVal{IP: "10.0.0.2"})
		reg.Set(fromCRI("B"), ipamVal{IP: "10.0.0.3"})
		cp := checkpoint.NewMemory[ipamKey, ipamVal]()
		require.NoError(t, cp.Save(ctx, checkpoint.Snapshot[ipamKey, ipamVal]{Meta: checkpoint.Meta{Phase: "migrate"}, Entries: map[ipamKey]ipamVal{
			real("A"): {IP: "10.0.0.2"}, real("B"): {IP: "10.0.0.3"},
		}}))
		s, err := migrate.New(migrate.Config[ipamKey, ipamVal]{Phase: migrate.PhaseMigrate, Legacy: reg, Checkpoint: cp, Match: byContainer})
		require.NoError(t, err)
		defer s.Close()
		r, err := s.Restore(ctx)
		require.NoError(t, err)
		assert.Empty(t, r.Backfilled)
		assert.Empty(t, r.Orphaned)

		require.NoError(t, s.Delete(ctx, real("A")))
		require.NoError(t, s.Put(ctx, real("B"), ipamVal{IP: "10.0.0.9"}))
		assert.Equal(t, map[ipamKey]ipamVal{real("B"): {IP: "10.0.0.9"}}, reg.Snapshot(), "placeholders are gone from legacy too")
	})
}

var _ source.Reader[ipamKey, ipamVal] = (*migratetest.Implicit[ipamKey, ipamVal])(nil)
