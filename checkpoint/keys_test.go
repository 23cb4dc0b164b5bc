package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// marker is in every key the tests below expect to see refused: an error
// may name the key's type, never the key.
const marker = "sk-live-5ecret"

// timeKey holds a time: time.Now() carries a monotonic clock reading and a
// *time.Location, neither of which JSON keeps.
type timeKey struct {
	Name string    `json:"name"`
	At   time.Time `json:"at"`
}

// shardKey has an unexported field, which JSON does not store.
type shardKey struct {
	Name  string `json:"name"`
	shard int
}

// lowerKey writes itself lower case: its JSON does not read back as itself
// when it holds upper case.
type lowerKey string

func (k lowerKey) MarshalText() ([]byte, error) { return []byte(strings.ToLower(string(k))), nil }

func (k *lowerKey) UnmarshalText(b []byte) error { *k = lowerKey(b); return nil }

// refKey holds a pointer: JSON stores what it points to, and reading it
// back makes a new pointer.
type refKey struct {
	Name string `json:"name"`
	Ref  *int   `json:"ref"`
}

// keyBackend is a File or a Memory, as the key tests see them.
type keyBackend[K comparable] interface {
	Load(ctx context.Context) (checkpoint.Snapshot[K, string], error)
	Save(ctx context.Context, s checkpoint.Snapshot[K, string]) error
	Commit(ctx context.Context, m checkpoint.Meta, changes []checkpoint.Change[K, string]) error
}

// keyBackends returns a fresh File and a fresh Memory, with a function that
// returns the bytes of each one's file.
func keyBackends[K comparable](t *testing.T) map[string]struct {
	b     keyBackend[K]
	bytes func() []byte
} {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.json")
	m := checkpoint.NewMemory[K, string]()
	backends := map[string]struct {
		b     keyBackend[K]
		bytes func() []byte
	}{"memory": {m, m.Bytes}}
	f, err := checkpoint.Open[K, string](context.Background(), path)
	if checkpoint.CheckKeyType[K]() != nil {
		// Refused when opened (TestKeyTypesRefusedAtOpen); NewMemory, which
		// cannot fail, checks every key as it is written.
		require.ErrorIs(t, err, checkpoint.ErrInvalidKeyType)
		return backends
	}
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	backends["file"] = struct {
		b     keyBackend[K]
		bytes func() []byte
	}{f, func() []byte {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return b
	}}
	return backends
}

// TestKeyTypesRefusedAtOpen: a key type with a pointer, an interface, an
// unexported field or a field tagged json:"-" is refused when the
// checkpoint is opened (Open, Memory.Reopen), naming the field, rather than
// at the first write that holds a value JSON loses (a daemon's first CNI
// ADD). Types whose own JSON methods decide are left to the per-key check.
func TestKeyTypesRefusedAtOpen(t *testing.T) {
	type hidden struct {
		Name string `json:"name"`
		Salt string `json:"-"`
	}
	type nested struct {
		Pod podKey
		Ref refKey
	}
	type shard int
	type embedsUnexported struct {
		shard
		Name string
	}
	cases := map[string]struct {
		check func() error
		open  func(path string) error
		why   string
	}{
		"unexported field": {checkpoint.CheckKeyType[shardKey], openAs[shardKey], "field shard (int) is unexported"},
		"pointer field":    {checkpoint.CheckKeyType[refKey], openAs[refKey], "field Ref (*int) is a pointer"},
		"pointer":          {checkpoint.CheckKeyType[*int], openAs[*int], "the key is a pointer"},
		"interface":        {checkpoint.CheckKeyType[any], openAs[any], "the key is an interface"},
		"json:\"-\"":       {checkpoint.CheckKeyType[hidden], openAs[hidden], `field Salt (string) is tagged json:"-"`},
		"nested pointer":   {checkpoint.CheckKeyType[nested], openAs[nested], "field Ref.Ref (*int) is a pointer"},
		"channel":          {checkpoint.CheckKeyType[chan int], openAs[chan int], "the key is a chan, which JSON cannot encode"},
		"complex field":    {checkpoint.CheckKeyType[struct{ Z complex128 }], openAs[struct{ Z complex128 }], "field Z (complex128) is a complex128"},
		"embedded string":  {checkpoint.CheckKeyType[embedsUnexported], openAs[embedsUnexported], "field shard (checkpoint_test.shard) is unexported"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := c.check()
			require.ErrorIs(t, err, checkpoint.ErrInvalidKeyType)
			assert.Contains(t, err.Error(), c.why)
			err = c.open(filepath.Join(t.TempDir(), "keys.json"))
			require.ErrorIs(t, err, checkpoint.ErrInvalidKeyType)
			assert.Contains(t, err.Error(), c.why)
		})
	}
	for name, err := range map[string]error{
		"plain struct":   checkpoint.CheckKeyType[podKey](),
		"time.Time":      checkpoint.CheckKeyType[timeKey](),
		"MarshalText":    checkpoint.CheckKeyType[lowerKey](),
		"array, numbers": checkpoint.CheckKeyType[[2]float64](),
	} {
		assert.NoError(t, err, name)
	}
	_, err := checkpoint.NewMemory[refKey, string]().Reopen()
	require.ErrorIs(t, err, checkpoint.ErrInvalidKeyType, "Memory.Reopen refuses it too")
}

func openAs[K comparable](path string) error {
	f, err := checkpoint.Open[K, string](context.Background(), path)
	if err == nil {
		f.Close()
	}
	return err
}

// refused requires that every way of writing bad fails with ErrEncode,
// naming the key's type and the words in why, never the key itself, and
// changes nothing; good, a key of the same type, is accepted.
func refused[K comparable](t *testing.T, good, bad K, why ...string) {
	t.Helper()
	ctx := context.Background()
	for name, be := range keyBackends[K](t) {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, be.b.Save(ctx, checkpoint.Snapshot[K, string]{Entries: map[K]string{good: "v1"}}), "a good key of the same type")
			before := be.bytes()
			check := func(err error, how string) {
				t.Helper()
				require.Error(t, err, "%s: a key that does not read back as itself was accepted", how)
				assert.ErrorIs(t, err, checkpoint.ErrEncode, how)
				msg := err.Error()
				assert.Contains(t, msg, fmt.Sprintf("%T", bad), "%s: the error names the key's type", how)
				for _, w := range why {
					assert.Contains(t, msg, w, "%s: the error says why", how)
				}
				assert.NotContains(t, msg, marker, "%s: the error shows the key", how)
				assert.Equal(t, string(before), string(be.bytes()), "%s: nothing may change on disk", how)
			}
			check(be.b.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[K, string]{{Key: good, Value: "v2"}, {Key: bad, Value: "x"}}), "Commit")
			check(be.b.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[K, string]{{Key: bad, Value: "x"}, {Key: bad, Delete: true}}), "Commit, put then delete")
			check(be.b.Save(ctx, checkpoint.Snapshot[K, string]{Entries: map[K]string{good: "v2", bad: "x"}}), "Save")

			require.NoError(t, be.b.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[K, string]{{Key: good, Value: "v3"}}))
			s, err := be.b.Load(ctx)
			require.NoError(t, err)
			assert.Equal(t, map[K]string{good: "v3"}, s.Entries, "the refused writes left nothing behind")
		})
	}
}

// TestKeysThatDoNotReadBackAreRefused writes keys whose JSON does not
// decode to a key == to themselves: such a key could never be found again
// (a second Put appends a second line, a Delete misses it, a restart
// serves another key). Every write that would store one must fail with
// ErrEncode before anything is written.
//
// How it failed before the fix: every write was accepted ("a key that does
// not read back as itself was accepted"), for every case below.
func TestKeysThatDoNotReadBackAreRefused(t *testing.T) {
	t.Run("string not valid UTF-8", func(t *testing.T) {
		refused(t, "pod-1", "pod-"+marker+"\xff", "UTF-8")
	})
	t.Run("named string not valid UTF-8", func(t *testing.T) {
		type podID string
		refused[podID](t, "pod-1", podID(marker+"\xc3\x28"), "UTF-8")
	})
	t.Run("string field not valid UTF-8", func(t *testing.T) {
		refused(t, key("c1"), podKey{Network: "aws-cni", ContainerID: marker + "\xed\xa0\x80", IfName: "eth0"}, "ContainerID", "UTF-8")
	})
	t.Run("time with a monotonic reading", func(t *testing.T) {
		refused(t, timeKey{"a", time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)}, timeKey{marker, time.Now()}, "At", "time.Time", "monotonic")
	})
	t.Run("time in a zone JSON cannot name", func(t *testing.T) {
		zone := time.FixedZone("X", 5*3600)
		refused(t, timeKey{"a", time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)}, timeKey{marker, time.Date(2026, 11, 30, 8, 0, 0, 0, zone)}, "At", "time.Time")
	})
	t.Run("unexported field", func(t *testing.T) {
		refused(t, shardKey{Name: "a"}, shardKey{Name: marker, shard: 2}, "shard", "unexported")
	})
	t.Run("pointer", func(t *testing.T) {
		n := 1
		refused(t, refKey{Name: "a"}, refKey{Name: marker, Ref: &n}, "Ref", "pointer")
	})
	t.Run("interface holding an int", func(t *testing.T) {
		refused[any](t, "a", 7, "int", "float64")
	})
	t.Run("MarshalText that loses case", func(t *testing.T) {
		refused[lowerKey](t, "abc", lowerKey("ABC-"+strings.ToUpper(marker)))
	})
	t.Run("field tagged json:\"-\"", func(t *testing.T) {
		type hidden struct {
			Name string `json:"name"`
			Salt string `json:"-"`
		}
		refused(t, hidden{Name: "a"}, hidden{Name: "a", Salt: marker}, "Salt", `json:"-"`)
	})
	t.Run("interface holding a map", func(t *testing.T) {
		// A map cannot be a Go map key, so only Commit can be asked to
		// store one; it must fail, not panic.
		ctx := context.Background()
		for name, be := range keyBackends[any](t) {
			err := be.b.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[any, string]{{Key: map[string]string{"k": marker}, Value: "x"}})
			require.ErrorIs(t, err, checkpoint.ErrEncode, name)
			assert.Contains(t, err.Error(), "cannot be compared", name)
			assert.NotContains(t, err.Error(), marker, name)
			require.NoError(t, be.b.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[any, string]{{Key: map[string]string{"k": marker}, Delete: true}}), "%s: deleting it is deleting nothing", name)
		}
	})
	t.Run("two keys that differ only in an unexported field", func(t *testing.T) {
		// The one with the zero shard reads back as itself; the other
		// would read back as the first: one entry for two keys.
		ctx := context.Background()
		m := checkpoint.NewMemory[shardKey, string]()
		require.NoError(t, m.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[shardKey, string]{{Key: shardKey{Name: "a"}, Value: "1"}}))
		err := m.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[shardKey, string]{{Key: shardKey{Name: "a", shard: 1}, Value: "2"}})
		require.ErrorIs(t, err, checkpoint.ErrEncode)
		s, err := m.Load(ctx)
		require.NoError(t, err)
		assert.Equal(t, map[shardKey]string{{Name: "a"}: "1"}, s.Entries)
	})
}

// TestKeysThatReadBackAreAccepted writes keys that look risky but read
// back as themselves, and requires that they are accepted and found again
// by Load and by later Commits.
func TestKeysThatReadBackAreAccepted(t *testing.T) {
	t.Run("strings", func(t *testing.T) {
		accepted(t, "", "\ufffd", "a\u2028b\u2029c", "\x00\x1f\x7f", `\ufffd`, `\\ufffd`, "\\", `"`, "<&>", "日本", "🙂", "pod-\ufffd")
	})
	t.Run("struct of strings", func(t *testing.T) {
		accepted(t, key("c1"), podKey{Network: "\ufffd", ContainerID: `\ufffd`, IfName: "\x01"}, podKey{})
	})
	t.Run("times without a monotonic reading", func(t *testing.T) {
		accepted(t, timeKey{"a", time.Now().UTC()}, timeKey{"b", time.Now().Round(0).UTC()}, timeKey{"c", time.Time{}}, timeKey{"d", time.Date(2026, 1, 1, 0, 0, 0, 1, time.UTC)})
	})
	t.Run("floats", func(t *testing.T) {
		accepted(t, 0.0, math.Copysign(0, -1), 0.1, 1e300, 5e-324, -math.MaxFloat64, 1<<53+1)
	})
	t.Run("float32", func(t *testing.T) {
		accepted[float32](t, 0.1, math.MaxFloat32, math.SmallestNonzeroFloat32)
	})
	t.Run("integers", func(t *testing.T) {
		accepted[int64](t, math.MinInt64, math.MaxInt64, 0)
		accepted[uint64](t, math.MaxUint64, 0)
	})
	t.Run("interface", func(t *testing.T) {
		accepted[any](t, "x", 1.5, true, nil, "\ufffd")
	})
	t.Run("array and nil pointer", func(t *testing.T) {
		accepted(t, [2]string{"a", "b"}, [2]string{})
		accepted[*int](t, nil)
		accepted(t, refKey{Name: "a"})
	})
	t.Run("unexported field at its zero", func(t *testing.T) {
		accepted(t, shardKey{Name: "a"}, shardKey{Name: "b"})
	})
	t.Run("MarshalText that reads back", func(t *testing.T) {
		accepted[lowerKey](t, "abc", "")
	})
	t.Run("tags", func(t *testing.T) {
		type tagged struct {
			A string  `json:"a,omitempty"`
			B int     `json:",string"`
			C float64 `json:"c,omitzero"`
			D string  `json:"-"`
			E bool    `json:"-,"` //lint:ignore SA5008 deliberate: encoding/json names this field "-", and keys must round-trip it
		}
		accepted(t, tagged{}, tagged{A: "x", B: 3, C: -1, E: true}, tagged{B: -4})
	})
}

// accepted requires that keys are stored by Commit and Save and read back.
func accepted[K comparable](t *testing.T, keys ...K) {
	t.Helper()
	ctx := context.Background()
	want := make(map[K]string, len(keys))
	var changes []checkpoint.Change[K, string]
	for i, k := range keys {
		want[k] = fmt.Sprint(i)
		changes = append(changes, checkpoint.Change[K, string]{Key: k, Value: fmt.Sprint(i)})
	}
	for name, be := range keyBackends[K](t) {
		require.NoError(t, be.b.Commit(ctx, checkpoint.Meta{}, changes), "%s: Commit", name)
		// A second Commit finds every key again: nothing is appended twice.
		require.NoError(t, be.b.Commit(ctx, checkpoint.Meta{}, changes), "%s: Commit again", name)
		s, err := be.b.Load(ctx)
		require.NoError(t, err, name)
		assert.Equal(t, want, s.Entries, name)
		require.NoError(t, be.b.Save(ctx, checkpoint.Snapshot[K, string]{Entries: want}), "%s: Save", name)
		s, err = be.b.Load(ctx)
		require.NoError(t, err, name)
		assert.Equal(t, want, s.Entries, name)
		var bad *checkpoint.BadEntriesError
		assert.False(t, errors.As(err, &bad))
	}
}
