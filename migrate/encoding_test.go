package migrate_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// counted is a value that counts how often it is encoded.
type counted struct {
	N int `json:"n"`
}

var encodings atomic.Int64

func (c counted) MarshalJSON() ([]byte, error) {
	encodings.Add(1)
	type plain counted
	return json.Marshal(plain(c))
}

// TestWriteEncodesEachValueOnce attacks the cost of a write's encoding
// (issue 35): a write is checked against what the checkpoint would refuse
// before anything is written, and then committed; the commit must write
// the encoding the check made, not encode the value again. It failed
// before: every Put encoded its value twice.
func TestWriteEncodesEachValueOnce(t *testing.T) {
	ctx := context.Background()
	path := func(t *testing.T) string { return filepath.Join(t.TempDir(), "s.json") }
	for _, tc := range []struct {
		name  string
		phase migrate.Phase
		// open opens the checkpoint; again reads it back after the Store
		// closed it.
		open func(t *testing.T, at string) migrate.Checkpoint[string, counted]
	}{
		{"file", migrate.PhaseContract, func(t *testing.T, at string) migrate.Checkpoint[string, counted] {
			f, err := checkpoint.Open[string, counted](ctx, at)
			require.NoError(t, err)
			t.Cleanup(func() { f.Close() })
			return f
		}},
		{"file without journal", migrate.PhaseContract, func(t *testing.T, at string) migrate.Checkpoint[string, counted] {
			f, err := checkpoint.Open[string, counted](ctx, at, checkpoint.WithoutJournal())
			require.NoError(t, err)
			t.Cleanup(func() { f.Close() })
			return f
		}},
		{"memory, phase 2", migrate.PhaseMigrate, func(t *testing.T, _ string) migrate.Checkpoint[string, counted] {
			return checkpoint.NewMemory[string, counted]()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := path(t)
			cp := tc.open(t, at)
			legacy := &migratetest.Explicit[string, counted]{}
			s, err := migrate.New(migrate.Config[string, counted]{Phase: tc.phase, Legacy: legacy, Checkpoint: cp})
			require.NoError(t, err)
			_, err = s.Restore(ctx)
			require.NoError(t, err)

			encodings.Store(0)
			require.NoError(t, s.Put(ctx, "a", counted{1}))
			assert.Equal(t, int64(1), encodings.Load(), "a Put encodes its value once")

			encodings.Store(0)
			require.NoError(t, s.Update(ctx, func(tx *migrate.Tx[string, counted]) error {
				tx.Put("b", counted{2})
				tx.Put("c", counted{3})
				tx.Delete("a")
				return nil
			}))
			assert.Equal(t, int64(2), encodings.Load(), "an Update of two puts and a delete encodes two values")

			// What was written is what was encoded.
			want := map[string]counted{"b": {2}, "c": {3}}
			if m, ok := cp.(*checkpoint.Memory[string, counted]); ok {
				snap, err := m.Load(ctx)
				require.NoError(t, err)
				assert.Equal(t, want, snap.Entries)
				require.NoError(t, s.Close())
				return
			}
			require.NoError(t, s.Close())
			snap, err := tc.open(t, at).Load(ctx)
			require.NoError(t, err)
			assert.Equal(t, want, snap.Entries)
		})
	}
}

// countingCheckpoint is a user's wrapper that embeds a File, and so gets
// its methods, CommitEncoded included, but has its own Commit.
type countingCheckpoint struct {
	*checkpoint.File[string, counted]
	commits atomic.Int64
}

func (c *countingCheckpoint) Commit(ctx context.Context, m checkpoint.Meta, chs []checkpoint.Change[string, counted]) error {
	c.commits.Add(1)
	return c.File.Commit(ctx, m, chs)
}

// TestWrapperCommitIsNotBypassed: a Store commits the encoding of its
// checks only through a File or a Memory itself; a wrapper that embeds a
// File (and so has CommitEncoded too) has its own Commit called.
func TestWrapperCommitIsNotBypassed(t *testing.T) {
	ctx := context.Background()
	f, err := checkpoint.Open[string, counted](ctx, filepath.Join(t.TempDir(), "s.json"))
	require.NoError(t, err)
	cp := &countingCheckpoint{File: f}
	s, err := migrate.New(migrate.Config[string, counted]{Phase: migrate.PhaseContract, Checkpoint: cp})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Restore(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "a", counted{1}))
	require.NoError(t, s.Delete(ctx, "a"))
	assert.Equal(t, int64(2), cp.commits.Load(), "every write went through the wrapper's Commit")
}
