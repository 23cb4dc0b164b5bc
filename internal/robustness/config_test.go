package robustness_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

// TestConfigMistakesInEveryPhase extends migrate's own table
// (TestNewCatchesConfigurationMistakes) to every phase and every way of
// leaving a side out: a nil interface, and typed nils of each kind of
// implementation (pointer, func). New must refuse each required side that
// is missing with a message that names the fix, and accept a typed nil in
// a slot the phase does not need without panicking later (Restore and
// writes work).
//
// How I checked that it has teeth: dropping reflect.Func from migrate's
// isNil fails "phase0/checkpoint nil custom func" (Restore calls the nil
// func and panics); dropping reflect.Pointer fails "phase0/checkpoint nil
// *File" with a nil pointer dereference in Restore.
func TestConfigMistakesInEveryPhase(t *testing.T) {
	cp := func() migrate.Checkpoint[string, int] { return checkpoint.NewMemory[string, int]() }
	legacy := func() source.Reader[string, int] { return &migratetest.Explicit[string, int]{} }
	noCheckpoints := map[string]migrate.Checkpoint[string, int]{
		"nil":             nil,
		"nil *File":       (*checkpoint.File[string, int])(nil),
		"nil *Memory":     (*checkpoint.Memory[string, int])(nil),
		"nil custom func": (checkpointFunc)(nil),
	}
	noLegacies := map[string]source.Reader[string, int]{
		"nil":           nil,
		"nil *Explicit": (*migratetest.Explicit[string, int])(nil),
		"nil *Map":      (*source.Map[string, int])(nil),
		"nil Func":      source.Func[string, int](nil),
	}
	for _, p := range []migrate.Phase{migrate.PhaseLegacy, migrate.PhaseExpand, migrate.PhaseMigrate, migrate.PhaseContract} {
		for name, none := range noCheckpoints {
			t.Run(fmt.Sprintf("phase%d/checkpoint %s", p, name), func(t *testing.T) {
				s, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: legacy(), Checkpoint: none})
				if p.WritesCheckpoint() {
					require.Error(t, err)
					assert.Contains(t, err.Error(), fmt.Sprintf("phase %d (%s) needs Config.Checkpoint: open one with checkpoint.Open, or run phase 0 to use legacy only", p, p))
					return
				}
				require.NoError(t, err, "phase 0 runs without a checkpoint")
				usable(t, s)
			})
		}
		for name, none := range noLegacies {
			t.Run(fmt.Sprintf("phase%d/legacy %s", p, name), func(t *testing.T) {
				s, err := migrate.New(migrate.Config[string, int]{Phase: p, Legacy: none, Checkpoint: cp()})
				if p != migrate.PhaseContract {
					require.Error(t, err)
					assert.Contains(t, err.Error(), fmt.Sprintf("phase %d (%s) needs Config.Legacy, the source the previous version restored from: only phase 3 (contract) runs without it", p, p))
					return
				}
				require.NoError(t, err, "phase 3 runs without legacy")
				usable(t, s)
			})
		}
	}
	for _, bad := range []migrate.Phase{-1, 4, 99} {
		_, err := migrate.New(migrate.Config[string, int]{Phase: bad, Legacy: legacy(), Checkpoint: cp()})
		require.Error(t, err)
		assert.Contains(t, err.Error(), fmt.Sprintf("Config.Phase %d is not a phase: use 0 (legacy), 1 (expand), 2 (migrate) or 3 (contract); ParsePhase reads one from a flag", bad))
	}
	_, err := migrate.ParsePhase("contracted")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown phase "contracted": use 0 (legacy), 1 (expand), 2 (migrate) or 3 (contract)`)
}

// TestStructKeysWithoutMatch: Match is optional even for struct keys; the
// key is then its own identity, across a restart too.
func TestStructKeysWithoutMatch(t *testing.T) {
	type podKey struct {
		Network, ContainerID, IfName string
	}
	ctx := context.Background()
	for _, p := range []migrate.Phase{migrate.PhaseLegacy, migrate.PhaseExpand, migrate.PhaseMigrate, migrate.PhaseContract} {
		t.Run(p.String(), func(t *testing.T) {
			cp := checkpoint.NewMemory[podKey, string]()
			legacy := &migratetest.Explicit[podKey, string]{}
			open := func() *migrate.Store[podKey, string] {
				s, err := migrate.New(migrate.Config[podKey, string]{Phase: p, Legacy: legacy, Checkpoint: checkpointtest.Reopen(t, cp)})
				require.NoError(t, err)
				_, err = s.Restore(ctx)
				require.NoError(t, err)
				return s
			}
			s := open()
			k1, k2 := podKey{"net", "c1", "eth0"}, podKey{"net", "c1", "eth1"}
			require.NoError(t, s.Put(ctx, k1, "10.0.0.1"))
			require.NoError(t, s.Put(ctx, k2, "10.0.0.2"))
			require.NoError(t, s.Delete(ctx, podKey{"other", "c1", "eth0"}), "a key that differs in one field is another entry")
			require.NoError(t, s.Close())
			s = open()
			defer s.Close()
			assert.Equal(t, map[podKey]string{k1: "10.0.0.1", k2: "10.0.0.2"}, collect(s))
		})
	}
}

// usable checks that a Store whose optional side is a typed nil restores
// and writes without touching it.
func usable(t *testing.T, s *migrate.Store[string, int]) {
	t.Helper()
	ctx := context.Background()
	_, err := s.Restore(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "a", 1))
	require.NoError(t, s.Delete(ctx, "a"))
	require.NoError(t, s.Close())
}

// checkpointFunc is a checkpoint implemented by a func type, to show that a
// typed nil of a func kind is caught like a nil pointer.
type checkpointFunc func(ctx context.Context) (checkpoint.Snapshot[string, int], error)

func (f checkpointFunc) Load(ctx context.Context) (checkpoint.Snapshot[string, int], error) {
	return f(ctx)
}

func (f checkpointFunc) Save(context.Context, checkpoint.Snapshot[string, int]) error { return nil }

func (f checkpointFunc) Quarantine(context.Context) (string, error) { return "", nil }

func (f checkpointFunc) BootID() string { return "" }

func (f checkpointFunc) Journal() checkpoint.JournalStatus { return checkpoint.JournalStatus{} }
