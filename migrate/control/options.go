package control

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/migrate"
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
	report  any // WithReport's migrate.Report[K], checked against the Store's K by Listen
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

// WithReport serves r, the Report of the Store's Restore, which the Store
// does not keep: the report request answers with its line and the keys of
// the orphaned and diverged entries restore left that are still as it left
// them (no write or delete has settled them since), and prune-orphans
// deletes the orphans among those the operator confirms (see the package
// documentation). Listen fails with ErrInvalidOption when r's key type is
// not the Store's, or r is not a Report of a restore that returned.
func WithReport[K comparable](r migrate.Report[K]) Option {
	return optionFunc(func(c *config) error {
		if r.ReadFrom == "" {
			return fmt.Errorf("control: %w: WithReport: the Report is not one of a Restore that returned (give the Report Store.Restore returned without an error)", ErrInvalidOption)
		}
		c.report = r
		return nil
	})
}
