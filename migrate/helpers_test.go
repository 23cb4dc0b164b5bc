package migrate_test

import (
	"context"
	"encoding/json"
	"maps"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// world is one node: a legacy source (implicit or explicit) and a
// checkpoint in memory.
type world struct {
	explicit bool
	impl     *migratetest.Implicit[string, int]
	exp      *migratetest.Explicit[string, int]
	cp       *checkpoint.Memory[string, int]
}

func newWorld(explicit bool, legacy map[string]int) *world {
	w := &world{explicit: explicit, cp: checkpoint.NewMemory[string, int]()}
	if explicit {
		w.exp = &migratetest.Explicit[string, int]{}
		w.impl = &w.exp.Implicit
	} else {
		w.impl = &migratetest.Implicit[string, int]{}
	}
	w.impl.Replace(legacy)
	return w
}

func (w *world) legacy() source.Reader[string, int] {
	if w.explicit {
		return w.exp
	}
	return w.impl
}

// saveCheckpoint writes the checkpoint as a Store in phase would have.
func (w *world) saveCheckpoint(t *testing.T, phase migrate.Phase, entries map[string]int, bootID string) {
	t.Helper()
	require.NoError(t, w.cp.Save(context.Background(), checkpoint.Snapshot[string, int]{
		Meta:    checkpoint.Meta{Phase: phase.String(), BootID: bootID},
		Entries: maps.Clone(entries),
	}))
}

// checkpointEntries reads the checkpoint through a new handle, as the next
// process would.
func (w *world) checkpointEntries(t *testing.T) (checkpoint.Snapshot[string, int], error) {
	t.Helper()
	return checkpointtest.Reopen(t, w.cp).Load(context.Background())
}

// open builds a Store for phase over w (the checkpoint through a new
// handle, as a new process) and closes it at cleanup. When the test ends
// cleanly, it checks that every side the phase writes holds what the Store
// serves.
func (w *world) open(t *testing.T, cfg migrate.Config[string, int]) *migrate.Store[string, int] {
	t.Helper()
	if cfg.Legacy == nil {
		cfg.Legacy = w.legacy()
	}
	if !w.explicit && cfg.Equal == nil {
		cfg.Equal = sameInt // an observing legacy must say what it sees
	}
	if cfg.Checkpoint == nil && (cfg.Phase != migrate.PhaseLegacy) {
		cfg.Checkpoint = checkpointtest.Reopen(t, w.cp)
	}
	s, err := migrate.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		served := collect(s)
		// A Delete of an absent key writes nothing; it tells whether
		// the store is restored and still open.
		restored := s.Delete(context.Background(), "\x00absent") == nil
		require.NoError(t, s.Close())
		if t.Failed() || !restored {
			return
		}
		if cfg.Phase.WritesCheckpoint() {
			snap, err := w.checkpointEntries(t)
			if err == nil {
				assert.Equal(t, served, snap.Entries, "invariant: the checkpoint holds what the store served")
			}
		}
	})
	return s
}

func collect(s *migrate.Store[string, int]) map[string]int {
	m := map[string]int{}
	for k, v := range s.All() {
		m[k] = v
	}
	return m
}

// badEntryFile returns checkpoint bytes (written by phase) whose checksum
// holds but whose entry under bad is not an int.
func badEntryFile(t *testing.T, phase migrate.Phase, good map[string]int, bad string) []byte {
	t.Helper()
	raw := checkpoint.NewMemory[string, json.RawMessage]()
	entries := map[string]json.RawMessage{bad: json.RawMessage(`"not a number"`)}
	for k, v := range good {
		b, _ := json.Marshal(v)
		entries[k] = b
	}
	require.NoError(t, raw.Save(context.Background(), checkpoint.Snapshot[string, json.RawMessage]{Meta: checkpoint.Meta{Phase: phase.String()}, Entries: entries}))
	return raw.Bytes()
}
