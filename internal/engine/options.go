package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/internal/fsys"
	"github.com/phaseshift/phaseshift/internal/logbridge"
)

// Option is checkpoint.Option: see its documentation there.
type Option interface {
	apply(*config) error
}

// optionFunc is an Option that checks its own value as it applies it, so
// that the error names the option the caller wrote.
type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// UpgradeFunc is checkpoint.UpgradeFunc: see its documentation there.
type UpgradeFunc func(key, value json.RawMessage) (newKey, newValue json.RawMessage, err error)

// config holds what the options set. The zero value is not valid;
// buildConfig starts from defaultConfig.
type config struct {
	schema      int
	upgrades    map[int]UpgradeFunc
	bootID      func() (string, error)
	mode        fs.FileMode
	lockWait    time.Duration // < 0: no limit but the context's
	logger      *zap.Logger
	loggerOpt   string         // the name of the logger option given, to refuse both
	dropUnknown bool           // WithDropUnknownFields
	validate    any            // WithValidate's func(K, V) error; checked against K and V by validatorFor
	fs          fsys.FS        // the file system under a File; nil means fsys.OS (see WithFS)
	compactions runCompactions // how background compactions run; nil: in a goroutine (see WithCompactions)
	journal     bool           // WithJournal, WithoutJournal
	journalOpt  string         // the name of the journal option given, to refuse both
}

func defaultConfig() config {
	return config{
		schema:   1,
		mode:     0o600,
		lockWait: -1,
		logger:   zap.NewNop(),
		journal:  true,
	}
}

// invalidOption returns an error matching ErrInvalidOption that names the
// option as the caller wrote it.
func invalidOption(option, format string, args ...any) error {
	return fmt.Errorf("checkpoint: %w: %s: %s", ErrInvalidOption, option, fmt.Sprintf(format, args...))
}

// WithSchema is checkpoint.WithSchema: see its documentation there.
func WithSchema(version int) Option {
	return optionFunc(func(c *config) error {
		if version < 1 {
			return invalidOption(fmt.Sprintf("checkpoint.WithSchema(%d)", version), "schema version %d is invalid: versions start at 1", version)
		}
		c.schema = version
		return nil
	})
}

// WithUpgrade is checkpoint.WithUpgrade: see its documentation there.
func WithUpgrade(from int, fn UpgradeFunc) Option {
	return optionFunc(func(c *config) error {
		name := fmt.Sprintf("checkpoint.WithUpgrade(%d, ...)", from)
		if fn == nil {
			return invalidOption(name, "the upgrade from schema %d is nil", from)
		}
		if c.upgrades == nil {
			c.upgrades = make(map[int]UpgradeFunc)
		}
		c.upgrades[from] = fn
		return nil
	})
}

// WithBootID is checkpoint.WithBootID: see its documentation there.
func WithBootID(source func() (string, error)) Option {
	return optionFunc(func(c *config) error {
		if source == nil {
			source = KernelBootID
		}
		c.bootID = source
		return nil
	})
}

// WithFileMode is checkpoint.WithFileMode: see its documentation there.
func WithFileMode(mode fs.FileMode) Option {
	return optionFunc(func(c *config) error {
		if mode&^fs.ModePerm != 0 || mode&0o600 != 0o600 {
			return invalidOption(fmt.Sprintf("checkpoint.WithFileMode(%#o)", uint32(mode)), "file mode %v is invalid: it must be permission bits that let the owner read and write (0600 is the default)", mode)
		}
		c.mode = mode
		return nil
	})
}

// WithLockWait is checkpoint.WithLockWait: see its documentation there.
func WithLockWait(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < 0 {
			return invalidOption(fmt.Sprintf("checkpoint.WithLockWait(%v)", d), "the wait must not be negative: use 0 to try once, or leave the option out to wait as long as the context allows")
		}
		c.lockWait = d
		return nil
	})
}

// WithDropUnknownFields is checkpoint.WithDropUnknownFields: see its documentation there.
func WithDropUnknownFields() Option {
	return optionFunc(func(c *config) error {
		c.dropUnknown = true
		return nil
	})
}

// WithLogger is checkpoint.WithLogger: see its documentation there.
func WithLogger(l *zap.Logger) Option {
	return loggerOption("checkpoint.WithLogger", l)
}

// WithSlog is checkpoint.WithSlog: see its documentation there.
func WithSlog(l *slog.Logger) Option {
	return loggerOption("checkpoint.WithSlog", logbridge.New(l))
}

// loggerOption sets the one logger every line goes through, given by the
// option name: a nil l changes nothing, and a logger of the other option
// too is an error.
func loggerOption(name string, l *zap.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return nil
		}
		if c.loggerOpt != "" && c.loggerOpt != name {
			return invalidOption(name+"(...)", "%s(...) was given too: give one logger", c.loggerOpt)
		}
		c.logger, c.loggerOpt = l, name
		return nil
	})
}

// WithValidate is checkpoint.WithValidate: see its documentation there.
func WithValidate[K comparable, V any](fn func(key K, value V) error) Option {
	return optionFunc(func(c *config) error {
		if fn == nil {
			return invalidOption(fmt.Sprintf("checkpoint.WithValidate[%v, %v]", reflect.TypeFor[K](), reflect.TypeFor[V]()), "the function is nil")
		}
		c.validate = fn
		return nil
	})
}

// validatorFor returns the WithValidate function for a checkpoint of K and
// V, or nil; an error when it was given for other types.
func validatorFor[K comparable, V any](c *config) (func(K, V) error, error) {
	if c.validate == nil {
		return nil, nil
	}
	fn, ok := c.validate.(func(K, V) error)
	if !ok {
		return nil, invalidOption("checkpoint.WithValidate", "the function is a %T, but this checkpoint's entries are of key type %v and value type %v: give a func(%v, %v) error",
			c.validate, reflect.TypeFor[K](), reflect.TypeFor[V](), reflect.TypeFor[K](), reflect.TypeFor[V]())
	}
	return fn, nil
}

// WithFS makes Open use fsys instead of the operating system's file system.
// It is a test hook, not part of the API: package checkpoint does not
// re-export it, and only this module can import this package (tests reach
// it as fsystest.WithFS), so no caller's option can change which file
// system a checkpoint uses.
func WithFS(f fsys.FS) Option {
	return optionFunc(func(c *config) error {
		if f == nil {
			return invalidOption("WithFS", "the file system is nil")
		}
		c.fs = f
		return nil
	})
}

// WithCompactions makes a File run the steps of each background
// compaction (see compact.go) by calling run, instead of in a goroutine:
// a test that must see every step in order (the power-cut suite) runs them
// when it chooses, with commits between them. run must call every step,
// in order, once each, from any goroutine; Close waits for the last. It
// is a test hook, reached like WithFS (fsystest.WithCompactions).
func WithCompactions(run func(steps []func())) Option {
	return optionFunc(func(c *config) error {
		if run == nil {
			return invalidOption("WithCompactions", "the function is nil")
		}
		c.compactions = run
		return nil
	})
}

// buildConfig applies opts in order over the defaults, stops at the first
// mistake (a nil Option, or one whose value is invalid) and then checks
// what only the options together can say: the upgrade chain. Every error
// matches ErrInvalidOption.
func buildConfig(opts []Option) (config, error) {
	c := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return c, fmt.Errorf("checkpoint: %w: option %d of %d is nil", ErrInvalidOption, i+1, len(opts))
		}
		if err := o.apply(&c); err != nil {
			return c, err
		}
	}
	if err := checkUpgradeChain(c.schema, c.upgrades); err != nil {
		return c, err
	}
	return c, nil
}

// checkUpgradeChain makes sure Load can never meet an older schema it has
// no path for: every version from 1 up to the current schema needs its
// step.
func checkUpgradeChain(schema int, ups map[int]UpgradeFunc) error {
	if schema > 1 && len(ups) == 0 {
		return invalidOption(fmt.Sprintf("checkpoint.WithSchema(%d)", schema),
			"a binary that writes schema %d reads older files only through upgrades: register checkpoint.WithUpgrade(1, fn) and every step up to %d (a file of schema 1 would otherwise be unreadable, and moved aside with the state it holds); an upgrade that returns an error refuses such files on purpose", schema, schema)
	}
	if len(ups) == 0 {
		return nil
	}
	for from := range ups {
		if from < 1 || from >= schema {
			return invalidOption(fmt.Sprintf("checkpoint.WithUpgrade(%d, ...)", from),
				"the upgrade from schema %d does not lead to the current schema %d: register upgrades from 1..%d only", from, schema, schema-1)
		}
	}
	var missing []string
	for v := 1; v < schema; v++ {
		if ups[v] == nil {
			missing = append(missing, fmt.Sprintf("%d→%d", v, v+1))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("checkpoint: %w: the upgrade chain from schema 1 to %d has a gap: missing %s (a file of an older schema would be unreadable)", ErrInvalidOption, schema, strings.Join(missing, ", "))
	}
	return nil
}

// KernelBootID is checkpoint.KernelBootID: see its documentation there.
func KernelBootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("checkpoint: reading the boot ID: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", errors.New("checkpoint: /proc/sys/kernel/random/boot_id is empty")
	}
	return id, nil
}

// configure builds the config of a checkpoint of K and V from opts: every
// mistake, the WithValidate function's types included, is an error here,
// at construction, matching ErrInvalidOption.
func configure[K comparable, V any](opts []Option) (config, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return cfg, err
	}
	if _, err := validatorFor[K, V](&cfg); err != nil {
		return cfg, err
	}
	if err := CheckKeyType[K](); err != nil {
		return cfg, err
	}
	return cfg, nil
}
