package migratetest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// TestInjectedFailuresCountAlike holds the three fault injectors of the
// module's fakes to one convention for n: n > 0 fails the next n calls,
// n < 0 every call from now on, 0 none (and ends an earlier injection).
// Before issue 13, checkpoint.Memory.FailSaves took n < 0 for "no failure"
// while FailList and FailWrites took it for "every call".
func TestInjectedFailuresCountAlike(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("injected")
	injectors := map[string]func(t *testing.T) (inject func(n int), call func() error){
		"Implicit.FailList": func(*testing.T) (func(int), func() error) {
			l := &migratetest.Implicit[string, int]{}
			return func(n int) { l.FailList(n, boom) }, func() error { _, err := l.List(ctx); return err }
		},
		"Explicit.FailWrites": func(*testing.T) (func(int), func() error) {
			l := &migratetest.Explicit[string, int]{}
			return func(n int) { l.FailWrites(0, n, boom) }, func() error { return l.Put(ctx, "k", 1) }
		},
		"checkpointtest.FailSaves": func(*testing.T) (func(int), func() error) {
			m := checkpoint.NewMemory[string, int]()
			return func(n int) { checkpointtest.FailSaves(m, n, boom) }, func() error {
				return m.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"k": 1}})
			}
		},
	}
	for name, newInjector := range injectors {
		t.Run(name, func(t *testing.T) {
			outcomes := func(call func() error, calls int) []bool {
				var failed []bool
				for range calls {
					err := call()
					if err != nil {
						assert.ErrorIs(t, err, boom)
					}
					failed = append(failed, err != nil)
				}
				return failed
			}

			inject, call := newInjector(t)
			inject(2)
			assert.Equal(t, []bool{true, true, false, false}, outcomes(call, 4), "n > 0: the next n calls fail")

			inject, call = newInjector(t)
			inject(-1)
			assert.Equal(t, []bool{true, true, true, true, true}, outcomes(call, 5), "n < 0: every call from now on fails")
			inject(0)
			assert.Equal(t, []bool{false, false}, outcomes(call, 2), "n == 0 ends an earlier injection")

			inject, call = newInjector(t)
			inject(0)
			assert.Equal(t, []bool{false}, outcomes(call, 1), "n == 0: nothing fails")
		})
	}
}
