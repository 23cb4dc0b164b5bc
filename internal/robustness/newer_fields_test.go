package robustness_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// vmNew is a value type as a newer binary has it: a field more than vmOld,
// without a schema bump.
type vmNew struct {
	Name  string `json:"name"`
	Token string `json:"token"`
}

type vmOld struct {
	Name string `json:"name"`
}

// TestStoreTreatsUnknownFieldsAsATypeMismatch downgrades a daemon whose
// newer binary added a value field without bumping the schema, in phase
// 2: the older binary must not serve or rewrite the file, but move it
// aside intact (every rule for an unreadable file applies) and restore
// from legacy; its next writes must not touch the quarantined copy. In
// phase 3, strict or not, Restore must fail and leave the file as it was.
// The file's schema is this binary's, so the error is
// checkpoint.ErrTypeMismatch, not ErrNewerSchema (issue 42, item 3).
//
// How it failed before the fix: both Restores served the entries, with
// no error ("Should NOT be empty" for Report.Quarantined in phase 2,
// "Expected error ... but got nil" in phase 3), and the next save would
// have written the file again without the newer field.
func TestStoreTreatsUnknownFieldsAsATypeMismatch(t *testing.T) {
	ctx := context.Background()
	t.Run("phase 2", func(t *testing.T) {
		path, newer := newerFile(t)
		legacy := &migratetest.Explicit[string, vmOld]{}
		legacy.Replace(map[string]vmOld{"vm-1": {Name: "a"}})
		cp, err := checkpoint.Open[string, vmOld](ctx, path)
		require.NoError(t, err)
		s, err := migrate.New(migrate.Config[string, vmOld]{Phase: migrate.PhaseMigrate, Legacy: legacy, Checkpoint: cp})
		require.NoError(t, err)
		defer s.Close()
		rep, err := s.Restore(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, rep.Quarantined, "the file with unknown fields is moved aside")
		require.NotEmpty(t, rep.Errors)
		assert.ErrorIs(t, rep.Errors[0], checkpoint.ErrTypeMismatch)
		kept, err := os.ReadFile(rep.Quarantined)
		require.NoError(t, err)
		assert.Equal(t, string(newer), string(kept), "the quarantined copy is the newer binary's file, byte for byte")
		assert.Equal(t, map[string]vmOld{"vm-1": {Name: "a"}}, collect(s))
		require.NoError(t, s.Put(ctx, "vm-2", vmOld{Name: "b"}))
		kept, err = os.ReadFile(rep.Quarantined)
		require.NoError(t, err)
		assert.Equal(t, string(newer), string(kept))
	})

	// Phase 3 has nothing else to serve: Restore fails whatever Strict
	// says, and the file stays as it was.
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("phase 3 strict=%v", strict), func(t *testing.T) {
			path, newer := newerFile(t)
			cp, err := checkpoint.Open[string, vmOld](ctx, path)
			require.NoError(t, err)
			s, err := migrate.New(migrate.Config[string, vmOld]{Phase: migrate.PhaseContract, Checkpoint: cp, Strict: strict})
			require.NoError(t, err)
			defer s.Close()
			_, err = s.Restore(ctx)
			require.ErrorIs(t, err, checkpoint.ErrTypeMismatch)
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, string(newer), string(after))
		})
	}
}

// newerFile writes a checkpoint with vmNew values, as the newer binary
// would, and returns its path and bytes.
func newerFile(t *testing.T) (string, []byte) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "vms.json")
	f, err := checkpoint.Open[string, vmNew](ctx, path)
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, vmNew]{Meta: checkpoint.Meta{Phase: "migrate"}, Entries: map[string]vmNew{"vm-1": {Name: "a", Token: "t-1"}}}))
	require.NoError(t, f.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return path, b
}
