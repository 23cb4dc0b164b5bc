package source

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
)

// Reader lists every entry a legacy source holds.
//
// List returns a map the caller may keep and modify. A Reader that could read
// some entries but not others returns them together with a [*ListError].
type Reader[K comparable, V any] interface {
	List(ctx context.Context) (map[K]V, error)
}

// Writer takes explicit writes to a legacy source. A Reader that also
// implements Writer is written by migrate.Store in the phases that write
// legacy; see the package documentation.
//
// Put stores value under key, replacing any value there. Delete removes key;
// deleting a key that is absent is not an error.
type Writer[K comparable, V any] interface {
	Put(ctx context.Context, key K, value V) error
	Delete(ctx context.Context, key K) error
}

// BatchWriter is a [Writer] that also takes a whole commit's changes at
// once. A legacy that is one file (an older release's state file, rewritten
// whole at every change) is then written once per commit instead of once per
// changed key: migrate.Store calls Write, and not Put and Delete, for the
// changes of each group commit when its legacy has it (Put and Delete remain
// for the rare writes that put legacy back in line after a failed undo, and
// for restore's repairs).
//
// Write applies changes in order (a later change to a key wins over an
// earlier one) and returns nil only once all of them are durable. It is all
// or nothing: when it returns an error, legacy holds none of them, as a Put
// that fails is taken to have written nothing; a file written to a temporary
// file and renamed over the old one gives that. A Write that panics is taken
// to have written any part of them. changes is never empty, and Write must not
// keep it after it returns.
type BatchWriter[K comparable, V any] interface {
	Writer[K, V]
	Write(ctx context.Context, changes []Change[K, V]) error
}

// Change is one change a [BatchWriter] takes: Value stored under Key, or Key
// removed when Delete is set (removing a key that is absent is not an
// error, as for Writer.Delete).
type Change[K comparable, V any] struct {
	Key    K
	Value  V
	Delete bool
}

// Func adapts a function to a [Reader]. It has no Writer, so a source read
// through it is taken to be kept current by someone else.
type Func[K comparable, V any] func(ctx context.Context) (map[K]V, error)

var _ Reader[string, int] = Func[string, int](nil)

// List calls f. A nil Func lists nothing.
func (f Func[K, V]) List(ctx context.Context) (map[K]V, error) {
	if f == nil {
		return map[K]V{}, nil
	}
	return f(ctx)
}

// ListError is returned by [Reader.List], together with the entries that
// could be read, when some entries could not. Each error in Errs should name
// the entry it is about.
type ListError struct {
	Errs []error
}

// Error lists the per-entry errors on one line.
func (e *ListError) Error() string {
	if len(e.Errs) == 1 {
		return "1 entry could not be read: " + e.Errs[0].Error()
	}
	parts := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		parts[i] = err.Error()
	}
	return fmt.Sprintf("%d entries could not be read: %s", len(e.Errs), strings.Join(parts, "; "))
}

// Unwrap returns the per-entry errors, so errors.Is and errors.As look
// through them.
func (e *ListError) Unwrap() []error { return e.Errs }

// Partial reports whether err is a [*ListError], that is whether the map
// returned with it holds the entries that could be read.
func Partial(err error) bool {
	var le *ListError
	return errors.As(err, &le)
}

// Map is an in-memory legacy source: a [Reader] and a [Writer] over a map.
// A proxy can use it as its registry and a test as its fake. The zero Map is
// empty and ready to use. A Map must not be copied after first use.
//
// All methods are safe for concurrent use. Map never hands out its internal
// map: List and Snapshot return copies. Values are copied as Go copies them,
// so a value holding a pointer, slice or map shares what it points to.
type Map[K comparable, V any] struct {
	mu sync.RWMutex // guards m
	m  map[K]V
}

var (
	_ Reader[string, int] = (*Map[string, int])(nil)
	_ Writer[string, int] = (*Map[string, int])(nil)
)

// List returns a copy of every entry. It never fails.
func (m *Map[K, V]) List(context.Context) (map[K]V, error) {
	return m.Snapshot(), nil
}

// Snapshot returns a copy of every entry.
func (m *Map[K, V]) Snapshot() map[K]V {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make(map[K]V, len(m.m))
	maps.Copy(out, m.m)
	return out
}

// Put stores value under key. It never fails.
func (m *Map[K, V]) Put(_ context.Context, key K, value V) error {
	m.Set(key, value)
	return nil
}

// Delete removes key. It never fails.
func (m *Map[K, V]) Delete(_ context.Context, key K) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, key)
	return nil
}

// Set stores value under key, like Put without a context.
func (m *Map[K, V]) Set(key K, value V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = make(map[K]V)
	}
	m.m[key] = value
}

// Get returns the value under key and whether it was there.
func (m *Map[K, V]) Get(key K) (V, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	v, ok := m.m[key]
	return v, ok
}

// Len returns the number of entries.
func (m *Map[K, V]) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.m)
}

// Replace makes entries the whole content of m (it copies entries). Replace
// with nil empties m; a daemon that keeps its registry only in memory looks
// like that after a restart.
func (m *Map[K, V]) Replace(entries map[K]V) {
	fresh := make(map[K]V, len(entries))
	maps.Copy(fresh, entries)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.m = fresh
}
