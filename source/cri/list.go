package cri

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
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
	// Such sandboxes are listed only with [WithHostNetworkSandboxes].
	HostNetwork bool

	// RuntimeHandler is the RuntimeClass handler ("" for the default, or
	// e.g. "kata"), which tells a VM proxy which sandboxes are its own.
	RuntimeHandler string
}

// Sandboxes lists the ready pod sandboxes, sorted by ID.
//
// It makes one ListPodSandbox call, then one PodSandboxStatus call per
// sandbox (at most 8 in flight) to learn its IPs and network mode.
// Sandboxes that are not ready, or are in the host's network namespace
// (unless [WithHostNetworkSandboxes]), are left out, and so is a sandbox
// removed between the two calls.
//
// When some sandboxes cannot be read, Sandboxes returns the others together
// with a *source.ListError holding one [*SandboxError] per sandbox left
// out, as package source documents for partial reads. Any other error means
// nothing was listed: the runtime could not be reached or listed, or it
// stopped answering part way, when a partial list would hide an unknown
// number of sandboxes.
func (l *Lister) Sandboxes(ctx context.Context) ([]Sandbox, error) {
	start := time.Now()
	ch, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer l.release(ch)
	if _, err := l.version(ctx, ch); err != nil {
		return nil, err
	}

	items, err := l.listReady(ctx, ch)
	if err != nil {
		return nil, err
	}
	outcomes, err := l.statuses(ctx, ch, items)
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
func (l *Lister) listReady(ctx context.Context, ch *channel) ([]*runtimeapi.PodSandbox, error) {
	callCtx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	resp, err := ch.client.ListPodSandbox(callCtx, &runtimeapi.ListPodSandboxRequest{
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
func (l *Lister) statuses(ctx context.Context, ch *channel, items []*runtimeapi.PodSandbox) ([]outcome, error) {
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
				o := l.status(ctx, ch, items[i])
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
func (l *Lister) status(ctx context.Context, ch *channel, item *runtimeapi.PodSandbox) outcome {
	if item.GetId() == "" {
		// Asking for the status of "" would come back NotFound and the
		// sandbox would vanish without a word.
		return outcome{err: errors.New("cri: runtime listed a sandbox without an ID")}
	}
	callCtx, cancel := context.WithTimeout(ctx, l.cfg.timeout)
	defer cancel()
	resp, err := ch.client.PodSandboxStatus(callCtx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: item.GetId()})
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
			// Neither s nor netip's error (which quotes s) goes into the
			// error whole: the runtime's answer is of any size.
			return nil, fmt.Errorf("cri: %w: %s", ErrInvalidIP, bounded(s))
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
