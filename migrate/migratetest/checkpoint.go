package migratetest

import (
	"context"
	"errors"
	"io"
	"maps"
	"reflect"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
)

// CheckCheckpoint reports, with t.Errorf, each way a Checkpoint of your own
// breaks what migrate.Checkpoint's documentation says a Store relies on: a
// first Load that is not checkpoint.ErrNotExist, a save that does not come
// back after a restart with its entries and its Meta's Phase, Writer,
// Behind and BootID, a Seq that does not grow, a BootID that changes within
// a boot, a Commit (checkpoint.Committer, where the Checkpoint has one) not
// applied on top of the last save, a Quarantine after which Load still
// finds a checkpoint. It does not inject faults: that a failed save leaves
// the previous checkpoint is for your own tests.
//
// open returns a handle on one checkpoint: a new, empty one at the first
// call, and at every later call a new handle on the same storage, as the
// next process of the same boot would open it. CheckCheckpoint closes each
// handle (when it is an io.Closer) before it opens the next. entries are
// what it saves: give at least two.
func CheckCheckpoint[K comparable, V any](t TestingT, open func() (migrate.Checkpoint[K, V], error), entries map[K]V) {
	t.Helper()
	c := &cpCheck[K, V]{t: t, open: open}
	defer c.close()
	if !c.reopen() {
		return
	}
	ctx := context.Background()
	if _, err := c.h.Load(ctx); !errors.Is(err, checkpoint.ErrNotExist) {
		t.Errorf("migratetest: Load of a checkpoint never saved returned %v, want an error matching checkpoint.ErrNotExist (rule 1: a missing checkpoint is an empty one)", err)
	}
	if torn := c.h.Journal().Torn; torn != nil {
		t.Errorf("migratetest: Journal reports a torn record (%v) of a checkpoint never saved", torn)
	}
	boot := c.h.BootID()
	if again := c.h.BootID(); again != boot {
		t.Errorf("migratetest: BootID returned %q, then %q: it must not change within a boot", boot, again)
	}
	// A phase-0 run's save: its mark must come back (rule 26).
	m := checkpoint.Meta{Phase: migrate.PhaseLegacy.String(), Writer: "migratetest", BootID: boot, Behind: "phase 0 (legacy) ran, which writes legacy only"}
	seq := c.saved(ctx, "the first Save", m, entries, 0)
	// A phase-3 run's save clears the mark.
	fewer := maps.Clone(entries)
	var gone K
	for k := range fewer {
		gone = k
		delete(fewer, k)
		break
	}
	m.Phase, m.Behind = migrate.PhaseContract.String(), ""
	seq = c.saved(ctx, "a second Save, which clears Meta.Behind", m, fewer, seq)
	if com, ok := c.h.(checkpoint.Committer[K, V]); ok {
		m.Phase, m.Behind = migrate.PhaseExpand.String(), "phase 1 (expand) could not read legacy in full"
		if err := com.Commit(ctx, m, []checkpoint.Change[K, V]{{Key: gone, Value: entries[gone]}}); err != nil {
			t.Errorf("migratetest: Commit: %v", err)
		} else {
			c.loaded(ctx, "a Commit on top of the second Save", m, entries, seq)
		}
	}
	if where, err := c.h.Quarantine(ctx); err != nil || where == "" {
		t.Errorf("migratetest: Quarantine of a checkpoint returned %q, %v: want where it went, and nil", where, err)
	} else if _, err := c.h.Load(ctx); !errors.Is(err, checkpoint.ErrNotExist) {
		t.Errorf("migratetest: Load after Quarantine returned %v, want an error matching checkpoint.ErrNotExist", err)
	}
}

// cpCheck is the state of one CheckCheckpoint.
type cpCheck[K comparable, V any] struct {
	t    TestingT
	open func() (migrate.Checkpoint[K, V], error)
	h    migrate.Checkpoint[K, V]
}

func (c *cpCheck[K, V]) close() {
	if cl, ok := c.h.(io.Closer); ok {
		if err := cl.Close(); err != nil {
			c.t.Errorf("migratetest: Close: %v", err)
		}
	}
	c.h = nil
}

// reopen closes the handle and opens the next, as a restart would.
func (c *cpCheck[K, V]) reopen() bool {
	c.t.Helper()
	if c.h != nil {
		c.close()
	}
	h, err := c.open()
	if err != nil || h == nil {
		c.t.Errorf("migratetest: open returned %v, %v", h, err)
		return false
	}
	c.h = h
	return true
}

// saved saves m and entries, and checks what a new handle loads; it
// returns the Seq loaded.
func (c *cpCheck[K, V]) saved(ctx context.Context, what string, m checkpoint.Meta, entries map[K]V, after uint64) uint64 {
	c.t.Helper()
	if err := c.h.Save(ctx, checkpoint.Snapshot[K, V]{Meta: m, Entries: maps.Clone(entries)}); err != nil {
		c.t.Errorf("migratetest: %s: Save: %v", what, err)
		return after
	}
	return c.loaded(ctx, what, m, entries, after)
}

// loaded checks what a new handle loads after what: entries, and m's
// Phase, Writer, Behind and BootID; the Seq must be above after. It returns
// the Seq loaded.
func (c *cpCheck[K, V]) loaded(ctx context.Context, what string, m checkpoint.Meta, entries map[K]V, after uint64) uint64 {
	c.t.Helper()
	boot := c.h.BootID()
	if !c.reopen() {
		return after
	}
	if again := c.h.BootID(); again != boot {
		c.t.Errorf("migratetest: after %s, a new handle's BootID is %q, the last one's %q: within a boot it must not change", what, again, boot)
	}
	snap, err := c.h.Load(ctx)
	if err != nil {
		c.t.Errorf("migratetest: after %s, Load of a new handle: %v", what, err)
		return after
	}
	got := snap.Meta
	for _, f := range []struct{ name, got, want, why string }{
		{"Phase", got.Phase, m.Phase, "rules 9, 17 and 25 read which phase wrote it"},
		{"Behind", got.Behind, m.Behind, "rule 26's mark: without it, phase 3 serves a checkpoint a phase-0 run left behind legacy"},
		{"BootID", got.BootID, m.BootID, "rule 3's boot epoch"},
		{"Writer", got.Writer, m.Writer, "which build wrote it, for the operator"},
	} {
		if f.got != f.want {
			c.t.Errorf("migratetest: after %s, Load returned Meta.%s %q, want %q as saved (%s)", what, f.name, f.got, f.want, f.why)
		}
	}
	if got.Seq <= after {
		c.t.Errorf("migratetest: after %s, Load returned Meta.Seq %d, want more than %d: every save increases it", what, got.Seq, after)
	}
	if !reflect.DeepEqual(snap.Entries, entries) && !(len(snap.Entries) == 0 && len(entries) == 0) {
		c.t.Errorf("migratetest: after %s, Load returned %d entries, want the %d saved", what, len(snap.Entries), len(entries))
	}
	if torn := c.h.Journal().Torn; torn != nil {
		c.t.Errorf("migratetest: after %s, Journal reports a torn record (%v) after a clean save", what, torn)
	}
	return got.Seq
}
