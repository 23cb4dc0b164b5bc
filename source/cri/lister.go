package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/phaseshift/phaseshift/source"
)

// Sandbox is one ready pod sandbox as the runtime reports it. Its maps and
// slices are the caller's own: nothing else holds them.
type Sandbox struct {
	ID        string // the sandbox ID, which is CNI_CONTAINERID for the CNI plugin
	Name      string // pod name
	Namespace string // pod namespace
	UID       string // pod UID
	Attempt   uint32 // how many sandboxes the kubelet created for this pod before this one

	// CreatedAt is when the runtime created the sandbox; the zero Time if
	// the runtime did not say.
	CreatedAt time.Time

	Labels      map[string]string
	Annotations map[string]string // may hold secrets: do not log them

	// IPs are the sandbox's addresses: the primary one first, then the
	// additional ones (the other family of a dual-stack pod). Empty when
	// the runtime knows no address for the sandbox.
	IPs []netip.Addr

	// HostNetwork is true for a sandbox in the node's network namespace.
	// Such sandboxes are listed only with the IncludeHostNetwork option.
	HostNetwork bool

	// RuntimeHandler is the RuntimeClass handler ("" for the default, or
	// e.g. "kata"), which tells a VM proxy which sandboxes are its own.
	RuntimeHandler string
}

// RuntimeInfo is what the runtime says about itself in answer to the CRI
// Version call.
type RuntimeInfo struct {
	Name       string // e.g. "containerd" or "cri-o"
	Version    string // e.g. "v1.7.13" or "1.29.1"
	APIVersion string // the CRI version it serves, "v1"
}

// String reads like "containerd v1.7.13 (CRI v1)".
func (r RuntimeInfo) String() string {
	return fmt.Sprintf("%s %s (CRI %s)", r.Name, r.Version, r.APIVersion)
}

// Lister reads pod sandboxes from a container runtime over CRI.
//
// All methods are safe for concurrent use. A Lister holds one gRPC
// connection, made on first use and remade after the runtime restarts;
// Close it when done.
type Lister struct {
	endpoint string // as the caller gave it, for messages
	path     string // the socket's path
	cfg      config
	log      *zap.Logger
	conn     *grpc.ClientConn
	client   runtimeapi.RuntimeServiceClient

	// lastDialErr is the error of the most recent failed connect. gRPC
	// reports a refused or denied connect only as text inside an
	// Unavailable status; keeping the error itself lets a failed call say
	// which of the two it was and still match syscall.ECONNREFUSED.
	lastDialErr atomic.Pointer[error]

	mu      sync.Mutex  // guards runtime and known
	runtime RuntimeInfo // what Version answered, once known is true
	known   bool

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// Dial returns a Lister for the CRI runtime at endpoint, which is
// "unix:///path/to.sock" or an absolute socket path such as
// "/run/containerd/containerd.sock".
//
// Dial does no I/O: a runtime that is not running yet does not fail it. The
// socket is checked, and the connection made, at the first call; the
// runtime's CRI version is checked at the first call that succeeds in
// reaching it.
func Dial(endpoint string, opts ...Option) (*Lister, error) {
	path, err := socketPath(endpoint)
	if err != nil {
		return nil, err
	}
	cfg := defaultConfig()
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	l := &Lister{
		endpoint: endpoint,
		path:     path,
		cfg:      cfg,
		log:      cfg.log.With(zap.String("endpoint", endpoint)),
	}
	// The kubelet's choices (k8s.io/cri-client remote_runtime.go): authority
	// "localhost", because a socket path is no host name; a short reconnect
	// backoff, because the runtime is local and a restarted runtime should
	// be found again within seconds, not gRPC's default of up to 2 minutes.
	// The target is a fixed placeholder and the dialer holds the real path,
	// so that no socket path ever meets URL parsing.
	conn, err := grpc.NewClient("passthrough:///cri-runtime",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"),
		grpc.WithContextDialer(l.dial),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  100 * time.Millisecond,
				Multiplier: backoff.DefaultConfig.Multiplier,
				Jitter:     backoff.DefaultConfig.Jitter,
				MaxDelay:   3 * time.Second,
			},
			MinConnectTimeout: cfg.timeout,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.maxReceiveSize)),
	)
	if err != nil {
		return nil, fmt.Errorf("cri: set up gRPC client for %s: %w", endpoint, err)
	}
	l.conn = conn
	l.client = runtimeapi.NewRuntimeServiceClient(conn)
	return l, nil
}

// socketPath checks endpoint's form and returns the socket path in it.
func socketPath(endpoint string) (string, error) {
	const accepted = "use unix:///path/to/runtime.sock or an absolute socket path " +
		"(containerd: unix:///run/containerd/containerd.sock, CRI-O: unix:///var/run/crio/crio.sock)"
	var path string
	switch {
	case endpoint == "":
		return "", fmt.Errorf("%w: no endpoint given: %s", ErrInvalidEndpoint, accepted)
	case strings.HasPrefix(endpoint, "unix://"):
		path = strings.TrimPrefix(endpoint, "unix://")
	case strings.HasPrefix(endpoint, "/"):
		path = endpoint
	case strings.Contains(endpoint, "://"):
		scheme, _, _ := strings.Cut(endpoint, "://")
		return "", fmt.Errorf("%w: %q: scheme %s:// is not supported, only local unix sockets are: %s",
			ErrInvalidEndpoint, endpoint, scheme, accepted)
	default:
		return "", fmt.Errorf("%w: %q is not an absolute path: %s", ErrInvalidEndpoint, endpoint, accepted)
	}
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%w: %q: the socket path must be absolute (unix:// then /path, three slashes): %s",
			ErrInvalidEndpoint, endpoint, accepted)
	}
	path = filepath.Clean(path)
	// sun_path holds 108 bytes on Linux, the terminating NUL included.
	// Checking here turns connect's bare EINVAL into a message.
	if len(path) > 107 {
		return "", fmt.Errorf("%w: %q: a unix socket path can be at most 107 bytes long, this one is %d",
			ErrInvalidEndpoint, endpoint, len(path))
	}
	return path, nil
}

// dial connects to the socket for gRPC and remembers why it failed.
func (l *Lister) dial(ctx context.Context, _ string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", l.path)
	if err != nil {
		l.lastDialErr.Store(&err)
		return nil, err
	}
	l.lastDialErr.Store(nil)
	return conn, nil
}

// Endpoint returns the endpoint the Lister was dialed with.
func (l *Lister) Endpoint() string { return l.endpoint }

// Close releases the connection. It is idempotent: calls after the first do
// nothing and return nil. Calls in flight fail with [ErrClosed].
func (l *Lister) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.closeErr = l.conn.Close()
	})
	return l.closeErr
}

// Runtime returns the runtime's name and version and the CRI version it
// serves. It asks the runtime the first time and remembers a successful
// answer; a failed attempt is not remembered, so the next call asks again
// (the runtime may just have been starting). It fails with
// [ErrUnsupportedAPI] if the runtime does not serve CRI v1.
func (l *Lister) Runtime(ctx context.Context) (RuntimeInfo, error) {
	if err := l.precheck(); err != nil {
		return RuntimeInfo{}, err
	}
	return l.version(ctx)
}

// precheck fails fast on what needs no round trip: a closed Lister or a
// missing socket. The socket is checked at every call, not at Dial, because
// a daemon is often started before the runtime.
func (l *Lister) precheck() error {
	if l.closed.Load() {
		return &callError{msg: fmt.Sprintf("cri: lister for %s is closed", l.endpoint), kinds: []error{ErrClosed}}
	}
	return l.checkSocket()
}

func (l *Lister) checkSocket() error {
	fi, err := os.Stat(l.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &callError{
			msg:   fmt.Sprintf("cri: runtime socket %s does not exist: %s", l.path, socketHint(l.path)),
			kinds: []error{ErrSocketMissing},
			cause: err,
		}
	case err != nil:
		// Not ours to judge (often EACCES on a parent directory): the
		// connect that follows fails with the reason.
		return nil
	case fi.Mode().Type() != fs.ModeSocket:
		return &callError{
			msg: fmt.Sprintf("cri: runtime socket %s is a %s, not a socket: a hostPath volume for a socket "+
				"that did not exist yet leaves a directory in its place; remove it, mount the socket's directory "+
				"instead, and check the endpoint: %s", l.path, fileKind(fi.Mode()), socketHint(l.path)),
			kinds: []error{ErrSocketMissing},
		}
	}
	return nil
}

// socketHint says which runtime is expected at path and where the other
// common one listens, so a misconfigured endpoint is easy to spot.
func socketHint(path string) string {
	switch {
	case strings.Contains(path, "crio"):
		return "is CRI-O running? (for containerd use unix:///run/containerd/containerd.sock)"
	case strings.Contains(path, "containerd"):
		return "is containerd running? (for CRI-O use unix:///var/run/crio/crio.sock)"
	default:
		return "is the container runtime running? (containerd listens on unix:///run/containerd/containerd.sock, " +
			"CRI-O on unix:///var/run/crio/crio.sock)"
	}
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	default:
		return "file of mode " + m.Type().String()
	}
}

// version asks the runtime for its version unless a previous call already
// learned it. Concurrent first calls may each ask; the answers are the same
// and asking twice is cheaper than making one caller wait on another's
// deadline.
func (l *Lister) version(ctx context.Context) (RuntimeInfo, error) {
	l.mu.Lock()
	info, known := l.runtime, l.known
	l.mu.Unlock()
	if known {
		return info, nil
	}

	callCtx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	// The kubelet sends "0.1.0", the version of its runtime API client;
	// runtimes ignore the field.
	resp, err := l.client.Version(callCtx, &runtimeapi.VersionRequest{Version: "0.1.0"})
	if status.Code(err) == codes.Unimplemented {
		return RuntimeInfo{}, l.unsupported(ctx, err)
	}
	if err != nil {
		return RuntimeInfo{}, l.explain(ctx, callCtx, "Version", err)
	}
	info = RuntimeInfo{
		Name:       resp.GetRuntimeName(),
		Version:    resp.GetRuntimeVersion(),
		APIVersion: resp.GetRuntimeApiVersion(),
	}
	// A runtime answering on the v1 service speaks v1. Only an explicit
	// pre-v1 version is refused: runtimes have put other things in this
	// field (dockershim put the Docker API version there).
	if strings.HasPrefix(info.APIVersion, "v1alpha") || strings.HasPrefix(info.APIVersion, "v1beta") {
		return RuntimeInfo{}, &callError{
			msg: fmt.Sprintf("cri: runtime %s %s at %s reports CRI %s: phaseshift needs CRI v1 "+
				"(%s)", info.Name, info.Version, l.endpoint, info.APIVersion, v1Runtimes),
			kinds: []error{ErrUnsupportedAPI},
		}
	}
	l.mu.Lock()
	l.runtime, l.known = info, true
	l.mu.Unlock()
	l.log.Info("CRI runtime found",
		zap.String("runtime", info.Name), zap.String("version", info.Version), zap.String("api", info.APIVersion))
	return info, nil
}

// v1Runtimes names runtime releases that serve CRI v1: the ones Kubernetes
// 1.26, which dropped v1alpha2, requires.
const v1Runtimes = "containerd 1.6 or later, CRI-O 1.26 or later"

// unsupported builds the error for a runtime that does not serve v1. It
// asks the v1alpha2 service, whose Version messages are wire-compatible with
// v1's, so that the error can name the runtime the operator must upgrade.
func (l *Lister) unsupported(ctx context.Context, v1err error) error {
	callCtx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	var old runtimeapi.VersionResponse
	err := l.conn.Invoke(callCtx, "/runtime.v1alpha2.RuntimeService/Version",
		&runtimeapi.VersionRequest{Version: "0.1.0"}, &old)
	if err == nil && old.GetRuntimeName() != "" {
		return &callError{
			msg: fmt.Sprintf("cri: runtime %s %s at %s does not support CRI v1, only %s: "+
				"upgrade it (%s): %v",
				old.GetRuntimeName(), old.GetRuntimeVersion(), l.endpoint, old.GetRuntimeApiVersion(), v1Runtimes, v1err),
			kinds: []error{ErrUnsupportedAPI},
			cause: v1err,
		}
	}
	return &callError{
		msg: fmt.Sprintf("cri: runtime at %s does not support CRI v1 (and did not say what it is): "+
			"upgrade it (%s): %v", l.endpoint, v1Runtimes, v1err),
		kinds: []error{ErrUnsupportedAPI},
		cause: v1err,
	}
}

// explain turns a failed RPC into an error that says what an operator
// should look at. ctx is the caller's context and callCtx the call's, so
// that a caller's cancellation or deadline is told apart from the runtime
// being slow.
func (l *Lister) explain(ctx, callCtx context.Context, method string, err error) error {
	if l.closed.Load() {
		return &callError{
			msg:   fmt.Sprintf("cri: %s at %s: lister closed during the call", method, l.endpoint),
			kinds: []error{ErrClosed},
			cause: err,
		}
	}
	if ctxErr := ctx.Err(); errors.Is(ctxErr, context.Canceled) {
		// The caller gave up; nothing is wrong with the runtime.
		return fmt.Errorf("cri: %s at %s: %w (%w)", method, l.endpoint, ctxErr, err)
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded:
		// Which deadline ran out is read from the deadlines, not from
		// ctx.Err(): the server sees the deadline too and may end the call
		// a moment before the caller's context expires.
		within := "within " + l.cfg.timeout.String()
		callerDeadline, bound := ctx.Deadline()
		if callDeadline, _ := callCtx.Deadline(); bound && !callerDeadline.After(callDeadline) {
			within = "before the caller's deadline"
		}
		return &callError{
			msg: fmt.Sprintf("cri: runtime at %s did not answer %s %s: it is overloaded or hung "+
				"(try crictl --runtime-endpoint %s pods): %v", l.endpoint, method, within, l.endpoint, err),
			kinds: []error{ErrTimeout, ErrRuntimeNotResponding},
			cause: err,
		}
	case codes.Unavailable:
		if missing := l.checkSocket(); missing != nil {
			// The runtime went away, and took its socket with it, between
			// the precheck and the call.
			return missing
		}
		why, cause := "the connection failed or was dropped", err
		if p := l.lastDialErr.Load(); p != nil {
			switch {
			case errors.Is(*p, syscall.ECONNREFUSED):
				why = "connection refused: the socket file exists but nothing listens on it " +
					"(the runtime stopped or crashed, or is restarting)"
				cause = errors.Join(err, *p)
			case errors.Is(*p, fs.ErrPermission):
				why = "permission denied: the daemon needs read and write access to the socket (usually root)"
				cause = errors.Join(err, *p)
			}
		}
		return &callError{
			msg:   fmt.Sprintf("cri: runtime not answering at %s: %s: %v", l.endpoint, why, err),
			kinds: []error{ErrRuntimeNotResponding},
			cause: cause,
		}
	case codes.Unimplemented:
		return &callError{
			msg:   fmt.Sprintf("cri: runtime at %s does not implement %s of CRI v1: %v", l.endpoint, method, err),
			kinds: []error{ErrUnsupportedAPI},
			cause: err,
		}
	case codes.ResourceExhausted:
		if strings.Contains(status.Convert(err).Message(), "larger than max") {
			return &callError{
				msg: fmt.Sprintf("cri: %s answer from %s is larger than the receive limit of %d bytes: "+
					"raise it with the cri.MaxReceiveSize option: %v", method, l.endpoint, l.cfg.maxReceiveSize, err),
				kinds: []error{ErrResponseTooLarge},
				cause: err,
			}
		}
	}
	return fmt.Errorf("cri: %s at %s: %w", method, l.endpoint, err)
}

// fatal reports whether a failed status call means the rest of the listing
// would fail the same way, so that it must end rather than be reported
// sandbox by sandbox: a runtime that went away, a caller that gave up, a
// closed Lister.
func fatal(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	return errors.Is(err, ErrClosed) || errors.Is(err, ErrSocketMissing) || errors.Is(err, ErrUnsupportedAPI) ||
		(errors.Is(err, ErrRuntimeNotResponding) && !errors.Is(err, ErrTimeout))
}

// Sandboxes lists the ready pod sandboxes, sorted by ID.
//
// It makes one ListPodSandbox call, then one PodSandboxStatus call per
// sandbox (at most 8 in flight) to learn its IPs and network mode.
// Sandboxes that are not ready, or are in the host's network namespace
// (unless [IncludeHostNetwork]), are left out, and so is a sandbox removed
// between the two calls.
//
// When some sandboxes cannot be read, Sandboxes returns the others together
// with a *source.ListError holding one [*SandboxError] per sandbox left
// out, as package source documents for partial reads. Any other error means
// nothing was listed: the runtime could not be reached or listed, or it
// stopped answering part way, when a partial list would hide an unknown
// number of sandboxes.
func (l *Lister) Sandboxes(ctx context.Context) ([]Sandbox, error) {
	start := time.Now()
	if err := l.precheck(); err != nil {
		return nil, err
	}
	if _, err := l.version(ctx); err != nil {
		return nil, err
	}

	items, err := l.listReady(ctx)
	if err != nil {
		return nil, err
	}
	outcomes, err := l.statuses(ctx, items)
	if err != nil {
		return nil, err
	}

	var (
		out     []Sandbox
		errs    []error
		skipped = map[skipReason]int{}
	)
	for i, o := range outcomes {
		switch {
		case o.err != nil:
			errs = append(errs, &SandboxError{
				ID:        items[i].GetId(),
				Namespace: items[i].GetMetadata().GetNamespace(),
				Name:      items[i].GetMetadata().GetName(),
				Err:       o.err,
			})
			l.log.Warn("cannot read CRI pod sandbox", zap.String("sandbox", items[i].GetId()), zap.Error(o.err))
		case o.skip != keep:
			skipped[o.skip]++
			l.log.Debug("CRI pod sandbox left out", zap.String("sandbox", items[i].GetId()), zap.Stringer("reason", o.skip))
		default:
			out = append(out, o.sandbox)
		}
	}
	slices.SortFunc(out, func(a, b Sandbox) int { return strings.Compare(a.ID, b.ID) })
	l.log.Info("listed CRI pod sandboxes",
		zap.Int("ready", len(out)),
		zap.Int("failed", len(errs)),
		zap.Int("hostNetwork", skipped[skipHostNetwork]),
		zap.Int("notReady", skipped[skipNotReady]),
		zap.Int("vanished", skipped[skipVanished]),
		zap.Duration("took", time.Since(start)))
	if len(errs) > 0 {
		return out, &source.ListError{Errs: errs}
	}
	return out, nil
}

// listReady lists the ready sandboxes, once each. It asks the runtime to
// filter by state and filters again, since the filter is advisory and a
// runtime that ignores it would otherwise hand back stopped sandboxes.
func (l *Lister) listReady(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
	callCtx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	resp, err := l.client.ListPodSandbox(callCtx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{
			State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		},
	})
	if err != nil {
		return nil, l.explain(ctx, callCtx, "ListPodSandbox", err)
	}
	items := resp.GetItems()
	ready := make([]*runtimeapi.PodSandbox, 0, len(items))
	seen := make(map[string]bool, len(items))
	for _, item := range items {
		if item == nil || item.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY || seen[item.GetId()] {
			continue
		}
		seen[item.GetId()] = true
		ready = append(ready, item)
	}
	l.log.Debug("ListPodSandbox answered", zap.Int("items", len(items)), zap.Int("ready", len(ready)))
	return ready, nil
}

type skipReason int

const (
	keep skipReason = iota
	skipNotReady
	skipHostNetwork
	skipVanished
)

func (r skipReason) String() string {
	switch r {
	case skipNotReady:
		return "not ready"
	case skipHostNetwork:
		return "host network"
	case skipVanished:
		return "removed since listed"
	}
	return "kept"
}

// outcome is what became of one listed sandbox.
type outcome struct {
	sandbox Sandbox
	skip    skipReason
	err     error
}

// statuses reads the status of every item with a bounded number of calls in
// flight. outcomes[i] is items[i]'s. It fails as a whole when a call fails
// in a way that the rest would too.
//
// One sandbox's status call can time out while the others answer (a hung
// shim in containerd does that), and that is the sandbox's problem. But
// when every call in flight times out, the runtime itself has hung, and
// reporting 5,000 timeouts one by one would take 5,000 timeouts / 8 in
// flight to arrive; so a run of as many timeouts as there can be calls in
// flight, with no answer in between, fails the listing.
func (l *Lister) statuses(ctx context.Context, items []*runtimeapi.PodSandbox) ([]outcome, error) {
	outcomes := make([]outcome, len(items))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		next     atomic.Int64 // index of the next item to read
		done     atomic.Int64 // items whose outcome is in
		timeouts atomic.Int64 // status calls timed out since the last answer
		wg       sync.WaitGroup
		failOnce sync.Once
		failErr  error // written once under failOnce, read after wg.Wait
	)
	fail := func(err error) { failOnce.Do(func() { failErr = err; cancel() }) }
	workers := min(statusConcurrency, len(items))
	wg.Add(workers)
	for range workers {
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(items) {
					return
				}
				o := l.status(ctx, items[i])
				if o.err != nil && fatal(ctx, o.err) {
					fail(o.err)
					return
				}
				if !errors.Is(o.err, ErrTimeout) {
					timeouts.Store(0)
				} else if timeouts.Add(1) >= statusConcurrency && ctx.Err() == nil {
					fail(&callError{
						msg: fmt.Sprintf("cri: runtime at %s stopped answering: %d PodSandboxStatus calls in a row "+
							"took longer than %s: %v", l.endpoint, statusConcurrency, l.cfg.timeout, o.err),
						kinds: []error{ErrTimeout, ErrRuntimeNotResponding},
						cause: o.err,
					})
					return
				}
				outcomes[i] = o
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if failErr != nil {
		return nil, failErr
	}
	if int(done.Load()) < len(items) {
		// The caller gave up between two calls, leaving no failed call to
		// show for it.
		return nil, fmt.Errorf("cri: PodSandboxStatus at %s: %w", l.endpoint, context.Cause(ctx))
	}
	return outcomes, nil
}

// status reads one sandbox's status and turns it into a Sandbox.
func (l *Lister) status(ctx context.Context, item *runtimeapi.PodSandbox) outcome {
	if item.GetId() == "" {
		// Asking for the status of "" would come back NotFound and the
		// sandbox would vanish without a word.
		return outcome{err: errors.New("cri: runtime listed a sandbox without an ID")}
	}
	callCtx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	resp, err := l.client.PodSandboxStatus(callCtx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: item.GetId()})
	if status.Code(err) == codes.NotFound {
		// Removed after the list: it holds nothing to restore any more.
		return outcome{skip: skipVanished}
	}
	if err != nil {
		return outcome{err: l.explain(ctx, callCtx, "PodSandboxStatus", err)}
	}
	return l.fromStatus(item, resp.GetStatus())
}

// fromStatus builds a Sandbox from its list entry and its status, preferring
// the status, which is the newer of the two. Every field is read through the
// generated getters, which return zero values for nil messages, so a runtime
// that leaves parts out cannot make this panic.
func (l *Lister) fromStatus(item *runtimeapi.PodSandbox, st *runtimeapi.PodSandboxStatus) outcome {
	if st == nil {
		return outcome{err: ErrNoStatus}
	}
	if st.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
		return outcome{skip: skipNotReady}
	}
	hostNetwork := st.GetLinux().GetNamespaces().GetOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
	if hostNetwork && !l.cfg.includeHostNetwork {
		return outcome{skip: skipHostNetwork}
	}

	ips, err := sandboxIPs(st.GetNetwork())
	if err != nil {
		return outcome{err: err}
	}
	meta := st.GetMetadata()
	if meta == nil {
		meta = item.GetMetadata()
	}
	created := st.GetCreatedAt()
	if created == 0 {
		created = item.GetCreatedAt()
	}
	labels, annotations := st.GetLabels(), st.GetAnnotations()
	if labels == nil {
		labels = item.GetLabels()
	}
	if annotations == nil {
		annotations = item.GetAnnotations()
	}
	handler := st.GetRuntimeHandler()
	if handler == "" {
		handler = item.GetRuntimeHandler()
	}
	return outcome{sandbox: Sandbox{
		ID:             item.GetId(),
		Name:           meta.GetName(),
		Namespace:      meta.GetNamespace(),
		UID:            meta.GetUid(),
		Attempt:        meta.GetAttempt(),
		CreatedAt:      unixNano(created),
		Labels:         maps.Clone(labels),
		Annotations:    maps.Clone(annotations),
		IPs:            ips,
		HostNetwork:    hostNetwork,
		RuntimeHandler: handler,
	}}
}

// sandboxIPs returns the primary IP then the additional ones, each once.
// An empty string is an absent address, not an error: runtimes report ""
// for a sandbox whose network is not set up or is the host's.
func sandboxIPs(n *runtimeapi.PodSandboxNetworkStatus) ([]netip.Addr, error) {
	raw := make([]string, 0, 1+len(n.GetAdditionalIps()))
	raw = append(raw, n.GetIp())
	for _, extra := range n.GetAdditionalIps() {
		raw = append(raw, extra.GetIp())
	}
	var ips []netip.Addr
	for _, s := range raw {
		if s == "" {
			continue
		}
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrInvalidIP, s, err)
		}
		if !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	return ips, nil
}

// unixNano converts CRI's nanoseconds since the epoch, leaving 0 (unset) as
// the zero Time rather than 1970.
func unixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
