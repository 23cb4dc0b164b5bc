package robustness_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// anyKey is a comparable key that can hold something JSON cannot encode:
// an infinite Score, or a Tag whose MarshalJSON fails. (A key type that no
// value of can be stored, with an interface or a channel in it, is refused
// when the checkpoint is opened: TestKeyTypesRefusedAtOpen.)
type anyKey struct {
	Name  string
	Score float64   `json:",omitempty"`
	Tag   choosyTag `json:",omitempty"`
}

// choosyTag marshals as its string, except "refuse", which it refuses.
type choosyTag string

func (c choosyTag) MarshalJSON() ([]byte, error) {
	if c == "refuse" {
		return nil, errors.New("refusing to encode")
	}
	return json.Marshal(string(c))
}

func (c *choosyTag) UnmarshalJSON(b []byte) error {
	var s string
	err := json.Unmarshal(b, &s)
	*c = choosyTag(s)
	return err
}

// failingJSON is a comparable value whose MarshalJSON always fails.
type failingJSON struct{ N int }

func (failingJSON) MarshalJSON() ([]byte, error) { return nil, errors.New("refusing to encode") }

// TestUnencodableKeysAndValues writes keys and values JSON cannot encode
// (NaN, ±Inf, a channel inside a value, a failing MarshalJSON)
// while other goroutines write good ones, through a Store on a real file in
// each phase that writes the checkpoint. Each bad write fails at once with
// checkpoint.ErrEncode (and migrate.ErrCheckpointWrite), writes nothing
// (the file is unchanged by a lone bad write, legacy is compensated), loses
// nothing; every good write in the same group commits succeeds; an Update
// with one bad change commits none of them.
//
// How I checked that it has teeth: making migrate's saveCheckpoint fail the
// whole batch on ErrEncode (no per-request retry) fails with good writes
// refused ("good writer 3: migrate: checkpoint write failed: ... checkpoint
// entry cannot be encoded: key {k-chan ...}"); dropping its undo of the
// legacy write fails phase 1 with "legacy holds exactly the good writes".
func TestUnencodableKeysAndValues(t *testing.T) {
	ctx := context.Background()
	ch := make(chan int)
	badValues := []any{math.NaN(), math.Inf(1), math.Inf(-1), ch, failingJSON{1}, map[string]any{"nested": []any{1, math.NaN()}}}
	// No NaN key: NaN != NaN, so a NaN key can never be found again in a
	// Go map, and the legacy fake (a map) could not even undo its write.
	badKeys := []anyKey{{Name: "k-marshal", Tag: "refuse"}, {Name: "k-inf", Score: math.Inf(1)}, {Name: "k-nan-free", Score: math.Inf(-1)}}
	for _, p := range []migrate.Phase{migrate.PhaseExpand, migrate.PhaseMigrate, migrate.PhaseContract} {
		t.Run(p.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			cp, err := checkpoint.Open[anyKey, any](ctx, path)
			require.NoError(t, err)
			legacy := &migratetest.Explicit[anyKey, any]{}
			s, err := migrate.New(migrate.Config[anyKey, any]{Phase: p, Legacy: legacy, Checkpoint: cp})
			require.NoError(t, err)
			defer s.Close()
			_, err = s.Restore(ctx)
			require.NoError(t, err)
			require.NoError(t, s.Put(ctx, anyKey{Name: "base"}, "v0"))
			good := map[anyKey]any{{Name: "base"}: "v0"}

			// Alone: nothing reaches the file or legacy.
			before, err := os.ReadFile(path)
			require.NoError(t, err)
			for i, v := range badValues {
				err := s.Put(ctx, anyKey{Name: "base"}, v)
				requireEncodeError(t, err, fmt.Sprintf("bad value %d", i))
				err = s.Put(ctx, anyKey{Name: fmt.Sprintf("new-%d", i)}, v)
				requireEncodeError(t, err, fmt.Sprintf("bad value %d on a new key", i))
			}
			for _, k := range badKeys {
				requireEncodeError(t, s.Put(ctx, k, "fine"), "bad key "+k.Name)
			}
			err = s.Update(ctx, func(tx *migrate.Tx[anyKey, any]) error {
				tx.Put(anyKey{Name: "tx-good"}, "fine")
				tx.Delete(anyKey{Name: "base"})
				tx.Put(anyKey{Name: "tx-bad"}, math.NaN())
				return nil
			})
			requireEncodeError(t, err, "update with one bad change")
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, string(before), string(after), "a write that cannot be encoded changes nothing on disk")
			assert.Equal(t, good, collect(s))

			// Concurrently with good writers, in shared group commits.
			var wg sync.WaitGroup
			var mu sync.Mutex
			for g := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 15 {
						k, v := anyKey{Name: fmt.Sprintf("g%d-%d", g, i%5)}, fmt.Sprintf("v%d", i)
						if err := s.Put(ctx, k, v); err != nil {
							t.Errorf("good writer %d: %v", g, err)
							continue
						}
						mu.Lock()
						good[k] = v
						mu.Unlock()
					}
				}()
			}
			for b := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 15 {
						var err error
						if i%3 == 0 {
							err = s.Put(ctx, badKeys[i%len(badKeys)], "fine")
						} else {
							err = s.Put(ctx, anyKey{Name: fmt.Sprintf("g%d-%d", b, i%5)}, badValues[i%len(badValues)])
						}
						if !errors.Is(err, checkpoint.ErrEncode) {
							t.Errorf("bad writer %d: %v, want ErrEncode", b, err)
						}
					}
				}()
			}
			wg.Wait()
			assert.Equal(t, good, collect(s), "the store serves exactly the good writes")
			assert.Equal(t, good, loadAny(t, path), "the checkpoint holds exactly the good writes")
			if p.WritesLegacy() {
				assert.Equal(t, good, legacy.Snapshot(), "legacy holds exactly the good writes")
			}
		})
	}
}

func requireEncodeError(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, what)
	assert.ErrorIs(t, err, checkpoint.ErrEncode, what)
	assert.ErrorIs(t, err, migrate.ErrCheckpointWrite, what)
}

// loadAny reads the checkpoint of TestUnencodableKeysAndValues as another
// process would.
func loadAny(t *testing.T, path string) map[anyKey]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	m := checkpoint.NewMemory[anyKey, any]()
	checkpointtest.SetBytes(m, b)
	if j, err := os.ReadFile(path + ".journal"); err == nil {
		checkpointtest.SetJournal(m, j) // the commits since the file was written
	}
	s, err := m.Load(context.Background())
	require.NoError(t, err)
	return s.Entries
}
