package robustness_test

// The plans TestRollout plays: a random rollout of up to eight steps, each
// one binary (this library in a phase, or the old binary) that restores,
// makes a few writes and stops. A plan is plain data, so that a failing one
// can be shrunk and printed.

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/phaseshift/phaseshift/migrate"
)

// podKey is an entry's key: a container and its interface, as a CNI ADD
// names an attachment. Match identifies an entry by its container alone
// (matchContainer), so a Put with another interface re-keys the entry, and
// an observing legacy, which does not know the interface, lists it under
// the placeholder placeholderIf.
type podKey struct {
	C  string `json:"c"`
	If string `json:"if"`
}

// podAddr is an entry's value. An observing legacy sees the IP only; the
// gateway is what only the checkpoint (and an explicit legacy) records.
type podAddr struct {
	IP int `json:"ip"`
	GW int `json:"gw"`
}

func (k podKey) String() string  { return k.C + "/" + k.If }
func (v podAddr) String() string { return fmt.Sprintf("ip%d,gw%d", v.IP, v.GW) }

// placeholderIf is the interface an observing legacy lists every entry
// under, as CRI lists a sandbox without the CNI interface name.
const placeholderIf = "unknown"

var (
	rolloutContainers = []string{"c0", "c1", "c2", "c3"}
	rolloutIfs        = []string{"eth0", "eth1"}
)

// matchContainer is Config.Match: one entry per container.
func matchContainer(k podKey) podKey { return podKey{C: k.C} }

// sameIP is Config.Equal for an observing legacy: it compares what legacy
// records.
func sameIP(a, b podAddr) bool { return a.IP == b.IP }

// worldKind is the kind of legacy a plan runs against.
type worldKind int

const (
	// explicitWorld: a source.Map the Store writes, and the old binary too;
	// it survives restarts (a registry on disk, host-local's files).
	explicitWorld worldKind = iota
	// observingWorld: a reader only (CRI). The outside world adds an entry
	// when a write of it is acknowledged and removes it when a delete is,
	// and lists it with a poorer view: the placeholder interface and the
	// IP alone.
	observingWorld
	// volatileWorld: a source.Map kept in memory, emptied at every process
	// stop (a VM proxy's registry; Config.VolatileLegacy).
	volatileWorld
)

func (w worldKind) String() string {
	return [...]string{"explicit legacy", "observing legacy", "volatile legacy"}[w]
}

// binary is the program one step runs.
type binary struct {
	Old     bool          // the old binary: phase 0 without a checkpoint
	Phase   migrate.Phase // this library's phase (0 for the old binary)
	Schema  int           // 1: the old build; 2: the new build, which upgrades schema-1 files
	Journal bool          // the checkpoint is opened WithJournal
}

func (b binary) String() string {
	if b.Old {
		return "the old binary (phase 0, no checkpoint)"
	}
	j := "journal off"
	if b.Journal {
		j = "journal on"
	}
	return fmt.Sprintf("this library, phase %d (%s), schema %d, %s", b.Phase, b.Phase, b.Schema, j)
}

// cut is a crash in the middle of a write (or of a restore): the first
// After durable writes (legacy Put or Delete, checkpoint Save, Commit or
// Quarantine) take effect, and the process dies at the next one, before
// the caller sees an answer. With Tear, the write at the cut runs, and if
// it is a journal append, only half of it stays (the next Load discards
// the torn record).
type cut struct {
	At    bool
	After int
	Tear  bool
}

func (c cut) String() string {
	if !c.At {
		return ""
	}
	s := fmt.Sprintf("killed after %d durable write(s)", c.After)
	if c.Tear {
		s += ", the write at the cut runs (a journal append half written)"
	}
	return s
}

// fault is what fails during one write, as a real disk or legacy might.
type fault struct {
	CheckpointSaves int   // the next n checkpoint saves fail (checkpointtest.FailSaves)
	LegacyWrites    []int // these legacy writes of the op fail (0-based, attempts counted)
}

func (f fault) String() string {
	var s []string
	if f.CheckpointSaves > 0 {
		s = append(s, fmt.Sprintf("the next %d checkpoint save(s) fail", f.CheckpointSaves))
	}
	if len(f.LegacyWrites) > 0 {
		s = append(s, fmt.Sprintf("legacy writes %v of the op fail", f.LegacyWrites))
	}
	return strings.Join(s, ", ")
}

type opKind int

const (
	opPut        opKind = iota
	opDelete            // Delete(Key): with Match, the entry of any key of the container
	opUpdate            // Update with Tx.Put and Tx.Delete of several containers
	opDeleteFunc        // DeleteFunc(Pred)
	opSweep             // Update iterating Tx.All: at the first entry, delete (or replace) the others Pred selects
)

// rolloutOp is one write.
type rolloutOp struct {
	Kind    opKind
	Key     podKey     // put, delete
	Val     podAddr    // put
	Tx      []txChange // update
	Pred    int        // deleteFunc, sweep: index in rolloutPreds
	Replace bool       // sweep: replace the others instead of deleting them
	Fault   fault
	Cut     cut
}

// txChange is one change of an Update, to a container: to the key the
// container's entry is served under, or to {C, If} if it has none.
type txChange struct {
	C   string
	If  string
	Del bool
	Val podAddr
}

func (o rolloutOp) String() string {
	var s string
	switch o.Kind {
	case opPut:
		s = fmt.Sprintf("Put(%v, %v)", o.Key, o.Val)
	case opDelete:
		s = fmt.Sprintf("Delete(%v)", o.Key)
	case opUpdate:
		var parts []string
		for _, c := range o.Tx {
			if c.Del {
				parts = append(parts, "delete "+c.C)
			} else {
				parts = append(parts, fmt.Sprintf("put %s=%v", c.C, c.Val))
			}
		}
		s = "Update(" + strings.Join(parts, "; ") + ")"
	case opDeleteFunc:
		s = fmt.Sprintf("DeleteFunc(%s)", rolloutPreds[o.Pred].name)
	case opSweep:
		what := "delete"
		if o.Replace {
			what = "replace"
		}
		s = fmt.Sprintf("Update(range Tx.All; at the first entry, %s the others with %s)", what, rolloutPreds[o.Pred].name)
	}
	for _, extra := range []string{o.Fault.String(), o.Cut.String()} {
		if extra != "" {
			s += " [" + extra + "]"
		}
	}
	return s
}

// rolloutPreds are the predicates of DeleteFunc and of the Tx.All sweep.
var rolloutPreds = []struct {
	name string
	f    func(podKey, podAddr) bool
}{
	{"odd IP", func(_ podKey, v podAddr) bool { return v.IP%2 == 1 }},
	{"GW above 4", func(_ podKey, v podAddr) bool { return v.GW > 4 }},
	{"container c0 or c2", func(k podKey, _ podAddr) bool { return k.C == "c0" || k.C == "c2" }},
	{"every entry", func(podKey, podAddr) bool { return true }},
}

// stepEnd is how a step's process stops.
type stepEnd int

const (
	endClean      stepEnd = iota // Close
	endCrash                     // killed: no Close, nothing more reaches a disk
	endReboot                    // killed by a reboot: the boot ID changes, every legacy is empty, the state died
	endRebootWipe                // the same, and the checkpoint was on tmpfs: gone
)

func (e stepEnd) String() string {
	return [...]string{"clean stop", "crash", "reboot", "reboot (checkpoint on tmpfs: removed)"}[e]
}

// rolloutStep is one binary's run: restore, writes, stop.
type rolloutStep struct {
	Bin        binary
	RestoreCut cut // the process dies during Restore
	Ops        []rolloutOp
	End        stepEnd
	Corrupt    bool // after the stop, one bit of the checkpoint flips (checkpointtest.Corrupt)
}

// rolloutPlan is one random rollout.
type rolloutPlan struct {
	Seed      uint64
	World     worldKind
	Immutable bool // observing world: a container's IP never changes (a sandbox keeps its address)
	Steps     []rolloutStep
}

func (p rolloutPlan) size() (steps, ops int) {
	for _, s := range p.Steps {
		ops += len(s.Ops)
	}
	return len(p.Steps), ops
}

func (p rolloutPlan) clone() rolloutPlan {
	c := p
	c.Steps = make([]rolloutStep, len(p.Steps))
	for i, s := range p.Steps {
		c.Steps[i] = s
		c.Steps[i].Ops = make([]rolloutOp, len(s.Ops))
		for j, o := range s.Ops {
			c.Steps[i].Ops[j] = o
			c.Steps[i].Ops[j].Tx = append([]txChange(nil), o.Tx...)
			c.Steps[i].Ops[j].Fault.LegacyWrites = append([]int(nil), o.Fault.LegacyWrites...)
		}
	}
	return c
}

// planGen draws plans. It follows the rollout only as far as it needs to
// keep most plans out of the sequences package migrate excludes ("What
// holds"); the runner decides what was excluded from what really ran.
type planGen struct {
	rng          *rand.Rand
	world        worldKind
	immutable    bool
	prev         binary
	started      bool
	oldSinceLib  bool // the old binary ran since this library's last phase 0-2 run
	phase3Writes bool // phase 3 ran since this library's last phase 0-2 run
	lastPut      string
	retryDel     string // a Put that failed or was cut: the runtime sends its DEL
	repeat       bool   // the next step restarts the same build (the steady-state rule)
}

// genPlan draws the plan of seed: 2 to 8 steps, the last one a restore
// without writes that judges what the others left.
func genPlan(seed uint64) rolloutPlan {
	g := &planGen{rng: rand.New(rand.NewPCG(seed, 0x726f6c6c6f7574))}
	g.world = worldKind(g.rng.IntN(3))
	g.immutable = g.world == observingWorld && g.rng.IntN(2) == 0
	p := rolloutPlan{Seed: seed, World: g.world, Immutable: g.immutable}
	n := 2 + g.rng.IntN(7)
	for i := range n {
		p.Steps = append(p.Steps, g.step(i == n-1))
	}
	return p
}

func (g *planGen) step(last bool) rolloutStep {
	st := rolloutStep{Bin: g.prev}
	if !g.repeat {
		st.Bin = g.binary()
		if !st.Bin.Old && g.rng.IntN(12) == 0 {
			st.RestoreCut = cut{At: true, After: g.rng.IntN(3)}
		}
	}
	g.repeat = false
	if last {
		return st
	}
	// A restart of the same build with no write between, one step in six.
	if !st.Bin.Old && st.Bin.Phase != 0 && !st.RestoreCut.At && g.rng.IntN(6) == 0 {
		st.End, g.repeat = stepEnd(g.rng.IntN(2)), true
		g.follow(st)
		return st
	}
	st.Ops = g.ops()
	st.End = g.end()
	st.Corrupt = g.rng.IntN(16) == 0
	g.follow(st)
	return st
}

// ops draws a step's writes, the last one cut by a crash three times in
// ten.
func (g *planGen) ops() []rolloutOp {
	var ops []rolloutOp
	// "the runtime ... calls DEL" for an ADD that failed or whose plugin
	// died (the CNI spec), at the next process's first write, half the
	// time.
	if g.retryDel != "" && g.rng.IntN(2) == 0 {
		ops = append(ops, rolloutOp{Kind: opDelete, Key: podKey{C: g.retryDel, If: rolloutIfs[g.rng.IntN(2)]}})
	}
	g.retryDel = ""
	for range g.rng.IntN(5) {
		ops = append(ops, g.op())
	}
	if len(ops) == 0 {
		return ops
	}
	last := &ops[len(ops)-1]
	if g.rng.IntN(10) < 3 {
		// After one durable write is the edge that matters most: between
		// the legacy write and the checkpoint write, or between the two
		// legacy writes of a re-key.
		after := 1
		if g.rng.IntN(2) == 0 {
			after = g.rng.IntN(4)
		}
		last.Cut = cut{At: true, After: after, Tear: g.rng.IntN(3) == 0}
	}
	if last.Kind == opPut && (last.Cut.At || last.Fault.CheckpointSaves > 0 || last.Fault.LegacyWrites != nil) {
		g.retryDel = last.Key.C
	}
	return ops
}

func (g *planGen) end() stepEnd {
	switch r := g.rng.IntN(20); {
	case r < 9:
		return endClean
	case r < 17:
		return endCrash
	case r < 19:
		return endReboot
	}
	return endRebootWipe
}

// binary draws the next step's program: mostly a phase next to the last
// one, sometimes any phase or the old binary; the schema and the journal
// change now and then.
func (g *planGen) binary() binary {
	for {
		b := binary{Schema: 1 + g.rng.IntN(2), Journal: g.rng.IntN(2) == 0}
		if g.started && g.rng.IntN(4) != 0 {
			b.Schema = g.prev.Schema
		}
		switch r := g.rng.IntN(12); {
		case r < 2:
			b = binary{Old: true, Phase: migrate.PhaseLegacy, Schema: 1}
		case r < 7 && g.started && !g.prev.Old:
			b.Phase = min(max(g.prev.Phase+migrate.Phase(g.rng.IntN(3))-1, 0), 3)
		default:
			b.Phase = migrate.Phase(g.rng.IntN(4))
		}
		// Excluded sequences are drawn again, nine times in ten: the rest
		// are played up to the exclusion and counted.
		if g.excludes(b) && g.rng.IntN(10) != 0 {
			continue
		}
		g.prev, g.started = b, true
		return b
	}
}

func (g *planGen) excludes(b binary) bool {
	switch {
	case b.Old && g.world == volatileWorld:
		return true
	case b.Old && g.world == explicitWorld && g.phase3Writes:
		return true
	case !b.Old && b.Phase == migrate.PhaseContract && g.oldSinceLib:
		return true
	}
	return false
}

func (g *planGen) follow(st rolloutStep) {
	switch {
	case st.Bin.Old:
		g.oldSinceLib = true
	case st.Bin.Phase == migrate.PhaseContract:
		g.phase3Writes = true
	default:
		g.oldSinceLib, g.phase3Writes = false, false
	}
	if st.End >= endReboot {
		g.oldSinceLib, g.phase3Writes = false, false
	}
}

func (g *planGen) op() rolloutOp {
	o := rolloutOp{Pred: g.rng.IntN(len(rolloutPreds))}
	switch r := g.rng.IntN(20); {
	case r < 8:
		o.Kind, o.Key = opPut, g.key()
		o.Val = g.addr(o.Key.C)
		g.lastPut = o.Key.C
	case r < 12:
		// A DEL mostly follows its ADD, whichever step made it.
		o.Kind, o.Key = opDelete, g.key()
		if g.lastPut != "" && g.rng.IntN(2) == 0 {
			o.Key.C = g.lastPut
		}
	case r < 15:
		o.Kind = opUpdate
		for _, i := range g.rng.Perm(len(rolloutContainers))[:1+g.rng.IntN(3)] {
			c := rolloutContainers[i]
			o.Tx = append(o.Tx, txChange{C: c, If: rolloutIfs[g.rng.IntN(2)], Del: g.rng.IntN(3) == 0, Val: g.addr(c)})
		}
	case r < 17:
		o.Kind = opDeleteFunc
	default:
		o.Kind, o.Replace = opSweep, g.rng.IntN(2) == 0
	}
	if g.rng.IntN(5) == 0 {
		o.Fault = g.fault()
	}
	return o
}

func (g *planGen) key() podKey {
	return podKey{C: rolloutContainers[g.rng.IntN(len(rolloutContainers))], If: rolloutIfs[g.rng.IntN(2)]}
}

// addr draws a value; in an immutable observing world a container keeps
// its IP for good and only the gateway changes.
func (g *planGen) addr(c string) podAddr {
	v := podAddr{IP: 1 + g.rng.IntN(9), GW: 1 + g.rng.IntN(9)}
	if g.immutable {
		v.IP = fixedIP(c)
	}
	return v
}

// fixedIP is a container's IP in an immutable observing world.
func fixedIP(c string) int { return 10 + int(c[len(c)-1]-'0') }

func (g *planGen) fault() fault {
	if g.rng.IntN(2) == 0 {
		return fault{CheckpointSaves: 1 + g.rng.IntN(2)}
	}
	var f fault
	for i := range 4 {
		if g.rng.IntN(3) == 0 {
			f.LegacyWrites = append(f.LegacyWrites, i)
		}
	}
	if f.LegacyWrites == nil {
		f.LegacyWrites = []int{g.rng.IntN(2)}
	}
	return f
}
