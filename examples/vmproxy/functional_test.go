package main

// Functional tests: they build the real binary (see binary in
// main_test.go), run it on a socket and a checkpoint in a temporary
// directory, and kill it the way a crash would.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
)

func TestBinaryHelp(t *testing.T) {
	out, err := exec.Command(binary(t), "--help").CombinedOutput()
	require.NoError(t, err, "--help exits 0")
	for _, want := range []string{"Usage: vmproxy", "-socket", "-state", "-phase", "-error-on-failure-to-restore", "-lock-wait", phaseEnv} {
		assert.Contains(t, string(out), want)
	}
}

// TestKillRestoresEverything registers VMs, attaches, creates tokens, opens
// sessions and closes one, kills the proxy with SIGKILL, and requires the
// restarted proxy to list byte for byte what the killed one listed.
func TestKillRestoresEverything(t *testing.T) {
	e := newEnv(t)
	d := e.start(t)
	c := e.dial(t)
	c.ok(request{Op: "register", VM: "vm-1", Console: "/run/vc/vm-1/console.sock"})
	c.ok(request{Op: "register", VM: "vm-2", Console: "/run/vc/vm-2/console.sock"})
	c.ok(request{Op: "attach", VM: "vm-1"})
	c.ok(request{Op: "attach", VM: "vm-1"})
	c.ok(request{Op: "attach", VM: "vm-2"})
	var toks []string
	for _, vm := range []string{"vm-1", "vm-1", "vm-1", "vm-2"} {
		toks = append(toks, c.ok(request{Op: "token", VM: vm}).Token)
	}
	s1 := c.ok(request{Op: "open", Token: toks[0]}).Session
	c.ok(request{Op: "open", Token: toks[1]})
	c.ok(request{Op: "open", VM: "vm-2", Token: toks[3]})
	c.ok(request{Op: "close", Session: s1})
	before, vms := c.list()
	require.Len(t, vms, 2)
	require.Len(t, vms[0].Tokens, 3)
	require.Len(t, vms[0].Sessions, 1)

	d.kill9()
	e.start(t)
	after, _ := e.dial(t).list()
	assert.Equal(t, before, after)
}

// vmModel is what the test expects the proxy to hold for one VM.
type vmModel struct {
	console  string
	attached int
	tokens   map[string]bool   // token -> exists
	sessions map[string]string // session -> token
}

// stateModel is the test's own account of every acknowledged change.
type stateModel map[string]*vmModel

// fromList turns a list answer into a model, to compare with the test's.
func fromList(vms []vmView) stateModel {
	m := stateModel{}
	for _, v := range vms {
		vm := &vmModel{console: v.Console, attached: v.Attached, tokens: map[string]bool{}, sessions: map[string]string{}}
		for _, tok := range v.Tokens {
			vm.tokens[tok.Token] = true
		}
		for _, s := range v.Sessions {
			vm.sessions[s.ID] = s.Token
		}
		m[v.ID] = vm
	}
	return m
}

func testSeed(t *testing.T) uint64 {
	seed := uint64(20261130)
	if s := os.Getenv("VMPROXY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		seed = v
	}
	t.Logf("seed %d (set VMPROXY_SEED to replay another)", seed)
	return seed
}

// mutate makes one random change, or a request that must be refused, and
// records what was acknowledged in m.
func mutate(t *testing.T, rng *rand.Rand, c *client, m stateModel, next *int) {
	t.Helper()
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if len(ids) == 0 || rng.IntN(6) == 0 {
		*next++
		id := fmt.Sprintf("vm-%d", *next)
		console := fmt.Sprintf("/run/vc/%s/console.sock", id)
		c.ok(request{Op: "register", VM: id, Console: console})
		m[id] = &vmModel{console: console, tokens: map[string]bool{}, sessions: map[string]string{}}
		return
	}
	id := ids[rng.IntN(len(ids))]
	vm := m[id]
	free := []string{} // tokens without an open session
	for tok := range vm.tokens {
		if !slices.Contains(mapValues(vm.sessions), tok) {
			free = append(free, tok)
		}
	}
	slices.Sort(free)
	switch op := rng.IntN(20); {
	case op < 4:
		vm.attached++
		assert.Equal(t, vm.attached, c.ok(request{Op: "attach", VM: id}).Attached)
	case op < 9:
		vm.tokens[c.ok(request{Op: "token", VM: id}).Token] = true
	case op < 13 && len(free) > 0:
		tok := free[rng.IntN(len(free))]
		req := request{Op: "open", Token: tok}
		if rng.IntN(2) == 0 {
			req.VM = id
		}
		vm.sessions[c.ok(req).Session] = tok
	case op < 16 && len(vm.sessions) > 0:
		sessions := mapKeys(vm.sessions)
		s := sessions[rng.IntN(len(sessions))]
		c.ok(request{Op: "close", Session: s})
		delete(vm.sessions, s)
	case op < 17:
		c.ok(request{Op: "unregister", VM: id})
		delete(m, id)
	default:
		// Requests that must be refused, and change nothing.
		refusals := []request{
			{Op: "register", VM: id},
			{Op: "attach", VM: "no-such-vm"},
			{Op: "open", Token: "NOSUCHTOKEN"},
			{Op: "close", Session: "s-none"},
		}
		for _, s := range mapKeys(vm.sessions) {
			refusals = append(refusals, request{Op: "open", Token: vm.sessions[s]})
		}
		req := refusals[rng.IntN(len(refusals))]
		resp := c.call(req)
		require.False(t, resp.OK, "%+v was accepted", req)
	}
}

func mapKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func mapValues(m map[string]string) []string {
	vs := make([]string, 0, len(m))
	for _, v := range m {
		vs = append(vs, v)
	}
	return vs
}

// TestKillRandomRounds makes random changes, kills the proxy with SIGKILL
// right after the last acknowledgement, restarts it on the same state and
// requires every acknowledged change to be there, round after round.
func TestKillRandomRounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 1))
	e := newEnv(t)
	m := stateModel{}
	next := 0
	parent := t // owns the daemons, which outlive each round
	d := e.start(parent)
	const rounds, changes = 6, 25
	for round := range rounds {
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			c := e.dial(t)
			for range changes {
				mutate(t, rng, c, m, &next)
			}
			d.kill9()
			d = e.start(parent)
			_, vms := e.dial(t).list()
			require.Equal(t, m, fromList(vms), "after kill -9 and restart")
			for _, v := range vms {
				assert.False(t, v.Registered.IsZero())
			}
		})
	}
}

// TestKillDuringBurst kills the proxy while several clients are changing
// state at once (so writes are group-committed): every change acknowledged
// before the kill must be back; changes whose answer was lost may be there
// or not.
func TestKillDuringBurst(t *testing.T) {
	e := newEnv(t)
	d := e.start(t)
	setup := e.dial(t)
	setup.ok(request{Op: "register", VM: "shared"})
	const workers = 4
	type result struct {
		vm       string
		acked    []string // tokens acknowledged
		tried    int      // token requests sent
		attached int      // largest attach count acknowledged
		attaches int      // attach requests sent
	}
	results := make([]result, workers)
	for w := range workers {
		results[w].vm = fmt.Sprintf("vm-%d", w)
		setup.ok(request{Op: "register", VM: results[w].vm})
	}
	var wg sync.WaitGroup
	var acks sync.WaitGroup
	acks.Add(workers)
	for w := range workers {
		c := e.dial(t)
		r := &results[w]
		wg.Add(1)
		go func() {
			defer wg.Done()
			signalled := false
			for i := 0; ; i++ {
				var resp response
				var err error
				if i%3 == 2 {
					r.attaches++
					resp, err = c.try(request{Op: "attach", VM: "shared"})
					if err == nil && resp.OK {
						r.attached = max(r.attached, resp.Attached)
					}
				} else {
					r.tried++
					resp, err = c.try(request{Op: "token", VM: r.vm})
					if err == nil && resp.OK {
						r.acked = append(r.acked, resp.Token)
					}
				}
				if err != nil {
					break // killed
				}
				if !resp.OK {
					t.Errorf("refused before the kill: %s", resp.Error)
					break
				}
				if i == 20 && !signalled {
					acks.Done()
					signalled = true
				}
			}
			if !signalled {
				acks.Done()
			}
		}()
	}
	acks.Wait() // every worker has had 20 answers; the next ones are in flight
	d.kill9()
	wg.Wait()

	e.start(t)
	_, vms := e.dial(t).list()
	got := fromList(vms)
	attaches := 0
	for _, r := range results {
		vm := got[r.vm]
		require.NotNil(t, vm, r.vm)
		for _, tok := range r.acked {
			assert.True(t, vm.tokens[tok], "an acknowledged token of %s is missing", r.vm)
		}
		assert.LessOrEqual(t, len(vm.tokens), r.tried, "more tokens than were asked for")
		assert.GreaterOrEqual(t, got["shared"].attached, r.attached)
		attaches += r.attaches
	}
	assert.LessOrEqual(t, got["shared"].attached, attaches)
}

// flipByte corrupts the file the way bit rot would.
func flipByte(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[len(b)/2] ^= 0x01
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return b
}

func corruptFiles(t *testing.T, e env) []string {
	t.Helper()
	m, err := filepath.Glob(e.state + ".corrupt-*")
	require.NoError(t, err)
	// A quarantined checkpoint's journal goes with it, under its name +
	// ".journal": one checkpoint kept aside.
	return slices.DeleteFunc(m, func(p string) bool { return strings.HasSuffix(p, ".journal") })
}

// populate starts a proxy on e, registers vm-1 with a token, stops it and
// returns the token.
func populate(t *testing.T, e env) {
	t.Helper()
	d := e.start(t)
	c := e.dial(t)
	c.ok(request{Op: "register", VM: "vm-1"})
	c.ok(request{Op: "token", VM: "vm-1"})
	d.kill9()
}

func TestCorruptCheckpoint(t *testing.T) {
	t.Run("default quarantines and starts empty", func(t *testing.T) {
		e := newEnv(t)
		populate(t, e)
		corrupted := flipByte(t, e.state)

		d := e.start(t)
		_, vms := e.dial(t).list()
		assert.Empty(t, vms)
		moved := corruptFiles(t, e)
		require.Len(t, moved, 1, "the corrupt file is kept aside")
		b, err := os.ReadFile(moved[0])
		require.NoError(t, err)
		assert.Equal(t, corrupted, b, "byte for byte")
		assert.Contains(t, d.stderr.String(), moved[0], "the log says where it went")
		assert.Contains(t, d.stderr.String(), "checksum mismatch")

		// The fresh file works: a change survives the next kill.
		e.dial(t).ok(request{Op: "register", VM: "vm-2"})
		d.kill9()
		e.start(t)
		_, vms = e.dial(t).list()
		require.Len(t, vms, 1)
		assert.Equal(t, "vm-2", vms[0].ID)
	})
	t.Run("strict exits and leaves the file alone", func(t *testing.T) {
		e := newEnv(t)
		populate(t, e)
		corrupted := flipByte(t, e.state)

		code, stderr := e.runToExit(t, "--error-on-failure-to-restore")
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr, e.state)
		assert.Contains(t, stderr, "corrupt")
		assert.Contains(t, stderr, "--error-on-failure-to-restore is set")
		b, err := os.ReadFile(e.state)
		require.NoError(t, err)
		assert.Equal(t, corrupted, b, "the file is untouched")
		assert.Empty(t, corruptFiles(t, e))
		_, err = net.Dial("unix", e.socket)
		assert.Error(t, err, "it never served")
	})
}

// writeRaw writes a checkpoint whose entries are raw JSON values: intact
// (its checksum holds) whether or not each value is a VM.
func writeRaw(t *testing.T, path string, entries map[string]json.RawMessage, opts ...checkpoint.Option) {
	t.Helper()
	ctx := context.Background()
	f, err := checkpoint.Open[string, json.RawMessage](ctx, path, opts...)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, json.RawMessage]{
		Meta: checkpoint.Meta{Phase: "contract", Writer: "vmproxy test"}, Entries: entries,
	}))
}

const badValue = `"oops-this-value-is-not-a-vm"`

func partialEntries() map[string]json.RawMessage {
	return map[string]json.RawMessage{
		"vm-good-1": json.RawMessage(`{"console":"/run/vc/vm-good-1/console.sock","registered":"2026-11-30T08:00:00Z","attached":1,"tokens":{"TOKENGOODONE":{"created":"2026-11-30T08:00:01Z"}},"sessions":{"s-1":{"token":"TOKENGOODONE","opened":"2026-11-30T08:00:02Z"}}}`),
		"vm-bad":    json.RawMessage(badValue),
		"vm-good-2": json.RawMessage(`{"registered":"2026-11-30T08:00:00Z"}`),
	}
}

// invalidEntries are records that decode as a VM but that the proxy would
// never have stored (validateVM): each must be refused like one that does
// not decode, without its token in any log or error.
func invalidEntries() map[string]json.RawMessage {
	return map[string]json.RawMessage{
		"":                 json.RawMessage(`{"registered":"2026-11-30T08:00:00Z"}`),
		"vm-no-token":      json.RawMessage(`{"registered":"2026-11-30T08:00:00Z","sessions":{"s-9":{"token":"","opened":"2026-11-30T08:00:02Z"}}}`),
		"vm-stray-session": json.RawMessage(`{"registered":"2026-11-30T08:00:00Z","sessions":{"s-8":{"token":"TOKENNOTISSUED","opened":"2026-11-30T08:00:02Z"}}}`),
		"vm-shared-token":  json.RawMessage(`{"registered":"2026-11-30T08:00:00Z","tokens":{"TOKENSHARED":{"created":"2026-11-30T08:00:01Z"}},"sessions":{"s-1":{"token":"TOKENSHARED","opened":"2026-11-30T08:00:02Z"},"s-2":{"token":"TOKENSHARED","opened":"2026-11-30T08:00:02Z"}}}`),
		"vm-relative":      json.RawMessage(`{"console":"console.sock","registered":"2026-11-30T08:00:00Z"}`),
	}
}

func TestInvalidRecords(t *testing.T) {
	t.Run("default serves the valid VMs and names the others", func(t *testing.T) {
		e := newEnv(t)
		entries := invalidEntries()
		entries["vm-good-2"] = partialEntries()["vm-good-2"]
		writeRaw(t, e.state, entries)

		d := e.start(t)
		_, vms := e.dial(t).list()
		assert.Equal(t, stateModel{"vm-good-2": {tokens: map[string]bool{}, sessions: map[string]string{}}}, fromList(vms))
		stderr := d.stderr.String()
		for _, id := range []string{"vm-no-token", "vm-stray-session", "vm-shared-token", "vm-relative"} {
			assert.Contains(t, stderr, `"vm":"`+id+`"`, "the log names %s", id)
		}
		assert.Contains(t, stderr, "holds a token the VM never issued")
		assert.NotContains(t, stderr, "TOKENNOTISSUED", "a token is never logged")
		assert.NotContains(t, stderr, "TOKENSHARED", "a token is never logged")
		assert.Len(t, corruptFiles(t, e), 1, "the original is kept for recovery by hand")
	})
	t.Run("strict exits and leaves the file alone", func(t *testing.T) {
		e := newEnv(t)
		writeRaw(t, e.state, invalidEntries())
		before, err := os.ReadFile(e.state)
		require.NoError(t, err)

		code, stderr := e.runToExit(t, "--error-on-failure-to-restore")
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr, "vm-stray-session")
		assert.NotContains(t, stderr, "TOKENNOTISSUED")
		assert.NotContains(t, stderr, "TOKENSHARED")
		after, err := os.ReadFile(e.state)
		require.NoError(t, err)
		assert.Equal(t, before, after, "the file is untouched")
	})
}

func TestPartialCheckpoint(t *testing.T) {
	t.Run("default restores the rest and names the bad VM", func(t *testing.T) {
		e := newEnv(t)
		writeRaw(t, e.state, partialEntries())

		d := e.start(t)
		_, vms := e.dial(t).list()
		got := fromList(vms)
		assert.Equal(t, stateModel{
			"vm-good-1": {console: "/run/vc/vm-good-1/console.sock", attached: 1,
				tokens: map[string]bool{"TOKENGOODONE": true}, sessions: map[string]string{"s-1": "TOKENGOODONE"}},
			"vm-good-2": {tokens: map[string]bool{}, sessions: map[string]string{}},
		}, got)
		stderr := d.stderr.String()
		assert.Contains(t, stderr, `"vm":"vm-bad"`, "the log names the VM that was not restored")
		assert.Contains(t, stderr, "VM not restored")
		assert.NotContains(t, stderr, "oops-this-value", "but not its value")
		assert.Len(t, corruptFiles(t, e), 1, "the original is kept for recovery by hand")

		// The next start reads a clean file.
		d.kill9()
		d = e.start(t)
		_, vms = e.dial(t).list()
		assert.Len(t, vms, 2)
		assert.NotContains(t, d.stderr.String(), "VM not restored")
	})
	t.Run("strict exits and names the bad VM", func(t *testing.T) {
		e := newEnv(t)
		writeRaw(t, e.state, partialEntries())
		before, err := os.ReadFile(e.state)
		require.NoError(t, err)

		code, stderr := e.runToExit(t, "--error-on-failure-to-restore")
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr, "vm-bad")
		assert.Contains(t, stderr, e.state)
		assert.NotContains(t, stderr, "oops-this-value")
		after, err := os.ReadFile(e.state)
		require.NoError(t, err)
		assert.Equal(t, before, after, "the file is untouched")
		assert.Empty(t, corruptFiles(t, e))
	})
}

// TestStateFromEarlierBoot: the VMs in a file written before the last
// reboot died with it; the proxy must not bring them back.
func TestStateFromEarlierBoot(t *testing.T) {
	e := newEnv(t)
	writeRaw(t, e.state, map[string]json.RawMessage{"vm-1": json.RawMessage(`{"registered":"2026-11-30T08:00:00Z"}`)},
		checkpoint.WithBootID(func() (string, error) { return "00000000-0000-0000-0000-000000000000", nil }))
	d := e.start(t)
	_, vms := e.dial(t).list()
	assert.Empty(t, vms)
	assert.Contains(t, d.stderr.String(), "the saved state was not used")
	assert.Contains(t, d.stderr.String(), "reboot")
}

// TestSecretsNotLogged runs a whole session at debug level, refusals
// included, and requires that no token value reaches stderr.
func TestSecretsNotLogged(t *testing.T) {
	e := newEnv(t)
	d := e.start(t, "--log-level", "debug")
	c := e.dial(t)
	c.ok(request{Op: "register", VM: "vm-secret", Console: "/run/vc/vm-secret/console.sock"})
	c.ok(request{Op: "attach", VM: "vm-secret"})
	var toks []string
	for range 3 {
		toks = append(toks, c.ok(request{Op: "token", VM: "vm-secret"}).Token)
	}
	s := c.ok(request{Op: "open", Token: toks[0]}).Session
	c.ok(request{Op: "open", VM: "vm-secret", Token: toks[1]})
	assert.False(t, c.call(request{Op: "open", Token: toks[1]}).OK)
	c.ok(request{Op: "close", Session: s})
	const guessed = "GUESSEDTOKENVALUE0123456789"
	assert.False(t, c.call(request{Op: "open", Token: guessed}).OK)
	assert.False(t, c.call(request{Op: "close", Session: toks[2]}).OK)
	assert.False(t, c.call(`{"op":"open","token":"`+toks[2]+`"`).OK)
	assert.False(t, c.call(`{"op":"open","tokn":"`+toks[2]+`"}`).OK)
	c.list()
	d.kill9()
	d = e.start(t, "--log-level", "debug") // the restore is logged too
	e.dial(t).ok(request{Op: "unregister", VM: "vm-secret"})
	require.Equal(t, 0, d.stop())

	all := d.stderr.String()
	for _, tok := range append(toks, guessed) {
		assert.NotContains(t, all, tok)
	}
	// Not vacuous: the log did record the session, by VM and count.
	assert.Contains(t, all, `"vm":"vm-secret"`)
	assert.Contains(t, all, `"tokens":3`)
}

// TestSecondInstanceLocked starts a second proxy on the same state while
// the first runs: it must fail fast, name the first's PID, and leave the
// first serving (its socket included).
func TestSecondInstanceLocked(t *testing.T) {
	e := newEnv(t)
	d := e.start(t)
	e.dial(t).ok(request{Op: "register", VM: "vm-1"})

	start := time.Now()
	code, stderr := e.runToExit(t, "--lock-wait", "200ms")
	assert.Equal(t, 1, code)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Contains(t, stderr, fmt.Sprintf("locked by process %d", d.cmd.Process.Pid))
	assert.Contains(t, stderr, e.state)

	_, vms := e.dial(t).list()
	assert.Len(t, vms, 1, "the first instance still serves")
}

// TestSIGTERM: a clean shutdown exits 0, removes the socket and releases
// the lock, so the next instance starts at once with the state.
func TestSIGTERM(t *testing.T) {
	e := newEnv(t)
	d := e.start(t)
	c := e.dial(t)
	c.ok(request{Op: "register", VM: "vm-1"})
	tok := c.ok(request{Op: "token", VM: "vm-1"}).Token
	c.ok(request{Op: "open", Token: tok})
	before, _ := c.list()

	assert.Equal(t, 0, d.stop(), d.stderr.String())
	_, err := os.Stat(e.socket)
	assert.True(t, os.IsNotExist(err), "the socket is removed")

	e.start(t, "--lock-wait", "0")
	after, _ := e.dial(t).list()
	assert.Equal(t, before, after)
}

// TestBadInputOverSocket sends what a broken client might and requires
// answers, not a crash.
func TestBadInputOverSocket(t *testing.T) {
	e := newEnv(t)
	d := e.start(t)
	c := e.dial(t)
	for _, line := range []string{`{"op":`, `hello`, `[]`, `{"op":"reboot"}`, `{"op":"attach","vm":"nope"}`, "\x00\x01\x02", `{"op":"list","vm":7}`} {
		resp := c.call(line)
		assert.False(t, resp.OK, line)
		assert.NotEmpty(t, resp.Code, line)
	}
	c.ok(request{Op: "register", VM: "vm-1"})

	// A line longer than maxRequest is answered, then the connection is
	// closed: the rest of it cannot be told from the next request.
	long := e.dial(t)
	resp := long.call(`{"op":"register","vm":"` + strings.Repeat("x", maxRequest) + `"}`)
	assert.Equal(t, "bad_request", resp.Code)
	_, err := long.try(request{Op: "list"})
	assert.Error(t, err)

	// A client that hangs up mid-line does not disturb the proxy.
	half := e.dial(t)
	_, _ = half.c.Write([]byte(`{"op":"regis`))
	_ = half.c.Close()

	_, vms := c.list()
	assert.Len(t, vms, 1)
	assert.Equal(t, 0, d.stop(), d.stderr.String())
}
