package main_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// node is a daemon's Store over a real journaled checkpoint and CRI (an
// implicit legacy), restarted in any phase.
type node struct {
	t    *testing.T
	path string
	cri  *migratetest.Implicit[key, value]
	// prune sets Config.PruneOrphans.
	prune bool
}

// start restores a Store in phase p; the caller closes it.
func (n *node) start(p migrate.Phase) (*migrate.Store[key, value], migrate.Report[key], error) {
	n.t.Helper()
	cp, err := checkpoint.Open[key, value](context.Background(), n.path, checkpointtest.Schema(schema)...)
	require.NoError(n.t, err)
	s, err := migrate.New(migrate.Config[key, value]{Phase: p, Legacy: n.cri, Checkpoint: cp,
		Equal:        func(a, b value) bool { return a.IP == b.IP },
		PruneOrphans: n.prune})
	require.NoError(n.t, err)
	rep, err := s.Restore(context.Background())
	return s, rep, err
}

func (n *node) add(s *migrate.Store[key, value], i int) {
	require.NoError(n.t, s.Put(context.Background(), k(i), v(i)))
	n.cri.Set(k(i), v(i)) // the sandbox is ready once its ADD returned
}

func (n *node) del(s *migrate.Store[key, value], i int) {
	require.NoError(n.t, s.Delete(context.Background(), k(i)))
	n.cri.Remove(k(i))
}

func served(s *migrate.Store[key, value]) map[key]value { return maps.Collect(s.All()) }

// TestRestorePrevIsNotServedAsCurrent: at phase 3 a journal damaged
// before its last record makes the sole copy unreadable, and Restore
// refuses, naming first the recovery that loses nothing here (phase 2
// rebuilds from CRI, which is current). An operator who runs
// `phaseshift restore-prev` instead gets .prev back, which lacks every
// commit since the last compaction: phase 3 must refuse it (found on
// main: it served pod c0, deleted, and lacked c4 and c5), and phase 2
// rebuilds it from legacy (c0, which only .prev holds, as a reported
// orphan until PruneOrphans drops it), after which phase 3 serves exactly.
func TestRestorePrevIsNotServedAsCurrent(t *testing.T) {
	n := &node{t: t, path: filepath.Join(t.TempDir(), "state.json"), cri: &migratetest.Implicit[key, value]{}}
	n.cri.Replace(entries(3)) // c0, c1, c2 on the node before the rollout
	s, _, err := n.start(migrate.PhaseMigrate)
	require.NoError(t, err)
	n.add(s, 3)
	require.NoError(t, s.Close())

	// Phase 3's first restore saves (it records phase 3): .prev is the
	// phase-2 file; the commits after it go to the journal.
	s, _, err = n.start(migrate.PhaseContract)
	require.NoError(t, err)
	n.del(s, 0)
	n.add(s, 4)
	n.add(s, 5)
	want := served(s)
	require.NoError(t, s.Close())
	require.FileExists(t, n.path+".journal")

	// Bit rot in a record before the last one.
	j := readBytes(t, n.path+".journal")
	j[len(j)/4] ^= 0x20
	require.NoError(t, os.WriteFile(n.path+".journal", j, 0o600))
	s, _, err = n.start(migrate.PhaseContract)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	msg := err.Error()
	require.Contains(t, msg, "run phase 2 (migrate) once")
	require.Contains(t, msg, "restore-prev")
	assert.Less(t, strings.Index(msg, "run phase 2 (migrate) once"), strings.Index(msg, "restore-prev"),
		"the recovery that loses nothing is named first: %s", msg)
	require.NoError(t, s.Close())

	// restore-prev says what .prev lacks, and refuses to lose it
	// (issue 42: it put back a .prev with fewer entries, saying nothing).
	r := run(t, "restore-prev", n.path)
	require.Equal(t, 9, r.code, r.stderr)
	assert.Contains(t, r.stderr, "lacks against "+n.path)
	assert.Contains(t, r.stderr, "phaseshift repair-journal "+n.path)
	r = run(t, "restore-prev", "--accept-loss", n.path)
	require.Equal(t, 0, r.code, r.stderr)

	s, _, err = n.start(migrate.PhaseContract)
	require.ErrorIs(t, err, migrate.ErrStale, "phase 3 must not serve a file that lacks acknowledged commits")
	assert.Contains(t, err.Error(), "restore-prev")
	assert.Zero(t, s.Len())
	require.NoError(t, s.Close())

	// Phase 2 rebuilds from CRI, which is current: c4 and c5 are
	// backfilled. c0, deleted since, only .prev holds: over an observing
	// legacy that is no evidence it is gone (issue 41's rule 2), so it is
	// served as an orphan and reported; PruneOrphans, the operator's
	// choice, drops it.
	s, rep, err := n.start(migrate.PhaseMigrate)
	require.NoError(t, err)
	assert.Equal(t, withEntry(want, k(0), v(0)), served(s), "phase 2 rebuilds from CRI, which is current")
	assert.NotEmpty(t, rep.Stale)
	assert.Equal(t, []key{k(0)}, rep.Orphaned, "%s", rep)
	require.NoError(t, s.Close())

	n.prune = true
	s, rep, err = n.start(migrate.PhaseMigrate)
	require.NoError(t, err)
	assert.Equal(t, want, served(s), "PruneOrphans drops the entry CRI no longer lists")
	assert.Equal(t, []key{k(0)}, rep.Pruned, "%s", rep)
	require.NoError(t, s.Close())
	n.prune = false

	s, _, err = n.start(migrate.PhaseContract)
	require.NoError(t, err)
	assert.Equal(t, want, served(s))
	require.NoError(t, s.Close())
}
