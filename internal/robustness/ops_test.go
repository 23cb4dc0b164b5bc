package robustness_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/internal/fsys/fsystest"
	"github.com/phaseshift/phaseshift/internal/testsize"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

var flagSeeds = flag.Int("robustness.seeds", 0, "random op sequences TestStoreOps runs (default 300; 60 with -short; 3000 with PHASESHIFT_LONG_TESTS=1)")

// TestStoreOps runs FuzzStoreOps's property on a few hundred seeded random
// inputs, so that CI checks it without -fuzz.
func TestStoreOps(t *testing.T) {
	n := *flagSeeds
	if n <= 0 {
		n = testsize.Pick(60, 300, 3000)
	}
	base := crashSeed(t)
	files := 0
	for i := range n {
		rng := rand.New(rand.NewPCG(base, uint64(i)))
		data := make([]byte, 8+rng.IntN(120))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		// One input in four on a real file: fsyncs make it slower.
		if rng.IntN(4) == 0 {
			data[0] |= 4
			files++
		} else {
			data[0] &^= 4
		}
		if !runOps(t, data) {
			t.Fatalf("input %d failed; add it to FuzzStoreOps's seeds to debug: f.Add([]byte(%q))", i, data)
		}
	}
	t.Logf("%d op sequences (%d on a real file)", n, files)
}

// FuzzStoreOps decodes its input into a sequence of Put, Delete, Update
// (some rolled back), a second Restore, crashes (the Store dropped without
// Close, as a killed process), clean restarts, phase changes at restart
// (one step at a time), injected write failures on either side and reads,
// and runs it against a Store and a plain map: after every step the Store
// serves exactly the map, and every restart restores exactly the map. The
// first byte picks the phase, the checkpoint (checkpoint.Memory or a real
// checkpoint.File) and whether phases change. Legacy is an explicit fake
// that lives across restarts, like a durable registry.
//
// How I checked that it has teeth: making migrate's apply keep the old
// value on a delete (if p.existed && !o.del) fails TestStoreOps on its
// first input with "after op 8 (delete k0): the store serves map[k0:162
// k1:215 k5:204], the model map[k1:215 k5:204]"; making restoreCheckpoint
// return at once (no re-save after a legacy failure in phase 2) fails
// input 8 with "final restart: restart in phase 2 restored map[... k5:173],
// want map[...]" (the refused write came back).
func FuzzStoreOps(f *testing.F) {
	f.Add([]byte{0x00, 0, 1, 2, 3, 1, 4, 6, 0, 7, 5})
	f.Add([]byte{0x05, 0, 1, 9, 4, 2, 0, 1, 2, 6, 8, 0, 0, 3, 1})
	f.Add([]byte{0x0a, 0, 2, 3, 8, 1, 1, 5, 6, 7, 2, 2, 4, 0, 7})
	f.Add([]byte{0x0b, 4, 1, 2, 3, 4, 5, 6, 7, 8, 9, 7, 7, 6, 6, 8, 2, 2})
	f.Add([]byte{0x0f, 8, 3, 1, 8, 0, 0, 6, 0, 1, 7, 0, 3, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 400 {
			return // long inputs only slow the fuzzer down
		}
		if !runOps(t, data) {
			t.FailNow()
		}
	})
}

const opsKeys = 6

// opsWorld is what survives a restart: legacy, and the checkpoint's bytes
// (in memory, or a file).
type opsWorld struct {
	t      *testing.T
	ctx    context.Context
	phase  migrate.Phase
	legacy *migratetest.Explicit[string, int]
	mem    *checkpoint.Memory[string, int] // the current handle, or nil
	path   string                          // the file, when not in memory
	faulty *fsystest.Faulty
	file   *checkpoint.File[string, int] // the current handle on the file
	s      *migrate.Store[string, int]
	model  map[string]int
	trace  []string
}

// runOps runs the op sequence data encodes and reports whether the Store
// kept to the model; it logs what went wrong.
func runOps(t *testing.T, data []byte) bool {
	t.Helper()
	if len(data) == 0 {
		return true
	}
	w := &opsWorld{t: t, ctx: context.Background(), phase: migrate.Phase(data[0] % 4), legacy: &migratetest.Explicit[string, int]{}, model: map[string]int{}}
	walk := data[0]&8 != 0
	if data[0]&4 != 0 {
		w.path = filepath.Join(t.TempDir(), "state.json")
		w.faulty = &fsystest.Faulty{}
	} else {
		w.mem = checkpoint.NewMemory[string, int]()
	}
	defer w.closeAll()
	if err := w.start(); err != nil {
		return w.fail("start: %v", err)
	}
	arg := func(i int) byte {
		if i < len(data) {
			return data[i]
		}
		return 0
	}
	key := func(b byte) string { return fmt.Sprintf("k%d", int(b)%opsKeys) }
	for i := 1; i < len(data); {
		op := data[i]
		a, b, c := arg(i+1), arg(i+2), arg(i+3)
		var desc string
		var err error
		switch op % 10 {
		case 0, 1, 2:
			k, v := key(a), int(b)
			desc = fmt.Sprintf("put %s=%d", k, v)
			if err = w.s.Put(w.ctx, k, v); err == nil {
				w.model[k] = v
			}
			i += 3
		case 3:
			k := key(a)
			desc = "delete " + k
			if err = w.s.Delete(w.ctx, k); err == nil {
				delete(w.model, k)
			}
			i += 2
		case 4:
			k1, k2 := key(a), key(b)
			rollback := c&1 != 0
			desc = fmt.Sprintf("update put %s=%d, delete %s, rollback=%v", k1, int(c), k2, rollback)
			boom := errors.New("rolled back")
			err = w.s.Update(w.ctx, func(tx *migrate.Tx[string, int]) error {
				tx.Put(k1, int(c))
				if v, ok := tx.Get(k1); !ok || v != int(c) {
					return fmt.Errorf("the transaction does not see its own put: %d, %v", v, ok)
				}
				tx.Delete(k2)
				if rollback {
					return boom
				}
				return nil
			})
			if rollback && errors.Is(err, boom) {
				err = nil
			} else if err == nil {
				w.model[k1] = int(c)
				delete(w.model, k2)
			}
			i += 4
		case 5:
			desc = "restore again"
			if _, rerr := w.s.Restore(w.ctx); !errors.Is(rerr, migrate.ErrAlreadyRestored) {
				err = fmt.Errorf("a second Restore returned %v, want ErrAlreadyRestored", rerr)
			}
			i++
		case 6, 7:
			clean := op%10 == 7
			next := w.phase
			if walk && a&1 != 0 {
				next = migrate.Phase(min(3, max(0, int(w.phase)+[]int{-1, 1}[(a>>1)&1])))
			}
			desc = fmt.Sprintf("%s, restart in phase %d", map[bool]string{true: "clean stop", false: "crash"}[clean], next)
			err = w.restart(clean, next)
			i += 2
		case 8:
			k, v := key(a), int(b)
			side := w.injectFault(b&1 == 0)
			desc = fmt.Sprintf("put %s=%d with the %s failing", k, v, side)
			if side == "" {
				i += 3
				continue
			}
			perr := w.s.Put(w.ctx, k, v)
			if perr == nil {
				err = errors.New("the write succeeded despite the injected fault")
			} else if want := map[string]error{"checkpoint": migrate.ErrCheckpointWrite, "legacy": migrate.ErrLegacyWrite}[side]; !errors.Is(perr, want) {
				err = fmt.Errorf("the write failed with %v, want %v", perr, want)
			}
			w.clearFaults()
			i += 3
		default:
			k := key(a)
			desc = "get " + k
			v, ok := w.s.Get(k)
			if mv, mok := w.model[k]; v != mv || ok != mok {
				err = fmt.Errorf("Get(%s) = %d, %v, the model has %d, %v", k, v, ok, mv, mok)
			}
			i += 2
		}
		w.trace = append(w.trace, desc)
		if err != nil {
			return w.fail("op %d (%s): %v", len(w.trace), desc, err)
		}
		if got := collect(w.s); !maps.Equal(got, w.model) {
			return w.fail("after op %d (%s): the store serves %v, the model %v", len(w.trace), desc, got, w.model)
		}
	}
	// A last restart must restore exactly the model too.
	if err := w.restart(true, w.phase); err != nil {
		return w.fail("final restart: %v", err)
	}
	return true
}

func (w *opsWorld) fail(format string, args ...any) bool {
	w.t.Helper()
	where := "memory"
	if w.path != "" {
		where = "file"
	}
	w.t.Errorf("phase %d on a %s checkpoint: %s\ntrace:\n  %s", w.phase, where, fmt.Sprintf(format, args...), strings.Join(w.trace, "\n  "))
	return false
}

// start opens the checkpoint and a Store for the current phase, restores
// it and checks it serves exactly the model.
func (w *opsWorld) start() error {
	var cp migrate.Checkpoint[string, int]
	if w.path != "" {
		f, err := checkpoint.Open[string, int](w.ctx, w.path, fsystest.WithFS(w.faulty))
		if err != nil {
			return err
		}
		w.file, cp = f, f
	} else {
		m, err := w.mem.Reopen()
		if err != nil {
			return err
		}
		w.mem, cp = m, m
	}
	s, err := migrate.New(migrate.Config[string, int]{Phase: w.phase, Legacy: w.legacy, Checkpoint: cp})
	if err != nil {
		return err
	}
	w.s = s
	if _, err := s.Restore(w.ctx); err != nil {
		return fmt.Errorf("restore in phase %d: %w", w.phase, err)
	}
	if got := collect(s); !maps.Equal(got, w.model) {
		return fmt.Errorf("restart in phase %d restored %v, want %v", w.phase, got, w.model)
	}
	return nil
}

// restart stops the Store, cleanly or as a crash would (no Close; the
// kernel would release the file's lock, so the file handle alone is
// closed), and starts one in phase next.
func (w *opsWorld) restart(clean bool, next migrate.Phase) error {
	if clean {
		if err := w.s.Close(); err != nil {
			return err
		}
	} else if w.file != nil {
		_ = w.file.Close()
	}
	w.s, w.file = nil, nil
	w.phase = next
	return w.start()
}

// injectFault makes the next write of one side the phase writes fail, and
// says which; "" when the phase writes neither that side nor the other.
func (w *opsWorld) injectFault(preferCheckpoint bool) string {
	sides := []string{}
	if w.phase.WritesCheckpoint() {
		sides = append(sides, "checkpoint")
	}
	if w.phase.WritesLegacy() {
		sides = append(sides, "legacy")
	}
	if len(sides) == 0 {
		return ""
	}
	side := sides[len(sides)-1]
	if preferCheckpoint {
		side = sides[0]
	}
	if side == "legacy" {
		w.legacy.FailWrites(0, 1, errors.New("injected legacy failure"))
	} else if w.path != "" {
		// The commit either appends to the journal or replaces the file:
		// the fsync of either fails (clearFaults drops the one not met).
		w.faulty.Fail(fsystest.OpFsync, w.path, syscall.EIO, 1)
		w.faulty.Fail(fsystest.OpFsync, w.path+".journal", syscall.EIO, 1)
	} else {
		checkpointtest.FailSaves(w.mem, 1, syscall.EIO)
	}
	return side
}

func (w *opsWorld) clearFaults() {
	w.legacy.FailWrites(0, 0, nil)
	if w.faulty != nil {
		w.faulty.Clear()
	}
	if w.mem != nil {
		checkpointtest.FailSaves(w.mem, 0, nil)
	}
}

func (w *opsWorld) closeAll() {
	if w.s != nil {
		_ = w.s.Close()
	}
	if w.file != nil {
		_ = w.file.Close()
	}
}
