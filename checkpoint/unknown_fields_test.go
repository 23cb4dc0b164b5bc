package checkpoint_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// vmV1 is a value type as an older binary knows it; vmV2 is the same type
// after a newer binary added fields without bumping the schema.
type vmV1 struct {
	Name string `json:"name"`
	Net  netV1  `json:"net"`
}

type netV1 struct {
	IP netip.Addr `json:"ip"`
}

type vmV2 struct {
	Name  string `json:"name"`
	Net   netV2  `json:"net"`
	Token string `json:"token,omitempty"`
}

type netV2 struct {
	IP   netip.Addr `json:"ip"`
	MTU  int        `json:"mtu,omitempty"`
	Mask int        `json:"mask,omitempty"`
}

type vmKeyV2 struct {
	ID   string `json:"id"`
	Zone string `json:"zone,omitempty"`
}

type vmKeyV1 struct {
	ID string `json:"id"`
}

// writeV2 saves entries with vmV2 values at path, as the newer binary would.
func writeV2(t *testing.T, path string, entries map[string]vmV2) []byte {
	t.Helper()
	f, err := checkpoint.Open[string, vmV2](context.Background(), path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Save(context.Background(), checkpoint.Snapshot[string, vmV2]{Meta: checkpoint.Meta{Phase: "contract", Writer: "vmproxy v2"}, Entries: entries}))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// TestUnknownFieldsAreATypeMismatch reads a file written with a value type
// that has fields this binary's type lacks (a downgrade where the schema
// was not bumped, or a field this binary removed: the file cannot tell
// which): Load must fail with ErrTypeMismatch, return the file's
// Meta, name the entry and the field, and the file must never be
// overwritten; on a File and a Memory, at the top level of the value, in a
// nested struct and in the key.
//
// How it failed before the fix: the file loaded with no error ("An error
// is expected but got nil"), and the next Save wrote every entry without
// the fields.
func TestUnknownFieldsAreATypeMismatch(t *testing.T) {
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.0.1")
	for _, tc := range []struct {
		name, field string
		v           vmV2
	}{
		{"top level", "token", vmV2{Name: "a", Net: netV2{IP: ip}, Token: "t"}},
		{"nested", "mtu", vmV2{Name: "a", Net: netV2{IP: ip, MTU: 9000}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "vms.json")
			newer := writeV2(t, path, map[string]vmV2{"vm-old": {Name: "o", Net: netV2{IP: ip}}, "vm-new": tc.v})

			f, err := checkpoint.Open[string, vmV1](ctx, path)
			require.NoError(t, err)
			defer f.Close()
			m := checkpoint.NewMemory[string, vmV1]()
			checkpointtest.SetBytes(m, newer)
			for name, be := range map[string]interface {
				Load(context.Context) (checkpoint.Snapshot[string, vmV1], error)
				Save(context.Context, checkpoint.Snapshot[string, vmV1]) error
				Commit(context.Context, checkpoint.Meta, []checkpoint.Change[string, vmV1]) error
			}{"file": f, "memory": m} {
				s, err := be.Load(ctx)
				require.ErrorIs(t, err, checkpoint.ErrTypeMismatch, name)
				assert.Contains(t, err.Error(), `"vm-new"`, "%s: the error names the entry", name)
				assert.Contains(t, err.Error(), tc.field, "%s: the error names the field", name)
				assert.Contains(t, err.Error(), "WithDropUnknownFields", "%s: the error says how to go on", name)
				assert.Equal(t, "vmproxy v2", s.Meta.Writer, "%s: Load returns the file's Meta", name)
				assert.Equal(t, uint64(1), s.Meta.Seq, name)
				assert.Empty(t, s.Entries, "%s: no entry of a newer file is served", name)

				assert.ErrorIs(t, be.Save(ctx, checkpoint.Snapshot[string, vmV1]{}), checkpoint.ErrUnreadable, name)
				assert.ErrorIs(t, be.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, vmV1]{{Key: "x"}}), checkpoint.ErrUnreadable, name)
			}
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, string(newer), string(after), "the newer file is never overwritten")
			assert.Equal(t, string(newer), string(m.Bytes()))
		})
	}
	t.Run("key", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "vms.json")
		g, err := checkpoint.Open[vmKeyV2, string](ctx, path)
		require.NoError(t, err)
		require.NoError(t, g.Save(ctx, checkpoint.Snapshot[vmKeyV2, string]{Entries: map[vmKeyV2]string{{ID: "a", Zone: "z1"}: "x"}}))
		require.NoError(t, g.Close())
		f, err := checkpoint.Open[vmKeyV1, string](ctx, path)
		require.NoError(t, err)
		defer f.Close()
		_, err = f.Load(ctx)
		require.ErrorIs(t, err, checkpoint.ErrTypeMismatch)
		assert.Contains(t, err.Error(), "zone")
	})
}

// TestWithDropUnknownFields opens the same newer file with the option
// that drops unknown fields: it loads, a log line counts the entries that
// lost fields (naming no value), and the entries are rewritten without
// them at the next Save or Commit, unchanged ones included.
func TestWithDropUnknownFields(t *testing.T) {
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.0.1")
	path := filepath.Join(t.TempDir(), "vms.json")
	writeV2(t, path, map[string]vmV2{
		"vm-1": {Name: "a", Net: netV2{IP: ip, MTU: 9000}, Token: marker},
		"vm-2": {Name: "b", Net: netV2{IP: ip}},
		"vm-3": {Name: "c", Net: netV2{IP: ip}, Token: marker},
	})
	core, logs := observer.New(zapcore.InfoLevel)
	f, err := checkpoint.Open[string, vmV1](ctx, path, checkpoint.WithDropUnknownFields(), checkpoint.WithLogger(zap.New(core)))
	require.NoError(t, err)
	defer f.Close()
	s, err := f.Load(ctx)
	require.NoError(t, err)
	want := map[string]vmV1{"vm-1": {Name: "a", Net: netV1{IP: ip}}, "vm-2": {Name: "b", Net: netV1{IP: ip}}, "vm-3": {Name: "c", Net: netV1{IP: ip}}}
	assert.Equal(t, want, s.Entries)
	dropped := logs.FilterMessageSnippet("unknown fields").All()
	require.Len(t, dropped, 1)
	assert.Equal(t, int64(2), dropped[0].ContextMap()["entries"])
	assert.Equal(t, path, dropped[0].ContextMap()["path"])
	for _, e := range logs.All() {
		assert.NotContains(t, e.Message+toJSON(e.ContextMap()), marker)
	}

	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, vmV1]{{Key: "vm-2", Value: want["vm-2"]}}))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.NotContains(t, string(b), marker, "the dropped fields are gone from every entry once the file is written")
	assert.NotContains(t, string(b), "mtu")
	g, err := checkpoint.Open[string, vmV1](ctx, filepath.Join(t.TempDir(), "copy.json"))
	require.NoError(t, err)
	defer g.Close()
	m := checkpoint.NewMemory[string, vmV1]()
	checkpointtest.SetBytes(m, b)
	s, err = m.Load(ctx)
	require.NoError(t, err, "without the option, the rewritten file loads")
	assert.Equal(t, want, s.Entries)
}

// TestOlderFileIntoATypeWithMoreFields is the other direction: a file
// written by an older binary whose types lack fields this binary's have.
// It must load, the missing fields at their zero values, without the
// option (kubelet's checkpoints, checksummed over the Go types, broke
// exactly here).
func TestOlderFileIntoATypeWithMoreFields(t *testing.T) {
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.0.1")
	path := filepath.Join(t.TempDir(), "vms.json")
	old, err := checkpoint.Open[vmKeyV1, vmV1](ctx, path)
	require.NoError(t, err)
	require.NoError(t, old.Save(ctx, checkpoint.Snapshot[vmKeyV1, vmV1]{Entries: map[vmKeyV1]vmV1{{ID: "a"}: {Name: "a", Net: netV1{IP: ip}}}}))
	require.NoError(t, old.Close())

	f, err := checkpoint.Open[vmKeyV2, vmV2](ctx, path)
	require.NoError(t, err)
	defer f.Close()
	s, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[vmKeyV2]vmV2{{ID: "a"}: {Name: "a", Net: netV2{IP: ip}}}, s.Entries)
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[vmKeyV2, vmV2]{{Key: vmKeyV2{ID: "b", Zone: "z"}, Value: vmV2{Token: "t"}}}))
	s, err = f.Load(ctx)
	require.NoError(t, err)
	assert.Len(t, s.Entries, 2)
}

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestUpgradeOutputWithUnknownFields: an UpgradeFunc that leaves a field
// the current type does not have is held to the same rule as the file.
func TestUpgradeOutputWithUnknownFields(t *testing.T) {
	ctx := context.Background()
	old := checkpoint.NewMemory[string, vmV1]()
	require.NoError(t, old.Save(ctx, checkpoint.Snapshot[string, vmV1]{Entries: map[string]vmV1{"vm-1": {Name: "a"}}}))
	// Adds "zone" to the value, which vmV1 does not have.
	sloppy := func(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) {
		var m map[string]any
		if err := json.Unmarshal(v, &m); err != nil {
			return nil, nil, err
		}
		m["zone"] = "z1"
		nv, err := json.Marshal(m)
		return k, nv, err
	}
	for _, drop := range []bool{false, true} {
		opts := []checkpoint.Option{checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, sloppy)}
		if drop {
			opts = append(opts, checkpoint.WithDropUnknownFields())
		}
		m := checkpointtest.NewMemory[string, vmV1](t, opts...)
		checkpointtest.SetBytes(m, old.Bytes())
		s, err := m.Load(ctx)
		if !drop {
			require.ErrorIs(t, err, checkpoint.ErrTypeMismatch)
			assert.Contains(t, err.Error(), `"zone"`)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, map[string]vmV1{"vm-1": {Name: "a"}}, s.Entries)
	}
}

// TestJournalHistoryWithUnknownFieldsIsNotJudged attacks "a value a later
// line replaced or deleted is history and is not judged" for fields the
// older binary's types lack: a newer build (same schema) set a new
// omitempty field on "vm-1", then replaced or deleted it, in its journal.
// The older build must load the state the journal replays to, as it loads
// the same state compacted (found on main: ErrNewerSchema naming vm-1, so
// whether a rollback worked depended on when the journal was last folded).
// A field still set in the state replayed is a type mismatch, as ever.
func TestJournalHistoryWithUnknownFieldsIsNotJudged(t *testing.T) {
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.0.1")
	withToken := vmV2{Name: "one", Net: netV2{IP: ip}, Token: "t0k3n"}
	plain := vmV2{Name: "one", Net: netV2{IP: ip}}
	for _, tc := range []struct {
		name    string
		changes []checkpoint.Change[string, vmV2]
		want    map[string]vmV1 // nil: ErrTypeMismatch
	}{
		{"replaced", []checkpoint.Change[string, vmV2]{{Key: "vm-1", Value: withToken}, {Key: "vm-1", Value: plain}},
			map[string]vmV1{"vm-0": {Name: "zero"}, "vm-1": {Name: "one", Net: netV1{IP: ip}}}},
		{"deleted", []checkpoint.Change[string, vmV2]{{Key: "vm-1", Value: withToken}, {Key: "vm-1", Delete: true}},
			map[string]vmV1{"vm-0": {Name: "zero"}}},
		{"still set", []checkpoint.Change[string, vmV2]{{Key: "vm-1", Value: plain}, {Key: "vm-1", Value: withToken}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "vm.json")
			newer, err := checkpoint.Open[string, vmV2](ctx, path)
			require.NoError(t, err)
			require.NoError(t, newer.Save(ctx, checkpoint.Snapshot[string, vmV2]{Entries: map[string]vmV2{"vm-0": {Name: "zero"}}}))
			for _, ch := range tc.changes { // one record each
				require.NoError(t, newer.Commit(ctx, checkpoint.Meta{Phase: "contract"}, []checkpoint.Change[string, vmV2]{ch}))
			}
			require.NoError(t, newer.Close())
			require.FileExists(t, path+".journal", "the history is in the journal, not compacted")

			older, err := checkpoint.Open[string, vmV1](ctx, path)
			require.NoError(t, err)
			defer older.Close()
			s, err := older.Load(ctx)
			if tc.want == nil {
				require.ErrorIs(t, err, checkpoint.ErrTypeMismatch)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, s.Entries)
		})
	}
}

// TestFileHistoryWithUnknownFieldsIsNotJudged attacks the same sentence
// ("a value a later line replaced or deleted is history and is not judged
// ... a journal loads exactly when the same state compacted would") where
// the history is in the file rather than in an earlier line, and in a key
// rather than a value. A newer build (same schema) compacted the file while
// "a" carried its new field (or wrote, in its journal, a key with a new
// field), then replaced or deleted that entry in its journal. The state
// the journal replays to has no field the older build lacks, and loads
// once compacted; whether a rollback works still depends on when the
// journal was last folded. Fails on main: every case is ErrNewerSchema.
func TestFileHistoryWithUnknownFieldsIsNotJudged(t *testing.T) {
	ctx := context.Background()
	ip := netip.MustParseAddr("10.0.0.1")
	keyB := vmKeyV2{ID: "b", Zone: "z1"}
	for _, tc := range []struct {
		name    string
		file    map[vmKeyV2]vmV2
		changes []checkpoint.Change[vmKeyV2, vmV2]
		want    map[vmKeyV1]vmV1
	}{
		{"a file value replaced", map[vmKeyV2]vmV2{{ID: "a"}: {Name: "a", Token: "t0k3n"}},
			[]checkpoint.Change[vmKeyV2, vmV2]{{Key: vmKeyV2{ID: "a"}, Value: vmV2{Name: "a", Net: netV2{IP: ip}}}},
			map[vmKeyV1]vmV1{{ID: "a"}: {Name: "a", Net: netV1{IP: ip}}}},
		{"a file value deleted", map[vmKeyV2]vmV2{{ID: "a"}: {Name: "a", Token: "t0k3n"}, {ID: "c"}: {Name: "c"}},
			[]checkpoint.Change[vmKeyV2, vmV2]{{Key: vmKeyV2{ID: "a"}, Delete: true}},
			map[vmKeyV1]vmV1{{ID: "c"}: {Name: "c"}}},
		{"a journal key deleted", map[vmKeyV2]vmV2{{ID: "a"}: {Name: "a"}},
			[]checkpoint.Change[vmKeyV2, vmV2]{{Key: keyB, Value: vmV2{Name: "b"}}, {Key: keyB, Delete: true}},
			map[vmKeyV1]vmV1{{ID: "a"}: {Name: "a"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "vm.json")
			newer, err := checkpoint.Open[vmKeyV2, vmV2](ctx, path)
			require.NoError(t, err)
			require.NoError(t, newer.Save(ctx, checkpoint.Snapshot[vmKeyV2, vmV2]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: tc.file}))
			for _, ch := range tc.changes { // one record each
				require.NoError(t, newer.Commit(ctx, checkpoint.Meta{Phase: "contract"}, []checkpoint.Change[vmKeyV2, vmV2]{ch}))
			}
			require.NoError(t, newer.Close())
			require.FileExists(t, path+".journal", "the history is in the file and the journal, not compacted")

			// The control: the same state, compacted by the newer build
			// into a file of its own, loads in the older one.
			newer, err = checkpoint.Open[vmKeyV2, vmV2](ctx, path)
			require.NoError(t, err)
			state, err := newer.Load(ctx)
			require.NoError(t, err)
			require.NoError(t, newer.Close())
			compacted := filepath.Join(t.TempDir(), "vm.json")
			c, err := checkpoint.Open[vmKeyV2, vmV2](ctx, compacted)
			require.NoError(t, err)
			require.NoError(t, c.Save(ctx, state))
			require.NoError(t, c.Close())
			o, err := checkpoint.Open[vmKeyV1, vmV1](ctx, compacted)
			require.NoError(t, err)
			cs, err := o.Load(ctx)
			require.NoError(t, err)
			require.NoError(t, o.Close())
			require.Equal(t, tc.want, cs.Entries)

			older, err := checkpoint.Open[vmKeyV1, vmV1](ctx, path)
			require.NoError(t, err)
			defer older.Close()
			s, err := older.Load(ctx)
			require.NoError(t, err, "the same state compacted loads")
			assert.Equal(t, tc.want, s.Entries)
		})
	}
}
