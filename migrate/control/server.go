package control

import (
	"bufio"
	"bytes"
	"context"
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
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/internal/fsys"
	"github.com/phaseshift/phaseshift/migrate"
)

// Store is what the server uses of a Store: *migrate.Store[K, V] has these
// methods, and the server calls no others. Origin and Update serve the
// restore's report (WithReport): which of its orphans restore left as they
// were, and their prune, in one commit that checks it again.
type Store[K comparable, V any] interface {
	All() iter.Seq2[K, V]
	Get(key K) (V, bool)
	// Key returns the key key's entry is stored under: what All yields,
	// and what get answers with (with a Match, it may differ from key).
	Key(key K) (K, bool)
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

// Listen creates the control socket at path, owner-only, and serves store
// on it until Close. It first checks path's directory (owned by this
// user or root, writable by nobody else unless sticky; an error matching
// ErrUnsafe otherwise), replaces a socket a daemon that died left at the
// path (one that refuses connections), and refuses (ErrInUse) a socket
// that another process still serves and anything that is not a socket.
// Call it while the daemon holds the checkpoint's lock, so that no other
// daemon serves the same path (see the package documentation).
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

// listenOwnerOnly binds a unix socket inside a new directory of its own
// (mode 0700, beside path), makes it 0600 there, and renames it to path.
// A socket bound at path would be reachable with the umask's mode until
// its chmod, and a chmod of a name in the shared directory follows
// whatever another user who can write it put there (a symlink to a file
// root then makes 0600); in a directory only this process can write,
// the name is the socket it bound.
func listenOwnerOnly(path string) (*net.UnixListener, fs.FileInfo, error) {
	fail := func(err error) (*net.UnixListener, fs.FileInfo, error) {
		return nil, nil, fmt.Errorf("control: listen on %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	// ".ctl-" and 10 digits, then the socket's name.
	if long := len(dir) + len("/.ctl-1234567890/s"); len(path) > maxSocketPath || long > maxSocketPath {
		return fail(fmt.Errorf("the path is %d bytes, and a unix socket's path is at most %d: put the checkpoint in a shorter directory", max(len(path), long), maxSocketPath))
	}
	if err := fsys.CheckDir(dir); err != nil {
		return fail(err)
	}
	if err := notServed(path); err != nil {
		return fail(err)
	}
	private, err := os.MkdirTemp(dir, ".ctl-")
	if err != nil {
		return fail(err)
	}
	defer os.Remove(private)
	tmp := filepath.Join(private, "s")
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
	if err := os.Chmod(tmp, 0o600); err != nil { // in the 0700 directory: the name is ours
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

// notServed returns nil if nothing is at path, or a socket nobody serves
// (left by a daemon that died): Listen may replace it. A socket that
// accepts a connection is another process's, which the error names (by
// SO_PEERCRED) and which Listen must not take over; anything else at the
// path is not Listen's to replace.
func notServed(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("%s is there and is not a socket: move it away", fi.Mode().Type())
	}
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil // nobody listens: a socket left by a daemon that died
	}
	if err != nil {
		return fmt.Errorf("%w: cannot tell whether another process serves the socket there (%w): move it away if none does", ErrInUse, err)
	}
	defer c.Close()
	who := "another process"
	if p, err := peerOf(c.(*net.UnixConn)); err == nil {
		who = fmt.Sprintf("process %d (uid %d)", p.pid, p.uid)
	}
	return fmt.Errorf("%w: %s serves the socket there: stop it first (two daemons of one checkpoint? each must hold its lock)", ErrInUse, who)
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
			defer s.untrack(c)
			w := bufio.NewWriter(c)
			st := s.serve(c, w)
			// The status line ends the answer, so the slot is given
			// back before it is written: a client that waits for one
			// answer before it sends the next request is never told
			// busy because of its own last one.
			<-s.slots
			_ = c.SetWriteDeadline(time.Now().Add(s.cfg.timeout))
			writeStatus(w, st)
			_ = w.Flush()
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

// serve answers one connection but for its status line, which it
// returns: the peer's credentials, then its request, and the entries it
// asks for, written to w and flushed. The request must come within the
// timeout (WithTimeout), and the answer is written within a timeout of
// its own, from when it is ready: a Delete whose save outlasted the
// request's deadline still reports what it did.
func (s *Server[K, V]) serve(c *net.UnixConn, w *bufio.Writer) status {
	_ = c.SetReadDeadline(time.Now().Add(s.cfg.timeout))
	p, err := peerOf(c)
	if err != nil {
		s.cfg.logger.Error("cannot read a control connection's peer credentials; refused", zap.Error(err))
		return status{Status: "error", Code: CodeRefused, Error: "the daemon cannot tell who connected"}
	}
	log := s.cfg.logger.With(zap.Uint32("uid", p.uid), zap.Int32("pid", p.pid))
	if !p.allowed() {
		log.Warn("refused a control connection from another user", zap.Int("daemonUID", os.Geteuid()))
		return status{Status: "error", Code: CodeRefused,
			Error: fmt.Sprintf("uid %d is neither the daemon's (uid %d) nor root: run the command as one of them", p.uid, os.Geteuid())}
	}
	req, err := readRequest(c)
	if err != nil {
		return status{Status: "error", Code: CodeBadRequest, Error: err.Error()}
	}
	st := s.handle(req, log, func(line []byte) {
		_ = c.SetWriteDeadline(time.Now().Add(s.cfg.timeout))
		_, _ = w.Write(line)
	})
	_ = c.SetWriteDeadline(time.Now().Add(s.cfg.timeout))
	if err := w.Flush(); err != nil {
		return status{Status: "error", Code: CodeFailed, Error: "writing the answer: " + err.Error()}
	}
	return st
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

// handle answers req, giving each line of its answer but the status (an
// entry's, a report's) to emit, and returns the
// status. A panic of the Store or of a key's or value's MarshalJSON (a
// user's type) is recovered and answered as a failure, with its type and
// never its value, as package migrate recovers one in its writes: the
// daemon goes on serving.
func (s *Server[K, V]) handle(req request, log *zap.Logger, emit func(line []byte)) (st status) {
	defer func() {
		if p := recover(); p != nil {
			log.Error("a control request panicked; answered as failed", zap.String("op", req.Op), zap.String("panic", fmt.Sprintf("%T", p)))
			st = status{Status: "error", Code: CodeFailed, Error: fmt.Sprintf("the daemon panicked answering %s (a %T; see its log)", req.Op, p)}
		}
	}()
	switch req.Op {
	case "list":
		return s.list(emit)
	case "get", "delete":
		k, canon, err := decodeKey[K](req.Key)
		if err != nil {
			return status{Status: "error", Code: CodeBadKey, Error: err.Error()}
		}
		// get answers with the stored key, which list shows: with a
		// Match, it may differ from the key asked for.
		stored, ok := s.store.Key(k)
		var v V
		if ok {
			v, ok = s.store.Get(stored)
		}
		if !ok {
			return status{Status: "error", Code: CodeNoSuchKey, Error: fmt.Sprintf("the daemon's Store has no entry with key %s", canon)}
		}
		if req.Op == "get" {
			return writeEntry(emit, stored, v)
		}
		return s.delete(k, canon, log)
	case "report":
		if s.report == nil {
			return noReport()
		}
		return s.report.list(emit, s.store)
	case "prune-orphans":
		if s.report == nil {
			return noReport()
		}
		return s.report.prune(s.ctx, emit, s.store, req.Keys, s.cfg.timeout, log)
	}
	return status{Status: "error", Code: CodeBadRequest, Error: fmt.Sprintf("unknown op %q: use list, get, delete, report or prune-orphans", req.Op)}
}

// list gives every entry's line to emit, sorted by key JSON.
func (s *Server[K, V]) list(emit func(line []byte)) status {
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
		emit(entryLine(l.key, l.value))
	}
	st.Count = len(lines)
	return st
}

func writeEntry[K comparable, V any](emit func(line []byte), k K, v V) status {
	kj, err1 := json.Marshal(k)
	vj, err2 := json.Marshal(v)
	if err1 != nil || err2 != nil {
		return status{Status: "error", Code: CodeFailed, Error: "the entry does not encode as JSON"}
	}
	emit(entryLine(kj, vj))
	return status{Status: "ok", Count: 1}
}

// entryLine is an entry's line, {"key":K,"value":V} and a newline.
func entryLine(key, value []byte) []byte {
	line := make([]byte, 0, len(key)+len(value)+20)
	line = append(line, `{"key":`...)
	line = append(line, key...)
	line = append(line, `,"value":`...)
	line = append(line, value...)
	return append(line, "}\n"...)
}

// delete deletes k's entry through the Store, durably on every side the
// Store's phase writes. Its context bounds the wait for the Delete's turn
// (WithTimeout, and Close); once a commit has taken the Delete it runs to
// its end (see migrate.Store.Delete), and its outcome is the answer,
// written within a timeout of its own.
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
