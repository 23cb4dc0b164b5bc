package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// errNegative is what positive returns: it names the key, never the value.
var errNegative = errors.New("the value is negative")

func positive(key string, v int) error {
	if v < 0 {
		return fmt.Errorf("%s: %w", key, errNegative)
	}
	return nil
}

func TestWithValidate(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")

	// A program without the check wrote a record the program with it
	// would never have stored.
	w, err := checkpoint.Open[string, int](ctx, path)
	require.NoError(t, err)
	require.NoError(t, w.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"a": 1, "b": -424242, "c": 3}}))
	require.NoError(t, w.Close())

	f, err := checkpoint.Open[string, int](ctx, path, checkpoint.WithValidate(positive))
	require.NoError(t, err)
	defer f.Close()
	snap, err := f.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrBadEntry)
	assert.Equal(t, map[string]int{"a": 1, "c": 3}, snap.Entries, "the others are returned")
	var bad *checkpoint.BadEntriesError
	require.ErrorAs(t, err, &bad)
	require.Len(t, bad.Entries, 1)
	assert.Equal(t, `"b"`, bad.Entries[0].Key, "the key as it appears in the file")
	assert.ErrorIs(t, bad.Entries[0].Err, errNegative, "fn's error is kept")
	assert.ErrorIs(t, err, errNegative)
	assert.Contains(t, err.Error(), "rejected by the WithValidate function")
	assert.NotContains(t, err.Error(), "424242", "no value in the error")

	// Like an entry that does not decode, it keeps the file from being
	// overwritten until it is moved aside.
	err = f.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"a": 1}})
	require.Error(t, err, "a save would lose the rejected record for good")
	_, err = f.Quarantine(ctx)
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"a": 1, "c": 3}}))

	// What a program writes it has checked: Save does not call fn.
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"d": -1}}))
}

func TestWithValidateOnMemory(t *testing.T) {
	ctx := context.Background()
	m := checkpoint.NewMemory[string, int]()
	require.NoError(t, m.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"a": 1, "b": -2}}))
	v, err := m.Reopen(checkpoint.WithValidate(positive))
	require.NoError(t, err)
	snap, err := v.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrBadEntry)
	assert.Equal(t, map[string]int{"a": 1}, snap.Entries)
}

func TestWithValidateMistakes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	t.Run("nil function", func(t *testing.T) {
		_, err := checkpoint.Open[string, int](ctx, path, checkpoint.WithValidate[string, int](nil))
		require.ErrorIs(t, err, checkpoint.ErrInvalidOption)
		assert.Contains(t, err.Error(), "nil")
	})
	t.Run("other types than the checkpoint's", func(t *testing.T) {
		wrong := checkpoint.WithValidate(func(string, string) error { return nil })
		_, err := checkpoint.Open[string, int](ctx, path, wrong)
		require.ErrorIs(t, err, checkpoint.ErrInvalidOption)
		assert.Contains(t, err.Error(), "func(string, int) error", "the error says what to give")
		_, err = checkpoint.NewMemory[string, int]().Reopen(wrong)
		require.ErrorIs(t, err, checkpoint.ErrInvalidOption)
	})
}
