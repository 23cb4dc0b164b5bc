package migrate_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
)

// TestStats counts what a Store did: writes by kind and outcome, group
// commits and what they carried, saves, legacy writes, and the last
// restore's report.
func TestStats(t *testing.T) {
	ctx := context.Background()
	w := newWorld(true, map[string]int{"a": 1, "b": 2})
	w.saveCheckpoint(t, migrate.PhaseMigrate, map[string]int{"a": 1, "z": 26}, "")
	cp := checkpointtest.Reopen(t, w.cp)
	checkpointtest.SetSaveLatency(cp, time.Millisecond)
	s := w.open(t, migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Checkpoint: cp})
	assert.Zero(t, s.Stats().LastRestore.At, "no restore yet")
	_, err := s.Restore(ctx)
	require.NoError(t, err)

	st := s.Stats()
	assert.Equal(t, migrate.PhaseMigrate, st.Phase)
	assert.Equal(t, 2, st.Entries)
	lr := st.LastRestore
	assert.False(t, lr.At.IsZero())
	assert.Equal(t, migrate.ReadCheckpointAndLegacy, lr.ReadFrom)
	assert.Equal(t, 2, lr.Restored)
	assert.Equal(t, 1, lr.Backfilled)
	assert.Equal(t, 1, lr.Dropped)
	assert.True(t, lr.CheckpointRewritten)
	assert.EqualValues(t, 1, st.CheckpointSaves, "restore's save")

	require.NoError(t, s.Put(ctx, "c", 3))
	require.NoError(t, s.Delete(ctx, "b"))
	require.NoError(t, s.Update(ctx, func(tx *migrate.Tx[string, int]) error { tx.Put("d", 4); return nil }))
	_, err = s.DeleteFunc(ctx, func(k string, _ int) bool { return k == "d" })
	require.NoError(t, err)
	require.Error(t, s.Update(ctx, func(*migrate.Tx[string, int]) error { return errors.New("no") }))
	w.exp.FailWrites(0, 1, errors.New("refused"))
	require.ErrorIs(t, s.Put(ctx, "e", 5), migrate.ErrLegacyWrite)
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, s.Put(done, "f", 6), context.Canceled, "an already done context writes nothing")

	st = s.Stats()
	assert.EqualValues(t, 1, st.Puts)
	assert.EqualValues(t, 1, st.Deletes)
	assert.EqualValues(t, 2, st.Updates, "Update and DeleteFunc")
	assert.EqualValues(t, 3, st.WriteErrors, "a failed function, a refusal, a done context")
	assert.EqualValues(t, 0, st.OutcomeUnknown)
	assert.EqualValues(t, 4, st.Commits)
	assert.EqualValues(t, 4, st.Committed)
	assert.EqualValues(t, 5, st.CheckpointSaves)
	assert.GreaterOrEqual(t, st.CheckpointSaveTime, 5*time.Millisecond)
	assert.EqualValues(t, 4, st.LegacyWrites)
	assert.EqualValues(t, 1, st.LegacyWriteFailures)
	assert.Equal(t, 2, st.Entries)

	// Concurrent writers: fewer commits than writes.
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() { defer wg.Done(); assert.NoError(t, s.Put(ctx, string(rune('A'+i)), i)) }()
	}
	wg.Wait()
	after := s.Stats()
	assert.EqualValues(t, 33, after.Puts)
	assert.Less(t, after.Commits-st.Commits, uint64(32), "group commit shares saves")
	assert.EqualValues(t, 32, after.Committed-st.Committed)

	// A write refused because the Store is closed returned an error too.
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Put(ctx, "g", 7), migrate.ErrClosed)
	assert.EqualValues(t, st.WriteErrors+1, s.Stats().WriteErrors)
}
