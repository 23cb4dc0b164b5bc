package checkpoint_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// vmState is the value a VM proxy keeps; ipAlloc an unrelated value type
// another daemon keeps, whose files an operator can point the proxy at.
type vmState struct {
	Sandbox string
	PID     int
}

type ipAlloc struct {
	IP      string
	Gateway string
}

// vmRecord is a VM record as an older binary wrote it; vmRecordNew the
// same type in a newer binary that removed Sandbox (as Kata Containers'
// 3.32 removed a field from its struct while old files still carried it).
type vmRecord struct {
	Name    string  `json:"name"`
	Sandbox string  `json:"sandbox"`
	Net     netConf `json:"net"`
}

type netConf struct {
	IP  string `json:"ip"`
	MTU int    `json:"mtu"`
}

type vmRecordNew struct {
	Name string     `json:"name"`
	Net  netConfNew `json:"net"`
}

type netConfNew struct {
	IP string `json:"ip"`
}

type portString struct{ Port string }
type portInt struct{ Port int }

// saveAs writes entries at path with a File of value type V and the given
// options, as the binary with that type would.
func saveAs[V any](t *testing.T, path string, entries map[string]V, opts ...checkpoint.Option) {
	t.Helper()
	ctx := context.Background()
	f, err := checkpoint.Open[string, V](ctx, path, opts...)
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, V]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: entries}))
	require.NoError(t, f.Close())
}

// loadAs loads path with a File of value type V and the given options and
// returns Load's error.
func loadAs[V any](t *testing.T, path string, opts ...checkpoint.Option) error {
	t.Helper()
	ctx := context.Background()
	f, err := checkpoint.Open[string, V](ctx, path, opts...)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Load(ctx)
	require.Error(t, err)
	return err
}

// TestFileOfAnotherTypeIsATypeMismatch opens a file written for one value
// type with another. The error must say that the file does not decode as
// this binary's types, name the field and the Go type, never call the
// file newer, never offer an option that drops data, and never quote a
// value.
//
// How it failed before the fix: a file of another struct type was
// ErrNewerSchema, "a newer binary wrote them without bumping the schema
// ... or open it WithDropUnknownFields to drop those fields"; a value of
// another kind was named without the struct type the field belongs to.
func TestFileOfAnotherTypeIsATypeMismatch(t *testing.T) {
	t.Run("another struct type", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "vm.json")
		saveAs(t, path, map[string]vmState{"vm-1": {Sandbox: "sb-secret", PID: 7}})
		err := loadAs[ipAlloc](t, path)
		assert.ErrorIs(t, err, checkpoint.ErrTypeMismatch)
		assert.NotErrorIs(t, err, checkpoint.ErrNewerSchema)
		msg := err.Error()
		assert.Contains(t, msg, "does not decode as this binary's types")
		assert.Contains(t, msg, `"vm-1"`, "the entry")
		assert.Contains(t, msg, `field "Sandbox" of type checkpoint_test.ipAlloc: this binary's type has no such field`)
		assert.Contains(t, msg, "written for another key or value type")
		assert.NotContains(t, msg, "WithDropUnknownFields", "no option that drops data")
		assert.NotContains(t, msg, "newer")
		assert.NotContains(t, msg, "sb-secret")
	})
	t.Run("a value of another kind", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "n.json")
		saveAs(t, path, map[string]string{"a": "abc-secret"})
		err := loadAs[int](t, path)
		assert.ErrorIs(t, err, checkpoint.ErrBadEntry, "the entry is a bad entry, as before")
		assert.ErrorIs(t, err, checkpoint.ErrTypeMismatch)
		assert.NotErrorIs(t, err, checkpoint.ErrNewerSchema)
		msg := err.Error()
		assert.Contains(t, msg, `(key "a"): the value does not decode as this binary's type int: cannot decode a JSON string into Go type int`)
		assert.NotContains(t, msg, "WithDropUnknownFields")
		assert.NotContains(t, msg, "abc-secret")
	})
	t.Run("a field of another kind", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "p.json")
		saveAs(t, path, map[string]portString{"a": {Port: "abc-secret"}})
		err := loadAs[portInt](t, path)
		assert.ErrorIs(t, err, checkpoint.ErrBadEntry)
		assert.ErrorIs(t, err, checkpoint.ErrTypeMismatch)
		msg := err.Error()
		assert.Contains(t, msg, `field "Port" of type checkpoint_test.portInt: cannot decode a JSON string into Go type int`)
		assert.NotContains(t, msg, "WithDropUnknownFields")
		assert.NotContains(t, msg, "abc-secret")
	})
}

// TestRemovedFieldIsNotANewerSchema is a newer binary reading an older
// binary's file, of the same schema, whose records carry a field the newer
// binary's type removed, at the top level and in a nested struct. It must
// not be told that the schema is newer: the error says the record has a
// field this binary's type lacks, names the field and the type that lacks
// it, and gives the fixes that lose nothing (declare the field again, an
// upgrade for the old schema) before the one that drops data, which it
// names as lossy. With a schema bump and an upgrade that leaves the field
// in, the error points at that upgrade.
//
// How it failed before the fix: ErrNewerSchema, "a newer binary wrote
// them without bumping the schema (WithSchema); upgrade the binary, ...".
func TestRemovedFieldIsNotANewerSchema(t *testing.T) {
	old := map[string]vmRecord{"vm-1": {Name: "a", Sandbox: "sb-secret", Net: netConf{IP: "10.0.0.1", MTU: 9000}}}
	check := func(t *testing.T, err error, field, typ string) string {
		t.Helper()
		assert.ErrorIs(t, err, checkpoint.ErrTypeMismatch)
		assert.NotErrorIs(t, err, checkpoint.ErrNewerSchema)
		msg := err.Error()
		assert.NotContains(t, msg, "newer", "the schema is not newer")
		assert.Contains(t, msg, "does not decode as this binary's types")
		assert.Contains(t, msg, `field "`+field+`" of type `+typ+`: this binary's type has no such field`)
		assert.Contains(t, msg, "has a field this binary's type lacks")
		assert.NotContains(t, msg, "sb-secret")
		drop := strings.Index(msg, "WithDropUnknownFields")
		require.Positive(t, drop, "the lossy option is named, last")
		assert.Contains(t, msg[drop:], "lossy")
		return msg
	}
	t.Run("same schema", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "vm.json")
		saveAs(t, path, old)
		msg := check(t, loadAs[vmRecordNew](t, path), "sandbox", "checkpoint_test.vmRecordNew")
		drop := strings.Index(msg, "WithDropUnknownFields")
		for _, safe := range []string{"declare the field again", "checkpoint.WithSchema(2)", "checkpoint.WithUpgrade(1, fn)"} {
			at := strings.Index(msg, safe)
			if assert.Positive(t, at, "the error offers %q", safe) {
				assert.Less(t, at, drop, "%q comes before the lossy option", safe)
			}
		}
	})
	t.Run("nested", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "vm.json")
		type vmRecordNested struct {
			Name    string     `json:"name"`
			Sandbox string     `json:"sandbox"`
			Net     netConfNew `json:"net"`
		}
		saveAs(t, path, old)
		check(t, loadAs[vmRecordNested](t, path), "mtu", "checkpoint_test.netConfNew")
	})
	t.Run("older schema through an upgrade", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "vm.json")
		saveAs(t, path, old)
		keep := func(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }
		msg := check(t, loadAs[vmRecordNew](t, path, checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, keep)), "sandbox", "checkpoint_test.vmRecordNew")
		assert.Contains(t, msg, "the upgrade from schema 1")
	})
}

// TestNewerSchemaStillSaysNewer is the real newer-schema case: a file of
// schema 2 read by a binary of schema 1 is ErrNewerSchema, says so with
// both numbers, and is not called a type mismatch.
func TestNewerSchemaStillSaysNewer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vm.json")
	keep := func(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }
	saveAs(t, path, map[string]vmRecord{"vm-1": {Name: "a"}}, checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, keep))
	err := loadAs[vmRecordNew](t, path)
	assert.ErrorIs(t, err, checkpoint.ErrNewerSchema)
	assert.NotErrorIs(t, err, checkpoint.ErrTypeMismatch)
	assert.Contains(t, err.Error(), "the file has schema 2 and this binary knows up to 1")
	assert.Contains(t, err.Error(), "newer")
}
