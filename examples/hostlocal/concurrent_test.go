package main

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// delMany runs one DEL per ID at once.
func (n *node) delMany(r func(i int) runner, ids []string) {
	n.tb.Helper()
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = n.del(r(i), id)
		}()
	}
	wg.Wait()
	require.NoError(n.tb, errors.Join(errs...))
}

// TestConcurrentADDs runs 32 ADDs at once and then 32 DELs at once, as a
// node starting and stopping many pods does: during a rollout, with the
// real host-local and this plugin in phases 0 to 2 side by side (the
// binary on a node is replaced while the runtime keeps calling it), and
// in phase 3. The locks serialise them: every ADD gets its own address,
// every side the phases write holds all of them, and the DELs release all
// of them. (TestWalkThrough runs 32 at once in phase 2.)
func TestConcurrentADDs(t *testing.T) {
	for _, c := range []struct {
		name    string
		runners []runner
		files   bool
		ckpt    bool
	}{
		{"host-local and phases 0 to 2", []runner{hl, ps("legacy"), ps("expand"), ps("migrate")}, true, false},
		{"phase 3", []runner{ps("contract")}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWalk(t)
			pick := func(i int) runner { return c.runners[i%len(c.runners)] }
			burst := ids("c", 32)
			for id, a := range w.n.addMany(pick, burst) {
				w.added(id, a)
			}
			w.sides(c.files, c.ckpt)
			w.n.delMany(pick, burst)
			for _, id := range burst {
				w.m.deleted(id)
			}
			w.sides(c.files, c.ckpt)
		})
	}
}
