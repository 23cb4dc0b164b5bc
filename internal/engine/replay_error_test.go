package engine_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/internal/engine"
)

// TestReplayErrorIsTyped: a journal refused before its last record comes
// back as a *ReplayError with the record's place, its seq and the reason,
// which the command's inspect reads with errors.As rather than by trimming
// the error's text (issue 37); the text and ErrCorrupt stay as they were.
func TestReplayErrorIsTyped(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	open := func() *engine.File[string, int] {
		f, err := engine.Open[string, int](ctx, path)
		require.NoError(t, err)
		return f
	}
	f := open()
	require.NoError(t, f.Save(ctx, engine.Snapshot[string, int]{Meta: engine.Meta{Phase: "contract"}, Entries: map[string]int{"a": 1}}))
	for i, k := range []string{"b", "c", "d"} {
		require.NoError(t, f.Commit(ctx, engine.Meta{Phase: "contract"}, []engine.Change[string, int]{{Key: k, Value: i}}))
	}
	require.NoError(t, f.Close())
	journal := path + ".journal"
	data, err := os.ReadFile(journal)
	require.NoError(t, err)
	lines := bytes.SplitAfter(data, []byte("\n"))
	require.Len(t, lines, 4, "three records and the empty tail")

	t.Run("out of sequence", func(t *testing.T) {
		// The second record dropped: the third has seq 4 where 3 is due.
		require.NoError(t, os.WriteFile(journal, joined(lines[0], lines[2]), 0o600))
		f := open()
		defer f.Close()
		_, err := f.Load(ctx)
		var re *engine.ReplayError
		require.ErrorAs(t, err, &re)
		assert.ErrorIs(t, err, engine.ErrCorrupt)
		assert.Equal(t, journal, re.Path)
		assert.Equal(t, int64(len(lines[0])), re.Offset)
		assert.Equal(t, int64(len(lines[2])), re.Bytes)
		assert.Equal(t, uint64(4), re.Seq)
		assert.Equal(t, "has seq 4, want 3", re.Reason)
		assert.Nil(t, re.Damaged)
		assert.Contains(t, err.Error(), "checkpoint is corrupt: journal "+journal+": the record at byte ")
	})
	t.Run("damaged before the last", func(t *testing.T) {
		bad := bytes.Clone(lines[1])
		bad[len(bad)/2] ^= 0x20
		require.NoError(t, os.WriteFile(journal, joined(lines[0], bad, lines[2]), 0o600))
		f := open()
		defer f.Close()
		_, err := f.Load(ctx)
		var re *engine.ReplayError
		require.ErrorAs(t, err, &re)
		assert.True(t, errors.Is(err, engine.ErrCorrupt))
		assert.Equal(t, int64(len(lines[0])), re.Offset)
		assert.Equal(t, int64(len(bad)), re.Bytes)
		assert.Zero(t, re.Seq, "a record that does not parse has no seq")
		assert.Error(t, re.Damaged)
		assert.Contains(t, re.Reason, "records follow it: not what a crash leaves")
	})
}

func joined(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
