package checkpoint_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// TestEncodeChange attacks EncodeChange and CommitEncoded: an entry
// EncodeChange refuses is refused with the error CheckEntry and Commit
// give, a delete never fails, what CommitEncoded writes reads back as the
// values encoded, and the zero EncodedChange is refused before anything is
// written.
func TestEncodeChange(t *testing.T) {
	ctx := context.Background()
	type val struct{ F float64 }

	_, err := checkpoint.EncodeChange(checkpoint.Change[string, val]{Key: "nan", Value: val{math.NaN()}})
	require.ErrorIs(t, err, checkpoint.ErrEncode)
	var ee *checkpoint.EncodeError
	require.True(t, errors.As(err, &ee))
	check := checkpoint.CheckEntry("nan", val{math.NaN()})
	assert.Equal(t, check.Error(), err.Error(), "the error CheckEntry gives")
	_, err = checkpoint.EncodeChange(checkpoint.Change[string, val]{Key: "\xff", Value: val{1}})
	require.ErrorIs(t, err, checkpoint.ErrEncode, "a key that does not read back")
	_, err = checkpoint.EncodeChange(checkpoint.Change[string, val]{Key: "\xff", Delete: true})
	require.NoError(t, err, "a delete is not encoded")

	for _, journal := range []checkpoint.Option{checkpoint.WithJournal(), checkpoint.WithoutJournal()} {
		path := filepath.Join(t.TempDir(), "s.json")
		f, err := checkpoint.Open[string, val](ctx, path, journal)
		require.NoError(t, err)
		require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, val]{Entries: map[string]val{"a": {1}, "b": {2}}}))
		v := val{3}
		put, err := checkpoint.EncodeChange(checkpoint.Change[string, val]{Key: "c", Value: v})
		require.NoError(t, err)
		v.F = 4 // taken at EncodeChange
		del, err := checkpoint.EncodeChange(checkpoint.Change[string, val]{Key: "a", Delete: true})
		require.NoError(t, err)
		require.NoError(t, f.CommitEncoded(ctx, checkpoint.Meta{}, []checkpoint.EncodedChange[string, val]{put, del}))

		err = f.CommitEncoded(ctx, checkpoint.Meta{}, []checkpoint.EncodedChange[string, val]{put, {}})
		require.ErrorIs(t, err, checkpoint.ErrEncode, "the zero EncodedChange")
		assert.Contains(t, err.Error(), "change 1")
		require.NoError(t, f.Close())

		g, err := checkpoint.Open[string, val](ctx, path)
		require.NoError(t, err)
		s, err := g.Load(ctx)
		require.NoError(t, err)
		assert.Equal(t, map[string]val{"b": {2}, "c": {3}}, s.Entries, "the refused commit wrote nothing")
		assert.Equal(t, uint64(2), s.Meta.Seq)
		require.NoError(t, g.Close())
	}
}
