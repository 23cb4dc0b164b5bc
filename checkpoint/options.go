package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Option configures Open and NewMemory.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// UpgradeFunc turns one entry written with value schema n into schema n+1.
// It works on raw JSON because the Go types of schema n may no longer exist
// in the binary. It may change the key as well as the value. An error
// makes that one entry unreadable (see BadEntriesError); the rest load.
type UpgradeFunc func(key, value json.RawMessage) (newKey, newValue json.RawMessage, err error)

type config struct {
	schema      int
	upgrades    map[int]UpgradeFunc
	bootID      func() (string, error)
	mode        fs.FileMode
	lockWait    time.Duration // < 0: no limit but the context's
	logger      *zap.Logger
	dropUnknown bool // WithDropUnknownFields
}

func defaultConfig() config {
	return config{
		schema:   1,
		mode:     0o600,
		lockWait: -1,
		logger:   zap.NewNop(),
	}
}

// WithSchema sets the version of the value schema this binary writes and
// reads, 1 by default. Bump it whenever the JSON form of the key or value
// type changes meaning, and register a WithUpgrade from the previous
// version. A file with a newer schema fails to load with ErrNewerSchema.
func WithSchema(version int) Option {
	return optionFunc(func(c *config) { c.schema = version })
}

// WithUpgrade registers fn to turn entries of schema from into schema
// from+1. Load applies the chain from a file's schema up to the current
// one. The registered versions must form an unbroken chain ending at the
// current schema; Open reports a gap.
func WithUpgrade(from int, fn UpgradeFunc) Option {
	return optionFunc(func(c *config) {
		if c.upgrades == nil {
			c.upgrades = make(map[int]UpgradeFunc)
		}
		c.upgrades[from] = fn
	})
}

// WithBootID stamps every saved file with the ID of the current boot, read
// once at Open from source, so that a reader can tell a checkpoint written
// before the last reboot (package migrate treats it as stale when its
// Config asks for a boot epoch). A nil source reads the kernel's boot ID
// (see KernelBootID).
func WithBootID(source func() (string, error)) Option {
	return optionFunc(func(c *config) {
		if source == nil {
			source = KernelBootID
		}
		c.bootID = source
	})
}

// WithFileMode sets the permissions of the checkpoint, its .prev copy and
// its lock file; 0600 by default, because values may hold secrets. The
// directory, when Open creates it, is 0700.
func WithFileMode(mode fs.FileMode) Option {
	return optionFunc(func(c *config) { c.mode = mode })
}

// WithLockWait bounds how long Open waits for another holder to release the
// lock, in addition to the context's deadline. Zero means try once. By
// default Open waits until its context is done.
func WithLockWait(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < 0 {
			d = 0
		}
		c.lockWait = d
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
	return optionFunc(func(c *config) { c.dropUnknown = true })
}

// WithLogger logs opening, quarantining, leftover cleanup, a checkpoint
// or lock file that disappeared, and dropped unknown fields (paths and
// counts, never values). The default discards everything.
func WithLogger(l *zap.Logger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.logger = l
		}
	})
}

func buildConfig(opts []Option) (config, error) {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.schema < 1 {
		return c, fmt.Errorf("checkpoint: schema version %d is invalid: versions start at 1", c.schema)
	}
	if c.mode&^fs.ModePerm != 0 || c.mode&0o600 != 0o600 {
		return c, fmt.Errorf("checkpoint: file mode %v is invalid: it must be permission bits that let the owner read and write (0600 is the default)", c.mode)
	}
	if err := checkUpgradeChain(c.schema, c.upgrades); err != nil {
		return c, err
	}
	return c, nil
}

// checkUpgradeChain makes sure Load can never meet a schema it has a partial
// path for: every version from the oldest registered one up to the current
// schema needs its step.
func checkUpgradeChain(schema int, ups map[int]UpgradeFunc) error {
	if len(ups) == 0 {
		return nil
	}
	froms := make([]int, 0, len(ups))
	for from, fn := range ups {
		if fn == nil {
			return fmt.Errorf("checkpoint: upgrade from schema %d is nil", from)
		}
		if from < 1 || from >= schema {
			return fmt.Errorf("checkpoint: upgrade from schema %d does not lead to the current schema %d: register upgrades from 1..%d only", from, schema, schema-1)
		}
		froms = append(froms, from)
	}
	slices.Sort(froms)
	var missing []string
	for v := froms[0]; v < schema; v++ {
		if ups[v] == nil {
			missing = append(missing, fmt.Sprintf("%d→%d", v, v+1))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("checkpoint: the upgrade chain from schema %d to %d has a gap: missing %s", froms[0], schema, strings.Join(missing, ", "))
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
