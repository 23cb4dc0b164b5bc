package migrate_test

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
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// TestSlogGetsTheRestoreReport runs a phase-2 restore over a corrupt
// checkpoint with a *slog.Logger given to both the Store (Config.Slog) and
// the checkpoint (checkpoint.WithSlog): one slog JSON handler receives the
// checkpoint's quarantine message and the Store's, and the restore
// report's line, with their keys and levels.
func TestSlogGetsTheRestoreReport(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vm.json")
	require.NoError(t, os.WriteFile(path, []byte("not a checkpoint"), 0o600))
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	cp, err := checkpoint.Open[string, int](ctx, path, checkpoint.WithSlog(log))
	require.NoError(t, err)
	legacy := &migratetest.Explicit[string, int]{}
	legacy.Replace(map[string]int{"vm-1": 1, "vm-2": 2})
	s, err := migrate.New(migrate.Config[string, int]{Phase: migrate.PhaseMigrate, Legacy: legacy, Checkpoint: cp, Slog: log})
	require.NoError(t, err)
	defer s.Close()
	rep, err := s.Restore(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, rep.Quarantined)

	byMsg := map[string]map[string]any{}
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &r), l)
		byMsg[r["msg"].(string)] = r
	}
	ck := byMsg["moved the checkpoint aside for inspection (quarantined)"]
	require.NotNil(t, ck, "the checkpoint's quarantine message: %s", buf.String())
	assert.Equal(t, "WARN", ck["level"])
	assert.Equal(t, path, ck["path"])
	assert.Equal(t, rep.Quarantined, ck["to"])

	q := byMsg["checkpoint quarantined"]
	require.NotNil(t, q, "the Store's quarantine message: %s", buf.String())
	assert.Equal(t, "WARN", q["level"])
	assert.Equal(t, "migrate", q["phase"])
	assert.Equal(t, rep.Quarantined, q["to"])
	assert.Contains(t, q["error"], "checkpoint is corrupt")

	r := byMsg["restored"]
	require.NotNil(t, r, "the restore report's line: %s", buf.String())
	assert.Equal(t, "INFO", r["level"])
	assert.Equal(t, "migrate", r["phase"])
	report, ok := r["report"].(map[string]any)
	require.True(t, ok, "the report is a group: %v", r["report"])
	assert.Equal(t, float64(2), report["phase"])
	assert.Equal(t, float64(2), report["restored"])
	assert.Equal(t, rep.Quarantined, report["quarantined"])
	assert.NotEmpty(t, report["errors"])
}

// TestLoggerAndSlogTogether: one logging path, so a Config with both is a
// mistake New reports, saying to pick one.
func TestLoggerAndSlogTogether(t *testing.T) {
	_, err := migrate.New(migrate.Config[string, int]{
		Phase: migrate.PhaseContract, Checkpoint: checkpoint.NewMemory[string, int](),
		Logger: zap.NewNop(), Slog: slog.Default(),
	})
	require.ErrorIs(t, err, migrate.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "Config.Logger and Config.Slog")
	assert.Contains(t, err.Error(), "pick one")
}
