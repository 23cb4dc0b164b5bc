package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// Errors a request can fail with. The text goes back to the client; none
// of them carries a token value, because request errors are also logged.
var (
	errBadRequest     = errors.New("bad request")
	errUnknownOp      = errors.New("unknown op")
	errUnknownVM      = errors.New("unknown VM")
	errVMExists       = errors.New("VM already registered")
	errUnknownToken   = errors.New("unknown token")
	errTokenInUse     = errors.New("token already has an open session")
	errUnknownSession = errors.New("unknown session")
)

// codeOf gives an error a stable code that clients can switch on; the
// error text is for people and may change.
func codeOf(err error) string {
	switch {
	case errors.Is(err, errBadRequest):
		return "bad_request"
	case errors.Is(err, errUnknownOp):
		return "unknown_op"
	case errors.Is(err, errUnknownVM), errors.Is(err, errUnknownToken), errors.Is(err, errUnknownSession):
		return "not_found"
	case errors.Is(err, errVMExists), errors.Is(err, errTokenInUse):
		return "conflict"
	default:
		// A write the Store refused (checkpoint save failed, store
		// closed): nothing changed and the client may retry.
		return "not_stored"
	}
}

// request is one line of the control protocol.
type request struct {
	Op      string `json:"op"`
	VM      string `json:"vm,omitempty"`
	Console string `json:"console,omitempty"`
	Token   string `json:"token,omitempty"`
	Session string `json:"session,omitempty"`
}

// response is the answer to one request, on one line.
type response struct {
	OK       bool     `json:"ok"`
	Error    string   `json:"error,omitempty"`
	Code     string   `json:"code,omitempty"`
	VM       string   `json:"vm,omitempty"`
	Attached int      `json:"attached,omitempty"`
	Token    string   `json:"token,omitempty"`
	Session  string   `json:"session,omitempty"`
	VMs      []vmView `json:"vms,omitzero"` // [] for an empty list, absent for other ops
}

// vmView is a VM as list shows it: tokens and sessions as sorted lists, so
// that two lists of the same state are byte for byte equal.
type vmView struct {
	ID         string        `json:"vm"`
	Console    string        `json:"console,omitempty"`
	Registered time.Time     `json:"registered"`
	Attached   int           `json:"attached"`
	Tokens     []tokenView   `json:"tokens"`
	Sessions   []sessionView `json:"sessions"`
}

type tokenView struct {
	Token   string    `json:"token"`
	Created time.Time `json:"created"`
	Session string    `json:"session,omitempty"` // the open session holding it
}

type sessionView struct {
	ID     string    `json:"session"`
	Token  string    `json:"token"`
	Opened time.Time `json:"opened"`
}

// proxy is the daemon's logic: the control operations on the VM state.
//
// The proxy keeps no state of its own. Every VM lives in store, and every
// change goes through update or unregister, which commit it durably through
// the Store before they return; a request is acknowledged only after that.
// There is no other copy to change, so a mutation that is acknowledged but
// not stored (the cc-proxy review's "STORE only at RegisterVM") cannot be
// written.
//
// All methods are safe for concurrent use: the Store serialises writes and
// Update's read-modify-write runs while no other write commits.
type proxy struct {
	store *migrate.Store[string, VM]
	// registry is the old proxy's in-memory registry, the legacy side of
	// the migration: only the Store writes it (phases 0 to 2), only
	// Restore reads it.
	registry *source.Map[string, VM]
	log      *zap.Logger
	now      func() time.Time

	// attached holds the sessions a shim opened or reattached since this
	// proxy started. A session restored from the checkpoint is a record
	// whose shim lost its connection with the old process: the shim that
	// holds its token may attach to it again.
	amu      sync.Mutex // guards attached
	attached map[string]bool
}

// isAttached reports whether a shim is attached to session in this
// process.
func (p *proxy) isAttached(session string) bool {
	p.amu.Lock()
	defer p.amu.Unlock()
	return p.attached[session]
}

func (p *proxy) setAttached(session string, on bool) {
	p.amu.Lock()
	defer p.amu.Unlock()
	if on {
		p.attached[session] = true
	} else {
		delete(p.attached, session)
	}
}

// proxyConfig is what newProxy needs.
type proxyConfig struct {
	Phase      migrate.Phase
	Strict     bool // fail instead of logging and going on when restore cannot read something
	Checkpoint migrate.Checkpoint[string, VM]
	Logger     *zap.Logger
}

// openProxy opens the checkpoint at path and starts a proxy on it. The
// checkpoint's lock is what stops a second instance: it waits up to
// lockWait for the first to exit, then fails with checkpoint.ErrLocked.
//
// The checkpoint records the kernel's boot ID, and Restore discards a file
// from an earlier boot: the VMs it lists died with that boot, so a proxy
// whose --state is on a disk rather than on /run must not bring them back.
// Every record read is checked by validateVM: one the proxy would never
// have stored is a bad entry, like one that does not decode.
func openProxy(ctx context.Context, path string, lockWait time.Duration, cfg proxyConfig) (*proxy, migrate.Report[string], error) {
	opts := append(checkpointOptions(), checkpoint.WithLockWait(lockWait), checkpoint.WithLogger(cfg.Logger))
	f, err := checkpoint.Open[string, VM](ctx, path, opts...)
	if err != nil {
		return nil, migrate.Report[string]{}, err
	}
	cfg.Checkpoint = f
	return newProxy(ctx, cfg)
}

// checkpointOptions are what the state file is opened with, whoever opens
// it (openProxy, and rollout_test.go's matrix): the kernel's boot ID, and
// validateVM for every record read.
func checkpointOptions() []checkpoint.Option {
	return []checkpoint.Option{checkpoint.WithBootID(nil), checkpoint.WithValidate(validateVM)}
}

// storeConfig is the configuration of the proxy's Store in cfg.Phase, over
// the registry (the legacy side: written in phases 0 to 2, left out in
// phase 3) and cfg.Checkpoint. newProxy builds the Store from it, and
// rollout_test.go proves every rollout of it safe.
func storeConfig(cfg proxyConfig, registry source.Reader[string, VM]) migrate.Config[string, VM] {
	mc := migrate.Config[string, VM]{
		Phase:      cfg.Phase,
		Checkpoint: cfg.Checkpoint,
		Strict:     cfg.Strict,
		// Best effort, as the cc-proxy review asked: with the registry
		// in memory the checkpoint is the only copy, so by default an
		// unreadable one would keep the proxy from starting at all; here
		// it is moved aside (kept for an operator) and the proxy starts
		// with the VMs it can read. --error-on-failure-to-restore refuses
		// instead, leaving the file as it is. See README.md.
		DiscardUnreadableCheckpoint: !cfg.Strict,
		Version:                     writer(),
		Logger:                      cfg.Logger,
		// The registry lived in memory: it is empty after every restart,
		// which says nothing about which VMs exist. (A source.Map says so
		// itself; stated here too, for a reader of this file.)
		VolatileLegacy: true,
	}
	// Phase 3 does not write the registry, and would only compare the
	// checkpoint with an empty one.
	if cfg.Phase != migrate.PhaseContract {
		mc.Legacy = registry
	}
	return mc
}

// newProxy builds the Store, restores it and returns the proxy serving
// what it restored. It owns cfg.Checkpoint: it closes it when it fails, and
// proxy.Close closes it later.
func newProxy(ctx context.Context, cfg proxyConfig) (*proxy, migrate.Report[string], error) {
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	// Times are kept in UTC without a monotonic reading, exactly as JSON
	// brings them back, so a restored VM equals the one that was stored.
	now := func() time.Time { return time.Now().UTC().Round(0) }
	p := &proxy{registry: new(source.Map[string, VM]), log: log, now: now, attached: map[string]bool{}}
	cfg.Logger = log
	store, err := migrate.New(storeConfig(cfg, p.registry))
	if err != nil {
		if c, ok := cfg.Checkpoint.(io.Closer); ok {
			_ = c.Close()
		}
		return nil, migrate.Report[string]{}, err
	}
	report, err := store.Restore(ctx)
	if err != nil {
		_ = store.Close() // releases the checkpoint's lock
		return nil, report, err
	}
	p.store = store
	p.logRestore(report)
	return p, report, nil
}

// logRestore says what the restart brought back and what it could not:
// VM IDs, counts and paths, never values.
func (p *proxy) logRestore(r migrate.Report[string]) {
	tokens, sessions := 0, 0
	for _, vm := range p.store.All() {
		tokens += len(vm.Tokens)
		sessions += len(vm.Sessions)
	}
	p.log.Info("state restored",
		zap.String("report", r.String()),
		zap.Int("vms", p.store.Len()), zap.Int("tokens", tokens), zap.Int("sessions", sessions))
	if r.Stale != "" {
		p.log.Warn("the saved state was not used", zap.String("why", r.Stale))
	}
	if r.Quarantined != "" {
		p.log.Warn("the state file could not be read in full: it was moved aside, and the proxy starts with what it could read",
			zap.String("movedTo", r.Quarantined), zap.Int("vms", p.store.Len()))
	}
	for _, err := range r.Errors {
		var bad *checkpoint.BadEntriesError
		if !errors.As(err, &bad) {
			continue
		}
		for _, e := range bad.Entries {
			p.log.Warn("VM state unreadable: VM not restored", zap.String("vm", keyText(e.Key)), zap.Error(e.Err))
		}
	}
}

// keyText turns a key as checkpoint.EntryError gives it (its JSON) back
// into the VM ID, so the log shows vm-1 rather than "\"vm-1\"".
func keyText(raw string) string {
	var id string
	if json.Unmarshal([]byte(raw), &id) == nil {
		return id
	}
	return raw
}

// writer is what the checkpoint records as the program that wrote it.
func writer() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return "vmproxy " + bi.Main.Version
	}
	return "vmproxy"
}

// Close stops the Store and releases the checkpoint's lock. It is
// idempotent.
func (p *proxy) Close() error { return p.store.Close() }

// maxRequest bounds a request line. Real requests are a few hundred bytes;
// the bound keeps a client that never sends a newline from growing the
// proxy's memory.
const maxRequest = 64 << 10

// handleLine decodes one request line and handles it. Whatever the line
// holds, the answer is a response, never a panic.
func (p *proxy) handleLine(ctx context.Context, line []byte) response {
	req, err := decodeRequest(line)
	if err != nil {
		// The parser's message may quote the line, which may hold a
		// token: the log gets the code only.
		p.log.Debug("request refused", zap.String("code", codeOf(err)))
		return failure(err)
	}
	return p.handle(ctx, req)
}

// decodeRequest parses exactly one JSON object with known fields.
func decodeRequest(line []byte) (request, error) {
	var req request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields() // a misspelt field is an error, not a silent default
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("%w: not a JSON request object: %v", errBadRequest, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, fmt.Errorf("%w: one JSON object per line", errBadRequest)
	}
	return req, nil
}

func failure(err error) response {
	return response{OK: false, Error: err.Error(), Code: codeOf(err)}
}

// handle runs one request.
func (p *proxy) handle(ctx context.Context, req request) response {
	var (
		resp = response{OK: true, VM: req.VM}
		err  error
	)
	switch req.Op {
	case "register":
		err = p.register(ctx, req.VM, req.Console)
	case "attach":
		resp.Attached, err = p.attach(ctx, req.VM)
	case "token":
		resp.Token, err = p.newToken(ctx, req.VM)
	case "open":
		resp.VM, resp.Session, err = p.openSession(ctx, req.VM, req.Token)
	case "close":
		resp.VM, err = p.closeSession(ctx, req.VM, req.Session)
		resp.Session = req.Session
	case "unregister":
		err = p.unregister(ctx, req.VM)
	case "list":
		resp.VMs, err = p.list(req.VM)
	case "":
		err = fmt.Errorf("%w: the request has no op: use register, attach, token, open, close, unregister or list", errBadRequest)
	default:
		err = fmt.Errorf("%w %q: use register, attach, token, open, close, unregister or list", errUnknownOp, truncate(req.Op, 32))
	}
	if err != nil {
		code := codeOf(err)
		if code == "not_stored" {
			p.log.Error("request failed: nothing was stored or changed", zap.String("op", req.Op), zap.String("vm", req.VM), zap.Error(err))
		} else {
			p.log.Debug("request refused", zap.String("op", truncate(req.Op, 32)), zap.String("vm", truncate(req.VM, maxID)), zap.String("code", code))
		}
		return failure(err)
	}
	return resp
}

// maxID bounds a VM ID: the IDs runtimes use are 64 hex digits at most.
const maxID = 256

// checkID rejects VM IDs that would be awkward in logs and file names.
func checkID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: the request needs a vm", errBadRequest)
	case len(id) > maxID:
		return fmt.Errorf("%w: vm ID longer than %d bytes", errBadRequest, maxID)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: vm ID is not UTF-8", errBadRequest)
	case strings.IndexFunc(id, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return fmt.Errorf("%w: vm ID %q contains spaces or control characters", errBadRequest, id)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// update is how every change to an existing VM is made: fn gets a private
// copy of the VM, and the copy is committed through the Store, durably,
// before update returns. Nothing fn does is visible, or acknowledged, before
// that; if fn or the commit fails, nothing changed.
func (p *proxy) update(ctx context.Context, id string, fn func(vm *VM) error) error {
	return p.store.Update(ctx, func(tx *migrate.Tx[string, VM]) error {
		cur, ok := tx.Get(id)
		if !ok {
			return fmt.Errorf("%w %q", errUnknownVM, id)
		}
		next := cur.clone()
		if err := fn(&next); err != nil {
			return err
		}
		tx.Put(id, next)
		return nil
	})
}

// register adds a VM. It checks and writes in one transaction, so two
// concurrent registrations of one ID cannot both succeed (a plain Put after
// a Get could let the second erase tokens created in between).
func (p *proxy) register(ctx context.Context, id, console string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if console != "" && !filepath.IsAbs(console) {
		return fmt.Errorf("%w: console must be an absolute path", errBadRequest)
	}
	err := p.store.Update(ctx, func(tx *migrate.Tx[string, VM]) error {
		if _, ok := tx.Get(id); ok {
			return fmt.Errorf("%w: %q", errVMExists, id)
		}
		tx.Put(id, VM{Console: console, Registered: p.now()})
		return nil
	})
	if err != nil {
		return err
	}
	p.log.Info("VM registered", zap.String("vm", id), zap.String("console", console))
	return nil
}

// attach records that a runtime attached to the VM and returns how many
// times one has.
func (p *proxy) attach(ctx context.Context, id string) (int, error) {
	if err := checkID(id); err != nil {
		return 0, err
	}
	var n int
	err := p.update(ctx, id, func(vm *VM) error {
		vm.Attached++
		n = vm.Attached
		return nil
	})
	if err != nil {
		return 0, err
	}
	p.log.Info("VM attached", zap.String("vm", id), zap.Int("attached", n))
	return n, nil
}

// newToken generates an I/O token for the VM and returns it. The value is
// returned to the client only: the log gets the count.
func (p *proxy) newToken(ctx context.Context, id string) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	// 128 bits from the kernel's CSPRNG (crypto/rand.Text): guessing a
	// token is hopeless, so tokens are unique across VMs too.
	tok := rand.Text()
	var n int
	err := p.update(ctx, id, func(vm *VM) error {
		if vm.Tokens == nil {
			vm.Tokens = make(map[string]Token)
		}
		vm.Tokens[tok] = Token{Created: p.now()}
		n = len(vm.Tokens)
		return nil
	})
	if err != nil {
		return "", err
	}
	p.log.Info("token created", zap.String("vm", id), zap.Int("tokens", n))
	return tok, nil
}

// vmOfToken finds the VM a token belongs to, among committed state. The
// caller checks again inside its transaction: the VM may change meanwhile.
func (p *proxy) vmOfToken(token string) (string, bool) {
	for id, vm := range p.store.All() {
		if _, ok := vm.Tokens[token]; ok {
			return id, true
		}
	}
	return "", false
}

// vmOfSession finds the VM a session belongs to, like vmOfToken.
func (p *proxy) vmOfSession(session string) (string, bool) {
	for id, vm := range p.store.All() {
		if _, ok := vm.Sessions[session]; ok {
			return id, true
		}
	}
	return "", false
}

// openSession opens an I/O session on a token, as a shim does when it
// connects, and returns the VM and the session's ID. id may be empty: the
// token says which VM it is for. A shim that reconnects after a proxy
// restart, with the token of a session restored from the checkpoint, gets
// that session back; a token whose session a shim holds in this process is
// refused.
func (p *proxy) openSession(ctx context.Context, id, token string) (string, string, error) {
	if token == "" {
		return "", "", fmt.Errorf("%w: the request needs a token", errBadRequest)
	}
	if id == "" {
		var ok bool
		if id, ok = p.vmOfToken(token); !ok {
			return "", "", errUnknownToken
		}
	} else if err := checkID(id); err != nil {
		return "", "", err
	}
	sid := newSessionID()
	reattached := false
	err := p.update(ctx, id, func(vm *VM) error {
		if _, ok := vm.Tokens[token]; !ok {
			return errUnknownToken
		}
		if other, ok := vm.sessionOf(token); ok {
			if p.isAttached(other) {
				return fmt.Errorf("%w (%s)", errTokenInUse, other)
			}
			sid, reattached = other, true
			return nil
		}
		if vm.Sessions == nil {
			vm.Sessions = make(map[string]Session)
		}
		vm.Sessions[sid] = Session{Token: token, Opened: p.now()}
		return nil
	})
	if err != nil {
		return "", "", err
	}
	p.setAttached(sid, true)
	if reattached {
		p.log.Info("session reattached", zap.String("vm", id), zap.String("session", sid))
	} else {
		p.log.Info("session opened", zap.String("vm", id), zap.String("session", sid))
	}
	return id, sid, nil
}

// newSessionID returns a random session ID. Session IDs are not secrets
// (a session is only reachable through its token), so they are logged.
func newSessionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24)
	return "s-" + hex.EncodeToString(b[:])
}

// closeSession closes an I/O session and returns its VM. The token stays:
// a shim may reconnect with it.
func (p *proxy) closeSession(ctx context.Context, id, session string) (string, error) {
	if session == "" {
		return "", fmt.Errorf("%w: the request needs a session", errBadRequest)
	}
	if id == "" {
		var ok bool
		if id, ok = p.vmOfSession(session); !ok {
			return "", fmt.Errorf("%w %q", errUnknownSession, truncate(session, 64))
		}
	} else if err := checkID(id); err != nil {
		return "", err
	}
	err := p.update(ctx, id, func(vm *VM) error {
		if _, ok := vm.Sessions[session]; !ok {
			return fmt.Errorf("%w %q", errUnknownSession, truncate(session, 64))
		}
		delete(vm.Sessions, session)
		return nil
	})
	if err != nil {
		return "", err
	}
	p.setAttached(session, false)
	p.log.Info("session closed", zap.String("vm", id), zap.String("session", session))
	return id, nil
}

// unregister removes a VM with its tokens and sessions.
func (p *proxy) unregister(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	var tokens, sessions int
	err := p.store.Update(ctx, func(tx *migrate.Tx[string, VM]) error {
		vm, ok := tx.Get(id)
		if !ok {
			return fmt.Errorf("%w %q", errUnknownVM, id)
		}
		tokens, sessions = len(vm.Tokens), len(vm.Sessions)
		tx.Delete(id)
		return nil
	})
	if err != nil {
		return err
	}
	p.log.Info("VM unregistered", zap.String("vm", id), zap.Int("tokens", tokens), zap.Int("sessions", sessions))
	return nil
}

// list returns every VM, or only id's, sorted by ID.
func (p *proxy) list(id string) ([]vmView, error) {
	views := []vmView{}
	if id != "" {
		vm, ok := p.store.Get(id)
		if !ok {
			return nil, fmt.Errorf("%w %q", errUnknownVM, truncate(id, maxID))
		}
		return append(views, view(id, vm)), nil
	}
	for id, vm := range p.store.All() {
		views = append(views, view(id, vm))
	}
	slices.SortFunc(views, func(a, b vmView) int { return strings.Compare(a.ID, b.ID) })
	return views, nil
}

func view(id string, vm VM) vmView {
	v := vmView{ID: id, Console: vm.Console, Registered: vm.Registered, Attached: vm.Attached,
		Tokens: []tokenView{}, Sessions: []sessionView{}}
	for tok, t := range vm.Tokens {
		sid, _ := vm.sessionOf(tok)
		v.Tokens = append(v.Tokens, tokenView{Token: tok, Created: t.Created, Session: sid})
	}
	slices.SortFunc(v.Tokens, func(a, b tokenView) int { return strings.Compare(a.Token, b.Token) })
	for sid, s := range vm.Sessions {
		v.Sessions = append(v.Sessions, sessionView{ID: sid, Token: s.Token, Opened: s.Opened})
	}
	slices.SortFunc(v.Sessions, func(a, b sessionView) int { return strings.Compare(a.ID, b.ID) })
	return v
}
