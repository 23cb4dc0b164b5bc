package migratetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// world is one node's durable state across the binaries a sequence runs:
// the checkpoint file, the legacy source, the boot, and what the world can
// tell about them without asking the Store.
type world[K comparable, V any] struct {
	disk  *checkpoint.Memory[K, V] // the checkpoint file, surviving restarts
	whole bool                     // every build opens it WithoutJournal (Config.WithoutJournal)
	imp   *Implicit[K, V]
	exp   *Explicit[K, V] // nil for a legacy that observes
	boot  int

	// hide is the identities the next restore's listing cannot read; set
	// just before a start, consumed by the first List.
	hide map[K]bool
	// hiddenIDs is what the last restore's listing could not read.
	hiddenIDs map[K]bool

	// Injected save faults: the next saveOK saves succeed, then saveFail
	// fail.
	saveOK, saveFail int

	// The crash instant of a crashMidWrite: after the cutAt-th durable
	// write of the current op (0: before any).
	cutting bool
	cutAt   int
	written int
	frozen  *frozenWorld[K, V]

	// userOpts are the user's checkpoint options (Config.CheckpointOptions),
	// or nil; schemas the schema each build writes; bootEpoch whether the
	// checkpoint has a boot epoch.
	userOpts  func(older bool) []checkpoint.Option
	schemas   [2]int
	bootEpoch bool

	// store is what Config.OpenLegacy returned for the running binary, or
	// nil: the Store reads and writes it in place of exp, which stays
	// the model. storeMoved says the harness changed exp behind its back
	// (a new sequence, a crash, a reboot) since the last start;
	// storeFault is the first thing the store got wrong.
	store      legacyStore[K, V]
	storeMoved bool
	storeFault string
}

// frozenWorld is the durable state at a crash instant.
type frozenWorld[K comparable, V any] struct {
	disk, journal []byte
	legacy        map[K]V
}

// build is the version of the binary a step runs: the newer one writes
// schema 2 and upgrades schema 1; the older one knows schema 1 only.
type build int

const (
	newBuild build = iota
	oldBuild
)

// name is b's name in a trace: "v2 (schema 2)", with the schema it writes.
func (w *world[K, V]) name(b build) string {
	return fmt.Sprintf("v%d (schema %d)", 2-int(b), w.schemas[b])
}

// sameEntry keeps a key and a value as they are: the schema change between
// the builds is in name only.
func sameEntry(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }

func (b build) options(bootID string) []checkpoint.Option {
	opts := []checkpoint.Option{checkpoint.WithBootID(func() (string, error) { return bootID, nil })}
	if b == oldBuild {
		return opts
	}
	return append(opts, checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, sameEntry))
}

// options are the checkpoint options of build b in this world: the
// user's, if any, then the harness's own.
func (w *world[K, V]) options(b build) []checkpoint.Option {
	var opts []checkpoint.Option
	if w.userOpts != nil {
		opts = append(opts, w.userOpts(b == oldBuild)...)
		if w.bootEpoch {
			opts = append(opts, checkpoint.WithBootID(func() (string, error) { return w.bootID(), nil }))
		}
	} else {
		opts = b.options(w.bootID())
	}
	if w.whole {
		opts = append(opts, checkpoint.WithoutJournal())
	}
	return opts
}

// image is what the checkpoint holds on "disk": the file and its journal.
func (w *world[K, V]) image() string {
	return string(w.disk.Bytes()) + "\x00journal:" + string(checkpointtest.Journal(w.disk))
}

func (w *world[K, V]) bootID() string { return fmt.Sprintf("boot-%d", w.boot) }

// peek reads the file as the newer build would, to judge what a start
// should do, without changing it.
func (w *world[K, V]) peek() (checkpoint.Snapshot[K, V], error) {
	m, err := w.disk.Reopen(w.options(newBuild)...)
	if err != nil {
		return checkpoint.Snapshot[K, V]{}, err
	}
	return m.Load(context.Background())
}

func (w *world[K, V]) legacySnapshot() map[K]V { return w.imp.Snapshot() }

// schemaOf is the schema a checkpoint opened with opts writes.
func schemaOf[K comparable, V any](opts []checkpoint.Option) (int, error) {
	m, err := checkpoint.NewMemory[K, V]().Reopen(opts...)
	if err != nil {
		return 0, err
	}
	ctx := context.Background()
	if err := m.Save(ctx, checkpoint.Snapshot[K, V]{Entries: map[K]V{}}); err != nil {
		return 0, err
	}
	s, err := m.Load(ctx)
	return s.Meta.Schema, err
}

// saveFault returns the injected failure of the next save, if any.
func (w *world[K, V]) saveFault() error {
	switch {
	case w.saveFail == 0:
		return nil
	case w.saveOK > 0:
		w.saveOK--
		return nil
	}
	w.saveFail--
	return errors.New("injected checkpoint failure")
}

// wrote is called after every durable write of the fakes; it freezes the
// world at the crash instant.
func (w *world[K, V]) wrote() {
	if !w.cutting || w.frozen != nil {
		return
	}
	w.written++
	if w.written == w.cutAt {
		w.freeze()
	}
}

func (w *world[K, V]) freeze() {
	w.frozen = &frozenWorld[K, V]{disk: w.disk.Bytes(), journal: checkpointtest.Journal(w.disk), legacy: w.imp.Snapshot()}
}

// thaw brings the durable state back to the crash instant: what the dead
// process did afterwards never happened.
func (w *world[K, V]) thaw() {
	checkpointtest.SetBytes(w.disk, w.frozen.disk)
	checkpointtest.SetJournal(w.disk, w.frozen.journal)
	w.replaceLegacy(w.frozen.legacy)
}

// replaceLegacy changes legacy behind the Store's back (a crash rewinds
// it, a reboot empties it).
func (w *world[K, V]) replaceLegacy(entries map[K]V) {
	w.imp.Replace(entries)
	w.storeMoved = true
}

// checkpointSide is the Store's view of the checkpoint; it reports durable
// writes to the world.
type checkpointSide[K comparable, V any] struct {
	w *world[K, V]
	m *checkpoint.Memory[K, V]
}

// The Store must find every capability of the Memory under it.
var (
	_ migrate.Checkpoint[string, int]   = (*checkpointSide[string, int])(nil)
	_ checkpoint.Committer[string, int] = (*checkpointSide[string, int])(nil)
	_ checkpoint.BootIDer               = (*checkpointSide[string, int])(nil)
	_ checkpoint.Sizer                  = (*checkpointSide[string, int])(nil)
	_ checkpoint.JournalReporter        = (*checkpointSide[string, int])(nil)
	_ io.Closer                         = (*checkpointSide[string, int])(nil)
)

func (c *checkpointSide[K, V]) Load(ctx context.Context) (checkpoint.Snapshot[K, V], error) {
	return c.m.Load(ctx)
}

func (c *checkpointSide[K, V]) Save(ctx context.Context, s checkpoint.Snapshot[K, V]) error {
	if err := c.w.saveFault(); err != nil {
		return err
	}
	err := c.m.Save(ctx, s)
	if err == nil {
		c.w.wrote()
	}
	return err
}

func (c *checkpointSide[K, V]) Commit(ctx context.Context, m checkpoint.Meta, chs []checkpoint.Change[K, V]) error {
	if err := c.w.saveFault(); err != nil {
		return err
	}
	err := c.m.Commit(ctx, m, chs)
	if err == nil {
		c.w.wrote()
	}
	return err
}

func (c *checkpointSide[K, V]) Quarantine(ctx context.Context) (string, error) {
	return c.m.Quarantine(ctx)
}

func (c *checkpointSide[K, V]) BootID() string { return c.m.BootID() }

func (c *checkpointSide[K, V]) Size() int64 { return c.m.Size() }

func (c *checkpointSide[K, V]) Journal() checkpoint.JournalStatus { return c.m.Journal() }

func (c *checkpointSide[K, V]) Close() error { return c.m.Close() }

// implicitSide is a legacy that observes, as the Store sees it: no Writer.
// Its first List after a start may be partial, as the world decided.
type implicitSide[K comparable, V any] struct {
	w     *world[K, V]
	match func(K) K
}

func (l *implicitSide[K, V]) List(ctx context.Context) (map[K]V, error) {
	list := l.w.imp.List
	if l.w.store != nil {
		list = l.w.store.List
	}
	m, err := list(ctx)
	if err != nil || len(l.w.hide) == 0 {
		return m, err
	}
	hide := l.w.hide
	l.w.hide = nil
	var errs []error
	for _, k := range sortedKeys(m) {
		if id := l.match(k); hide[id] {
			delete(m, k)
			errs = append(errs, fmt.Errorf("entry %v: injected read failure", k))
			l.w.hiddenIDs[id] = true
		}
	}
	if len(errs) == 0 {
		return m, nil
	}
	return m, &source.ListError{Errs: errs}
}

// explicitSide is a legacy the Store writes, as the Store sees it; it
// reports durable writes to the world, and says it is volatile where the
// world's legacy dies with every restart (Config.Volatile).
type explicitSide[K comparable, V any] struct {
	implicitSide[K, V]
	volatile bool
}

// LegacyKind says what the world's legacy is.
func (l *explicitSide[K, V]) LegacyKind() source.Kind {
	if l.volatile {
		return source.Volatile
	}
	return source.Durable
}

func (l *explicitSide[K, V]) Put(ctx context.Context, k K, v V) error {
	err := l.w.exp.Put(ctx, k, v)
	if err == nil && l.w.store != nil {
		err = l.w.storeWrite("Put", k, l.w.store.Put(ctx, k, v))
	}
	if err == nil {
		l.w.wrote()
	}
	return err
}

func (l *explicitSide[K, V]) Delete(ctx context.Context, k K) error {
	err := l.w.exp.Delete(ctx, k)
	if err == nil && l.w.store != nil {
		err = l.w.storeWrite("Delete", k, l.w.store.Delete(ctx, k))
	}
	if err == nil {
		l.w.wrote()
	}
	return err
}

// seqString shows a sequence as "0(legacy) → 2(migrate)".
func seqString(seq []migrate.Phase) string {
	parts := make([]string, len(seq))
	for i, p := range seq {
		parts[i] = fmt.Sprintf("%d(%s)", int(p), p)
	}
	return strings.Join(parts, " → ")
}

// seqGo shows a sequence as Go: "{0, 2}".
func seqGo(seq []migrate.Phase) string {
	parts := make([]string, len(seq))
	for i, p := range seq {
		parts[i] = fmt.Sprint(int(p))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// sortedKeys returns m's keys in the order of their text, so that what the
// harness does with them depends on the seed only.
func sortedKeys[K comparable, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b K) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	return keys
}
