package migratetest_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// recorder is a migratetest.TestingT that keeps what was reported.
type recorder struct{ errs []string }

func (r *recorder) Helper()                   {}
func (r *recorder) Logf(string, ...any)       {}
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }

// dropsBehind is a user's wrapper around a checkpoint that does not
// persist Meta.Behind: it saves what it is given less the mark.
type dropsBehind struct {
	*checkpoint.Memory[string, int]
}

func (d dropsBehind) Save(ctx context.Context, s checkpoint.Snapshot[string, int]) error {
	s.Meta.Behind = ""
	return d.Memory.Save(ctx, s)
}

func (d dropsBehind) Commit(ctx context.Context, m checkpoint.Meta, ch []checkpoint.Change[string, int]) error {
	m.Behind = ""
	return d.Memory.Commit(ctx, m, ch)
}

var entries = map[string]int{"a": 1, "b": 2, "c": 3}

// TestCheckCheckpoint: checkpoint.File (with and without its journal, with
// a boot ID) and checkpoint.Memory keep the contract; a wrapper that drops
// Meta.Behind is caught, and the report says why it matters.
func TestCheckCheckpoint(t *testing.T) {
	ctx := context.Background()
	for name, opts := range map[string][]checkpoint.Option{
		"File":                 nil,
		"File without journal": {checkpoint.WithoutJournal()},
		"File with a boot ID":  {checkpoint.WithBootID(func() (string, error) { return "boot-1", nil })},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			var r recorder
			migratetest.CheckCheckpoint(&r, func() (migrate.Checkpoint[string, int], error) {
				return checkpoint.Open[string, int](ctx, path, opts...)
			}, entries)
			assert.Empty(t, r.errs)
		})
	}
	t.Run("Memory", func(t *testing.T) {
		mem := checkpoint.NewMemory[string, int]()
		first := true
		var r recorder
		migratetest.CheckCheckpoint(&r, func() (migrate.Checkpoint[string, int], error) {
			if first {
				first = false
				return mem, nil
			}
			return checkpointtest.Reopen(t, mem), nil
		}, entries)
		assert.Empty(t, r.errs)
	})
	t.Run("drops Meta.Behind", func(t *testing.T) {
		mem := checkpoint.NewMemory[string, int]()
		var r recorder
		migratetest.CheckCheckpoint(&r, func() (migrate.Checkpoint[string, int], error) {
			return dropsBehind{checkpointtest.Reopen(t, mem)}, nil
		}, entries)
		assert.Len(t, r.errs, 2, "the first Save's mark, and the Commit's: %v", r.errs)
		for _, e := range r.errs {
			assert.Contains(t, e, "Meta.Behind")
			assert.True(t, strings.Contains(e, "phase 3 serves a checkpoint a phase-0 run left behind"), e)
		}
	})
}
