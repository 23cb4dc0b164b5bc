package rawfile_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/internal/engine"
	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// A Key is the compact JSON of the key, and passes checkpoint's key
// round-trip check, so that a repair can write every key it read.
func TestKeyRoundTrip(t *testing.T) {
	for in, want := range map[string]string{
		`"c1"`:                       `"c1"`,
		` { "b" : 1, "a" : [ 2 ] } `: `{"b":1,"a":[2]}`,
		`"<a&b>"`:                    `"<a&b>"`,
		`"\u003c"`:                   `"\u003c"`,
		`-1.5e3`:                     `-1.5e3`,
		`"ünï"`:                      `"ünï"`,
		`null`:                       `null`,
	} {
		k, err := rawfile.ParseKey(in)
		require.NoError(t, err, in)
		assert.Equal(t, rawfile.Key(want), k)
		assert.NoError(t, checkpoint.CheckEntry(k, json.RawMessage(`{"v":1}`)), in)
	}
	for _, bad := range []string{``, `  `, `{"a":`, `c1`, `1 2`, `{"a":1}x`} {
		_, err := rawfile.ParseKey(bad)
		assert.Error(t, err, bad)
	}
	assert.Error(t, checkpoint.CheckEntry(rawfile.Key(""), json.RawMessage(`1`)), "the zero Key is never written")
}

// Read returns what Load returns, with the header and checksum verdict
// even of a file Load refuses, and the file's own schema.
func TestReadAnySchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, int](context.Background(), path, checkpointtest.Schema(7)...)
	require.NoError(t, err)
	require.NoError(t, f.Save(context.Background(), checkpoint.Snapshot[string, int]{Meta: checkpoint.Meta{Phase: "expand"}, Entries: map[string]int{"a": 1, "b": 2}}))
	require.NoError(t, f.Close())

	got := engine.ReadRaw(context.Background(), path, rawfile.Options{})
	require.NoError(t, got.Err)
	require.NoError(t, got.HeaderErr)
	require.NoError(t, got.ChecksumErr)
	assert.Equal(t, 7, got.Header.Schema)
	assert.Equal(t, "expand", got.Header.Phase)
	assert.WithinDuration(t, time.Now(), got.Header.SavedAt, time.Minute)
	assert.ElementsMatch(t, []rawfile.Entry{{Key: `"a"`, Value: json.RawMessage(`1`)}, {Key: `"b"`, Value: json.RawMessage(`2`)}}, got.Entries)

	missing := engine.ReadRaw(context.Background(), path+".none", rawfile.Options{})
	assert.ErrorIs(t, missing.Err, checkpoint.ErrNotExist)
	assert.Equal(t, int64(-1), missing.Size)
}
