package cri

import (
	"fmt"
	"time"

	"go.uber.org/zap"
)

const (
	// DefaultTimeout bounds each call to the runtime when no [WithTimeout]
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
	// when no [WithMaxReceiveSize] option is given: 16 MiB, the kubelet's
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

// Option configures a Lister. Pass options to [NewLister]; an option with an
// out-of-range value makes NewLister fail with [ErrInvalidOption].
type Option interface {
	apply(*config) error
}

// optionFunc is an Option that checks its own value as it applies it, so
// that the error names the option the caller wrote.
type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// config holds what the options set. The zero value is not valid;
// NewLister starts from defaultConfig.
type config struct {
	timeout            time.Duration
	maxReceiveSize     int
	includeHostNetwork bool
	log                *zap.Logger
}

func defaultConfig() config {
	return config{
		timeout:        DefaultTimeout,
		maxReceiveSize: DefaultMaxReceiveSize,
		log:            zap.NewNop(),
	}
}

// buildConfig applies opts in order over the defaults and stops at the first
// mistake: a nil Option, or one whose value is out of range.
func buildConfig(opts []Option) (config, error) {
	c := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return c, fmt.Errorf("cri: %w: option %d of %d is nil", ErrInvalidOption, i+1, len(opts))
		}
		if err := o.apply(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// WithTimeout bounds each call to the runtime (default [DefaultTimeout]).
// It applies on top of the caller's context: whichever expires first ends
// the call. It bounds one RPC, not a whole listing, which makes one Version,
// one ListPodSandbox and one PodSandboxStatus per sandbox; bound the listing
// with the context. d must be positive.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("cri: %w: cri.WithTimeout(%v): the timeout must be positive", ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	})
}

// WithMaxReceiveSize sets the largest answer, in bytes, accepted from the
// runtime (default [DefaultMaxReceiveSize], 16 MiB). A larger answer fails
// with [ErrResponseTooLarge]. n must be positive.
func WithMaxReceiveSize(n int) Option {
	return optionFunc(func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("cri: %w: cri.WithMaxReceiveSize(%d): the size must be positive", ErrInvalidOption, n)
		}
		c.maxReceiveSize = n
		return nil
	})
}

// WithHostNetworkSandboxes keeps host-network sandboxes in the listing. By
// default they are left out: they share the node's network namespace and
// hold no pod IP of their own, so an IPAM daemon has nothing to restore for
// them, and the addresses some runtimes report for them are the node's.
func WithHostNetworkSandboxes() Option {
	return optionFunc(func(c *config) error {
		c.includeHostNetwork = true
		return nil
	})
}

// WithLogger sets where the Lister logs (default zap.NewNop). It logs
// sandbox IDs, pod names and counts; it never logs labels or annotations,
// which can hold secrets. A nil logger discards everything, as the default
// does, so that a daemon can pass its own possibly unset logger through.
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			l = zap.NewNop()
		}
		c.log = l
		return nil
	})
}
