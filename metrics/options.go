package metrics

import (
	"fmt"
	"reflect"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// Option configures New.
type Option interface {
	apply(*Collector) error
}

type optionFunc func(*Collector) error

func (f optionFunc) apply(c *Collector) error { return f(c) }

// WithCheckpoint gives the Collector the checkpoint the Store saves to
// (a *checkpoint.File or *checkpoint.Memory), whose journal's state it
// then exports: the Store does not hand its checkpoint out. Without it,
// the journal's metrics are 0. A nil cp makes New fail with
// ErrInvalidArgument.
func WithCheckpoint(cp checkpoint.JournalReporter) Option {
	return optionFunc(func(c *Collector) error {
		if cp == nil || isNilPointer(cp) {
			return fmt.Errorf("metrics: %w: WithCheckpoint(nil): give the checkpoint the Store saves to, or leave the option out", ErrInvalidArgument)
		}
		c.journal = cp
		return nil
	})
}

// isNilPointer tells a nil pointer in a non-nil interface, such as a
// (*checkpoint.File[K, V])(nil), whose Journal would panic at a scrape.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
