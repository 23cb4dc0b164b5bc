package migratetest

import (
	"context"
	"fmt"
	"sync"

	"github.com/phaseshift/phaseshift/source"
)

// Implicit is an in-memory legacy source whose entries change only from
// outside, the way a container runtime learns of a pod sandbox because it
// created it, not because the CNI plugin told it: a source.Reader without
// source.Writer, so a Store never writes it. Tests play the outside world
// with Set and Remove. It can fail on demand.
//
// All methods are safe for concurrent use.
type Implicit[K comparable, V any] struct {
	m source.Map[K, V]

	mu        sync.Mutex // guards the fields below
	listErr   error
	listFails int // Lists still to fail; < 0: every one
	partial   []error
	lists     int
}

var _ source.Reader[string, int] = (*Implicit[string, int])(nil)

// List returns a copy of the entries, or the injected failure.
func (l *Implicit[K, V]) List(context.Context) (map[K]V, error) {
	l.mu.Lock()
	l.lists++
	if l.listFails != 0 {
		if l.listFails > 0 {
			l.listFails--
		}
		err := l.listErr
		l.mu.Unlock()
		return nil, err
	}
	partial := l.partial
	l.partial = nil
	l.mu.Unlock()
	m := l.m.Snapshot()
	if partial != nil {
		return m, &source.ListError{Errs: partial}
	}
	return m, nil
}

// Set makes key hold value, as the outside world would.
func (l *Implicit[K, V]) Set(key K, value V) { l.m.Set(key, value) }

// Remove removes key, as the outside world would.
func (l *Implicit[K, V]) Remove(key K) { _ = l.m.Delete(context.Background(), key) }

// Replace makes entries the whole content (nil empties it).
func (l *Implicit[K, V]) Replace(entries map[K]V) { l.m.Replace(entries) }

// Get returns key's value.
func (l *Implicit[K, V]) Get(key K) (V, bool) { return l.m.Get(key) }

// Snapshot returns a copy of every entry.
func (l *Implicit[K, V]) Snapshot() map[K]V { return l.m.Snapshot() }

// Len returns the number of entries.
func (l *Implicit[K, V]) Len() int { return l.m.Len() }

// FailList makes Lists fail with err: the next n for n > 0, every one from
// now on for n < 0, none for n == 0 (which ends an earlier FailList). A nil
// err fails them with a generic injected error. n counts as in
// checkpointtest.FailSaves and Explicit.FailWrites.
func (l *Implicit[K, V]) FailList(n int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		err = fmt.Errorf("migratetest: injected List failure")
	}
	l.listFails, l.listErr = n, err
}

// FailListPartly makes the next List return its entries together with a
// *source.ListError holding errs, as a Reader that could not read some
// entries does. (It does not remove entries: drop them with Remove first to
// model entries that could not be read.)
func (l *Implicit[K, V]) FailListPartly(errs ...error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = errs
}

// Lists returns how many times List was called.
func (l *Implicit[K, V]) Lists() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lists
}

// Explicit is an in-memory legacy source that a Store writes: a
// source.Reader and source.Writer, like a proxy's registry or an older file
// format. Besides the failures of Implicit, its writes can fail on demand.
//
// All methods are safe for concurrent use.
type Explicit[K comparable, V any] struct {
	Implicit[K, V]

	wmu        sync.Mutex // guards the fields below
	writeErr   error
	writeFails int // writes still to fail; < 0: every one
	writeAfter int // writes that succeed before the failures start
	puts       int
	deletes    int
}

var (
	_ source.Reader[string, int] = (*Explicit[string, int])(nil)
	_ source.Writer[string, int] = (*Explicit[string, int])(nil)
)

// FailWrites lets the next after writes (Put or Delete) succeed (none for
// after <= 0) and then makes writes fail with err: the next n for n > 0,
// every one from then on for n < 0, none for n == 0 (which ends an earlier
// FailWrites). A nil err fails them with a generic injected error. n counts
// as in checkpointtest.FailSaves and Implicit.FailList.
func (l *Explicit[K, V]) FailWrites(after, n int, err error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err == nil {
		err = fmt.Errorf("migratetest: injected legacy write failure")
	}
	l.writeAfter, l.writeFails, l.writeErr = after, n, err
}

func (l *Explicit[K, V]) fault() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.writeFails == 0 {
		return nil
	}
	if l.writeAfter > 0 {
		l.writeAfter--
		return nil
	}
	if l.writeFails > 0 {
		l.writeFails--
	}
	return l.writeErr
}

// Put stores value under key, or fails as FailWrites asked.
func (l *Explicit[K, V]) Put(ctx context.Context, key K, value V) error {
	if err := l.fault(); err != nil {
		return err
	}
	l.wmu.Lock()
	l.puts++
	l.wmu.Unlock()
	return l.m.Put(ctx, key, value)
}

// Delete removes key, or fails as FailWrites asked.
func (l *Explicit[K, V]) Delete(ctx context.Context, key K) error {
	if err := l.fault(); err != nil {
		return err
	}
	l.wmu.Lock()
	l.deletes++
	l.wmu.Unlock()
	return l.m.Delete(ctx, key)
}

// Writes returns how many Puts and Deletes succeeded.
func (l *Explicit[K, V]) Writes() (puts, deletes int) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.puts, l.deletes
}

// LegacyKind is source.Durable: an Explicit stands for a registry or a
// file that survives a restart. A Factory whose legacy dies with the
// process (Config.Volatile) sets migrate.Config.VolatileLegacy, or
// LegacyKind, which wins.
func (l *Explicit[K, V]) LegacyKind() source.Kind { return source.Durable }
