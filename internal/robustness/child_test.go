package robustness_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// The crash tests re-execute this test binary as a writer process. The
// environment tells the child what to do.
const (
	envRole     = "PHASESHIFT_ROBUSTNESS_ROLE" // "writer"
	envDir      = "PHASESHIFT_ROBUSTNESS_DIR"
	envPhase    = "PHASESHIFT_ROBUSTNESS_PHASE"
	envRun      = "PHASESHIFT_ROBUSTNESS_RUN"
	envSeed     = "PHASESHIFT_ROBUSTNESS_SEED"
	envWorkers  = "PHASESHIFT_ROBUSTNESS_WORKERS"
	envLockWait = "PHASESHIFT_ROBUSTNESS_LOCK_WAIT"
	envJournal  = "PHASESHIFT_ROBUSTNESS_JOURNAL" // "1": the checkpoint is opened WithJournal; otherwise WithoutJournal
)

// Exit codes of the writer child.
const (
	exitLocked = 4 // another process owns the checkpoint
	exitError  = 3 // anything else went wrong: a test failure
)

// keysPerWorker is the size of each worker's own key pool: small, so that
// writes overwrite and delete what earlier runs wrote.
const keysPerWorker = 6

// TestMain runs the writer child when the environment asks for it, and the
// tests otherwise.
func TestMain(m *testing.M) {
	if os.Getenv(envRole) == "writer" {
		os.Exit(writerChild())
	}
	os.Exit(m.Run())
}

// change is one key's change: a put of value, or a delete.
type change struct {
	key   string
	value string // "" for a delete
}

// workOp is one write a worker makes: a Put, a Delete, or an Update of two
// keys, which must commit together or not at all.
type workOp struct {
	changes []change
}

func (o workOp) String() string {
	s := ""
	for i, c := range o.changes {
		if i > 0 {
			s += " "
		}
		if c.value == "" {
			s += "del " + c.key
		} else {
			s += "put " + c.key + "=" + c.value
		}
	}
	if len(o.changes) > 1 {
		s = "update " + s
	}
	return s
}

// opGen makes worker w's ops in run run, the same sequence in the child
// that makes them and in the parent that checks them.
type opGen struct {
	rng    *rand.Rand
	run, w int
	i      int
}

func newOpGen(seed uint64, run, w int) *opGen {
	return &opGen{rng: rand.New(rand.NewPCG(seed, uint64(run)<<16|uint64(w))), run: run, w: w}
}

func workerKey(w, k int) string { return fmt.Sprintf("w%dk%d", w, k) }

// next returns the worker's next op; the i-th op's values end in .i<i>, so
// a value names the op that wrote it.
func (g *opGen) next() workOp {
	i := g.i
	g.i++
	value := func(part string) string { return fmt.Sprintf("r%d.w%d.i%d%s", g.run, g.w, i, part) }
	i1 := g.rng.IntN(keysPerWorker)
	k1 := workerKey(g.w, i1)
	switch r := g.rng.IntN(10); {
	case r < 6:
		return workOp{changes: []change{{k1, value("")}}}
	case r < 8:
		return workOp{changes: []change{{k1, ""}}}
	default:
		k2 := workerKey(g.w, (i1+1+g.rng.IntN(keysPerWorker-1))%keysPerWorker)
		c2 := change{k2, value(".b")}
		if g.rng.IntN(2) == 0 {
			c2.value = ""
		}
		return workOp{changes: []change{{k1, value(".a")}, c2}}
	}
}

// fileLegacy is the explicit legacy side of the crash tests: a second
// checkpoint file used as a plain key/value file, the way an older version
// of a daemon might have kept its own registry. It persists across
// restarts and takes each write durably before returning, which is what
// the Store asks of an explicit legacy; so after a crash it holds exactly
// the legacy writes that were made, and the parent can check phases 1 and
// 2 against what really reached each side rather than against a guess.
type fileLegacy struct {
	f *checkpoint.File[string, string]
}

var (
	_ source.Reader[string, string] = (*fileLegacy)(nil)
	_ source.Writer[string, string] = (*fileLegacy)(nil)
)

// LegacyKind: a file.
func (l *fileLegacy) LegacyKind() source.Kind { return source.Durable }

func (l *fileLegacy) List(ctx context.Context) (map[string]string, error) {
	s, err := l.f.Load(ctx)
	if errors.Is(err, checkpoint.ErrNotExist) {
		return map[string]string{}, nil
	}
	return s.Entries, err
}

func (l *fileLegacy) Put(ctx context.Context, key, value string) error {
	return l.f.Commit(ctx, checkpoint.Meta{Writer: "legacy"}, []checkpoint.Change[string, string]{{Key: key, Value: value}})
}

func (l *fileLegacy) Delete(ctx context.Context, key string) error {
	return l.f.Commit(ctx, checkpoint.Meta{Writer: "legacy"}, []checkpoint.Change[string, string]{{Key: key, Delete: true}})
}

func statePath(dir string) string  { return filepath.Join(dir, "state.json") }
func legacyPath(dir string) string { return filepath.Join(dir, "legacy.json") }

// writerChild opens the Store, restores it, and writes from several
// goroutines until it is killed. Its stdout is the protocol: "owner" once
// it holds the lock, "restored <json>" with what Restore served, and one
// "ack" line per write, printed only after the write returned nil.
func writerChild() int {
	ctx := context.Background()
	dir := os.Getenv(envDir)
	phase, err := migrate.ParsePhase(os.Getenv(envPhase))
	if err != nil {
		return fail(err)
	}
	run, _ := strconv.Atoi(os.Getenv(envRun))
	seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	workers, _ := strconv.Atoi(os.Getenv(envWorkers))
	lockCtx := ctx
	if d, err := time.ParseDuration(os.Getenv(envLockWait)); err == nil {
		var cancel context.CancelFunc
		lockCtx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}

	// The checkpoint's lock first: it decides who owns the node's state.
	// Without "+journal", the modes keep to the whole-file protocol:
	// every commit replaces the file.
	opts := []checkpoint.Option{checkpoint.WithoutJournal()}
	if os.Getenv(envJournal) == "1" {
		opts = []checkpoint.Option{checkpoint.WithJournal()}
	}
	cp, err := checkpoint.Open[string, string](lockCtx, statePath(dir), opts...)
	if errors.Is(err, checkpoint.ErrLocked) {
		fmt.Println("locked:", err)
		return exitLocked
	}
	if err != nil {
		return fail(err)
	}
	lf, err := checkpoint.Open[string, string](ctx, legacyPath(dir))
	if err != nil {
		return fail(err)
	}
	fmt.Println("owner")
	s, err := migrate.New(migrate.Config[string, string]{Phase: phase, Legacy: &fileLegacy{f: lf}, Checkpoint: cp, Version: "robustness"})
	if err != nil {
		return fail(err)
	}
	if _, err := s.Restore(ctx); err != nil {
		return fail(err)
	}
	served := map[string]string{}
	for k, v := range s.All() {
		served[k] = v
	}
	b, _ := json.Marshal(served)
	fmt.Printf("restored %s\n", b)

	var out sync.Mutex // one line per write(2), never interleaved
	errc := make(chan error, workers)
	for w := range workers {
		go func() {
			g := newOpGen(seed, run, w)
			for {
				i := g.i
				op := g.next()
				var err error
				if len(op.changes) == 1 {
					c := op.changes[0]
					if c.value == "" {
						err = s.Delete(ctx, c.key)
					} else {
						err = s.Put(ctx, c.key, c.value)
					}
				} else {
					err = s.Update(ctx, func(tx *migrate.Tx[string, string]) error {
						for _, c := range op.changes {
							if c.value == "" {
								tx.Delete(c.key)
							} else {
								tx.Put(c.key, c.value)
							}
						}
						return nil
					})
				}
				if err != nil {
					errc <- fmt.Errorf("worker %d op %d (%v): %w", w, i, op, err)
					return
				}
				line := fmt.Sprintf("ack %d %d %s\n", w, i, op)
				out.Lock()
				_, _ = os.Stdout.WriteString(line)
				out.Unlock()
			}
		}()
	}
	return fail(<-errc)
}

func fail(err error) int {
	fmt.Println("error:", err)
	fmt.Fprintln(os.Stderr, "error:", err)
	return exitError
}
