package migrate_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/migrate"
)

// TestTxOrigin: a Tx tells an entry a write before it in its group commit
// has put (OriginWrite) from one restore left as it was, which
// Store.Origin, reading committed state, cannot yet; and its own puts and
// deletes.
func TestTxOrigin(t *testing.T) {
	ctx := context.Background()
	h := newHeldStore(t, map[string]int{"a": 1, "b": 2})
	restored, ok := h.s.Origin("b")
	require.True(t, ok)
	require.NotEqual(t, migrate.OriginWrite, restored)
	wait := h.hold(t)
	results := make(chan error, 2)
	go func() { results <- h.s.Put(ctx, "a", 9) }()
	h.queued(t)
	go func() {
		results <- h.s.Update(ctx, func(tx *migrate.Tx[string, int]) error {
			type seen struct {
				o  migrate.Origin
				ok bool
			}
			got := map[string]seen{}
			look := func(name, k string) {
				o, ok := tx.Origin(k)
				got[name] = seen{o, ok}
			}
			look("a", "a")
			if o, _ := h.s.Origin("a"); o == migrate.OriginWrite {
				return fmt.Errorf("the Put before this Update is committed already: the test did not put them in one group")
			}
			look("b", "b")
			look("none", "zz")
			tx.Delete("b")
			look("b deleted", "b")
			tx.Put("c", 3)
			look("c put", "c")
			want := map[string]seen{
				"a": {migrate.OriginWrite, true}, "b": {restored, true}, "none": {0, false},
				"b deleted": {0, false}, "c put": {migrate.OriginWrite, true},
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("Tx.Origin says %v, want %v", got, want)
			}
			return nil
		})
	}()
	h.queued(t)
	close(h.slow.release)
	wait()
	for range 2 {
		assert.NoError(t, <-results)
	}
	o, _ := h.s.Origin("a")
	assert.Equal(t, migrate.OriginWrite, o)
}
