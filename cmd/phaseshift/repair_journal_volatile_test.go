package main_test

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// registryStart restores a Store in phase p over a real journaled
// checkpoint at path and a fresh source.Map registry: a VM proxy's
// registry lives in its memory, so every restart finds it empty. The
// caller closes the Store.
func registryStart(t *testing.T, path string, p migrate.Phase) (*migrate.Store[key, value], migrate.Report[key], error) {
	t.Helper()
	cp, err := checkpoint.Open[key, value](context.Background(), path, checkpointtest.Schema(schema)...)
	require.NoError(t, err)
	s, err := migrate.New(migrate.Config[key, value]{Phase: p, Legacy: &source.Map[key, value]{}, Checkpoint: cp})
	require.NoError(t, err)
	rep, err := s.Restore(context.Background())
	return s, rep, err
}

// TestRepairJournalOverAVolatileRegistry is issue 41's path 2 with the
// real command: phase 2 over a source.Map registry (volatile by
// construction), 6 VMs registered, bit rot in journal record 3. The
// restart refuses and names repair-journal; the operator runs
// `phaseshift repair-journal --drop-damaged-records`; a restart with a
// fresh (empty) registry must serve the VMs the records before the damage
// acknowledged, and save nothing emptier over the repaired file. On the
// code before the fix it served 0 VMs and saved that empty state.
func TestRepairJournalOverAVolatileRegistry(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	s, _, err := registryStart(t, path, migrate.PhaseMigrate)
	require.NoError(t, err)
	for i := 1; i <= 6; i++ {
		require.NoError(t, s.Put(ctx, k(i), v(i)))
	}
	require.NoError(t, s.Close())

	// The node: which VMs each journal record acknowledged. The records
	// before the damaged one are what the repair can keep.
	recs := bytes.SplitAfter(readBytes(t, path+".journal"), []byte("\n"))
	require.Empty(t, recs[len(recs)-1])
	recs = recs[:len(recs)-1]
	require.GreaterOrEqual(t, len(recs), 4, "the 6 Puts are journal records")
	const damaged = 2 // record 3
	before := mustLoad(t, path)
	require.Len(t, before.Entries, 6)
	keep := map[key]value{}
	for i := 1; i <= 6; i++ {
		at := slices.IndexFunc(recs, func(r []byte) bool { return bytes.Contains(r, []byte(`"`+k(i).ContainerID+`"`)) })
		if at >= 0 && at < damaged {
			keep[k(i)] = v(i)
		}
		if at < 0 { // in the file itself, under every record
			keep[k(i)] = v(i)
		}
	}
	require.NotEmpty(t, keep, "record 3 has records before it that hold VMs")
	require.Less(t, len(keep), 6)
	damage(t, path, recs, damaged)

	s, _, err = registryStart(t, path, migrate.PhaseMigrate)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	assert.Contains(t, err.Error(), "repair-journal", "the refusal names the repair")
	assert.Zero(t, s.Len())
	require.NoError(t, s.Close())

	r := run(t, "repair-journal", path)
	require.Equal(t, 9, r.code, "without --drop-damaged-records it changes nothing: %s", r.stderr)
	r = run(t, "repair-journal", "--drop-damaged-records", path)
	require.Equal(t, 0, r.code, r.stderr)
	repaired := mustLoad(t, path)
	require.Equal(t, keep, repaired.Entries, "the repair keeps every record before the damage")
	require.NotEmpty(t, repaired.Meta.Behind, "the repaired file is marked as lacking the dropped commits")

	for _, p := range []migrate.Phase{migrate.PhaseMigrate, migrate.PhaseMigrate, migrate.PhaseExpand, migrate.PhaseMigrate} {
		s, rep, err := registryStart(t, path, p)
		require.NoError(t, err, "phase %d over the repaired file", p)
		assert.Equal(t, keep, served(s), "phase %d: a fresh registry is no evidence; the repaired file's VMs are served: %s", p, rep)
		require.NoError(t, s.Close())
		after := mustLoad(t, path)
		assert.Equal(t, keep, after.Entries, "phase %d: nothing emptier is saved over the repaired file", p)
	}
}
