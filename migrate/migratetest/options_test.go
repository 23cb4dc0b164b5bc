package migratetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

// dirStore is a legacy store of its own: a directory with one file per
// key holding the value, as an older version of a daemon might have kept
// its registry. Every open is counted, and so is every Close.
type dirStore struct {
	dir    string
	opened *openCount
	closed bool
	// lose, if set, keeps Puts of this key in memory only, as a store
	// that forgot to write them would: they are gone at the next open.
	lose  string
	cache map[string]int
	// round, if set, stores values rounded down to tens, as a store of a
	// coarser format would.
	round bool
}

type openCount struct {
	mu          sync.Mutex
	opens, live int // opened, and still open
	overlaps    int // opens while another was still open
}

var (
	_ source.Reader[string, int] = (*dirStore)(nil)
	_ source.Writer[string, int] = (*dirStore)(nil)
	_ io.Closer                  = (*dirStore)(nil)
)

func openDirStore(dir string, n *openCount) (*dirStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.live > 0 {
		n.overlaps++
	}
	n.opens++
	n.live++
	return &dirStore{dir: dir, opened: n, cache: map[string]int{}}, nil
}

func (d *dirStore) List(context.Context) (map[string]int, error) {
	if d.closed {
		return nil, errors.New("dirStore: closed")
	}
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, err
	}
	m := map[string]int{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(d.dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if m[e.Name()], err = strconv.Atoi(string(b)); err != nil {
			return nil, fmt.Errorf("dirStore: %s: %w", e.Name(), err)
		}
	}
	for k, v := range d.cache {
		m[k] = v
	}
	return m, nil
}

func (d *dirStore) Put(_ context.Context, k string, v int) error {
	if d.closed {
		return errors.New("dirStore: closed")
	}
	if k == d.lose {
		d.cache[k] = v
		return nil
	}
	if d.round {
		v -= v % 10
	}
	tmp := filepath.Join(d.dir, "."+k+".tmp")
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(v)), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(d.dir, k))
}

func (d *dirStore) Delete(_ context.Context, k string) error {
	if d.closed {
		return errors.New("dirStore: closed")
	}
	delete(d.cache, k)
	if err := os.Remove(filepath.Join(d.dir, k)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (d *dirStore) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	d.opened.mu.Lock()
	defer d.opened.mu.Unlock()
	d.opened.live--
	return nil
}

// withDirStore makes cfg's legacy a dirStore in a fresh directory.
func withDirStore(t *testing.T, cfg *migratetest.Config[string, int], lose string) *openCount {
	dir, n := t.TempDir(), &openCount{}
	cfg.OpenLegacy = func() (source.Reader[string, int], error) {
		s, err := openDirStore(dir, n)
		if s != nil {
			s.lose = lose
		}
		return s, err
	}
	return n
}

// TestOpenLegacy: a legacy store of the user's own, on disk, stands in
// for the fake, reopened at every start and closed when its binary stops.
func TestOpenLegacy(t *testing.T) {
	cfg := registryConfig()
	opened := withDirStore(t, &cfg, "")
	cfg.PartialListings, cfg.NewBinaryInPhase0, cfg.MaxLen, cfg.Seed = true, true, 4, 21
	res := migratetest.Matrix(t, cfg)
	assert.Positive(t, res.Crashes)
	assert.Positive(t, res.Reboots)
	assert.Greater(t, opened.opens, res.Sequences, "a store opened per start")
	assert.Zero(t, opened.overlaps, "each closed before the next start")
	assert.Zero(t, opened.live, "every store opened was closed")
	assert.Positive(t, res.Refused["stale legacy that cannot be read in full"], "partial listings of the store's own listing")
}

// TestOpenLegacyCatches: a store that does not keep what it was given, or
// fails what the model took, fails the matrix, with the store named.
func TestOpenLegacyCatches(t *testing.T) {
	t.Run("a write kept in memory only", func(t *testing.T) {
		cfg := registryConfig()
		withDirStore(t, &cfg, "vm-3")
		cfg.MaxLen, cfg.NoFaults, cfg.NoCrashes, cfg.NoReboots = 3, true, true, true
		v := caught(t, cfg, 3, "LEGACY STORE: after a restart, it lists")
		assert.Contains(t, strings.Join(v.Problems, "\n"), "vm-3")
	})
	t.Run("a value the store changes", func(t *testing.T) {
		cfg := registryConfig()
		dir, n := t.TempDir(), &openCount{}
		cfg.OpenLegacy = func() (source.Reader[string, int], error) {
			s, err := openDirStore(dir, n)
			if s != nil {
				s.round = true
			}
			return s, err
		}
		cfg.MaxLen, cfg.NoFaults = 2, true
		caught(t, cfg, 2, "LEGACY STORE: (after a restart, it lists|it lists .* after the harness made it hold)")
	})
	t.Run("a write that fails on the store only", func(t *testing.T) {
		cfg := registryConfig()
		dir, n := t.TempDir(), &openCount{}
		cfg.OpenLegacy = func() (source.Reader[string, int], error) {
			s, err := openDirStore(dir, n)
			return failingPut{s}, err
		}
		cfg.MaxLen = 2
		caught(t, cfg, 2, "LEGACY STORE: (Put vm-[0-9] failed on the store|putting vm-[0-9])")
	})
	t.Run("a store the Store cannot write", func(t *testing.T) {
		cfg := registryConfig()
		cfg.OpenLegacy = func() (source.Reader[string, int], error) {
			return source.Func[string, int](func(context.Context) (map[string]int, error) { return nil, nil }), nil
		}
		_, err := migratetest.Check(cfg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "not a source.Writer")
	})
	t.Run("an implicit legacy", func(t *testing.T) {
		cfg := ipamConfig()
		cfg.OpenLegacy = func() (source.Reader[ipamKey, alloc], error) { return &migratetest.Explicit[ipamKey, alloc]{}, nil }
		_, err := migratetest.Check(cfg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "Config.OpenLegacy needs Config.Explicit")
	})
}

// failingPut fails every Put with a value above 900.
type failingPut struct{ *dirStore }

func (f failingPut) Put(ctx context.Context, k string, v int) error {
	if v > 900 {
		return errors.New("dirStore: disk full")
	}
	return f.dirStore.Put(ctx, k, v)
}

// schemaOptions are a daemon's checkpoint options across a schema bump:
// the older build writes schema 2, the newer 3 and validates its values.
// Both ask for the kernel's boot ID, which the harness replaces with the
// simulated boot's.
func schemaOptions(validate func(string, int) error) func(older bool) []checkpoint.Option {
	same := func(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }
	return func(older bool) []checkpoint.Option {
		opts := []checkpoint.Option{checkpoint.WithBootID(nil), checkpoint.WithUpgrade(1, same)}
		if older {
			return append(opts, checkpoint.WithSchema(2))
		}
		return append(opts, checkpoint.WithSchema(3), checkpoint.WithUpgrade(2, same), checkpoint.WithValidate(validate))
	}
}

// TestCheckpointOptions: the user's checkpoint options reach every step's
// checkpoint, their schemas make the builds of SchemaBumps, and the
// harness's boot ID replaces theirs.
func TestCheckpointOptions(t *testing.T) {
	t.Run("a schema bump of the user's own", func(t *testing.T) {
		cfg := volatileConfig()
		cfg.CheckpointOptions = schemaOptions(func(string, int) error { return nil })
		cfg.SchemaBumps, cfg.NewBinaryInPhase0, cfg.MaxLen, cfg.Seed = true, true, 4, 8
		res := migratetest.Matrix(t, cfg)
		assert.Positive(t, res.Refused["a newer checkpoint that is the sole copy"], "the older build (schema 2) refuses the newer one's file (schema 3)")
		assert.Positive(t, res.Reboots, "with the kernel's boot ID, a reboot would not discard the checkpoint, and the matrix would fail")
	})
	t.Run("a validation that rejects what the workload writes", func(t *testing.T) {
		cfg := registryConfig()
		cfg.CheckpointOptions = schemaOptions(func(_ string, v int) error {
			if v > 900 {
				return errors.New("out of range")
			}
			return nil
		})
		cfg.MaxLen, cfg.NoFaults = 3, true
		v := caught(t, cfg, 3, "refused to restore|LOST|STEADY STATE")
		assert.Contains(t, v.Trace, "out of range")
	})
	t.Run("no boot epoch, the checkpoint outliving a reboot", func(t *testing.T) {
		cfg := registryConfig()
		cfg.CheckpointOptions = func(bool) []checkpoint.Option { return nil }
		cfg.MaxLen, cfg.NoCrashes = 3, true
		v := caught(t, cfg, 3, "INVENTED|STALE")
		assert.Contains(t, v.Trace, "reboot", "without the user's WithBootID the harness adds no boot epoch")
	})
	t.Run("no boot epoch, the checkpoint on tmpfs", func(t *testing.T) {
		cfg := registryConfig()
		cfg.CheckpointOptions = func(bool) []checkpoint.Option { return nil }
		cfg.EphemeralCheckpoint, cfg.MaxLen = true, 4
		res := migratetest.Matrix(t, cfg)
		assert.Positive(t, res.Reboots)
	})
	t.Run("an older build that is not older", func(t *testing.T) {
		cfg := registryConfig()
		cfg.CheckpointOptions = func(bool) []checkpoint.Option { return nil }
		cfg.SchemaBumps = true
		_, err := migratetest.Check(cfg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "must give the older build a lower schema")
	})
	t.Run("an invalid option", func(t *testing.T) {
		cfg := registryConfig()
		cfg.CheckpointOptions = func(bool) []checkpoint.Option { return []checkpoint.Option{checkpoint.WithSchema(0)} }
		_, err := migratetest.Check(cfg)
		require.ErrorIs(t, err, checkpoint.ErrInvalidOption)
		assert.Contains(t, err.Error(), "Config.CheckpointOptions(false)")
	})
}

// TestCheckNeedsAViewThatSettles: a View that changes what it returned
// (a time shifted at every listing) is refused up front, rather than
// failing every sequence with a value one step off.
func TestCheckNeedsAViewThatSettles(t *testing.T) {
	cfg := ipamConfig()
	cfg.View = func(k ipamKey, v alloc) (ipamKey, alloc) {
		return k, alloc{IP: v.IP, Since: v.Since.Add(-time.Second)}
	}
	_, err := migratetest.Check(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Config.View changes what it returned")
}

// TestCheckNeedsAValueThatCanBeUnique: Config.Unique's doc says Value
// "must be able to draw values whose parts are free (a pool much larger
// than the entries)". One that cannot - a pool of one address - turns
// every ADD it cannot give a free address into a DEL, silently: the
// workload then holds one entry at a time, and a Store that serves an
// address twice over a partial listing (no migrate.Config.Unique, which
// the same Check with a pool of a thousand catches with TWICE) passes,
// with Result.Writes as high as ever. Check must refuse such a Value (or
// fail), as it refuses a View that does not settle. Fails on main: the
// pool of one passes with nil.
func TestCheckNeedsAValueThatCanBeUnique(t *testing.T) {
	broken := func(pool int) migratetest.Config[ipamKey, alloc] {
		cfg := ipamConfig()
		wrap(&cfg, func(_ migrate.Phase, mc *migrate.Config[ipamKey, alloc]) { mc.Unique = nil })
		cfg.PartialListings, cfg.MaxLen, cfg.Seed = true, 4, 4
		cfg.Value = func(rng *rand.Rand, _ ipamKey) alloc {
			return alloc{IP: fmt.Sprintf("10.0.0.%d", rng.IntN(pool)), Since: time.Unix(rng.Int64N(1e9), 0).UTC()}
		}
		return cfg
	}
	// The control: a pool of a thousand draws free values. (Without
	// Config.Unique, an address the old binary handed on beside an orphan
	// the Store kept is a leak the Store reports, not an address served
	// twice to two live pods.)
	_, err := migratetest.Check(broken(1000))
	require.NoError(t, err, "the control: a pool of a thousand")

	res, err := migratetest.Check(broken(1))
	t.Logf("a pool of one: %v", res)
	require.Error(t, err, "a Value that cannot draw a free value must not pass silently (%d writes)", res.Writes)
	assert.Contains(t, err.Error(), "Config.Value")
}
