package robustness_test

// The world a rollout plan runs in: the checkpoint's file (a
// checkpoint.Memory every process opens its own handle on), the legacy
// source of the plan's kind, the boot, and the process of the current
// step, whose durable writes go through wrappers that model a crash: from
// the cut on, nothing the process does reaches a disk.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

var (
	errKilled         = errors.New("rollout: the process was killed")
	errInjectedSave   = errors.New("rollout: injected checkpoint save failure")
	errInjectedLegacy = errors.New("rollout: injected legacy write failure")
)

// sameJSON is the new build's upgrade from schema 1: the JSON form did not
// change, only its schema number (a build that added a meaning, say).
func sameJSON(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }

// process is the running binary of one step.
type process struct {
	run   *rolloutRun
	bin   binary
	mem   *checkpoint.Memory[podKey, podAddr] // nil for the old binary
	store *migrate.Store[podKey, podAddr]

	cut    cut  // armed for the restore or op in progress
	writes int  // durable writes since the cut was armed
	dead   bool // killed: no write reaches a disk any more

	legacyFail      map[int]bool // legacy write attempts of the op in progress that fail
	legacyAttempts  int
	checkpointSaved bool // some checkpoint write of this process took effect
	acknowledged    bool // some write of this process returned nil
}

// arm sets the crash point of the restore or op about to run.
func (p *process) arm(c cut) { p.cut, p.writes = c, 0 }

// durable runs one durable write unless the process is dead. At the cut the
// process dies: with Tear the write runs first (and a journal append is
// torn), otherwise it does not run.
func (p *process) durable(what string, write func() error) error {
	if p.dead {
		return errKilled
	}
	if p.cut.At && p.writes == p.cut.After {
		p.dead = true
		if p.cut.Tear {
			p.tear(what, write)
		} else {
			p.run.logf("      killed before %s", what)
		}
		return errKilled
	}
	err := write()
	if err == nil {
		p.writes++
	}
	p.run.logf("      %s: %s", what, errText(err))
	return err
}

// tear runs the write at the cut; if it appended to the journal, half of
// the record stays, as a crash during the append leaves it.
func (p *process) tear(what string, write func() error) {
	var fileBefore, journalBefore []byte
	if p.mem != nil {
		fileBefore, journalBefore = p.mem.Bytes(), checkpointtest.Journal(p.mem)
	}
	err := write()
	if err == nil && strings.HasPrefix(what, "checkpoint.") {
		p.checkpointSaved = true
	}
	journalAfter := []byte(nil)
	if p.mem != nil {
		journalAfter = checkpointtest.Journal(p.mem)
	}
	appended := err == nil && p.mem != nil && bytes.Equal(p.mem.Bytes(), fileBefore) &&
		len(journalAfter) > len(journalBefore) && bytes.HasPrefix(journalAfter, journalBefore)
	if appended {
		half := len(journalBefore) + (len(journalAfter)-len(journalBefore))/2
		checkpointtest.SetJournal(p.mem, journalAfter[:half])
		p.run.tornPending = true
		p.run.logf("      killed during %s: the journal record is torn (%d of %d bytes kept)", what, half-len(journalBefore), len(journalAfter)-len(journalBefore))
		return
	}
	p.run.logf("      %s: %s, then killed before it returned", what, errText(err))
}

// legacyWrite is a durable legacy write that the op's fault may fail
// (without effect, as a legacy that refused it).
func (p *process) legacyWrite(what string, write func() error) error {
	i := p.legacyAttempts
	p.legacyAttempts++
	if p.legacyFail[i] && !p.dead {
		p.run.logf("      %s: injected failure", what)
		return errInjectedLegacy
	}
	return p.durable(what, write)
}

// checkpointWrite is a durable checkpoint write.
func (p *process) checkpointWrite(what string, write func() error) error {
	err := p.durable(what, write)
	if err == nil {
		p.checkpointSaved = true
	}
	return err
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// writableLegacy is the explicit and the volatile legacy: a source.Map whose
// writes go through the process.
type writableLegacy struct {
	p *process
	m *source.Map[podKey, podAddr]
}

var (
	_ source.Reader[podKey, podAddr] = (*writableLegacy)(nil)
	_ source.Writer[podKey, podAddr] = (*writableLegacy)(nil)
)

func (l *writableLegacy) List(ctx context.Context) (map[podKey]podAddr, error) { return l.m.List(ctx) }

// LegacyKind: a file, unless the world's Config says the registry is
// volatile (which wins).
func (l *writableLegacy) LegacyKind() source.Kind { return source.Durable }

func (l *writableLegacy) Put(ctx context.Context, k podKey, v podAddr) error {
	return l.p.legacyWrite(fmt.Sprintf("legacy.Put(%v, %v)", k, v), func() error { return l.m.Put(ctx, k, v) })
}

func (l *writableLegacy) Delete(ctx context.Context, k podKey) error {
	return l.p.legacyWrite(fmt.Sprintf("legacy.Delete(%v)", k), func() error { return l.m.Delete(ctx, k) })
}

// observingLegacy lists what the outside world (a container runtime) holds,
// as CRI would: under the placeholder interface, with the IP alone. It has
// no Writer.
type observingLegacy struct{ run *rolloutRun }

func (l observingLegacy) List(context.Context) (map[podKey]podAddr, error) {
	out := make(map[podKey]podAddr, len(l.run.world))
	for c, ip := range l.run.world {
		out[podKey{C: c, If: placeholderIf}] = podAddr{IP: ip}
	}
	return out, nil
}

// frozenCheckpoint is the process's checkpoint: a checkpoint.Memory whose
// writes go through the process. It forwards every capability Memory has,
// so that the Store keeps its boot epoch, journal report and commits.
type frozenCheckpoint struct {
	p *process
	m *checkpoint.Memory[podKey, podAddr]
}

var (
	_ migrate.Checkpoint[podKey, podAddr]   = (*frozenCheckpoint)(nil)
	_ checkpoint.Committer[podKey, podAddr] = (*frozenCheckpoint)(nil)
	_ checkpoint.BootIDer                   = (*frozenCheckpoint)(nil)
	_ checkpoint.Sizer                      = (*frozenCheckpoint)(nil)
	_ checkpoint.JournalReporter            = (*frozenCheckpoint)(nil)
)

func (c *frozenCheckpoint) Load(ctx context.Context) (checkpoint.Snapshot[podKey, podAddr], error) {
	return c.m.Load(ctx)
}

func (c *frozenCheckpoint) Save(ctx context.Context, s checkpoint.Snapshot[podKey, podAddr]) error {
	return c.p.checkpointWrite(fmt.Sprintf("checkpoint.Save(%d entries, phase %s)", len(s.Entries), s.Meta.Phase),
		func() error { return c.m.Save(ctx, s) })
}

func (c *frozenCheckpoint) Commit(ctx context.Context, meta checkpoint.Meta, changes []checkpoint.Change[podKey, podAddr]) error {
	return c.p.checkpointWrite(fmt.Sprintf("checkpoint.Commit(%s)", describeChanges(changes)),
		func() error { return c.m.Commit(ctx, meta, changes) })
}

func (c *frozenCheckpoint) Quarantine(ctx context.Context) (string, error) {
	var where string
	err := c.p.checkpointWrite("checkpoint.Quarantine", func() (err error) {
		where, err = c.m.Quarantine(ctx)
		return err
	})
	return where, err
}

func (c *frozenCheckpoint) BootID() string                    { return c.m.BootID() }
func (c *frozenCheckpoint) Size() int64                       { return c.m.Size() }
func (c *frozenCheckpoint) Journal() checkpoint.JournalStatus { return c.m.Journal() }
func (c *frozenCheckpoint) Close() error                      { return c.m.Close() }

func describeChanges(changes []checkpoint.Change[podKey, podAddr]) string {
	parts := make([]string, len(changes))
	for i, ch := range changes {
		if ch.Delete {
			parts[i] = "delete " + ch.Key.String()
		} else {
			parts[i] = fmt.Sprintf("put %v=%v", ch.Key, ch.Value)
		}
	}
	return strings.Join(parts, ", ")
}

// checkpointOptions are the options a build opens its checkpoint with.
func (r *rolloutRun) checkpointOptions(b binary) []checkpoint.Option {
	boot := r.bootID()
	opts := []checkpoint.Option{checkpoint.WithBootID(func() (string, error) { return boot, nil })}
	if b.Schema == 2 {
		opts = append(opts, checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, sameJSON))
	}
	if b.Journal {
		opts = append(opts, checkpoint.WithJournal())
	} else {
		opts = append(opts, checkpoint.WithoutJournal()) // the journal is the default
	}
	return opts
}

func (r *rolloutRun) bootID() string { return fmt.Sprintf("boot-%d", r.boot) }

// start runs a step's binary: it builds the Store as the daemon would,
// with Config{Phase, Legacy, Checkpoint} and only the options the legacy's
// kind needs.
func (r *rolloutRun) start(b binary) error {
	p := &process{run: r, bin: b}
	cfg := migrate.Config[podKey, podAddr]{Phase: b.Phase, Match: matchContainer}
	switch r.plan.World {
	case explicitWorld:
		cfg.Legacy = &writableLegacy{p: p, m: r.legacy}
	case volatileWorld:
		cfg.Legacy, cfg.VolatileLegacy = &writableLegacy{p: p, m: r.legacy}, true
	case observingWorld:
		cfg.Legacy, cfg.Equal = observingLegacy{run: r}, sameIP
	}
	if !b.Old {
		m, err := r.root.Reopen(r.checkpointOptions(b)...)
		if err != nil {
			return err
		}
		p.mem, cfg.Checkpoint = m, &frozenCheckpoint{p: p, m: m}
	}
	s, err := migrate.New(cfg)
	if err != nil {
		return err
	}
	p.store, r.proc = s, p
	return nil
}

// stop ends the step's process: a clean stop closes the Store; a crash
// kills it first, so that nothing it does on the way out reaches a disk.
func (r *rolloutRun) stop(end stepEnd) {
	p := r.proc
	if p == nil {
		return
	}
	if end != endClean {
		p.dead = true
	}
	_ = p.store.Close()
	r.proc = nil
	r.afterStop(p, end)
}

// durableState is everything that survives a process: what a refused
// Restore must leave as it found it.
type durableState struct {
	legacy      map[podKey]podAddr
	file        []byte
	journal     []byte
	quarantined int
}

func (r *rolloutRun) durable() durableState {
	d := durableState{file: r.root.Bytes(), journal: checkpointtest.Journal(r.root), quarantined: len(checkpointtest.Quarantined(r.root))}
	if r.plan.World == observingWorld {
		d.legacy = map[podKey]podAddr{}
	} else {
		d.legacy = r.legacy.Snapshot()
	}
	return d
}

func (d durableState) differs(e durableState) string {
	var what []string
	if !maps.Equal(d.legacy, e.legacy) {
		what = append(what, "legacy")
	}
	if !bytes.Equal(d.file, e.file) {
		what = append(what, "the checkpoint file")
	}
	if !bytes.Equal(d.journal, e.journal) {
		what = append(what, "the journal")
	}
	if d.quarantined != e.quarantined {
		what = append(what, "the quarantined files")
	}
	return strings.Join(what, ", ")
}

// peeked is an independent Load of the checkpoint's file by the newest
// build, before a restore: what the file says (its Meta describes it even
// with ErrNewerSchema, which this reader never meets).
type peeked struct {
	exists bool
	err    error
	meta   checkpoint.Meta
	snap   map[podKey]podAddr
}

func (r *rolloutRun) peek() peeked {
	m, err := r.root.Reopen(checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, sameJSON))
	if err != nil {
		return peeked{exists: true, err: err}
	}
	s, err := m.Load(r.ctx)
	if errors.Is(err, checkpoint.ErrNotExist) {
		return peeked{}
	}
	return peeked{exists: true, err: err, meta: s.Meta, snap: s.Entries}
}

// unreadableFor says whether a build cannot read the file in full: it is
// corrupt, has entries that do not decode, or a newer schema than the
// build's.
func (v peeked) unreadableFor(b binary) bool {
	return v.exists && (v.err != nil || v.meta.Schema > b.Schema)
}

// markedBehind says whether the file carries a mark phase 3 refuses in
// the current boot: phase 0's mark of the whole file (a file whose Phase is
// "legacy" with no Behind, a release before keyed marks), or any mark in
// Meta.Behind but a keyed phase-0 mark that names nothing ("A keyed mark
// with "keys":[] names nothing: nothing to distrust"; issue 41, rule 5).
func (v peeked) markedBehind(boot string) bool {
	if !v.exists || v.err != nil || (v.meta.BootID != "" && v.meta.BootID != boot) {
		return false
	}
	if keys, ok := v.keyedMark(); ok {
		return len(keys) > 0
	}
	return v.meta.Behind != "" || v.meta.Phase == migrate.PhaseLegacy.String()
}

// phase0Whole is the text of phase 0's mark of the whole file.
const phase0Whole = "phase 0 (legacy) ran, which writes legacy only"

// wholeMarked says whether the file carries phase 0's mark of the whole
// file in the current boot: the old-style mark (Phase "legacy" with no
// Behind, or its text), which phase 0 leaves over a file it could read
// only in part. A repair's or a partial listing's mark is not phase 0's: a
// volatile legacy's emptiness is never evidence (issue 41, rule 6).
func (v peeked) wholeMarked(boot string) bool {
	if !v.exists || v.err != nil || (v.meta.BootID != "" && v.meta.BootID != boot) {
		return false
	}
	return v.meta.Behind == phase0Whole || (v.meta.Behind == "" && v.meta.Phase == migrate.PhaseLegacy.String())
}

// keyedMark returns the containers phase 0's keyed mark names, if the
// file carries one: {"kind":"phase0","text":...,"keys":[identities]}.
func (v peeked) keyedMark() (map[string]bool, bool) {
	var km struct {
		Kind string            `json:"kind"`
		Keys []json.RawMessage `json:"keys"`
	}
	if !v.exists || v.err != nil || json.Unmarshal([]byte(v.meta.Behind), &km) != nil || km.Kind != "phase0" {
		return nil, false
	}
	cs := map[string]bool{}
	for _, raw := range km.Keys {
		var k podKey
		if json.Unmarshal(raw, &k) != nil {
			return nil, false // a key that does not decode: the whole file
		}
		cs[k.C] = true
	}
	return cs, true
}

// legacyHolds lists what legacy holds now, as the Store would read it.
func (r *rolloutRun) legacyHolds() map[podKey]podAddr {
	if r.plan.World == observingWorld {
		l, _ := observingLegacy{run: r}.List(r.ctx)
		return l
	}
	return r.legacy.Snapshot()
}

// served reads the Store's committed state.
func served(s *migrate.Store[podKey, podAddr]) map[podKey]podAddr {
	out := map[podKey]podAddr{}
	for k, v := range s.All() {
		out[k] = v
	}
	return out
}

func describeEntries(m map[podKey]podAddr) string {
	if len(m) == 0 {
		return "nothing"
	}
	keys := slices.SortedFunc(maps.Keys(m), func(a, b podKey) int { return strings.Compare(a.String(), b.String()) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%v=%v", k, m[k])
	}
	return strings.Join(parts, " ")
}
