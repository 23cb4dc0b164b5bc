package checkpoint_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// slogRecords decodes what a slog JSON handler wrote, one record a line.
func slogRecords(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

// TestWithSlogLogsTheQuarantine opens an unreadable checkpoint with a
// *slog.Logger and moves it aside: a slog JSON handler receives the
// quarantine message at Warn, with its keys (the path and where it went).
func TestWithSlogLogsTheQuarantine(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vm.json")
	require.NoError(t, os.WriteFile(path, []byte("not a checkpoint"), 0o600))
	var buf bytes.Buffer
	f, err := checkpoint.Open[string, int](ctx, path, checkpoint.WithSlog(slog.New(slog.NewJSONHandler(&buf, nil))))
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	to, err := f.Quarantine(ctx)
	require.NoError(t, err)

	var found bool
	for _, r := range slogRecords(t, &buf) {
		if r["msg"] != "moved the checkpoint aside for inspection (quarantined)" {
			continue
		}
		found = true
		assert.Equal(t, "WARN", r["level"])
		assert.Equal(t, path, r["path"])
		assert.Equal(t, to, r["to"])
	}
	assert.True(t, found, "the quarantine is logged: %s", buf.String())
}

// TestWithSlogAndWithLoggerTogether: one logging path, so both options
// are refused at Open, naming both.
func TestWithSlogAndWithLoggerTogether(t *testing.T) {
	_, err := checkpoint.Open[string, int](context.Background(), filepath.Join(t.TempDir(), "vm.json"),
		checkpoint.WithLogger(zap.NewNop()), checkpoint.WithSlog(slog.Default()))
	require.ErrorIs(t, err, checkpoint.ErrInvalidOption)
	assert.Contains(t, err.Error(), "checkpoint.WithSlog")
	assert.Contains(t, err.Error(), "checkpoint.WithLogger")
	_, err = checkpoint.Open[string, int](context.Background(), filepath.Join(t.TempDir(), "vm.json"),
		checkpoint.WithSlog(nil), checkpoint.WithLogger(zap.NewNop()))
	require.NoError(t, err, "a nil logger changes nothing, as WithLogger(nil) does")
}
