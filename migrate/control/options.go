package control

import (
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Option configures Listen.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	logger  *zap.Logger
	timeout time.Duration
}

func defaultConfig() config {
	return config{logger: zap.NewNop(), timeout: 30 * time.Second}
}

// WithLogger logs refused peers, deletes and failures to l (keys, uids,
// PIDs and counts, never values). The default logs nothing.
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return fmt.Errorf("control: %w: WithLogger(nil): pass zap.NewNop() to log nothing", ErrInvalidOption)
		}
		c.logger = l
		return nil
	})
}

// WithTimeout bounds one connection: reading its request, the Store's
// Delete and writing the answer (30 seconds by default).
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("control: %w: WithTimeout(%v): give a positive duration", ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	})
}
