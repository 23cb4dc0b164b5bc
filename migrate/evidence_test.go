package migrate_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

// The tests of this file state what the node holds - which pods exist and
// which address each uses - and check what a Store serves against that,
// not against the restore rules (issue 41).

// addr is the one part of an int value that no two pods may share.
func addr(v int) []string { return []string{fmt.Sprint(v)} }

// pods is the node: pod -> the address it uses.
type pods map[string]int

// assertServesNode checks the Store against the node: every pod that
// exists is served with its address, and no address a pod uses is served
// to another pod that exists.
func assertServesNode(t *testing.T, s *migrate.Store[string, int], node pods) {
	t.Helper()
	for pod, a := range node {
		v, ok := s.Get(pod)
		if assert.True(t, ok, "%s exists on the node and holds .%d: it must be served", pod, a) {
			assert.Equal(t, a, v, "%s's address", pod)
		}
	}
	holders := map[int][]string{}
	for k, v := range s.All() {
		if _, live := node[k]; live {
			holders[v] = append(holders[v], k)
		}
	}
	for a, hs := range holders {
		assert.Len(t, hs, 1, "address .%d is served to several pods that exist: %v", a, hs)
	}
}

// phase1Node restores pods from a runtime in phase 1 and returns the
// Store, the runtime and the checkpoint.
func phase1Node(t *testing.T, node pods) (*migrate.Store[string, int], *migratetest.Implicit[string, int], *checkpoint.Memory[string, int]) {
	t.Helper()
	cri := &migratetest.Implicit[string, int]{}
	cri.Replace(node)
	cp := checkpoint.NewMemory[string, int]()
	s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseExpand, Legacy: cri, Checkpoint: checkpointtest.Reopen(t, cp), Equal: sameInt, Unique: addr})
	require.NoError(t, err)
	_, err = s.Restore(context.Background())
	require.NoError(t, err)
	return s, cri, cp
}

// restartIn restarts the daemon in phase p over the same runtime and
// checkpoint.
func restartIn(t *testing.T, p migrate.Phase, cri source.Reader[string, int], cp *checkpoint.Memory[string, int]) (*migrate.Store[string, int], migrate.Report[string]) {
	t.Helper()
	s, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: cri, Checkpoint: checkpointtest.Reopen(t, cp), Equal: sameInt, Unique: addr})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	r, err := s.Restore(context.Background())
	require.NoError(t, err)
	return s, r
}

// TestPodChurnAcrossARestart is issue 41's path 1, as containerd 1.6 plays
// it: an ADD the Store acknowledged whose sandbox the runtime does not
// list yet (it lists one only once its network is set up), and a DEL the
// Store acknowledged whose sandbox the runtime still lists (a stopped
// sandbox stays listed until it is removed), then a restart into phase 2.
// No old binary ran: the new pod must be served, and its address must not
// be free. The second case frees an address and hands it to the new pod
// at once, as an allocator that takes the lowest free address does.
func TestPodChurnAcrossARestart(t *testing.T) {
	for _, reuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("address reused=%v", reuse), func(t *testing.T) {
			ctx := context.Background()
			node := pods{"pod-1": 1, "pod-2": 2, "pod-3": 3}
			s, cri, cp := phase1Node(t, node)
			require.NoError(t, s.Delete(ctx, "pod-3")) // DEL: the runtime still lists pod-3
			delete(node, "pod-3")
			newAddr := 4
			if reuse {
				newAddr = 3
			}
			require.NoError(t, s.Put(ctx, "pod-new", newAddr)) // ADD: not listed yet
			node["pod-new"] = newAddr
			require.NoError(t, s.Close())

			s2, r := restartIn(t, migrate.PhaseMigrate, cri, cp)
			assertServesNode(t, s2, node)
			assert.NotContains(t, r.Dropped, "pod-new", "nothing shows pod-new gone: %s", r)
		})
	}
}

// TestUniqueDropsOnlyForALiveHolder is issue 41's path 4: the checkpoint
// holds pod-y {.1} and pod-z {.2}; a partial listing (pod-z unreadable)
// lists pod-y {.1} and pod-x {.1, .2} (here: pod-x's value holds both).
// pod-x loses .1 to pod-y, which both sides show live; pod-z must then not
// lose .2 to pod-x, which is dropped.
func TestUniqueDropsOnlyForALiveHolder(t *testing.T) {
	both := func(v int) []string {
		if v == 12 {
			return []string{"1", "2"}
		}
		return []string{fmt.Sprint(v)}
	}
	for _, p := range []migrate.Phase{migrate.PhaseMigrate, migrate.PhaseContract} {
		t.Run(p.String(), func(t *testing.T) {
			ctx := context.Background()
			cp := checkpoint.NewMemory[string, int]()
			require.NoError(t, cp.Save(ctx, checkpoint.Snapshot[string, int]{Meta: checkpoint.Meta{Phase: migrate.PhaseMigrate.String()}, Entries: map[string]int{"pod-y": 1, "pod-z": 2}}))
			cri := &migratetest.Implicit[string, int]{}
			cri.Replace(map[string]int{"pod-y": 1, "pod-x": 12})
			cri.FailListPartly(fmt.Errorf("pod-z: sandbox status: deadline exceeded"))
			s, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: cri, Checkpoint: checkpointtest.Reopen(t, cp), Equal: sameInt, Unique: both})
			require.NoError(t, err)
			defer s.Close()
			r, err := s.Restore(ctx)
			require.NoError(t, err, "nothing here says the checkpoint is stale")
			for k, want := range map[string]int{"pod-y": 1, "pod-z": 2} {
				v, ok := s.Get(k)
				assert.True(t, ok && v == want, "%s is live and holds .%d: %s", k, want, r)
			}
		})
	}
}

// TestPhase1KeepsAnAddNotListedYet: phase 1 restarted while an ADD it
// acknowledged is not listed yet by the runtime. The pod exists: it must
// be served, its address taken. (The listing's silence is no evidence
// that it is gone.)
func TestPhase1KeepsAnAddNotListedYet(t *testing.T) {
	ctx := context.Background()
	node := pods{"pod-1": 1, "pod-2": 2}
	s, cri, cp := phase1Node(t, node)
	require.NoError(t, s.Put(ctx, "pod-new", 3))
	node["pod-new"] = 3
	require.NoError(t, s.Close())

	s2, r := restartIn(t, migrate.PhaseExpand, cri, cp)
	assertServesNode(t, s2, node)
	assert.Equal(t, []string{"pod-new"}, r.Orphaned, "kept, and reported")
}

// TestPartialListingOfAnExplicitLegacy: a file legacy whose listing cannot
// read pod-a, which the checkpoint holds as acknowledged. Nothing shows
// pod-a gone: it is served, not skipped.
func TestPartialListingOfAnExplicitLegacy(t *testing.T) {
	ctx := context.Background()
	for _, p := range []migrate.Phase{migrate.PhaseExpand, migrate.PhaseMigrate} {
		w := newWorld(true, map[string]int{"pod-a": 1, "pod-b": 2})
		w.saveCheckpoint(t, migrate.PhaseMigrate, map[string]int{"pod-a": 1, "pod-b": 2}, "")
		w.impl.FailListPartly(fmt.Errorf("pod-a: the file cannot be read"))
		s := w.open(t, migrate.Config[string, int]{Phase: p})
		rep, err := s.Restore(ctx)
		require.NoError(t, err)
		assertServesNode(t, s, pods{"pod-a": 1, "pod-b": 2})
		assert.NotEmpty(t, rep.Errors, "the unreadable entry is reported")
		require.NoError(t, s.Close())
	}
}
