package migratetest

import (
	"context"
	"fmt"
	"io"
	"reflect"

	"github.com/phaseshift/phaseshift/source"
)

// Your own legacy store (Config.OpenLegacy) in place of the Explicit fake.
// The fake stays the model, where faults and crash instants are injected
// and which a crash rewinds and a reboot empties; the store follows it:
// made to hold what the fake holds at every start, and written after it by
// every write of the Store.

// legacyStore is what Config.OpenLegacy must return.
type legacyStore[K comparable, V any] interface {
	source.Reader[K, V]
	source.Writer[K, V]
}

// openStore closes the last binary's store, opens the next binary's, and
// makes it hold what the model holds.
func (w *world[K, V]) openStore(open func() (source.Reader[K, V], error)) error {
	w.closeStore()
	if w.storeFault != "" {
		return fmt.Errorf("%s", w.storeFault)
	}
	r, err := open()
	if err != nil {
		return fmt.Errorf("LEGACY STORE: Config.OpenLegacy failed: %w", err)
	}
	s, ok := r.(legacyStore[K, V])
	if !ok {
		if c, ok := r.(io.Closer); ok {
			_ = c.Close()
		}
		return fmt.Errorf("LEGACY STORE: Config.OpenLegacy returned a %T, which is not a source.Writer: the Store must write it (Config.Explicit)", r)
	}
	w.store = s
	return w.mirror(context.Background())
}

// mirror makes the store hold exactly what the model holds, and checks
// that it lists that back. Unless the harness changed the model behind the
// store's back, the store must already hold it: only the Store's writes,
// made on both, changed either since the last start.
func (w *world[K, V]) mirror(ctx context.Context) error {
	want := w.exp.Snapshot()
	have, err := w.store.List(ctx)
	if err != nil {
		return fmt.Errorf("LEGACY STORE: listing it at a start: %w", err)
	}
	if !w.storeMoved && !sameMap(have, want) {
		return fmt.Errorf("LEGACY STORE: after a restart, it lists %v where the Store's writes left %v", have, want)
	}
	w.storeMoved = false
	// Deletes first, so that a value moving to another key finds its
	// place free (host-local refuses an address another key holds).
	for _, k := range sortedKeys(have) {
		if v, ok := want[k]; !ok || !reflect.DeepEqual(v, have[k]) {
			if err := w.store.Delete(ctx, k); err != nil {
				return fmt.Errorf("LEGACY STORE: deleting %v to make it hold what the model holds: %w", k, err)
			}
		}
	}
	for _, k := range sortedKeys(want) {
		if v, ok := have[k]; !ok || !reflect.DeepEqual(v, want[k]) {
			if err := w.store.Put(ctx, k, want[k]); err != nil {
				return fmt.Errorf("LEGACY STORE: putting %v to make it hold what the model holds: %w", k, err)
			}
		}
	}
	got, err := w.store.List(ctx)
	if err != nil {
		return fmt.Errorf("LEGACY STORE: listing it after the harness wrote it: %w", err)
	}
	if !sameMap(got, want) {
		return fmt.Errorf("LEGACY STORE: it lists %v after the harness made it hold %v", got, want)
	}
	return nil
}

// storeWrite records a write the store failed after the model took it: the
// two no longer agree, which is the store's fault.
func (w *world[K, V]) storeWrite(op string, k K, err error) error {
	if err != nil && w.storeFault == "" {
		w.storeFault = fmt.Sprintf("LEGACY STORE: %s %v failed on the store of Config.OpenLegacy, after the model took it: %v", op, k, err)
	}
	return err
}

// closeStore closes the running binary's store, if it has one: the process
// is gone.
func (w *world[K, V]) closeStore() {
	if w.store == nil {
		return
	}
	if c, ok := w.store.(io.Closer); ok {
		if err := c.Close(); err != nil && w.storeFault == "" {
			w.storeFault = fmt.Sprintf("LEGACY STORE: closing it: %v", err)
		}
	}
	w.store = nil
}
