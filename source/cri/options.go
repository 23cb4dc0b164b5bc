package cri

import (
	"fmt"
	"time"

	"go.uber.org/zap"
)

const (
	// DefaultTimeout bounds each call to the runtime when no [Timeout]
	// option is given. A healthy runtime answers Version, ListPodSandbox
	// and PodSandboxStatus from memory in milliseconds. crictl waits 2s,
	// which suits an interactive command; the kubelet waits 2m, which has
	// to cover pulling images and starting sandboxes. A daemon restoring
	// its state runs while the node is busiest (it restarts alongside pods
	// being created), so it gets more slack than crictl, but a hung
	// runtime must still be reported well before a liveness probe with the
	// usual 3 x 10s budget kills the daemon and the error with it.
	DefaultTimeout = 5 * time.Second

	// DefaultMaxReceiveSize is the largest answer accepted from the runtime
	// when no [MaxReceiveSize] option is given: 16 MiB, the kubelet's
	// limit (maxMsgSize in k8s.io/cri-client). gRPC's own default of 4 MiB
	// is exceeded by ListPodSandbox on a node with a few thousand pods that
	// carry ordinary labels and annotations, and a runtime that the kubelet
	// can list must be listable here too.
	DefaultMaxReceiveSize = 16 << 20

	// statusConcurrency bounds the PodSandboxStatus calls in flight. A
	// handful keeps the runtime's own worker pool busy without queuing
	// thousands of streams on one connection (which would also raise the
	// per-call latency past the timeout); 5,000 sandboxes at 8 in flight
	// and about a millisecond each take well under a second.
	statusConcurrency = 8
)

// Option configures a Lister. Pass options to [Dial].
type Option func(*config)

// config holds what the options set. The zero value is not valid; Dial
// starts from defaultConfig.
type config struct {
	timeout            time.Duration
	maxReceiveSize     int
	includeHostNetwork bool
	log                *zap.Logger
	err                error // the first invalid option, reported by Dial
}

func defaultConfig() config {
	return config{
		timeout:        DefaultTimeout,
		maxReceiveSize: DefaultMaxReceiveSize,
		log:            zap.NewNop(),
	}
}

// Timeout bounds each call to the runtime (default [DefaultTimeout]). It
// applies on top of the caller's context: whichever expires first ends the
// call. It bounds one RPC, not a whole listing, which makes one Version, one
// ListPodSandbox and one PodSandboxStatus per sandbox; bound the listing
// with the context. d must be positive.
func Timeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 && c.err == nil {
			c.err = fmt.Errorf("%w: cri.Timeout(%v): the timeout must be positive", ErrInvalidOption, d)
		}
		c.timeout = d
	}
}

// MaxReceiveSize sets the largest answer, in bytes, accepted from the
// runtime (default [DefaultMaxReceiveSize], 16 MiB). A larger answer fails
// with [ErrResponseTooLarge]. n must be positive.
func MaxReceiveSize(n int) Option {
	return func(c *config) {
		if n <= 0 && c.err == nil {
			c.err = fmt.Errorf("%w: cri.MaxReceiveSize(%d): the size must be positive", ErrInvalidOption, n)
		}
		c.maxReceiveSize = n
	}
}

// IncludeHostNetwork keeps host-network sandboxes in the listing. By
// default they are left out: they share the node's network namespace and
// hold no pod IP of their own, so an IPAM daemon has nothing to restore for
// them, and the addresses some runtimes report for them are the node's.
func IncludeHostNetwork() Option {
	return func(c *config) { c.includeHostNetwork = true }
}

// Logger sets where the Lister logs (default zap.NewNop). It logs sandbox
// IDs, pod names and counts; it never logs labels or annotations, which can
// hold secrets. A nil logger is taken as zap.NewNop.
func Logger(l *zap.Logger) Option {
	return func(c *config) {
		if l == nil {
			l = zap.NewNop()
		}
		c.log = l
	}
}
