package main

import (
	"fmt"
	"maps"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// walk is one node walked through a rollout: the runtime's ADDs, DELs and
// GCs served by the real host-local and by this plugin in one phase or
// another, checked against what the runtime was told after every step.
type walk struct {
	t *testing.T
	n *node
	m *model

	// leaked holds the addresses of containers a reboot killed, which
	// host-local's files still reserve until a GC or DEL releases them.
	leaked map[string]netip.Addr
	// viaInvoke holds the containers added through pkg/invoke, which
	// libcni's cache does not know.
	viaInvoke map[string]bool
}

func newWalk(t *testing.T) *walk {
	return &walk{t: t, n: newNode(t), m: newModel(t), leaked: map[string]netip.Addr{}, viaInvoke: map[string]bool{}}
}

func (w *walk) step(name string) { w.t.Logf("step: %s", name) }

// added records an ADD, which must not hand out an address a live
// container or a leaked reservation holds.
func (w *walk) added(id string, a netip.Addr) {
	w.t.Helper()
	for other, b := range w.leaked {
		require.NotEqual(w.t, a, b, "address %s given to %s while the files still reserve it for %s, killed by the reboot", a, id, other)
	}
	w.m.added(id, a)
}

func (w *walk) add(r runner, ids ...string) {
	w.t.Helper()
	for _, id := range ids {
		a, err := w.n.add(r, id)
		require.NoError(w.t, err, "ADD %s by %s", id, r)
		w.added(id, a)
	}
}

func (w *walk) del(r runner, ids ...string) {
	w.t.Helper()
	for _, id := range ids {
		require.NoError(w.t, w.n.del(r, id), "DEL %s by %s", id, r)
		w.m.deleted(id)
	}
}

// invokeAdd adds through pkg/invoke, as bridge asks its IPAM plugin.
func (w *walk) invokeAdd(r runner, ids ...string) {
	w.t.Helper()
	for _, id := range ids {
		a, err := w.n.delegateAdd(r, id)
		require.NoError(w.t, err, "DelegateAdd %s by %s", id, r)
		w.added(id, a)
		w.viaInvoke[id] = true
	}
}

// reboot kills every container. freed says the phase serves the
// checkpoint alone (3), which drops the earlier boot's state; otherwise
// host-local's files keep reserving the dead containers' addresses.
func (w *walk) reboot(id string, freed bool) {
	w.n.reboot(id)
	if !freed {
		maps.Copy(w.leaked, w.m.live)
	} else {
		clear(w.leaked)
	}
	clear(w.m.live)
}

// reserved is what a side must hold: the live containers and the leaked
// reservations.
func (w *walk) reserved() map[string]netip.Addr {
	out := maps.Clone(w.m.live)
	maps.Copy(out, w.leaked)
	return out
}

// sides checks that host-local's files and the checkpoint hold exactly
// what the runtime was told, for the sides the last phase keeps current.
func (w *walk) sides(files, ckpt bool) {
	w.t.Helper()
	if files {
		assert.Equal(w.t, w.reserved(), w.n.files(), "host-local's files")
	}
	if ckpt {
		got, _ := w.n.checkpointed()
		assert.Equal(w.t, w.reserved(), got, "the checkpoint")
	}
	if w.t.Failed() {
		w.t.FailNow()
	}
}

// checkAll runs the runtime's CHECK for every live container.
func (w *walk) checkAll(r runner) {
	w.t.Helper()
	for id := range w.m.live {
		if w.viaInvoke[id] {
			assert.NoError(w.t, w.n.delegateCheck(r, id), "DelegateCheck %s by %s", id, r)
		} else {
			assert.NoError(w.t, w.n.check(r, id), "CHECK %s by %s", id, r)
		}
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// TestWalkThrough walks one node through a rollout the way it happens:
// the real host-local serves while the new binary is rolled out, both run
// side by side, the node moves phase by phase to 3, is rolled back by
// both binaries, reboots twice, and is garbage-collected, with 32 ADDs at
// once on the way. After every step, the sides the phase keeps current
// hold exactly the addresses the runtime was told (no address lost), and
// no ADD ever hands out an address a container holds (none given twice).
func TestWalkThrough(t *testing.T) {
	w := newWalk(t)
	w.step("the old binary: host-local serves")
	w.add(hl, "a0", "a1", "a2", "a3")
	w.del(hl, "a1")
	w.sides(true, false)

	w.step("the new binary replaces it in phase 0: host-local's behaviour, and the checkpoint marked")
	w.add(ps("legacy"), "b0")
	w.del(ps("legacy"), "a2")
	w.sides(true, false)
	_, meta := w.n.checkpointed()
	assert.Equal(t, "legacy", meta.Phase, "phase 0 marks the checkpoint")

	w.step("rolling out phase 1 while host-local still runs: 8 ADDs of each at once")
	mixed := ids("m", 16)
	for id, a := range w.n.addMany(func(i int) runner {
		if i%2 == 0 {
			return hl
		}
		return ps("expand")
	}, mixed) {
		w.added(id, a)
	}
	w.sides(true, false)

	w.step("phase 1: the checkpoint rewritten from host-local's files")
	w.add(ps("expand"), "c0")
	w.sides(true, true)
	require.NoError(t, w.n.status(ps("expand")))

	w.step("a downgrade to the old binary")
	w.add(hl, "d0")
	w.del(hl, "b0")
	w.sides(true, false)

	w.step("phase 2: the checkpoint reconciled with what host-local did meanwhile")
	w.add(ps("migrate"), "e0")
	w.sides(true, true)

	w.step("phase 2, through pkg/invoke as bridge calls its IPAM plugin")
	w.invokeAdd(ps("migrate"), "f0", "f1")
	w.sides(true, true)

	w.step("phase 2: 32 ADDs at once")
	for id, a := range w.n.addMany(func(int) runner { return ps("migrate") }, ids("g", 32)) {
		w.added(id, a)
	}
	w.sides(true, true)

	w.step("phase 3: the checkpoint alone")
	w.add(ps("contract"), "h0")
	w.del(ps("contract"), "g00")
	w.sides(false, true)

	w.step("phase 3: GC, through libcni, keeps the valid attachments")
	valid := []string{}
	for id := range w.m.live {
		if id != "f0" && id != "g01" {
			valid = append(valid, id)
		}
	}
	// libcni DELs g01, which it has cached; f0, added through pkg/invoke,
	// is released by the plugin's GC.
	require.NoError(t, w.n.gc(ps("contract"), valid...))
	w.m.deleted("f0")
	w.m.deleted("g01")
	w.sides(false, true)

	w.step("a downgrade to phase 2: host-local's files healed from the checkpoint")
	w.add(ps("migrate"), "i0")
	w.sides(true, true)

	w.step("the old binary after phase 2")
	w.add(hl, "j0")
	w.sides(true, false)

	w.step("a reboot in phase 2: the files still reserve the dead containers' addresses, as host-local's do")
	w.reboot("boot-2", false)
	w.add(ps("migrate"), "k0")
	w.sides(true, true)
	w.step("... until the runtime's GC releases them")
	require.NoError(t, w.n.gc(ps("migrate"), "k0"))
	clear(w.leaked)
	w.sides(true, true)

	w.step("a reboot in phase 3: the earlier boot's state is dropped")
	w.add(ps("contract"), "l0")
	w.reboot("boot-3", true)
	w.add(ps("contract"), "m0")
	w.sides(false, true)

	w.step("a downgrade from 3 to this plugin's phase 0: the files healed from the checkpoint")
	w.add(ps("legacy"), "n0")
	w.sides(true, false)

	w.step("the old binary, then phase 1 again")
	w.add(hl, "o0")
	w.add(ps("expand"), "p0")
	w.sides(true, true)
	w.checkAll(ps("expand"))
}

// TestRollbackAfterPhase3ReusedAnAddress: phase 3 releases an address in
// its checkpoint only (host-local's file for it stays) and hands it out
// again; rolling back, the first exec in phase 0 rewrites host-local's
// files from the checkpoint, removing the stale reservation first, and
// then host-local serves without handing out a held address (found by a
// black-box test: every exec of phases 0 to 2 failed from then on, "held
// by" the deleted container).
func TestRollbackAfterPhase3ReusedAnAddress(t *testing.T) {
	w := newWalk(t)
	w.n.ranges = `[[{"subnet": "10.23.0.0/29"}]]` // 10.23.0.2 to .6
	w.add(ps("migrate"), "a")
	w.sides(true, true)
	w.del(ps("contract"), "a")
	w.add(ps("contract"), "b", "c", "d", "e", "a2") // round robin wraps: a2 gets a's address
	w.del(ps("contract"), "b")                      // b's file stays too
	w.sides(false, true)

	w.add(ps("legacy"), "x")
	w.sides(true, false)
	w.del(hl, "c")
	w.add(hl, "y")
	w.sides(true, false)
}
