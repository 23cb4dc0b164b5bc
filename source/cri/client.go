package cri

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

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

	chMu sync.Mutex // guards ch, and users and retired of every channel
	ch   *channel   // the connection calls use; replaced by redial

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

// NewLister returns a Lister for the CRI runtime at endpoint, which is
// "unix:///path/to.sock" or an absolute socket path such as
// "/run/containerd/containerd.sock". A malformed endpoint fails with
// [ErrInvalidEndpoint], a bad option with [ErrInvalidOption].
//
// NewLister does no I/O: it neither looks at the socket nor connects to it,
// so a runtime that is not running yet does not fail it. The first I/O is
// the first call to [Lister.Runtime] or [Lister.Sandboxes] (a [Reader]'s
// List calls Sandboxes): every call stats the socket and, unless the
// Lister's connection is up, checks that a gRPC server answers on it and
// connects, and the runtime's CRI version is checked at the first call
// that reaches it. The connection is then kept, and remade by the first
// call after the runtime restarts.
func NewLister(endpoint string, opts ...Option) (*Lister, error) {
	path, err := socketPath(endpoint)
	if err != nil {
		return nil, err
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	l := &Lister{
		endpoint: endpoint,
		path:     path,
		cfg:      cfg,
		log:      cfg.log.With(zap.String("endpoint", endpoint)),
	}
	if l.ch, err = l.newChannel(); err != nil {
		return nil, err
	}
	return l, nil
}

// newChannel sets up a gRPC connection to the socket. It does no I/O: gRPC
// connects at the first call.
func (l *Lister) newChannel() (*channel, error) {
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
			MinConnectTimeout: l.cfg.timeout,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(l.cfg.maxReceiveSize)),
	)
	if err != nil {
		return nil, fmt.Errorf("cri: set up gRPC client for %s: %w", l.endpoint, err)
	}
	return &channel{conn: conn, client: runtimeapi.NewRuntimeServiceClient(conn)}, nil
}

// socketPath checks endpoint's form and returns the socket path in it.
func socketPath(endpoint string) (string, error) {
	const accepted = "use unix:///path/to/runtime.sock or an absolute socket path " +
		"(containerd: unix:///run/containerd/containerd.sock, CRI-O: unix:///var/run/crio/crio.sock)"
	var path string
	switch {
	case endpoint == "":
		return "", fmt.Errorf("cri: %w: no endpoint given: %s", ErrInvalidEndpoint, accepted)
	case strings.HasPrefix(endpoint, "unix://"):
		path = strings.TrimPrefix(endpoint, "unix://")
	case strings.HasPrefix(endpoint, "/"):
		path = endpoint
	case strings.Contains(endpoint, "://"):
		scheme, _, _ := strings.Cut(endpoint, "://")
		return "", fmt.Errorf("cri: %w: %q: scheme %s:// is not supported, only local unix sockets are: %s",
			ErrInvalidEndpoint, endpoint, scheme, accepted)
	default:
		return "", fmt.Errorf("cri: %w: %q is not an absolute path: %s", ErrInvalidEndpoint, endpoint, accepted)
	}
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("cri: %w: %q: the socket path must be absolute (unix:// then /path, three slashes): %s",
			ErrInvalidEndpoint, endpoint, accepted)
	}
	path = filepath.Clean(path)
	// sun_path holds 108 bytes on Linux, the terminating NUL included.
	// Checking here turns connect's bare EINVAL into a message.
	if len(path) > 107 {
		return "", fmt.Errorf("cri: %w: %q: a unix socket path can be at most 107 bytes long, this one is %d",
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

// Endpoint returns the endpoint the Lister was made for, as given to
// NewLister.
func (l *Lister) Endpoint() string { return l.endpoint }

// Close releases the connection. It is idempotent: calls after the first do
// nothing and return nil. Calls in flight on its current connection fail
// with [ErrClosed]; one still on a connection that a reconnect replaced
// finishes, and that connection is closed when it returns.
func (l *Lister) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.chMu.Lock()
		defer l.chMu.Unlock()
		l.closeErr = l.ch.conn.Close()
	})
	return l.closeErr
}

// Runtime returns the runtime's name and version and the CRI version it
// serves. It asks the runtime the first time and remembers a successful
// answer; a failed attempt is not remembered, so the next call asks again
// (the runtime may just have been starting). It fails with
// [ErrUnsupportedAPI] if the runtime does not serve CRI v1.
func (l *Lister) Runtime(ctx context.Context) (RuntimeInfo, error) {
	ch, err := l.connect(ctx)
	if err != nil {
		return RuntimeInfo{}, err
	}
	defer l.release(ch)
	return l.version(ctx, ch)
}

// version asks the runtime for its version unless a previous call already
// learned it. Concurrent first calls may each ask; the answers are the same
// and asking twice is cheaper than making one caller wait on another's
// deadline.
func (l *Lister) version(ctx context.Context, ch *channel) (RuntimeInfo, error) {
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
	resp, err := ch.client.Version(callCtx, &runtimeapi.VersionRequest{Version: "0.1.0"})
	if status.Code(err) == codes.Unimplemented {
		return RuntimeInfo{}, l.unsupported(ctx, ch, err)
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
