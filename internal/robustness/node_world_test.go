package robustness_test

// A world that is a node, independent of migrate's restore rules: it knows
// which holders exist (pods, VMs), what each holds (a set of addresses from
// a pool of three) and what the daemon acknowledged, and it judges what a
// Store serves against that, through migratetest.Node (issue 41). Its
// events are what the real parts of a node do: a runtime whose listing
// lags both ways, an old binary with its own address reuse, a volatile
// registry that dies with the daemon, a legacy written in place and torn by
// a kill, partial listings, kill -9 at every durable write, reboots and a
// binary rollback across a schema bump. node_rapid_test.go and
// node_exhaustive_test.go explore it over a checkpoint.Memory;
// node_verbs_test.go over a real file, with the operator's verbs of the
// built cmd/phaseshift and bit rot in the journal as events too.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

// nodeKeys are the holders' keys; nodePool is the address pool.
var (
	nodeKeys = []string{"pod-a", "pod-b", "pod-c"}
	nodePool = []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}
)

var errNodeKilled = errors.New("node: the daemon was killed (kill -9)")

// legacyKind is the kind of legacy a world's daemon migrates from.
type legacyKind int

const (
	// kindObserving is a container runtime read over CRI (source.Func): it
	// lists a sandbox only once its network is set up, and keeps a stopped
	// one listed until it is removed.
	kindObserving legacyKind = iota
	// kindFile is an explicit legacy on tmpfs whose record is one file
	// replaced atomically (a registry file, host-local's files).
	kindFile
	// kindInPlace is an explicit legacy on tmpfs that writes a record in
	// place, two files per record, each truncated then written, with no
	// fsync (Kata Containers' persist driver): a kill leaves a record
	// unreadable or mixed.
	kindInPlace
	// kindRegistry is a source.Map registry configured as the README's
	// Quick start writes it (no VolatileLegacy): empty after every restart.
	kindRegistry
	// kindRegistryVolatile is the same registry with
	// Config.VolatileLegacy.
	kindRegistryVolatile
)

var legacyKindNames = []string{"observing runtime", "explicit file", "explicit in place", "registry as in the README", "registry with VolatileLegacy"}

func (k legacyKind) String() string { return legacyKindNames[k] }

func (k legacyKind) explicit() bool { return k == kindFile || k == kindInPlace }
func (k legacyKind) registry() bool { return k == kindRegistry || k == kindRegistryVolatile }

// nodeOp is what an event does.
type nodeOp int

const (
	opStart    nodeOp = iota // restart the daemon (this library) in a phase
	opRollback               // restart as the older build (schema 1) in a phase
	opOld                    // restart as the old binary (the release before phaseshift)
	opAdd                    // an ADD of a pod with n addresses, to the running daemon
	opDel                    // a DEL of a pod, to the running daemon
	opCatchUp                // the runtime's listing catches up with its sandboxes
	opHide                   // the next listing cannot read one entry
	opKill                   // kill -9 the next Store operation at its n-th durable write
	opReboot                 // the node reboots
	opVerb                   // the operator stops the daemon and runs verb n of cmd/phaseshift (node_verbs_test.go)
	opRot                    // bit rot flips a byte in a journal record that is not the last (node_verbs_test.go)
)

// nodeEvent is one event; which fields count depends on op.
type nodeEvent struct {
	op    nodeOp
	phase migrate.Phase
	key   int
	n     int
}

func (e nodeEvent) String() string {
	k := ""
	if e.key >= 0 && e.key < len(nodeKeys) {
		k = nodeKeys[e.key]
	}
	switch e.op {
	case opStart:
		return fmt.Sprintf("restart in phase %d", e.phase)
	case opRollback:
		return fmt.Sprintf("roll back to the older build (schema 1) in phase %d", e.phase)
	case opOld:
		return "restart as the old binary"
	case opAdd:
		return fmt.Sprintf("ADD %s (%d address(es))", k, e.n)
	case opDel:
		return "DEL " + k
	case opCatchUp:
		return "the runtime's listing catches up"
	case opHide:
		return "the next listing cannot read " + k
	case opKill:
		return fmt.Sprintf("kill -9 the next Store operation before its durable write #%d", e.n+1)
	case opReboot:
		return "reboot"
	case opVerb:
		return "the operator runs phaseshift " + strings.Join(nodeVerbs[e.n].args, " ")
	case opRot:
		return "bit rot in the journal's record before its last"
	}
	return "?"
}

// daemon is the process running on the node.
type daemon struct {
	old   bool                           // the old binary, not this library
	state map[string]string              // the old binary's memory
	store *migrate.Store[string, string] // this library
	disk  nodeDisk                       // its handle on the file
	dead  bool                           // killed: nothing it does reaches a disk
}

// nodeFinding is a violation with the events that led to it.
type nodeFinding struct {
	v      migratetest.NodeViolation
	events []nodeEvent
	trace  []string
}

// nodeWorld is one node.
type nodeWorld struct {
	kind legacyKind
	node *migratetest.Node[string, string]
	ctx  context.Context

	disk *checkpoint.Memory[string, string] // the checkpoint file (survives everything)
	boot int
	// A world over a real file (node_verbs_test.go) keeps its checkpoint
	// at path instead of disk, and runs the operator's verbs with bin.
	path, bin  string
	rotten     bool            // bit rot damaged the journal, and no repair or restore has settled it since
	excused    map[string]bool // live holders whose loss an operator's verb accepted (--accept-loss, --drop-damaged-records), until written again
	accepted   int             // violations on excused holders, counted, not failed
	unplayable bool            // a scenario's event could not happen (node_verbs_test.go)
	verbExits  []string        // each verb run: its name and exit status (node_verbs_test.go)

	// The runtime (kindObserving): its sandboxes (ADD acknowledged, DEL
	// not), and what its listing shows, which lags them until a catch-up.
	sandboxes, listed map[string]string
	// The explicit legacy's files on tmpfs: key -> two files; "" is
	// absent, "\x00" truncated.
	files map[string][2]string
	// The registry (kindRegistry*): in the daemon's memory.
	registry *source.Map[string, string]

	hide map[string]bool // entries the next listing cannot read
	open map[string]bool // keys whose last write's outcome is unknown (a DEL may settle them)

	run       *daemon
	lastStart int // the phase of the last start, or -1 for the old binary
	kill      int // the armed kill: die before the kill-th durable write (-1: none)
	writes    int // durable writes of the armed operation so far
	rep       migrate.Report[string]
	refusals  int
	leaks     int
	events    []nodeEvent
	trace     []string
	findings  []nodeFinding
	refusedOn string // a refusal's error, for the trace
}

func newNodeWorld(kind legacyKind) *nodeWorld { return newNodeWorldAt(kind, "", "") }

// newNodeWorldAt is newNodeWorld over a real checkpoint file at path (""
// for a checkpoint.Memory), whose operator runs the command bin.
func newNodeWorldAt(kind legacyKind, path, bin string) *nodeWorld {
	w := &nodeWorld{
		kind:      kind,
		path:      path,
		bin:       bin,
		excused:   map[string]bool{},
		node:      migratetest.NewNode[string, string](nil, addrParts),
		ctx:       context.Background(),
		disk:      checkpoint.NewMemory[string, string](),
		sandboxes: map[string]string{},
		listed:    map[string]string{},
		files:     map[string][2]string{},
		registry:  &source.Map[string, string]{},
		hide:      map[string]bool{},
		open:      map[string]bool{},
		kill:      -1,
	}
	w.apply(nodeEvent{op: opStart, phase: migrate.PhaseExpand})
	w.events = nil
	w.trace = []string{fmt.Sprintf("[%s] start: phase 1 on an empty node", kind)}
	return w
}

// addrParts is Config.Unique: a value is its addresses.
func addrParts(v string) []string { return strings.Split(v, ",") }

// legacyConfig sets what the Store is told about its legacy: the one
// place to change when the kind of a legacy comes from the source.
func (w *nodeWorld) legacyConfig(cfg *migrate.Config[string, string]) {
	switch w.kind {
	case kindObserving:
		cfg.Legacy = source.Func[string, string](w.runtimeList)
		cfg.Equal = func(a, b string) bool { return a == b }
	case kindFile, kindInPlace:
		cfg.Legacy = &nodeFiles{w: w}
		cfg.LegacyKind = source.Durable // files on disk; nodeFiles does not say
	case kindRegistry:
		cfg.Legacy = w.registry
	case kindRegistryVolatile:
		cfg.Legacy = w.registry
		cfg.VolatileLegacy = true
	}
}

// options are the checkpoint options of a build: the newer writes schema 2
// and upgrades 1; the older knows schema 1 only. The state dies with a
// reboot, so the boot epoch is on.
func (w *nodeWorld) options(older bool) []checkpoint.Option {
	boot := fmt.Sprintf("boot-%d", w.boot)
	opts := []checkpoint.Option{checkpoint.WithBootID(func() (string, error) { return boot, nil })}
	if older {
		return append(opts, checkpoint.WithSchema(1))
	}
	return append(opts, checkpointtest.Schema(2)...)
}

func (w *nodeWorld) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf(format, args...))
}

// durable runs one durable write of the daemon, unless it is dead or the
// armed kill falls here.
func (w *nodeWorld) durable(write func()) error {
	if w.run != nil && w.run.dead {
		return errNodeKilled
	}
	if w.kill >= 0 {
		if w.writes == w.kill {
			w.die()
			return errNodeKilled
		}
		w.writes++
	}
	write()
	return nil
}

func (w *nodeWorld) die() {
	w.kill = -1
	if w.run != nil {
		w.run.dead = true
	}
	w.logf("      killed")
}

// apply plays e and reports whether it could happen in this state (an
// event that cannot is skipped and changes nothing).
func (w *nodeWorld) apply(e nodeEvent) bool {
	if !w.valid(e) {
		return false
	}
	w.events = append(w.events, e)
	w.logf("%d. %s", len(w.events), e)
	switch e.op {
	case opStart, opRollback:
		w.start(e.phase, e.op == opRollback)
	case opOld:
		w.startOld()
	case opAdd:
		w.add(e.key, e.n)
	case opDel:
		w.del(e.key)
	case opCatchUp:
		w.listed = maps.Clone(w.sandboxes)
	case opHide:
		w.hide[nodeKeys[e.key]] = true
	case opKill:
		w.kill, w.writes = e.n, 0
	case opReboot:
		w.reboot()
	case opVerb:
		w.verb(nodeVerbs[e.n])
	case opRot:
		w.rot()
	}
	return true
}

// valid says whether e can happen now. Besides what the node allows, it
// keeps to the promise's stated conditions: phase 3 never directly after
// the old binary, the old binary never directly after phase 3 over an
// explicit legacy, and no old binary over a registry that dies with it.
func (w *nodeWorld) valid(e nodeEvent) bool {
	alive := w.run != nil && !w.run.dead
	k := ""
	if e.key >= 0 && e.key < len(nodeKeys) {
		k = nodeKeys[e.key]
	}
	switch e.op {
	case opStart, opRollback:
		return !(e.phase == migrate.PhaseContract && w.lastStart == -1)
	case opOld:
		return w.oldCanRun()
	case opAdd:
		_, live := w.node.Holds(k)
		return alive && !live && len(w.free(w.served())) >= e.n
	case opDel:
		_, live := w.node.Holds(k)
		return alive && (live || w.open[k])
	case opCatchUp:
		return w.kind == kindObserving && !maps.Equal(w.listed, w.sandboxes)
	case opHide:
		return !w.kind.registry() && !w.hide[k] && w.legacyHas(k)
	case opKill:
		return w.kill < 0 && (w.run == nil || !w.run.old)
	case opReboot:
		return true
	case opVerb:
		return w.verbCanRun(nodeVerbs[e.n])
	case opRot:
		return w.path != "" && w.journalRecords() >= 2
	}
	return false
}

func (w *nodeWorld) oldCanRun() bool {
	if w.kind.registry() || (w.kind.explicit() && w.lastStart == int(migrate.PhaseContract)) {
		return false
	}
	if (w.run != nil && w.run.old) || w.kill >= 0 {
		return false
	}
	if w.kind.explicit() {
		_, err := (&nodeFiles{w: w}).read(false)
		return err == nil // the old binary does not start on a record it cannot read
	}
	return true
}

func (w *nodeWorld) legacyHas(k string) bool {
	switch w.kind {
	case kindObserving:
		_, ok := w.listed[k]
		return ok
	default:
		f := w.files[k]
		return f[0] != "" || f[1] != ""
	}
}

// stop ends the running process: a clean shutdown if it is alive. A
// killed one's lock on a real file goes with it.
func (w *nodeWorld) stop() {
	if w.run != nil && !w.run.dead && w.run.store != nil {
		_ = w.run.store.Close()
	}
	w.release()
}

// release ends the running process without a word to its Store (a kill,
// a reboot): its handle on the checkpoint closes, which writes nothing
// and lets go of a real file's lock.
func (w *nodeWorld) release() {
	if w.run != nil && w.run.disk != nil {
		_ = w.run.disk.Close()
	}
	w.run = nil
}

// start restarts the daemon as this library in phase p (the older build
// if older), restores, and judges what it serves.
func (w *nodeWorld) start(p migrate.Phase, older bool) {
	w.stop()
	w.lastStart = int(p)
	if w.kind.registry() {
		w.registry = &source.Map[string, string]{} // it lived in the daemon's memory
	}
	disk, err := w.openDisk(older)
	if err != nil {
		panic(fmt.Sprintf("node world: reopening the checkpoint: %v", err))
	}
	d := &daemon{disk: disk}
	w.run = d
	cfg := migrate.Config[string, string]{Phase: p, Checkpoint: &nodeCheckpoint{w: w, m: disk}, Unique: addrParts}
	w.legacyConfig(&cfg)
	store, err := migrate.New(cfg)
	if err != nil {
		panic(fmt.Sprintf("node world: migrate.New refused the world's config: %v", err))
	}
	d.store = store
	before := w.sides()
	rep, err := store.Restore(w.ctx)
	w.hide = map[string]bool{}
	if d.dead {
		w.logf("      (restore killed)")
		return
	}
	if err != nil {
		w.refusals++
		w.logf("      refused: %v", err)
		if after := w.sides(); after != before {
			w.found(migratetest.NodeViolation{Invariant: "refusal changed a side", Detail: "Restore refused but a side changed:\n        before: " + before + "\n        after:  " + after})
		}
		w.release()
		w.afterOp()
		return
	}
	w.rotten = false // the journal was read whole, or its file quarantined with it
	w.rep = rep
	w.logf("      restored: %s", rep.String())
	w.check()
	w.afterOp()
}

// afterOp ends the armed kill's operation: a kill that did not fall inside
// it falls right after it.
func (w *nodeWorld) afterOp() {
	if w.kill >= 0 {
		w.die()
	}
}

// startOld restarts the daemon as the old binary: it restores from legacy
// alone and keeps its state in memory.
func (w *nodeWorld) startOld() {
	w.stop()
	w.lastStart = -1
	var state map[string]string
	if w.kind == kindObserving {
		w.listed = maps.Clone(w.sandboxes) // it lists what it restores from
		state = maps.Clone(w.listed)
	} else {
		state, _ = (&nodeFiles{w: w}).read(false)
	}
	w.run = &daemon{old: true, state: state}
}

// served is what the running daemon serves.
func (w *nodeWorld) served() map[string]string {
	if w.run == nil {
		return nil
	}
	if w.run.old {
		return w.run.state
	}
	m := map[string]string{}
	for k, v := range w.run.store.All() {
		m[k] = v
	}
	return m
}

// free is the pool's addresses no served entry holds, lowest first.
func (w *nodeWorld) free(served map[string]string) []string {
	used := map[string]bool{}
	for _, v := range served {
		for _, a := range addrParts(v) {
			used[a] = true
		}
	}
	var free []string
	for _, a := range nodePool {
		if !used[a] {
			free = append(free, a)
		}
	}
	return free
}

// add is an ADD: the daemon allocates the lowest free addresses from what
// it serves, and writes them.
func (w *nodeWorld) add(i, n int) {
	k := nodeKeys[i]
	v := strings.Join(w.free(w.served())[:n], ",")
	if w.run.old {
		// The old binary's own writes are listed at once: an ADD that
		// neither the checkpoint nor a listing holds is lost to any
		// daemon, so the lag is played on this library's writes only.
		if w.kind.explicit() {
			_ = (&nodeFiles{w: w}).Put(w.ctx, k, v)
		} else {
			w.sandboxes[k], w.listed[k] = v, v
		}
		w.run.state[k] = v
		delete(w.open, k)
		delete(w.excused, k)
		w.node.Acknowledge(k, v)
		w.logf("      acknowledged %s=%s (old binary)", k, v)
		return
	}
	err := w.run.store.Put(w.ctx, k, v)
	w.settle(k, v, false, err)
}

// del is a DEL.
func (w *nodeWorld) del(i int) {
	k := nodeKeys[i]
	if w.run.old {
		if w.kind.explicit() {
			_ = (&nodeFiles{w: w}).Delete(w.ctx, k)
		}
		delete(w.sandboxes, k)
		delete(w.listed, k)
		delete(w.run.state, k)
		delete(w.open, k)
		delete(w.excused, k)
		w.node.AcknowledgeDelete(k)
		w.logf("      acknowledged DEL %s (old binary)", k)
		return
	}
	err := w.run.store.Delete(w.ctx, k)
	w.settle(k, "", true, err)
}

// settle tells the node what a Store write's outcome was.
func (w *nodeWorld) settle(k, v string, deleted bool, err error) {
	switch {
	case w.run.dead || errors.Is(err, migrate.ErrOutcomeUnknown):
		w.node.Unsettled(k, v, deleted)
		w.open[k] = true
		delete(w.excused, k)
		w.logf("      unacknowledged (%v)", err)
		if w.run.dead {
			return
		}
	case err != nil:
		w.logf("      failed: %v", err)
	case deleted:
		delete(w.open, k)
		delete(w.excused, k)
		w.node.AcknowledgeDelete(k)
		delete(w.sandboxes, k) // the runtime removes the sandbox later
		w.logf("      acknowledged DEL %s", k)
		w.check()
	default:
		delete(w.open, k)
		delete(w.excused, k)
		w.node.Acknowledge(k, v)
		w.sandboxes[k] = v // the runtime lists it once its network is set up
		w.logf("      acknowledged %s=%s", k, v)
		w.check()
	}
	w.afterOp()
}

// reboot: every holder dies, and everything on tmpfs and in memory.
func (w *nodeWorld) reboot() {
	w.release()
	w.boot++
	w.excused = map[string]bool{}
	w.node.Gone()
	w.sandboxes, w.listed = map[string]string{}, map[string]string{}
	w.files = map[string][2]string{}
	w.registry = &source.Map[string, string]{}
	w.hide = map[string]bool{}
	w.open = map[string]bool{}
	w.kill = -1
}

// check judges what the Store serves against the node.
func (w *nodeWorld) check() {
	served := w.served()
	w.logf("      serves %s", showMap(served))
	vs, leaks := w.node.Check(served, w.rep, false)
	w.leaks += leaks
	for _, v := range vs {
		if w.excusedBy(v) {
			w.accepted++
			w.logf("      accepted loss (the operator's verb said so): %s", v)
			continue
		}
		w.found(v)
	}
}

// excusedBy says whether v is a loss an operator's verb accepted: a live
// holder missing, or its part free, where the holder's entry is one the
// verb said it would lose and no later write has settled.
func (w *nodeWorld) excusedBy(v migratetest.NodeViolation) bool {
	if v.Invariant != migratetest.Missing && v.Invariant != migratetest.Free {
		return false
	}
	for _, k := range v.Keys {
		if !w.excused[k] {
			return false
		}
	}
	return len(v.Keys) > 0
}

func (w *nodeWorld) found(v migratetest.NodeViolation) {
	w.logf("      VIOLATION %s", v)
	w.findings = append(w.findings, nodeFinding{v: v, events: slices.Clone(w.events), trace: slices.Clone(w.trace)})
}

// sides shows the durable state of both sides, to tell whether a refusal
// changed one.
func (w *nodeWorld) sides() string {
	if w.path != "" {
		return w.fileSides()
	}
	return fmt.Sprintf("checkpoint %q journal %q quarantined %d legacy %s", w.disk.Bytes(), checkpointtest.Journal(w.disk), len(checkpointtest.Quarantined(w.disk)), w.legacyImage())
}

func (w *nodeWorld) legacyImage() string {
	switch {
	case w.kind == kindObserving:
		return showMap(w.listed)
	case w.kind.registry():
		return showMap(w.registry.Snapshot())
	}
	parts := make([]string, 0, len(w.files))
	for _, k := range slices.Sorted(maps.Keys(w.files)) {
		parts = append(parts, fmt.Sprintf("%s:%q", k, w.files[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func showMap(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// runtimeList is the runtime's listing, as CRI gives it.
func (w *nodeWorld) runtimeList(context.Context) (map[string]string, error) {
	m := maps.Clone(w.listed)
	return m, w.hideFrom(m)
}

// hideFrom removes the entries the listing cannot read, and says so.
func (w *nodeWorld) hideFrom(m map[string]string) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(w.hide)) {
		if _, ok := m[k]; ok {
			delete(m, k)
			errs = append(errs, fmt.Errorf("entry %s: injected read failure", k))
		}
	}
	w.hide = map[string]bool{}
	if errs == nil {
		return nil
	}
	return &source.ListError{Errs: errs}
}

// nodeFiles is the explicit legacy: a record is two files on tmpfs, one
// address each. kindFile replaces a record atomically (one durable write);
// kindInPlace truncates and writes each file in turn (a durable write
// each), so a kill leaves a file truncated (the record is unreadable) or
// the two files of different generations (the record is mixed).
type nodeFiles struct{ w *nodeWorld }

var (
	_ source.Reader[string, string] = (*nodeFiles)(nil)
	_ source.Writer[string, string] = (*nodeFiles)(nil)
)

func (f *nodeFiles) List(context.Context) (map[string]string, error) {
	m, err := f.read(true)
	if herr := f.w.hideFrom(m); herr != nil {
		var le *source.ListError
		if errors.As(err, &le) {
			le.Errs = append(le.Errs, herr.(*source.ListError).Errs...)
		} else {
			err = herr
		}
	}
	return m, err
}

// read reads every record; one with a truncated file is unreadable.
func (f *nodeFiles) read(_ bool) (map[string]string, error) {
	m := map[string]string{}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(f.w.files)) {
		r := f.w.files[k]
		if r[0] == "\x00" || r[1] == "\x00" {
			errs = append(errs, fmt.Errorf("entry %s: unreadable (a file is empty)", k))
			continue
		}
		var parts []string
		for _, p := range r {
			if p != "" {
				parts = append(parts, p)
			}
		}
		if len(parts) > 0 {
			slices.Sort(parts)
			m[k] = strings.Join(parts, ",")
		}
	}
	if errs != nil {
		return m, &source.ListError{Errs: errs}
	}
	return m, nil
}

func (f *nodeFiles) Put(_ context.Context, k, v string) error {
	parts := addrParts(v)
	var want [2]string
	copy(want[:], parts)
	return f.write(k, want)
}

func (f *nodeFiles) Delete(_ context.Context, k string) error {
	return f.write(k, [2]string{})
}

func (f *nodeFiles) write(k string, want [2]string) error {
	w := f.w
	if w.kind != kindInPlace {
		return w.durable(func() { w.setFiles(k, want) })
	}
	for i := range want {
		cur := w.files[k]
		if cur[i] == want[i] {
			continue
		}
		if want[i] == "" {
			if err := w.durable(func() { cur[i] = ""; w.setFiles(k, cur) }); err != nil {
				return err
			}
			continue
		}
		if err := w.durable(func() { cur[i] = "\x00"; w.setFiles(k, cur) }); err != nil {
			return err
		}
		if err := w.durable(func() { cur[i] = want[i]; w.setFiles(k, cur) }); err != nil {
			return err
		}
	}
	return nil
}

func (w *nodeWorld) setFiles(k string, r [2]string) {
	if r == [2]string{} {
		delete(w.files, k)
		return
	}
	w.files[k] = r
}

// nodeCheckpoint is the daemon's handle on the checkpoint file; its
// durable writes can be killed.
type nodeCheckpoint struct {
	w *nodeWorld
	m nodeDisk
}

// nodeDisk is what the daemon opens its checkpoint as: a
// checkpoint.Memory, or a checkpoint.File over a real file.
type nodeDisk interface {
	migrate.Checkpoint[string, string]
	Commit(ctx context.Context, meta checkpoint.Meta, chs []checkpoint.Change[string, string]) error
	BootID() string
	Journal() checkpoint.JournalStatus
	Close() error
}

var (
	_ nodeDisk = (*checkpoint.Memory[string, string])(nil)
	_ nodeDisk = (*checkpoint.File[string, string])(nil)
)

var (
	_ migrate.Checkpoint[string, string]   = (*nodeCheckpoint)(nil)
	_ checkpoint.Committer[string, string] = (*nodeCheckpoint)(nil)
)

func (c *nodeCheckpoint) Load(ctx context.Context) (checkpoint.Snapshot[string, string], error) {
	return c.m.Load(ctx)
}

func (c *nodeCheckpoint) Save(ctx context.Context, s checkpoint.Snapshot[string, string]) error {
	var err error
	if kerr := c.w.durable(func() { err = c.m.Save(ctx, s) }); kerr != nil {
		return kerr
	}
	return err
}

func (c *nodeCheckpoint) Commit(ctx context.Context, meta checkpoint.Meta, chs []checkpoint.Change[string, string]) error {
	var err error
	if kerr := c.w.durable(func() { err = c.m.Commit(ctx, meta, chs) }); kerr != nil {
		return kerr
	}
	return err
}

func (c *nodeCheckpoint) Quarantine(ctx context.Context) (string, error) {
	var path string
	var err error
	if kerr := c.w.durable(func() { path, err = c.m.Quarantine(ctx) }); kerr != nil {
		return "", kerr
	}
	return path, err
}

func (c *nodeCheckpoint) BootID() string { return c.m.BootID() }

func (c *nodeCheckpoint) Journal() checkpoint.JournalStatus { return c.m.Journal() }
