package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
)

// testProxy is a proxy on a checkpoint file in a temporary directory, with
// its log kept for inspection.
type testProxy struct {
	*proxy
	t      *testing.T // where assertions go; subtests set it
	owner  *testing.T // whose cleanup closes the proxy
	path   string
	phase  migrate.Phase
	logs   *observer.ObservedLogs
	report migrate.Report[string]
}

// openTestProxy starts a proxy on the checkpoint at path.
func openTestProxy(t *testing.T, path string, phase migrate.Phase) *testProxy {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	p, report, err := openProxy(context.Background(), path, 0, proxyConfig{Phase: phase, Logger: zap.New(core)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return &testProxy{proxy: p, t: t, owner: t, path: path, phase: phase, logs: logs, report: report}
}

// restart closes the proxy and starts a new one on the same file in phase,
// as a restart of the daemon would. Close saves nothing (every write was
// already durable), so what the new proxy restores is what the old one
// stored before it answered.
func (tp *testProxy) restart(phase migrate.Phase) *testProxy {
	tp.t.Helper()
	require.NoError(tp.t, tp.Close())
	next := openTestProxy(tp.owner, tp.path, phase)
	next.t = tp.t
	return next
}

func (tp *testProxy) do(req request) response {
	return tp.handle(context.Background(), req)
}

func (tp *testProxy) mustDo(req request) response {
	tp.t.Helper()
	resp := tp.do(req)
	require.Truef(tp.t, resp.OK, "%+v: %s", req, resp.Error)
	return resp
}

// listed returns list's answer as JSON, the form a client sees.
func (tp *testProxy) listed() string {
	tp.t.Helper()
	b, err := json.Marshal(tp.do(request{Op: "list"}))
	require.NoError(tp.t, err)
	return string(b)
}

func tempState(t *testing.T) string { return filepath.Join(t.TempDir(), "state.json") }

// fixture is a proxy with vm-1 registered, attached once, with two tokens,
// the first in an open session, and vm-2 registered bare.
type fixture struct {
	*testProxy
	tok1, tok2, sess1 string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	tp := openTestProxy(t, tempState(t), migrate.PhaseContract)
	tp.mustDo(request{Op: "register", VM: "vm-1", Console: "/run/vc/vm-1/console.sock"})
	tp.mustDo(request{Op: "register", VM: "vm-2"})
	tp.mustDo(request{Op: "attach", VM: "vm-1"})
	f := fixture{testProxy: tp}
	f.tok1 = tp.mustDo(request{Op: "token", VM: "vm-1"}).Token
	f.tok2 = tp.mustDo(request{Op: "token", VM: "vm-1"}).Token
	f.sess1 = tp.mustDo(request{Op: "open", Token: f.tok1}).Session
	return f
}

func TestHandle(t *testing.T) {
	type tc struct {
		name  string
		req   func(f fixture) request
		code  string                                    // "" means success
		check func(t *testing.T, f fixture, r response) // after success
	}
	cases := []tc{
		{name: "register", req: func(fixture) request {
			return request{Op: "register", VM: "vm-3", Console: "/run/vc/vm-3/console.sock"}
		},
			check: func(t *testing.T, f fixture, r response) {
				vm, ok := f.store.Get("vm-3")
				require.True(t, ok)
				assert.Equal(t, "/run/vc/vm-3/console.sock", vm.Console)
				assert.False(t, vm.Registered.IsZero())
			}},
		{name: "register without console", req: func(fixture) request { return request{Op: "register", VM: "vm-3"} }},
		{name: "register duplicate", code: "conflict", req: func(fixture) request { return request{Op: "register", VM: "vm-1"} }},
		{name: "register without vm", code: "bad_request", req: func(fixture) request { return request{Op: "register"} }},
		{name: "register relative console", code: "bad_request", req: func(fixture) request { return request{Op: "register", VM: "vm-3", Console: "console.sock"} }},
		{name: "register vm with a space", code: "bad_request", req: func(fixture) request { return request{Op: "register", VM: "vm 3"} }},
		{name: "register vm with a control character", code: "bad_request", req: func(fixture) request { return request{Op: "register", VM: "vm\n3"} }},
		{name: "register vm ID too long", code: "bad_request", req: func(fixture) request { return request{Op: "register", VM: string(make([]byte, maxID+1))} }},
		{name: "attach", req: func(fixture) request { return request{Op: "attach", VM: "vm-1"} },
			check: func(t *testing.T, f fixture, r response) { assert.Equal(t, 2, r.Attached) }},
		{name: "attach unknown VM", code: "not_found", req: func(fixture) request { return request{Op: "attach", VM: "vm-9"} }},
		{name: "token", req: func(fixture) request { return request{Op: "token", VM: "vm-2"} },
			check: func(t *testing.T, f fixture, r response) {
				assert.Len(t, r.Token, 26)
				vm, _ := f.store.Get("vm-2")
				assert.Contains(t, vm.Tokens, r.Token)
			}},
		{name: "token unknown VM", code: "not_found", req: func(fixture) request { return request{Op: "token", VM: "vm-9"} }},
		{name: "open by token", req: func(f fixture) request { return request{Op: "open", Token: f.tok2} },
			check: func(t *testing.T, f fixture, r response) {
				assert.Equal(t, "vm-1", r.VM)
				vm, _ := f.store.Get("vm-1")
				assert.Equal(t, f.tok2, vm.Sessions[r.Session].Token)
			}},
		{name: "open by VM and token", req: func(f fixture) request { return request{Op: "open", VM: "vm-1", Token: f.tok2} }},
		{name: "open on unknown token", code: "not_found", req: func(fixture) request { return request{Op: "open", Token: "NOSUCHTOKEN"} }},
		{name: "open on another VM's token", code: "not_found", req: func(f fixture) request { return request{Op: "open", VM: "vm-2", Token: f.tok2} }},
		{name: "open on unknown VM", code: "not_found", req: func(f fixture) request { return request{Op: "open", VM: "vm-9", Token: f.tok2} }},
		{name: "open on token in use", code: "conflict", req: func(f fixture) request { return request{Op: "open", Token: f.tok1} }},
		{name: "open without token", code: "bad_request", req: func(fixture) request { return request{Op: "open", VM: "vm-1"} }},
		{name: "close", req: func(f fixture) request { return request{Op: "close", Session: f.sess1} },
			check: func(t *testing.T, f fixture, r response) {
				vm, _ := f.store.Get("vm-1")
				assert.Empty(t, vm.Sessions)
				assert.Contains(t, vm.Tokens, f.tok1, "closing a session keeps its token")
			}},
		{name: "close by VM and session", req: func(f fixture) request { return request{Op: "close", VM: "vm-1", Session: f.sess1} }},
		{name: "close unknown session", code: "not_found", req: func(fixture) request { return request{Op: "close", Session: "s-0"} }},
		{name: "close session of another VM", code: "not_found", req: func(f fixture) request { return request{Op: "close", VM: "vm-2", Session: f.sess1} }},
		{name: "close without session", code: "bad_request", req: func(fixture) request { return request{Op: "close"} }},
		{name: "unregister", req: func(fixture) request { return request{Op: "unregister", VM: "vm-1"} },
			check: func(t *testing.T, f fixture, r response) {
				_, ok := f.store.Get("vm-1")
				assert.False(t, ok)
				assert.Equal(t, "not_found", f.do(request{Op: "open", Token: f.tok2}).Code, "its tokens went with it")
			}},
		{name: "unregister unknown VM", code: "not_found", req: func(fixture) request { return request{Op: "unregister", VM: "vm-9"} }},
		{name: "list", req: func(fixture) request { return request{Op: "list"} },
			check: func(t *testing.T, f fixture, r response) {
				require.Len(t, r.VMs, 2)
				assert.Equal(t, "vm-1", r.VMs[0].ID)
				assert.Equal(t, 1, r.VMs[0].Attached)
				assert.Len(t, r.VMs[0].Tokens, 2)
				require.Len(t, r.VMs[0].Sessions, 1)
				assert.Equal(t, sessionView{ID: f.sess1, Token: f.tok1, Opened: r.VMs[0].Sessions[0].Opened}, r.VMs[0].Sessions[0])
				assert.Equal(t, "vm-2", r.VMs[1].ID)
				assert.NotNil(t, r.VMs[1].Tokens)
			}},
		{name: "list one VM", req: func(fixture) request { return request{Op: "list", VM: "vm-2"} },
			check: func(t *testing.T, f fixture, r response) {
				require.Len(t, r.VMs, 1)
				assert.Equal(t, "vm-2", r.VMs[0].ID)
			}},
		{name: "list unknown VM", code: "not_found", req: func(fixture) request { return request{Op: "list", VM: "vm-9"} }},
		{name: "unknown op", code: "unknown_op", req: func(fixture) request { return request{Op: "reboot", VM: "vm-1"} }},
		{name: "no op", code: "bad_request", req: func(fixture) request { return request{VM: "vm-1"} }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			before := f.listed()
			resp := f.do(c.req(f))
			if c.code != "" {
				assert.False(t, resp.OK)
				assert.Equal(t, c.code, resp.Code, resp.Error)
				assert.NotEmpty(t, resp.Error)
				assert.Equal(t, before, f.listed(), "a refused request changes nothing")
				return
			}
			require.True(t, resp.OK, resp.Error)
			if c.check != nil {
				c.check(t, f, resp)
			}
		})
	}
}

func TestHandleLine(t *testing.T) {
	cases := []struct{ name, line, code string }{
		{"malformed JSON", `{"op":`, "bad_request"},
		{"not JSON", `register vm-1`, "bad_request"},
		{"array", `[{"op":"list"}]`, "bad_request"},
		{"number", `42`, "bad_request"},
		{"null", `null`, "bad_request"},
		{"empty object", `{}`, "bad_request"},
		{"two objects on a line", `{"op":"list"} {"op":"list"}`, "bad_request"},
		{"trailing garbage", `{"op":"list"} x`, "bad_request"},
		{"unknown field", `{"op":"register","vm":"vm-3","consol":"/x"}`, "bad_request"},
		{"wrong type", `{"op":"register","vm":3}`, "bad_request"},
		{"unknown op", `{"op":"REGISTER","vm":"vm-3"}`, "unknown_op"},
		{"valid", `{"op":"register","vm":"vm-3"}`, ""},
		{"valid with spaces", `  {"op": "list"}  `, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			resp := f.handleLine(context.Background(), []byte(c.line))
			assert.Equal(t, c.code == "", resp.OK, resp.Error)
			assert.Equal(t, c.code, resp.Code)
		})
	}
}

// FuzzHandleLine feeds arbitrary lines to the handler: whatever arrives,
// the answer is a response (with a code when it is a refusal), never a
// panic.
func FuzzHandleLine(f *testing.F) {
	for _, s := range []string{
		`{"op":"register","vm":"vm-1","console":"/run/vc/vm-1/console.sock"}`,
		`{"op":"attach","vm":"vm-1"}`, `{"op":"token","vm":"vm-1"}`,
		`{"op":"open","token":"X"}`, `{"op":"close","session":"s-1"}`,
		`{"op":"unregister","vm":"vm-1"}`, `{"op":"list"}`, `{"op":`, `[]`, `"x"`, `{"op":"list","vm":"\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	mem := checkpoint.NewMemory[string, VM]()
	p, _, err := newProxy(context.Background(), proxyConfig{Phase: migrate.PhaseContract, Checkpoint: mem})
	require.NoError(f, err)
	defer p.Close()
	f.Fuzz(func(t *testing.T, line []byte) {
		resp := p.handleLine(context.Background(), line)
		if !resp.OK {
			assert.NotEmpty(t, resp.Code)
			assert.NotEmpty(t, resp.Error)
		}
		_, err := json.Marshal(resp)
		assert.NoError(t, err)
	})
}

// TestEveryChangeIsStored restarts the proxy after every change and
// requires the restarted proxy to list exactly what the old one did: a
// change that was acknowledged but kept only in memory (the cc-proxy
// review's "STORE only at RegisterVM") would be missing. Each step must
// also change the list, or the test would prove nothing.
func TestEveryChangeIsStored(t *testing.T) {
	for _, phase := range []migrate.Phase{migrate.PhaseMigrate, migrate.PhaseContract} {
		t.Run(phase.String(), func(t *testing.T) {
			tp := openTestProxy(t, tempState(t), phase)
			var tok, sess string
			steps := []struct {
				name string
				req  func() request
				keep func(response)
			}{
				{"register", func() request { return request{Op: "register", VM: "vm-1", Console: "/run/vc/vm-1/console.sock"} }, nil},
				{"attach", func() request { return request{Op: "attach", VM: "vm-1"} }, nil},
				{"attach again", func() request { return request{Op: "attach", VM: "vm-1"} }, nil},
				{"token", func() request { return request{Op: "token", VM: "vm-1"} }, func(r response) { tok = r.Token }},
				{"second token", func() request { return request{Op: "token", VM: "vm-1"} }, nil},
				{"open session", func() request { return request{Op: "open", Token: tok} }, func(r response) { sess = r.Session }},
				{"close session", func() request { return request{Op: "close", Session: sess} }, nil},
				{"reopen session", func() request { return request{Op: "open", VM: "vm-1", Token: tok} }, nil},
				{"register another", func() request { return request{Op: "register", VM: "vm-2"} }, nil},
				{"unregister", func() request { return request{Op: "unregister", VM: "vm-1"} }, nil},
			}
			prev := tp.listed()
			for _, s := range steps {
				if !t.Run(s.name, func(t *testing.T) {
					tp.t = t
					resp := tp.mustDo(s.req())
					if s.keep != nil {
						s.keep(resp)
					}
					before := tp.listed()
					require.NotEqual(t, prev, before, "the step changed nothing")
					if phase.WritesLegacy() {
						// Phase 2 writes the old registry too (which,
						// empty at start, holds only what changed since).
						id := resp.VM
						inStore, _ := tp.store.Get(id)
						inRegistry, _ := tp.registry.Get(id)
						assert.Equal(t, inStore, inRegistry)
					}
					tp = tp.restart(phase)
					assert.Equal(t, before, tp.listed(), "the restarted proxy lost or changed something")
					prev = before
				}) {
					return
				}
			}
		})
	}
}

// TestRefusedWriteIsNotAcknowledged makes the checkpoint fail and requires
// every change to be refused with not_stored, leaving both what is served
// and what a restart would restore as they were.
func TestRefusedWriteIsNotAcknowledged(t *testing.T) {
	mem := checkpoint.NewMemory[string, VM]()
	p, _, err := newProxy(context.Background(), proxyConfig{Phase: migrate.PhaseContract, Checkpoint: mem})
	require.NoError(t, err)
	defer p.Close()
	ctx := context.Background()
	do := func(req request) response { return p.handle(ctx, req) }
	require.True(t, do(request{Op: "register", VM: "vm-1"}).OK)
	tok := do(request{Op: "token", VM: "vm-1"}).Token
	sess := do(request{Op: "open", Token: tok}).Session
	tok2 := do(request{Op: "token", VM: "vm-1"}).Token
	require.NotEmpty(t, sess)

	list := func(p *proxy) string {
		b, _ := json.Marshal(p.handle(ctx, request{Op: "list"}))
		return string(b)
	}
	for _, req := range []request{
		{Op: "register", VM: "vm-2"},
		{Op: "attach", VM: "vm-1"},
		{Op: "token", VM: "vm-1"},
		{Op: "open", Token: tok2},
		{Op: "close", Session: sess},
		{Op: "unregister", VM: "vm-1"},
	} {
		t.Run(req.Op, func(t *testing.T) {
			before, saves := list(p), checkpointtest.Saves(mem)
			checkpointtest.FailSaves(mem, 1, errors.New("no space left on device"))
			resp := do(req)
			assert.False(t, resp.OK)
			assert.Equal(t, "not_stored", resp.Code)
			assert.Contains(t, resp.Error, "no space left on device")
			assert.Empty(t, resp.Token, "a token that was not stored must not be handed out")
			assert.Equal(t, before, list(p))
			assert.Equal(t, saves, checkpointtest.Saves(mem))

			// What a restart would restore did not change either.
			restarted, _, err := newProxy(ctx, proxyConfig{Phase: migrate.PhaseContract, Checkpoint: checkpointtest.Reopen(t, mem)})
			require.NoError(t, err)
			assert.Equal(t, before, list(restarted))
			require.NoError(t, restarted.Close())
		})
	}
}

// TestConcurrentChanges runs changes from many goroutines, some to one VM:
// Update's read-modify-write must not lose any (run it with -race).
func TestConcurrentChanges(t *testing.T) {
	tp := openTestProxy(t, tempState(t), migrate.PhaseContract)
	tp.mustDo(request{Op: "register", VM: "shared"})
	const workers, rounds = 8, 10
	var wg sync.WaitGroup
	errs := make(chan string, workers*rounds*4)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			own := fmt.Sprintf("vm-%d", w)
			if r := tp.handle(ctx, request{Op: "register", VM: own}); !r.OK {
				errs <- r.Error
				return
			}
			for range rounds {
				for _, req := range []request{{Op: "attach", VM: "shared"}, {Op: "token", VM: "shared"}} {
					if r := tp.handle(ctx, req); !r.OK {
						errs <- r.Error
					}
				}
				r := tp.handle(ctx, request{Op: "token", VM: own})
				if !r.OK {
					errs <- r.Error
					continue
				}
				if r = tp.handle(ctx, request{Op: "open", Token: r.Token}); !r.OK {
					errs <- r.Error
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	check := func(tp *testProxy) {
		shared, ok := tp.store.Get("shared")
		require.True(t, ok)
		assert.Equal(t, workers*rounds, shared.Attached)
		assert.Len(t, shared.Tokens, workers*rounds)
		for w := range workers {
			vm, ok := tp.store.Get(fmt.Sprintf("vm-%d", w))
			require.True(t, ok)
			assert.Len(t, vm.Tokens, rounds)
			assert.Len(t, vm.Sessions, rounds)
		}
	}
	check(tp)
	before := tp.listed()
	tp = tp.restart(migrate.PhaseContract)
	check(tp)
	assert.Equal(t, before, tp.listed())
}

// TestMigrationWalkThrough plays the rollout the package doc describes on
// one state file, phase by phase, including the downgrade to phase 0 and the
// refusal that follows it.
func TestMigrationWalkThrough(t *testing.T) {
	path := tempState(t)
	var tp *testProxy
	vms := func() []string {
		var ids []string
		for _, v := range tp.do(request{Op: "list"}).VMs {
			ids = append(ids, v.ID)
		}
		return ids
	}
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"contract starts empty", func(*testing.T) {
			tp = openTestProxy(t, path, migrate.PhaseContract)
			assert.Equal(t, migrate.ReadNothing, tp.report.ReadFrom)
			tp.mustDo(request{Op: "register", VM: "vm-1"})
		}},
		{"contract restores from the checkpoint", func(t *testing.T) {
			tp = tp.restart(migrate.PhaseContract)
			assert.Equal(t, migrate.ReadCheckpoint, tp.report.ReadFrom)
			assert.Equal(t, []string{"vm-1"}, vms())
		}},
		{"migrate after contract refills the registry it knows is stale", func(t *testing.T) {
			tp = tp.restart(migrate.PhaseMigrate)
			assert.Equal(t, []string{"vm-1"}, vms())
			assert.NotEmpty(t, tp.report.LegacyStale, tp.report.String())
			assert.Equal(t, 1, tp.report.LegacyWrites)
			_, ok := tp.registry.Get("vm-1")
			assert.True(t, ok)
			tp.mustDo(request{Op: "register", VM: "vm-2"})
			_, ok = tp.registry.Get("vm-2")
			assert.True(t, ok, "phase 2 writes the registry too")
		}},
		{"migrate serves the checkpoint and refills the empty registry", func(t *testing.T) {
			tp = tp.restart(migrate.PhaseMigrate)
			assert.Equal(t, []string{"vm-1", "vm-2"}, vms())
			assert.Equal(t, migrate.ReadCheckpoint, tp.report.ReadFrom)
			assert.Empty(t, tp.report.Orphaned, "an empty registry after a restart is no evidence")
			assert.Equal(t, 2, tp.report.LegacyWrites, tp.report.String())
			assert.Empty(t, tp.report.LegacyStale)
		}},
		{"expand keeps every VM too", func(t *testing.T) {
			tp = tp.restart(migrate.PhaseExpand)
			assert.Equal(t, migrate.ReadCheckpoint, tp.report.ReadFrom)
			assert.Equal(t, []string{"vm-1", "vm-2"}, vms())
			assert.Equal(t, 2, tp.registry.Len(), "and refills the registry")
		}},
		{"contract after expand finds what expand wrote", func(t *testing.T) {
			tp = tp.restart(migrate.PhaseContract)
			assert.Equal(t, []string{"vm-1", "vm-2"}, vms())
			tp.mustDo(request{Op: "register", VM: "vm-3"})
		}},
		{"legacy after contract restores from the checkpoint, once", func(t *testing.T) {
			tp = tp.restart(migrate.PhaseLegacy)
			assert.NotEmpty(t, tp.report.LegacyStale)
			assert.Equal(t, []string{"vm-1", "vm-2", "vm-3"}, vms())
			tp.mustDo(request{Op: "register", VM: "vm-4"}) // the registry only
		}},
		{"legacy keeps the VMs the checkpoint holds, and reports the one the registry took with it", func(t *testing.T) {
			// vm-1 to vm-3 still run: this proxy's phase 0 reads through
			// the checkpoint (the registry died with the last process).
			// vm-4 was acknowledged to the registry only, which died: it
			// is reported lost, not guessed.
			tp = tp.restart(migrate.PhaseLegacy)
			assert.Equal(t, migrate.ReadCheckpoint, tp.report.ReadFrom, tp.report.String())
			assert.Equal(t, []string{"vm-1", "vm-2", "vm-3"}, vms())
			assert.NotEmpty(t, tp.report.Behind, "phase 0's write of vm-4 is marked")
			require.Len(t, tp.report.Errors, 1, tp.report.String())
			var lost *migrate.LostError[string]
			require.ErrorAs(t, tp.report.Errors[0], &lost)
			assert.Equal(t, "vm-4", lost.Key)
		}},
		{"contract refuses a checkpoint that phase 0 superseded", func(t *testing.T) {
			require.NoError(t, tp.Close())
			_, _, err := openProxy(context.Background(), path, 0, proxyConfig{Phase: migrate.PhaseContract})
			require.ErrorIs(t, err, migrate.ErrStale)
			assert.Contains(t, explain(err, options{state: path}), "--phase migrate")
		}},
		{"migrate decides the key phase 0 marked, and keeps the rest", func(t *testing.T) {
			tp = openTestProxy(tp.owner, path, migrate.PhaseMigrate)
			assert.Equal(t, []string{"vm-1", "vm-2", "vm-3"}, vms(), tp.report.String())
			tp.mustDo(request{Op: "register", VM: "vm-5"})
		}},
		{"contract is safe again", func(t *testing.T) {
			tp = tp.restart(migrate.PhaseContract)
			assert.Equal(t, []string{"vm-1", "vm-2", "vm-3", "vm-5"}, vms())
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) {
			if tp != nil {
				tp.t = t
			}
			s.run(t)
		}) {
			return
		}
	}
}

// TestLogsNoTokens drives every op, valid and not, at debug level and
// requires that no log field holds a token value.
func TestLogsNoTokens(t *testing.T) {
	f := newFixture(t)
	tok3 := f.mustDo(request{Op: "token", VM: "vm-2"}).Token
	f.mustDo(request{Op: "open", VM: "vm-2", Token: tok3})
	f.do(request{Op: "open", Token: f.tok1})                                        // in use
	f.do(request{Op: "open", Token: "GUESSEDTOKENVALUE"})                           // unknown
	f.do(request{Op: "close", Session: f.tok2})                                     // a token where a session belongs
	f.handleLine(context.Background(), []byte(`{"op":"open","token":"`+f.tok2+`"`)) // malformed
	f.handleLine(context.Background(), []byte(`{"op":"open","tokn":"`+f.tok2+`"}`)) // unknown field
	f.do(request{Op: "list"})
	f.mustDo(request{Op: "unregister", VM: "vm-1"})

	entries := f.logs.All()
	require.NotEmpty(t, entries)
	for _, e := range entries {
		b, err := json.Marshal(map[string]any{"msg": e.Message, "fields": e.ContextMap()})
		require.NoError(t, err)
		for _, secret := range []string{f.tok1, f.tok2, tok3, "GUESSEDTOKENVALUE"} {
			assert.NotContains(t, string(b), secret)
		}
	}
	assert.NotEmpty(t, f.logs.FilterMessage("token created").All())
}

// TestShimReconnectsAfterRestart: the cc-proxy review's point: a restored
// session is a record whose shim lost its connection with the old process.
// The shim that holds its token gets it back after a restart; while it is
// attached, the token is in use; once closed, it opens a new one.
func TestShimReconnectsAfterRestart(t *testing.T) {
	tp := openTestProxy(t, tempState(t), migrate.PhaseContract)
	tp.mustDo(request{Op: "register", VM: "vm-1"})
	tok := tp.mustDo(request{Op: "token", VM: "vm-1"}).Token
	sid := tp.mustDo(request{Op: "open", Token: tok}).Session
	assert.Equal(t, "conflict", tp.do(request{Op: "open", Token: tok}).Code, "one shim per token")

	tp = tp.restart(migrate.PhaseContract)
	again := tp.mustDo(request{Op: "open", Token: tok})
	assert.Equal(t, sid, again.Session, "the shim gets its restored session back")
	assert.Equal(t, "vm-1", again.VM)
	assert.Equal(t, "conflict", tp.do(request{Op: "open", Token: tok}).Code, "and holds it")

	tp.mustDo(request{Op: "close", Session: sid})
	fresh := tp.mustDo(request{Op: "open", VM: "vm-1", Token: tok})
	assert.NotEqual(t, sid, fresh.Session)
	vms := tp.mustDo(request{Op: "list", VM: "vm-1"}).VMs
	require.Len(t, vms, 1)
	assert.Len(t, vms[0].Sessions, 1, "the reattached session was closed, one is open")
}

// TestStateDirectoryRemovedWhileRunning: an operator's rm -rf of the state
// directory, recreated or not, does not stop the proxy: the next change
// writes the whole state back (issue 14; the cause was fixed in package
// checkpoint), and a restart restores every VM.
func TestStateDirectoryRemovedWhileRunning(t *testing.T) {
	for _, recreate := range []bool{false, true} {
		t.Run(fmt.Sprintf("recreated=%v", recreate), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run", "vmproxy")
			path := filepath.Join(dir, "state.json")
			tp := openTestProxy(t, path, migrate.PhaseContract)
			tp.mustDo(request{Op: "register", VM: "vm-1"})
			tok := tp.mustDo(request{Op: "token", VM: "vm-1"}).Token

			require.NoError(t, os.RemoveAll(dir))
			if recreate {
				require.NoError(t, os.MkdirAll(dir, 0o700))
			}
			tp.mustDo(request{Op: "register", VM: "vm-2"})
			tp.mustDo(request{Op: "open", Token: tok})
			_, err := os.Stat(path)
			require.NoError(t, err, "the next change wrote the file back")

			tp = tp.restart(migrate.PhaseContract)
			assert.Equal(t, migrate.ReadCheckpoint, tp.report.ReadFrom)
			vms := tp.mustDo(request{Op: "list"}).VMs
			require.Len(t, vms, 2, "every VM is back after the restart")
			assert.Len(t, vms[0].Sessions, 1, "with vm-1's session")
		})
	}
}
