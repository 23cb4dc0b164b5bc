package checkpoint_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// TestSeqGoesOnAfterAQuarantine is issue 41's path 3: a rollback to an
// older schema quarantines the newer file (seq 41 there), and the next save
// must not write seq 1: the contract says every save increments Seq, and
// phaseshift restore-kept tells whether commits came after a kept copy by
// its seq. The node: the quarantined copy lacks every commit after it.
func TestSeqGoesOnAfterAQuarantine(t *testing.T) {
	ctx := context.Background()
	for _, journal := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "state.json")
		var opts []checkpoint.Option
		if !journal {
			opts = append(opts, checkpoint.WithoutJournal())
		}
		newer, err := checkpoint.Open[string, int](ctx, path, append(opts, checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, func(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }))...)
		require.NoError(t, err)
		var last uint64
		for i := range 5 {
			require.NoError(t, newer.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"pod-1": i}}))
		}
		snap, err := newer.Load(ctx)
		require.NoError(t, err)
		last = snap.Meta.Seq
		require.NoError(t, newer.Close())

		older, err := checkpoint.Open[string, int](ctx, path, opts...)
		require.NoError(t, err)
		_, err = older.Load(ctx)
		require.True(t, errors.Is(err, checkpoint.ErrNewerSchema), "%v", err)
		_, err = older.Quarantine(ctx)
		require.NoError(t, err)
		require.NoError(t, older.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"pod-9": 1}}))
		snap, err = older.Load(ctx)
		require.NoError(t, err)
		assert.Greater(t, snap.Meta.Seq, last, "journal=%v: the save after the quarantine goes on from the quarantined file's seq", journal)
		require.NoError(t, older.Close())
	}
}
