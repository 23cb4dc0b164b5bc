package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/internal/fsys"
)

// Option configures Open and Memory.Reopen. Pass options to them; a nil
// Option, or one whose value is invalid, makes them fail with an error
// matching ErrInvalidOption that names the option.
type Option interface {
	apply(*config) error
}

// optionFunc is an Option that checks its own value as it applies it, so
// that the error names the option the caller wrote.
type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// UpgradeFunc turns one entry written with value schema n into schema n+1.
// It works on raw JSON because the Go types of schema n may no longer exist
// in the binary. It may change the key as well as the value. An error
// makes that one entry unreadable (see BadEntriesError); the rest load.
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
	dropUnknown bool           // WithDropUnknownFields
	validate    any            // WithValidate's func(K, V) error; checked against K and V by validatorFor
	fs          fsys.FS        // the file system under a File; nil means fsys.OS (see withFS)
	compactions runCompactions // how background compactions run; nil: in a goroutine (see withCompactions)
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

// WithSchema sets the version of the value schema this binary writes and
// reads, 1 by default. Bump it whenever the JSON form of the key or value
// type changes meaning, and register a WithUpgrade from the previous
// version. A file with a newer schema fails to load with ErrNewerSchema.
// The version must be at least 1.
func WithSchema(version int) Option {
	return optionFunc(func(c *config) error {
		if version < 1 {
			return invalidOption(fmt.Sprintf("checkpoint.WithSchema(%d)", version), "schema version %d is invalid: versions start at 1", version)
		}
		c.schema = version
		return nil
	})
}

// WithUpgrade registers fn to turn entries of schema from into schema
// from+1. Load applies the chain from a file's schema up to the current
// one. The registered versions must form an unbroken chain ending at the
// current schema; Open reports a gap. A later WithUpgrade from the same
// version replaces an earlier one.
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

// WithBootID stamps every saved file with the ID of the current boot, read
// once at Open from source, so that a reader can tell a checkpoint written
// before the last reboot (package migrate treats it as stale, see its
// Checkpoint). A nil source reads the kernel's boot ID (see KernelBootID).
func WithBootID(source func() (string, error)) Option {
	return optionFunc(func(c *config) error {
		if source == nil {
			source = KernelBootID
		}
		c.bootID = source
		return nil
	})
}

// WithFileMode sets the permissions of the checkpoint, its .prev copy and
// its journal; 0600 by default, because values may hold secrets. The lock
// file is 0600 whatever the mode: flock needs only read access, so a lock
// file others can read is a lock others can hold, keeping the daemon from
// starting. The directory, when Open creates it, is 0700. The mode must be
// permission bits that let the owner read and write.
func WithFileMode(mode fs.FileMode) Option {
	return optionFunc(func(c *config) error {
		if mode&^fs.ModePerm != 0 || mode&0o600 != 0o600 {
			return invalidOption(fmt.Sprintf("checkpoint.WithFileMode(%#o)", uint32(mode)), "file mode %v is invalid: it must be permission bits that let the owner read and write (0600 is the default)", mode)
		}
		c.mode = mode
		return nil
	})
}

// WithLockWait bounds how long Open waits for another holder to release the
// lock, in addition to the context's deadline. Zero means try once; a
// negative d is an error. By default Open waits until its context is done.
func WithLockWait(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d < 0 {
			return invalidOption(fmt.Sprintf("checkpoint.WithLockWait(%v)", d), "the wait must not be negative: use 0 to try once, or leave the option out to wait as long as the context allows")
		}
		c.lockWait = d
		return nil
	})
}

// WithDropUnknownFields makes Load accept entries whose JSON has fields
// that the key or value type does not have (at any depth), and drop those
// fields, instead of failing with ErrNewerSchema.
//
// Without it, such fields are taken for what they most likely are: fields
// a newer binary added without bumping the schema, which this binary would
// lose for good at its next save (and a later roll forward would find
// gone). Use it only when those fields are known to be unneeded, e.g.
// fields a newer version added and then removed again. With it, Load logs
// how many entries lost fields, and the next Save or Commit writes every
// such entry without them, unchanged ones included.
//
// Fields are checked by encoding/json: a type with its own UnmarshalJSON
// decides for itself what it accepts.
func WithDropUnknownFields() Option {
	return optionFunc(func(c *config) error {
		c.dropUnknown = true
		return nil
	})
}

// WithLogger logs opening, quarantining, leftover cleanup, a checkpoint
// or lock file that disappeared, and dropped unknown fields (paths and
// counts, never values). The default discards everything; a nil l changes
// nothing.
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(c *config) error {
		if l != nil {
			c.logger = l
		}
		return nil
	})
}

// WithValidate makes Load run fn on every entry it decodes, after any
// upgrade, and treat an entry fn rejects exactly as one that does not
// decode: Load returns the other entries with a *BadEntriesError (matching
// ErrBadEntry) whose EntryError names the entry's key and carries fn's
// error, and Save and Commit refuse to replace the file until a Load
// succeeds or Quarantine moves it aside. Use it for what the types cannot
// say (an address inside its pool, a token of the right length), so that a
// restart never serves a record the program would not have accepted.
//
// fn's error is included in the entry's error text as it is returned
// (see Security): write it without values. Load may call fn from several
// goroutines at once, in no particular order. Save and Commit do not call
// fn: what a program writes it has checked already.
//
// K and V must be the File's or Memory's key and value types; other types,
// or a nil fn, make Open and Memory.Reopen fail with ErrInvalidOption.
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

// withFS makes Open use fsys instead of the operating system's file system.
// It is a test hook, not part of the API: tests in this module reach it
// through internal/fsys (see init below), so that no caller's context or
// option can change which file system a checkpoint uses.
func withFS(f fsys.FS) Option {
	return optionFunc(func(c *config) error {
		if f == nil {
			return invalidOption("withFS", "the file system is nil")
		}
		c.fs = f
		return nil
	})
}

// withCompactions makes a File run the steps of each background
// compaction (see compact.go) by calling run, instead of in a goroutine:
// a test that must see every step in order (the power-cut suite) runs them
// when it chooses, with commits between them. run must call every step,
// in order, once each, from any goroutine; Close waits for the last. It
// is a test hook, reached like withFS (fsystest.WithCompactions).
func withCompactions(run func(steps []func())) Option {
	return optionFunc(func(c *config) error {
		if run == nil {
			return invalidOption("withCompactions", "the function is nil")
		}
		c.compactions = run
		return nil
	})
}

func init() {
	fsys.CheckpointOption = func(f fsys.FS) any { return withFS(f) }
	fsys.CompactionsOption = func(run func(steps []func())) any { return withCompactions(run) }
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

// KernelBootID returns Linux's ID for the current boot, from
// /proc/sys/kernel/random/boot_id. It changes at every reboot.
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
