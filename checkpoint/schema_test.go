package checkpoint_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

var writeFixtures = flag.Bool("write-fixtures", false, "write the testdata fixtures that do not exist yet (never overwrites)")

// allocV1 is the value type of schema 1 in the upgrade tests: one IP as a
// string. Schema 2 (allocV2) holds a list of addresses; schema 3 adds the
// interface to the value as well.
type allocV1 struct {
	IP string `json:"ip"`
}

type allocV2 struct {
	IPs []netip.Addr `json:"ips"`
}

type allocV3 struct {
	IPs    []netip.Addr `json:"ips"`
	IfName string       `json:"ifName"`
}

func upgrade1to2(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) {
	var old allocV1
	if err := json.Unmarshal(v, &old); err != nil {
		return nil, nil, err
	}
	ip, err := netip.ParseAddr(old.IP)
	if err != nil {
		return nil, nil, err
	}
	nv, err := json.Marshal(allocV2{IPs: []netip.Addr{ip}})
	return k, nv, err
}

func upgrade2to3(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) {
	var old allocV2
	if err := json.Unmarshal(v, &old); err != nil {
		return nil, nil, err
	}
	var pk podKey
	if err := json.Unmarshal(k, &pk); err != nil {
		return nil, nil, err
	}
	nv, err := json.Marshal(allocV3{IPs: old.IPs, IfName: pk.IfName})
	return k, nv, err
}

// The fixtures: files written by this version of the format, read by the
// tests below for as long as the format is supported. Never regenerate one
// that exists; add a new fixture for a new format or schema.
var fixtures = []struct {
	file   string
	write  func(ctx context.Context, path string) error
	verify func(t *testing.T, path string)
}{
	{
		file: "format1-schema1.json",
		write: func(ctx context.Context, path string) error {
			f, err := checkpoint.Open[podKey, alloc](ctx, path)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Meta: checkpoint.Meta{Phase: "expand", Writer: "phaseshift fixture"}, Entries: fixtureAllocs()})
		},
		verify: func(t *testing.T, path string) {
			f, err := checkpoint.Open[podKey, alloc](context.Background(), path)
			require.NoError(t, err)
			defer f.Close()
			s, err := f.Load(context.Background())
			require.NoError(t, err)
			assert.Equal(t, fixtureAllocs(), s.Entries)
			assert.Equal(t, "expand", s.Meta.Phase)
			assert.Equal(t, "phaseshift fixture", s.Meta.Writer)
			assert.Equal(t, 1, s.Meta.Format)
			assert.Equal(t, 1, s.Meta.Schema)
			assert.Equal(t, uint64(1), s.Meta.Seq)
		},
	},
	{
		file: "format1-schema1-v1values.json",
		write: func(ctx context.Context, path string) error {
			f, err := checkpoint.Open[podKey, allocV1](ctx, path)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Save(ctx, checkpoint.Snapshot[podKey, allocV1]{Meta: checkpoint.Meta{Phase: "expand"}, Entries: map[podKey]allocV1{
				key("c1"): {IP: "10.0.0.2"},
				key("c2"): {IP: "fd00::2"},
			}})
		},
		verify: func(t *testing.T, path string) {
			// Read by today's binary, which is at schema 3.
			f, err := checkpoint.Open[podKey, allocV3](context.Background(), path,
				checkpoint.WithSchema(3), checkpoint.WithUpgrade(1, upgrade1to2), checkpoint.WithUpgrade(2, upgrade2to3))
			require.NoError(t, err)
			defer f.Close()
			s, err := f.Load(context.Background())
			require.NoError(t, err)
			assert.Equal(t, map[podKey]allocV3{
				key("c1"): {IPs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}, IfName: "eth0"},
				key("c2"): {IPs: []netip.Addr{netip.MustParseAddr("fd00::2")}, IfName: "eth0"},
			}, s.Entries)
			assert.Equal(t, 1, s.Meta.Schema, "Meta reports the schema the file was written with")
		},
	},
}

func fixtureAllocs() map[podKey]alloc {
	return map[podKey]alloc{
		key("4f1c9a"): {IP: netip.MustParseAddr("10.0.0.2"), Since: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)},
		key("77ab01"): {IP: netip.MustParseAddr("10.0.0.3"), Since: time.Date(2026, 11, 30, 8, 0, 1, 0, time.UTC)},
		{Network: "_migrated-from-cri", ContainerID: "9c2e", IfName: "unknown"}: {IP: netip.MustParseAddr("fd00::4")},
	}
}

func TestFixturesLoadForever(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.file, func(t *testing.T) {
			src := filepath.Join("testdata", fx.file)
			if *writeFixtures {
				if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
					tmp := filepath.Join(t.TempDir(), fx.file)
					require.NoError(t, fx.write(context.Background(), tmp))
					data, err := os.ReadFile(tmp)
					require.NoError(t, err)
					require.NoError(t, os.WriteFile(src, data, 0o644))
				}
			}
			data, err := os.ReadFile(src)
			require.NoError(t, err, "fixture missing: run go test ./checkpoint -run TestFixturesLoadForever -write-fixtures")
			// Work on a copy: opening writes a lock file next to the checkpoint.
			path := filepath.Join(t.TempDir(), fx.file)
			require.NoError(t, os.WriteFile(path, data, 0o600))
			fx.verify(t, path)
		})
	}
}

func TestUpgradeChain(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "s.json")
	w, err := checkpoint.Open[podKey, allocV1](ctx, path)
	require.NoError(t, err)
	require.NoError(t, w.Save(ctx, checkpoint.Snapshot[podKey, allocV1]{Entries: map[podKey]allocV1{
		key("a"): {IP: "10.0.0.2"},
		key("b"): {IP: "not an ip"},
	}}))
	require.NoError(t, w.Close())

	f, err := checkpoint.Open[podKey, allocV3](ctx, path, checkpoint.WithSchema(3),
		checkpoint.WithUpgrade(2, upgrade2to3), checkpoint.WithUpgrade(1, upgrade1to2))
	require.NoError(t, err)
	defer f.Close()
	s, err := f.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrBadEntry, "an entry its upgrade rejects is a bad entry, not a failed file")
	assert.Contains(t, err.Error(), "upgrade from schema 1 to 2")
	assert.Equal(t, map[podKey]allocV3{key("a"): {IPs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}, IfName: "eth0"}}, s.Entries)

	// After moving the file aside and saving, the file is at schema 3.
	_, err = f.Quarantine(ctx)
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, allocV3]{Entries: s.Entries}))
	again, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, 3, again.Meta.Schema)
	assert.Equal(t, s.Entries, again.Entries)
}

func TestUpgradedEntriesAreCommittedInTheNewSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	w, err := checkpoint.Open[podKey, allocV1](ctx, path)
	require.NoError(t, err)
	require.NoError(t, w.Save(ctx, checkpoint.Snapshot[podKey, allocV1]{Entries: map[podKey]allocV1{key("a"): {IP: "10.0.0.2"}}}))
	require.NoError(t, w.Close())

	f, err := checkpoint.Open[podKey, allocV2](ctx, path, checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, upgrade1to2))
	require.NoError(t, err)
	_, err = f.Load(ctx)
	require.NoError(t, err)
	// Commit touches another entry only; "a" must still be written as
	// schema 2, not copied from the schema-1 file.
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, allocV2]{{Key: key("b"), Value: allocV2{}}}))
	require.NoError(t, f.Close())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.NotContains(t, string(data), `"ip":"10.0.0.2"`)
	assert.Contains(t, string(data), `"ips":["10.0.0.2"]`)

	g, err := checkpoint.Open[podKey, allocV2](ctx, path, checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, upgrade1to2))
	require.NoError(t, err)
	defer g.Close()
	s, err := g.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, s.Meta.Schema)
	assert.Len(t, s.Entries, 2)
}

func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	w, err := checkpoint.Open[podKey, allocV2](ctx, path, checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, upgrade1to2))
	require.NoError(t, err)
	require.NoError(t, w.Save(ctx, checkpoint.Snapshot[podKey, allocV2]{Entries: map[podKey]allocV2{key("a"): {}}}))
	require.NoError(t, w.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	// The binary we downgraded to knows schema 1 only.
	f, err := checkpoint.Open[podKey, allocV1](ctx, path)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNewerSchema)
	assert.Contains(t, err.Error(), "schema 2")
	assert.Contains(t, err.Error(), "up to 1")
	require.ErrorIs(t, f.Save(ctx, checkpoint.Snapshot[podKey, allocV1]{}), checkpoint.ErrUnreadable)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before, after, "a newer file is never overwritten by an older binary")
}

func TestNewerFormatRefused(t *testing.T) {
	m, err := checkpoint.NewMemory[string, int]().Reopen(checkpoint.WithoutJournal()) // format 1
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, m.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"a": 1}}))
	data := string(m.Bytes())
	require.True(t, strings.HasPrefix(data, "{\n  \"format\": 1,"))
	// Reseal a format-3 header, as a future writer would produce it
	// (format 2 is format 1 written WithJournal).
	body := strings.Replace(data[:strings.Index(data, "  \"checksum\"")], `"format": 1`, `"format": 3`, 1)
	checkpointtest.SetBytes(m, []byte(body+sealFor(body)))
	_, err = m.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNewerSchema)
	assert.Contains(t, err.Error(), "file format is 3")

	// A newer format may add header fields: the file is still newer, not
	// corrupt (a corrupt file is quarantined, a newer one kept for the
	// roll-forward).
	withField := strings.Replace(body, `"format": 3,`, `"format": 3,
  "compression": "none",`, 1)
	checkpointtest.SetBytes(m, []byte(withField+sealFor(withField)))
	_, err = m.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNewerSchema)
	assert.NotErrorIs(t, err, checkpoint.ErrCorrupt)
	assert.Contains(t, err.Error(), "file format is 3")

	// In the current format, an unknown header field is corruption.
	same := strings.Replace(withField, `"format": 3,`, `"format": 1,`, 1)
	checkpointtest.SetBytes(m, []byte(same+sealFor(same)))
	_, err = m.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
}

// TestUpgradeChainStartsAtOne: a binary that writes schema N must read
// every older schema, so Open and Memory.Reopen refuse a chain that does
// not start at 1 (no upgrade at all, or one from 2 only): a file of schema 1
// would otherwise be found unreadable in production and moved aside with
// the state it holds.
func TestUpgradeChainStartsAtOne(t *testing.T) {
	for name, opts := range map[string][]checkpoint.Option{
		"no upgrade":          {checkpoint.WithSchema(2)},
		"a chain from 2":      {checkpoint.WithSchema(3), checkpoint.WithUpgrade(2, upgrade2to3)},
		"a gap in the middle": {checkpoint.WithSchema(3), checkpoint.WithUpgrade(1, upgrade1to2)},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := checkpoint.Open[podKey, allocV3](context.Background(), filepath.Join(t.TempDir(), "a.json"), opts...)
			require.ErrorIs(t, err, checkpoint.ErrInvalidOption)
			assert.Contains(t, err.Error(), "schema 1")
			_, err = checkpoint.NewMemory[podKey, allocV3]().Reopen(opts...)
			require.ErrorIs(t, err, checkpoint.ErrInvalidOption)
		})
	}
}
