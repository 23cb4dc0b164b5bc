package control

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/migrate"
)

// Store is what the server uses of a Store: *migrate.Store[K, V] has these
// methods, and the server calls no others. Origin and Update serve the
// restore's report (WithReport): which of its orphans restore left as they
// were, and their prune, in one commit that checks it again.
type Store[K comparable, V any] interface {
	All() iter.Seq2[K, V]
	Get(key K) (V, bool)
	Delete(ctx context.Context, key K) error
	Origin(key K) (migrate.Origin, bool)
	Update(ctx context.Context, fn func(tx *migrate.Tx[K, V]) error) error
}

// SocketPath returns the path of the control socket of the checkpoint at
// checkpointPath: checkpointPath + ".control.sock".
func SocketPath(checkpointPath string) string {
	return filepath.Clean(checkpointPath) + ".control.sock"
}

const (
	// maxConns bounds the connections served at once; more are answered
	// CodeBusy. An operator's command makes one at a time.
	maxConns = 4
	// maxRequest bounds a request line (a key is small).
	maxRequest = 1 << 20
	// maxSocketPath is the longest path a unix socket can have
	// (sizeof(sockaddr_un.sun_path) - 1 on Linux).
	maxSocketPath = 107
)

// Server serves a Store on a control socket. Its methods are safe for
// concurrent use.
type Server[K comparable, V any] struct {
	path   string
	store  Store[K, V]
	cfg    config
	report *restoreReport[K, V] // WithReport's; nil without it
	ln     *net.UnixListener
	made   fs.FileInfo // the socket Listen made, so that Close removes no other
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{} // one per connection served
	wg     sync.WaitGroup

	mu     sync.Mutex // guards closed and conns
	closed bool
	conns  map[*net.UnixConn]struct{}
}

// Listen creates the control socket at path, owner-only, replacing a
// socket left there by a daemon that died (but nothing else), and serves
// store on it until Close. Call it while the daemon holds the checkpoint's
// lock, so that no other daemon serves the same path (see the package
// documentation).
func Listen[K comparable, V any](path string, store Store[K, V], opts ...Option) (*Server[K, V], error) {
	cfg := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("control: %w: option %d is nil", ErrInvalidOption, i)
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}
	if store == nil {
		return nil, fmt.Errorf("control: %w: the Store is nil", ErrInvalidOption)
	}
	rep, err := reportOf[K, V](cfg.report)
	if err != nil {
		return nil, err
	}
	path = filepath.Clean(path)
	ln, made, err := listenOwnerOnly(path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server[K, V]{path: path, store: store, cfg: cfg, report: rep, ln: ln, made: made, ctx: ctx, cancel: cancel,
		slots: make(chan struct{}, maxConns), conns: map[*net.UnixConn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	cfg.logger.Info("serving the Store on its control socket", zap.String("socket", path))
	return s, nil
}

// listenOwnerOnly binds a unix socket under a temporary name beside path,
// makes it owner-only, and renames it to path: a socket bound at path
// would be reachable with the umask's mode until its chmod.
func listenOwnerOnly(path string) (*net.UnixListener, fs.FileInfo, error) {
	fail := func(err error) (*net.UnixListener, fs.FileInfo, error) {
		return nil, nil, fmt.Errorf("control: listen on %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSocket == 0 {
		return fail(fmt.Errorf("%s is there and is not a socket: move it away", fi.Mode().Type()))
	}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return fail(err)
	}
	tmp := filepath.Join(filepath.Dir(path), ".ctl-"+hex.EncodeToString(rnd[:]))
	if len(path) > maxSocketPath || len(tmp) > maxSocketPath {
		return fail(fmt.Errorf("the path is %d bytes, and a unix socket's path is at most %d: put the checkpoint in a shorter directory", max(len(path), len(tmp)), maxSocketPath))
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return fail(err)
	}
	ln.SetUnlinkOnClose(false)
	undo := func(err error) (*net.UnixListener, fs.FileInfo, error) {
		_ = ln.Close()
		_ = os.Remove(tmp)
		return fail(err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return undo(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return undo(err)
	}
	made, err := os.Lstat(path)
	if err != nil {
		_ = ln.Close()
		return fail(err)
	}
	return ln, made, nil
}

// Path returns the socket's path.
func (s *Server[K, V]) Path() string { return s.path }

// Close stops serving: it closes the socket and the connections being
// served, cancels a Delete still waiting for its turn, waits for them to
// end and removes the socket (if it is still the one Listen made). It is
// idempotent: later calls return nil.
func (s *Server[K, V]) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.cancel()
	err := s.ln.Close()
	s.wg.Wait()
	if fi, lerr := os.Lstat(s.path); lerr == nil && os.SameFile(fi, s.made) {
		if rerr := os.Remove(s.path); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return fmt.Errorf("control: close %s: %w", s.path, err)
	}
	return nil
}

func (s *Server[K, V]) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if s.ctx.Err() == nil {
				s.cfg.logger.Error("the control socket stopped accepting connections", zap.String("socket", s.path), zap.Error(err))
			}
			return
		}
		select {
		case s.slots <- struct{}{}:
		default:
			_ = c.SetDeadline(time.Now().Add(time.Second))
			writeStatus(c, status{Status: "error", Code: CodeBusy, Error: fmt.Sprintf("%d requests are being served: try again", maxConns)})
			_ = c.Close()
			continue
		}
		if !s.track(c) {
			<-s.slots
			_ = c.Close()
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			defer s.untrack(c)
			s.serve(c)
		}()
	}
}

// track records c as served, unless the server is closed.
func (s *Server[K, V]) track(c *net.UnixConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server[K, V]) untrack(c *net.UnixConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	_ = c.Close()
}

// request is a request line.
type request struct {
	Op   string            `json:"op"`
	Key  json.RawMessage   `json:"key,omitempty"`
	Keys []json.RawMessage `json:"keys,omitempty"` // prune-orphans: the orphans the operator confirmed
}

// status is the last line of an answer.
type status struct {
	Status    string `json:"status"` // "ok" or "error"
	Count     int    `json:"count,omitempty"`
	LossyKeys int    `json:"lossyKeys,omitempty"` // list: keys that do not read back as themselves
	Report    string `json:"report,omitempty"`    // report: the restore's report line
	Code      string `json:"code,omitempty"`
	Error     string `json:"error,omitempty"`
}

func writeStatus(w io.Writer, st status) {
	line, _ := json.Marshal(st) // plain strings and ints: cannot fail
	_, _ = w.Write(append(line, '\n'))
}

// serve answers one connection: the peer's credentials, then its request.
func (s *Server[K, V]) serve(c *net.UnixConn) {
	_ = c.SetDeadline(time.Now().Add(s.cfg.timeout))
	p, err := peerOf(c)
	if err != nil {
		s.cfg.logger.Error("cannot read a control connection's peer credentials; refused", zap.Error(err))
		writeStatus(c, status{Status: "error", Code: CodeRefused, Error: "the daemon cannot tell who connected"})
		return
	}
	log := s.cfg.logger.With(zap.Uint32("uid", p.uid), zap.Int32("pid", p.pid))
	if !p.allowed() {
		log.Warn("refused a control connection from another user", zap.Int("daemonUID", os.Geteuid()))
		writeStatus(c, status{Status: "error", Code: CodeRefused,
			Error: fmt.Sprintf("uid %d is neither the daemon's (uid %d) nor root: run the command as one of them", p.uid, os.Geteuid())})
		return
	}
	req, err := readRequest(c)
	if err != nil {
		writeStatus(c, status{Status: "error", Code: CodeBadRequest, Error: err.Error()})
		return
	}
	w := bufio.NewWriter(c)
	writeStatus(w, s.handle(w, req, log))
	_ = w.Flush()
}

// readRequest reads one request line.
func readRequest(c net.Conn) (request, error) {
	var req request
	line, err := bufio.NewReader(io.LimitReader(c, maxRequest)).ReadBytes('\n')
	if err != nil {
		return req, fmt.Errorf("the request must be one JSON object on one line, of at most %d bytes", maxRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, errors.New(`the request is not {"op":"list"}, {"op":"get","key":K}, {"op":"delete","key":K}, {"op":"report"} or {"op":"prune-orphans","keys":[K,...]}`)
	}
	return req, nil
}

// handle answers req, writing entries to w, and returns the status.
func (s *Server[K, V]) handle(w *bufio.Writer, req request, log *zap.Logger) status {
	switch req.Op {
	case "list":
		return s.list(w)
	case "get", "delete":
		k, canon, err := decodeKey[K](req.Key)
		if err != nil {
			return status{Status: "error", Code: CodeBadKey, Error: err.Error()}
		}
		v, ok := s.store.Get(k)
		if !ok {
			return status{Status: "error", Code: CodeNoSuchKey, Error: fmt.Sprintf("the daemon's Store has no entry with key %s", canon)}
		}
		if req.Op == "get" {
			return writeEntry(w, k, v)
		}
		return s.delete(k, canon, log)
	case "report":
		if s.report == nil {
			return noReport()
		}
		return s.report.list(w, s.store)
	case "prune-orphans":
		if s.report == nil {
			return noReport()
		}
		return s.report.prune(s.ctx, w, s.store, req.Keys, s.cfg.timeout, log)
	}
	return status{Status: "error", Code: CodeBadRequest, Error: fmt.Sprintf("unknown op %q: use list, get, delete, report or prune-orphans", req.Op)}
}

// list writes every entry, sorted by key JSON.
func (s *Server[K, V]) list(w *bufio.Writer) status {
	type line struct{ key, value []byte }
	var lines []line
	st := status{Status: "ok"}
	for k, v := range s.store.All() {
		kj, err1 := json.Marshal(k)
		vj, err2 := json.Marshal(v)
		if err1 != nil || err2 != nil {
			return status{Status: "error", Code: CodeFailed, Error: "an entry of the Store does not encode as JSON"}
		}
		var back K
		if json.Unmarshal(kj, &back) != nil || back != k {
			st.LossyKeys++
		}
		lines = append(lines, line{kj, vj})
	}
	slices.SortFunc(lines, func(a, b line) int { return bytes.Compare(a.key, b.key) })
	for _, l := range lines {
		writeLine(w, l.key, l.value)
	}
	st.Count = len(lines)
	return st
}

func writeEntry[K comparable, V any](w *bufio.Writer, k K, v V) status {
	kj, err1 := json.Marshal(k)
	vj, err2 := json.Marshal(v)
	if err1 != nil || err2 != nil {
		return status{Status: "error", Code: CodeFailed, Error: "the entry does not encode as JSON"}
	}
	writeLine(w, kj, vj)
	return status{Status: "ok", Count: 1}
}

func writeLine(w *bufio.Writer, key, value []byte) {
	_, _ = w.WriteString(`{"key":`)
	_, _ = w.Write(key)
	_, _ = w.WriteString(`,"value":`)
	_, _ = w.Write(value)
	_, _ = w.WriteString("}\n")
}

// delete deletes k's entry through the Store, durably on every side the
// Store's phase writes.
func (s *Server[K, V]) delete(k K, raw json.RawMessage, log *zap.Logger) status {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.timeout)
	defer cancel()
	if err := s.store.Delete(ctx, k); err != nil {
		log.Error("a delete through the control socket failed", zap.ByteString("key", raw), zap.Error(err))
		return status{Status: "error", Code: CodeFailed, Error: "the Store's Delete failed: " + err.Error()}
	}
	log.Info("deleted an entry through the control socket", zap.ByteString("key", raw))
	return status{Status: "ok", Count: 1}
}
