// Package critest runs a small CRI runtime service in process, on a unix
// socket, for tests and demos of code that reads pod sandboxes over CRI, in
// the way net/http/httptest runs an HTTP server.
//
// A [Runtime] holds pod sandboxes and answers the CRI v1 calls a sandbox
// lister makes: Version, ListPodSandbox (honouring the filter) and
// PodSandboxStatus; every other call answers Unimplemented. Its methods
// change the sandboxes and inject the faults real runtimes show: slow
// answers, a sandbox removed between list and status, a failing status, a
// runtime that serves only CRI v1alpha2, a runtime that ignores the state
// filter, and, through hooks, malformed answers. [Runtime.Serve] puts it on
// a socket; [Server.Kill] stops it the way a crash does, leaving the socket
// file behind.
//
// # Caveats
//
// It is not a container runtime: it starts nothing and checks nothing, and
// it is not meant for production use. It answers only the calls a sandbox
// lister makes, and keeps its sandboxes in memory: a new Runtime starts
// empty.
package critest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Sandbox describes a pod sandbox the Runtime holds. The zero value of each
// field is what a plain ready pod sandbox without an IP reports.
type Sandbox struct {
	ID        string
	Name      string // pod name
	Namespace string
	UID       string
	Attempt   uint32

	// CreatedAt is reported in nanoseconds; a zero CreatedAt is reported
	// as 0, which CRI clients read as unknown.
	CreatedAt time.Time

	Labels      map[string]string
	Annotations map[string]string

	// IPs are reported as given, so a test can feed an address that does
	// not parse: the first as the primary IP, the rest as additional IPs.
	IPs []string

	HostNetwork    bool // network namespace mode NODE instead of POD
	NotReady       bool // state SANDBOX_NOTREADY instead of SANDBOX_READY
	RuntimeHandler string
}

func (s Sandbox) clone() *Sandbox {
	s.Labels = maps.Clone(s.Labels)
	s.Annotations = maps.Clone(s.Annotations)
	s.IPs = slices.Clone(s.IPs)
	return &s
}

// Runtime is a fake CRI runtime service. Create it with [New]. All methods
// are safe for concurrent use, also while it serves.
type Runtime struct {
	mu              sync.Mutex          // guards every field below
	sandboxes       map[string]*Sandbox // by ID
	name, version   string
	v1Unimplemented bool
	ignoreFilter    bool
	delay           time.Duration
	statusDelays    map[string]time.Duration // PodSandboxStatus waits this long, by ID
	statusErrs      map[string]error         // PodSandboxStatus fails with these, by ID
	vanish          map[string]bool          // removed once listed, by ID
	listHook        func(*runtimeapi.ListPodSandboxResponse)
	statusHook      func(id string, resp *runtimeapi.PodSandboxStatusResponse)
	calls           map[string]int // by full method name
	inFlight        int
	maxInFlight     int
}

// New returns a Runtime holding no sandboxes that calls itself
// "critest 0.0.0" and serves CRI v1.
func New() *Runtime {
	return &Runtime{
		sandboxes:    map[string]*Sandbox{},
		name:         "critest",
		version:      "0.0.0",
		statusErrs:   map[string]error{},
		statusDelays: map[string]time.Duration{},
		vanish:       map[string]bool{},
		calls:        map[string]int{},
	}
}

// Add adds sandboxes, replacing any with the same ID. It copies them.
func (r *Runtime) Add(sandboxes ...Sandbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range sandboxes {
		r.sandboxes[s.ID] = s.clone()
	}
}

// Remove removes a sandbox, as the runtime does once the kubelet removes
// the pod. It reports whether the sandbox was there.
func (r *Runtime) Remove(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.sandboxes[id]
	delete(r.sandboxes, id)
	return ok
}

// SetReady marks a sandbox ready or not ready (stopped). It reports whether
// the sandbox was there.
func (r *Runtime) SetReady(id string, ready bool) bool {
	return r.edit(id, func(s *Sandbox) { s.NotReady = !ready })
}

// SetIPs replaces a sandbox's IPs: the first is the primary one. It reports
// whether the sandbox was there.
func (r *Runtime) SetIPs(id string, ips ...string) bool {
	return r.edit(id, func(s *Sandbox) { s.IPs = slices.Clone(ips) })
}

// SetHostNetwork puts a sandbox in the node's network namespace, or takes
// it out. It reports whether the sandbox was there.
func (r *Runtime) SetHostNetwork(id string, on bool) bool {
	return r.edit(id, func(s *Sandbox) { s.HostNetwork = on })
}

func (r *Runtime) edit(id string, fn func(*Sandbox)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sandboxes[id]
	if ok {
		fn(s)
	}
	return ok
}

// Sandboxes returns a copy of every sandbox, sorted by ID.
func (r *Runtime) Sandboxes() []Sandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Sandbox, 0, len(r.sandboxes))
	for _, id := range slices.Sorted(maps.Keys(r.sandboxes)) {
		out = append(out, *r.sandboxes[id].clone())
	}
	return out
}

// SetDelay makes every call wait d before it answers, or until the caller
// gives up, whichever comes first. Zero answers at once.
func (r *Runtime) SetDelay(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delay = d
}

// DelayStatus makes PodSandboxStatus for id wait d before it answers, or
// until the caller gives up, as a runtime does for a sandbox whose shim
// hangs. Zero clears the delay.
func (r *Runtime) DelayStatus(id string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d == 0 {
		delete(r.statusDelays, id)
		return
	}
	r.statusDelays[id] = d
}

// SetVersion sets the runtime name and version that Version reports.
func (r *Runtime) SetVersion(name, version string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.name, r.version = name, version
}

// SetV1Unimplemented makes every CRI v1 call answer Unimplemented, as
// containerd before 1.6 and other runtimes that serve only v1alpha2 do. The
// v1alpha2 Version call, which the Runtime always serves, still answers
// with the name and version from SetVersion.
func (r *Runtime) SetV1Unimplemented(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.v1Unimplemented = on
}

// IgnoreFilter makes ListPodSandbox list every sandbox whatever the
// request's filter says, as a careless runtime might.
func (r *Runtime) IgnoreFilter(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ignoreFilter = on
}

// FailStatus makes PodSandboxStatus for id fail with err, which should be a
// gRPC status error (status.Error). A nil err clears the fault.
func (r *Runtime) FailStatus(id string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		delete(r.statusErrs, id)
		return
	}
	r.statusErrs[id] = err
}

// VanishAfterList removes sandbox id as soon as a ListPodSandbox answer has
// included it, so that the status call that follows finds it gone
// (NotFound), as when a pod is deleted while a lister runs.
func (r *Runtime) VanishAfterList(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.vanish[id] = true
}

// SetListHook makes fn edit every ListPodSandbox answer before it is sent.
// It is a test hook for answers no real sandbox produces, such as nil items
// or nil metadata. A nil fn removes the hook.
func (r *Runtime) SetListHook(fn func(*runtimeapi.ListPodSandboxResponse)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listHook = fn
}

// SetStatusHook makes fn edit every PodSandboxStatus answer for a sandbox
// the Runtime holds before it is sent; fn may replace resp.Status, or set
// it to nil. It is a test hook for answers no real sandbox produces, such
// as a status without metadata, network or Linux namespaces. A nil fn
// removes the hook.
func (r *Runtime) SetStatusHook(fn func(id string, resp *runtimeapi.PodSandboxStatusResponse)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.statusHook = fn
}

// Calls returns how many calls of a CRI v1 RuntimeService method
// ("Version", "ListPodSandbox", "PodSandboxStatus", ...) the Runtime has
// received. A method given in full, starting with a slash
// ("/runtime.v1alpha2.RuntimeService/Version"), counts that method.
func (r *Runtime) Calls(method string) int {
	if !strings.HasPrefix(method, "/") {
		method = "/runtime.v1.RuntimeService/" + method
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[method]
}

// MaxInFlight returns the largest number of calls the Runtime has served at
// the same time, to check that a client bounds its concurrency.
func (r *Runtime) MaxInFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxInFlight
}

// Server is a Runtime serving on a unix socket. Close and Kill may be
// called from any goroutine, in any order, any number of times.
type Server struct {
	// Path is the socket's path.
	Path string

	srv     *grpc.Server
	lis     *net.UnixListener
	tempDir string        // removed by Close when Serve made it
	served  chan struct{} // closed when Serve's goroutine returns

	stopOnce  sync.Once
	killed    bool // set under stopOnce: stopped by Kill, socket file left
	cleanOnce sync.Once
}

// Serve starts serving r on a unix socket at socketPath, which must not
// exist yet. An empty socketPath makes a socket in a new temporary
// directory with a short path (unix socket paths are limited to about 107
// bytes, which t.TempDir paths can exceed); Close removes it.
func (r *Runtime) Serve(socketPath string) (*Server, error) {
	var tempDir string
	if socketPath == "" {
		dir, err := os.MkdirTemp("", "critest")
		if err != nil {
			return nil, fmt.Errorf("critest: make socket directory: %w", err)
		}
		tempDir, socketPath = dir, filepath.Join(dir, "cri.sock")
	}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: socketPath, Net: "unix"})
	if err != nil {
		if tempDir != "" {
			_ = os.RemoveAll(tempDir)
		}
		return nil, fmt.Errorf("critest: listen: %w", err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(r.intercept))
	runtimeapi.RegisterRuntimeServiceServer(srv, &v1Service{r: r})
	srv.RegisterService(&v1alpha2VersionDesc, &v1alpha2Service{r: r})

	s := &Server{Path: socketPath, srv: srv, lis: lis, tempDir: tempDir, served: make(chan struct{})}
	go func() {
		defer close(s.served)
		_ = srv.Serve(lis)
	}()
	return s, nil
}

// Endpoint returns the endpoint to dial: "unix://" and the socket path.
func (s *Server) Endpoint() string { return "unix://" + s.Path }

// Close stops serving, ends calls in flight, and removes the socket (and
// the directory Serve made for it). It is idempotent, and also cleans up
// after Kill.
func (s *Server) Close() {
	s.stop(true)
	s.cleanOnce.Do(func() {
		if s.killed {
			_ = os.Remove(s.Path)
		}
		if s.tempDir != "" {
			_ = os.RemoveAll(s.tempDir)
		}
	})
}

// Kill stops serving as a crashed runtime does: calls in flight end and the
// socket file stays, so that connecting to it is refused. Call Close to
// remove the file.
func (s *Server) Kill() { s.stop(false) }

func (s *Server) stop(unlink bool) {
	s.stopOnce.Do(func() {
		s.killed = !unlink
		s.lis.SetUnlinkOnClose(unlink)
		s.srv.Stop()
		<-s.served
	})
}

// intercept counts calls and applies the delays. The delay ends early when
// the caller gives up, so that a client's timeout test does not leave a
// handler sleeping past the end of the test.
func (r *Runtime) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	r.mu.Lock()
	r.calls[info.FullMethod]++
	r.inFlight++
	r.maxInFlight = max(r.maxInFlight, r.inFlight)
	delay := r.delay
	if req, ok := req.(*runtimeapi.PodSandboxStatusRequest); ok {
		delay += r.statusDelays[req.GetPodSandboxId()]
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inFlight--
		r.mu.Unlock()
	}()

	if delay > 0 {
		timer := time.NewTimer(delay)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return handler(ctx, req)
}
