package robustness_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/testsize"
	"github.com/phaseshift/phaseshift/migrate"
)

var (
	flagKills = flag.Int("robustness.kills", 0, "SIGKILLs TestKillWriter deals in all (default 60; 32 with -short; 300 with PHASESHIFT_LONG_TESTS=1)")
	flagSeed  = flag.Uint64("robustness.seed", 0, "seed of the crash tests' workloads and kill instants (0: from the clock; the seed is logged)")
)

const crashWorkers = 4

func crashSeed(t *testing.T) uint64 {
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -robustness.seed=%d)", seed, seed)
	return seed
}

// TestKillWriter kills writer processes with SIGKILL at random instants and
// checks, after each kill and after each restart's Restore, that nothing
// acknowledged was lost and nothing unwritten appeared.
//
// A child (this binary, re-executed) opens a migrate.Store on a real
// checkpoint.File and an explicit legacy (another checkpoint file used as a
// key/value file; see fileLegacy), restores it, prints what it serves, and
// writes from several goroutines, each printing a write only after it
// returned nil. Each worker owns its keys and makes its writes one at a
// time, so the order of its acknowledgements is the order of its commits,
// and at most one of its writes is in flight when it dies. After each kill
// the parent loads the checkpoint (and, in phases 1 and 2, the legacy file)
// directly: it must load (never torn, never ErrCorrupt) and hold every
// acknowledged write, the in-flight ones either wholly or not at all (an
// Update of two keys is never half there). When the next child has
// restored, what it serves must pass the same check, and it becomes the
// reference: an in-flight write is settled by what the restore served.
//
// Phases 1, 2 and 3 each run alone, and "rolling" moves between them at
// random (1↔2↔3, a step at a time), so that restores after upgrades and
// downgrades are killed too (phase 2 after 3 heals the stale legacy), with
// the checkpoint opened WithoutJournal, so that every commit replaces the
// file. The "+journal" modes do the same with the journal (the default), so
// that kills land during appends, compactions and replays; in
// "phase3+journal+background" the checkpoint also holds an entry of 100 KB
// that no worker touches, so that it compacts in the background (a
// checkpoint of 64 KiB or more does), and kills land while a compaction's
// goroutine writes or installs the new file as the workers go on
// committing (the log says how many kills left its temporary file behind).
//
// How I checked that it has teeth (each breakage made locally, seen to
// fail, reverted):
//   - Releasing writers before their batch is saved (in migrate's
//     commitBatch, finishing every request with nil before the saves):
//     phase 3 fails at once with "checkpoint file: w2k3: has
//     "r0.w2.i40.a", want "r0.w2.i41" (acknowledged)", and so do the
//     other modes.
//   - Writing the checkpoint in place (disk.replace truncating path and
//     writing it, instead of temp file and rename): every mode fails
//     within a few kills with "the checkpoint does not load: ...
//     checkpoint is corrupt: the file is empty".
//   - Replaying a journal without its last record (internal/engine/journal_replay.go's
//     replay taking every last line for a torn one): phase3+journal fails
//     at the first kill with "checkpoint file: w1k2: has "", want
//     "r0.w1.i43" (acknowledged)".
//   - In "phase3+journal+background": records made while a compaction
//     runs keeping the old file's base fails with "checkpoint file: w1k3:
//     has "", want "r1.w1.i0.b" (acknowledged)"; replay without the rule
//     that continues at the seq reached, with "the checkpoint does not
//     load: ... the record at byte 32793 follows seq 122, after records
//     that follow seq 1 up to seq 122".
//   - Not bringing legacy in line at phase 2's restore (migrate/restore.go):
//     phase2 and rolling fail within a few kills with "legacy file: w0k3:
//     has "", want "r0.w0.i12" (acknowledged)".
//
// Kills cannot catch a missing fsync (the page cache outlives the process);
// TestPowerCut does.
func TestKillWriter(t *testing.T) {
	kills := *flagKills
	if kills <= 0 {
		kills = testsize.Pick(32, 60, 300)
	}
	seed := crashSeed(t)
	// The "+journal" modes open the checkpoint WithJournal (the default):
	// commits append to its journal, which every few hundred commits is
	// compacted; the others WithoutJournal.
	// "phase3+journal+background" deals as many kills again as a mode of
	// the others.
	modes := []string{"phase1", "phase2", "phase3", "rolling", "phase3+journal", "rolling+journal", "phase3+journal+background"}
	base := len(modes) - 1
	for mi, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			n := kills / base
			if mi < kills%base {
				n++
			}
			h := newHarness(t, seed+uint64(mi))
			mode, background := strings.CutSuffix(mode, "+background")
			mode, h.journal = strings.CutSuffix(mode, "+journal")
			if background {
				h.seedBackground(t)
			}
			rng := rand.New(rand.NewPCG(seed, uint64(mi)))
			phase := migrate.PhaseExpand
			if mode != "rolling" {
				phase, _ = migrate.ParsePhase(strings.TrimPrefix(mode, "phase"))
			}
			start := time.Now()
			for run := range n {
				if mode == "rolling" && rng.IntN(3) == 0 {
					phase = migrate.Phase(min(3, max(1, int(phase)+[]int{-1, 1}[rng.IntN(2)])))
				}
				fromStart := rng.IntN(8) == 0
				var after time.Duration
				if fromStart {
					after = time.Duration(rng.IntN(60)) * time.Millisecond
				} else {
					after = 20*time.Millisecond + time.Duration(rng.IntN(80))*time.Millisecond
				}
				c := h.start(t, run, phase, "")
				if !fromStart {
					c.waitOwner(t)
				}
				if background && run%2 == 1 && !fromStart {
					// Every other kill waits for a compaction to start
					// writing its new file, then lands within 2ms: while
					// it writes, or installs the file and the journal.
					h.awaitCompaction(t, c)
					after = time.Duration(rng.IntN(2000)) * time.Microsecond
				}
				time.Sleep(after)
				c.kill(t)
				h.countCompactionLeftovers(t) // before an Open removes them
				if mode == "rolling" {
					// Across phase changes the checkpoint may hold part of
					// an Update that legacy got (phase 1 writes it second).
					h.settle(t, c, run, phase, strictPerKey)
					h.checkFile(t, "checkpoint", statePath(h.dir), strictPerKey)
				} else {
					how := map[migrate.Phase]strictness{1: strictPerKey, 2: strictPerKey, 3: strictAtomic}[phase]
					h.settle(t, c, run, phase, how)
					h.checkFile(t, "checkpoint", statePath(h.dir), how)
					if phase.WritesLegacy() {
						h.checkFile(t, "legacy", legacyPath(h.dir), how)
					}
				}
				if t.Failed() {
					t.Fatalf("run %d (phase %d, killed %v after %s): see above", run, phase, after, map[bool]string{true: "start", false: "owner"}[fromStart])
				}
			}
			t.Logf("%d kills in %v: %d writes acknowledged, %d restores checked, %d in flight at a kill", n, time.Since(start).Round(time.Millisecond), h.acks, h.restores, h.inflight)
			if background {
				t.Logf("%d kills left a temporary file of a compaction (killed while one wrote or installed the new file)", h.midCompaction)
			}
			assert.NotZero(t, h.acks, "no write was ever acknowledged: the kills came too early to test anything")
		})
	}
}

// TestLockOneOwner starts two writer processes on one checkpoint at the
// same time: exactly one owns it and the other fails with ErrLocked (exit
// code 4, the error on stdout); killing the owner lets another take it, and
// restore what the dead one acknowledged.
//
// How I checked that it has teeth: making fsys.OS.TryLock return success
// without taking the flock makes both children print "owner" and the test
// fail with "round 0: 2 owners, want exactly 1; the other said "owner"".
func TestLockOneOwner(t *testing.T) {
	rounds := 4
	if testing.Short() {
		rounds = 2
	}
	h := newHarness(t, crashSeed(t))
	run := 0
	for round := range rounds {
		// Both fail fast when the other holds the lock.
		a := h.start(t, run, migrate.PhaseContract, "300ms")
		b := h.start(t, run+1, migrate.PhaseContract, "300ms")
		run += 2
		owner, loser := a, b
		if a.first(t) != "owner" {
			owner, loser = b, a
		}
		require.Equal(t, "owner", owner.first(t), "round %d: %d owners, want exactly 1; outputs %q and %q", round, countOwners(t, a, b), a.first(t), b.first(t))
		require.True(t, strings.HasPrefix(loser.first(t), "locked:"), "round %d: 2 owners, want exactly 1; the other said %q", round, loser.first(t))
		assert.Contains(t, loser.first(t), "checkpoint is locked")
		assert.Contains(t, loser.first(t), fmt.Sprintf("by process %d", owner.cmd.Process.Pid), "the error names the holder")
		code := loser.wait(t)
		assert.Equal(t, exitLocked, code, "the loser exits with the ErrLocked code")
		time.Sleep(30 * time.Millisecond)
		owner.kill(t)
		h.settle(t, owner, owner.run, migrate.PhaseContract, strictAtomic)
		h.settle(t, loser, loser.run, migrate.PhaseContract, strictAtomic)

		// Both wait for the lock: the second takes over when the first
		// dies, and serves what the first acknowledged.
		a = h.start(t, run, migrate.PhaseContract, "20s")
		a.waitOwner(t)
		b = h.start(t, run+1, migrate.PhaseContract, "20s")
		run += 2
		time.Sleep(100 * time.Millisecond)
		assert.Empty(t, b.output(), "the second process must wait while the first owns the checkpoint")
		a.kill(t)
		h.settle(t, a, a.run, migrate.PhaseContract, strictAtomic)
		b.waitOwner(t)
		b.waitRestored(t)
		time.Sleep(20 * time.Millisecond)
		b.kill(t)
		h.settle(t, b, b.run, migrate.PhaseContract, strictAtomic)
		h.checkFile(t, "checkpoint", statePath(h.dir), strictAtomic)
		if t.Failed() {
			t.FailNow()
		}
	}
	assert.NotZero(t, h.acks)
}

func countOwners(t *testing.T, cs ...*child) int {
	n := 0
	for _, c := range cs {
		if c.first(t) == "owner" {
			n++
		}
	}
	return n
}

// harness is the parent's side: the node's directory and the reference
// state the children must keep.
type harness struct {
	dir     string
	seed    uint64
	journal bool // children open the checkpoint WithJournal, or WithoutJournal

	state   map[string]string // served by the last restore, with the acknowledged writes since
	pending []workOp          // writes in flight at the last kill after a restore

	acks, restores, inflight int
	midCompaction            int      // kills that left a compaction's temporary file
	history                  []string // what happened, for the failure message
}

// padKey is the entry of "phase3+journal+background" that no worker
// touches: 100 KB, so that the checkpoint compacts in the background.
const padKey = "pad"

// seedBackground writes the checkpoint the first child restores: padKey
// alone, which the reference state holds from the start.
func (h *harness) seedBackground(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	f, err := checkpoint.Open[string, string](ctx, statePath(h.dir))
	require.NoError(t, err)
	pad := strings.Repeat("p", 100<<10)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: map[string]string{padKey: pad}}))
	require.NoError(t, f.Close())
	h.state[padKey] = pad
}

// compactionLeftover reports whether a temporary file of a compaction is
// beside the checkpoint: the new file or the new journal, which the next
// Open removes.
func (h *harness) compactionLeftover(t *testing.T) bool {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(h.dir, ".state.json.*"))
	require.NoError(t, err)
	for _, n := range names {
		if strings.Contains(n, ".tmp-") || strings.HasSuffix(n, ".journal-tmp") {
			return true
		}
	}
	return false
}

// countCompactionLeftovers counts a kill that left a temporary file of a
// compaction.
func (h *harness) countCompactionLeftovers(t *testing.T) {
	t.Helper()
	if h.compactionLeftover(t) {
		h.midCompaction++
	}
}

// awaitCompaction waits until the child c's checkpoint has a compaction's
// temporary file, or c has exited, or a minute has passed (then the test
// fails: the workers write a compaction's worth in well under a second).
func (h *harness) awaitCompaction(t *testing.T, c *child) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !h.compactionLeftover(t) {
		select {
		case <-c.eof:
			t.Fatalf("the child exited before a compaction started: stdout %q, stderr %s", c.output(), c.stderr.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "no compaction started in a minute")
		time.Sleep(100 * time.Microsecond)
	}
}

// logf records an event for the failure message.
func (h *harness) logf(format string, args ...any) {
	h.history = append(h.history, fmt.Sprintf(format, args...))
	if len(h.history) > 400 {
		h.history = h.history[len(h.history)-300:]
	}
}

// historyOf returns the recorded events that mention key.
func (h *harness) historyOf(keys ...string) string {
	var out []string
	for _, e := range h.history {
		for _, k := range keys {
			if strings.Contains(e, k+"=") || strings.Contains(e, " "+k) || strings.HasPrefix(e, "run") && !strings.Contains(e, "=") {
				out = append(out, e)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

func newHarness(t *testing.T, seed uint64) *harness {
	return &harness{dir: t.TempDir(), seed: seed, state: map[string]string{}}
}

// child is one writer process.
type child struct {
	cmd    *exec.Cmd
	run    int
	stderr bytes.Buffer

	mu       sync.Mutex // guards lines
	lines    []string   // complete lines of stdout so far
	ownerC   chan struct{}
	restoreC chan struct{}
	firstC   chan struct{}
	eof      chan struct{}
}

func (h *harness) start(t *testing.T, run int, phase migrate.Phase, lockWait string) *child {
	t.Helper()
	c := &child{run: run, ownerC: make(chan struct{}), restoreC: make(chan struct{}), firstC: make(chan struct{}), eof: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(),
		envRole+"=writer", envDir+"="+h.dir, envPhase+"="+strconv.Itoa(int(phase)),
		envRun+"="+strconv.Itoa(run), envSeed+"="+strconv.FormatUint(h.seed, 10),
		envWorkers+"="+strconv.Itoa(crashWorkers), envLockWait+"="+lockWait)
	if h.journal {
		c.cmd.Env = append(c.cmd.Env, envJournal+"=1")
	}
	c.cmd.Stderr = &c.stderr
	out, err := c.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, c.cmd.Start())
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	go func() {
		defer close(c.eof)
		r := bufio.NewReader(out)
		var once [3]sync.Once
		for {
			// A line cut short by the kill is not an acknowledgement.
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			c.mu.Lock()
			c.lines = append(c.lines, line)
			c.mu.Unlock()
			once[0].Do(func() { close(c.firstC) })
			if line == "owner" {
				once[1].Do(func() { close(c.ownerC) })
			}
			if strings.HasPrefix(line, "restored ") {
				once[2].Do(func() { close(c.restoreC) })
			}
		}
	}()
	return c
}

func (c *child) await(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-c.eof:
		select {
		case <-ch:
			return
		default:
		}
		t.Fatalf("the child exited before %s: stdout %q, stderr %s", what, c.output(), c.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the child did not reach %s in a minute: stdout %q", what, c.output())
	}
}

func (c *child) waitOwner(t *testing.T)    { t.Helper(); c.await(t, c.ownerC, "owning the checkpoint") }
func (c *child) waitRestored(t *testing.T) { t.Helper(); c.await(t, c.restoreC, "restoring") }

// first returns the child's first line, waiting for it.
func (c *child) first(t *testing.T) string {
	t.Helper()
	c.await(t, c.firstC, "saying anything")
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lines[0]
}

func (c *child) output() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lines)
}

// kill sends SIGKILL and reaps the child, which must not have exited by
// itself.
func (c *child) kill(t *testing.T) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.eof
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("the child ended by itself (%v) before the kill: stdout %q, stderr %s", err, c.output(), c.stderr.String())
	}
}

// wait waits for a child that exits by itself and returns its exit code.
func (c *child) wait(t *testing.T) int {
	t.Helper()
	<-c.eof
	_ = c.cmd.Wait()
	return c.cmd.ProcessState.ExitCode()
}

// How strictly a side or a restore is checked against the reference.
type strictness int

const (
	// strictAtomic: keys no in-flight write touched are exactly as
	// settled, and an in-flight write is there wholly or not at all. For
	// what a checkpoint holds or serves: Commit saves an Update at once.
	strictAtomic strictness = iota
	// strictPerKey: the same, but an in-flight Update may be there in
	// part. For what explicit legacy holds or what is served from it:
	// legacy takes one write per key, so a crash in the middle of an
	// Update leaves part of it (see Store.Update). Phase 2 serves the
	// checkpoint but backfills from legacy, and phase 2's restore brings
	// legacy in line with what it served, so that a later restore, in any
	// phase, serves what this one served: phase 2 and rolling upgrades are
	// held to this rule too.
	strictPerKey
)

// settle reads what a dead child printed: checks its restore against the
// reference, adopts it, and applies its acknowledged writes.
func (h *harness) settle(t *testing.T, c *child, run int, phase migrate.Phase, how strictness) {
	t.Helper()
	gens := map[int]*opGen{}
	restored := false
	for _, line := range c.output() {
		switch {
		case line == "owner" || strings.HasPrefix(line, "locked:"):
		case strings.HasPrefix(line, "restored "):
			var got map[string]string
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "restored ")), &got))
			for _, p := range h.check(got, how) {
				t.Errorf("run %d (phase %d) restored wrong state: %s\nhistory of the key:\n%s", run, phase, p, h.historyOf(strings.SplitN(p, ":", 2)[0]))
			}
			for k, v := range got {
				h.logf("run %d restored %s=%s", run, k, v)
			}
			h.state, h.pending, restored = got, nil, true
			h.restores++
		case strings.HasPrefix(line, "ack "):
			require.True(t, restored, "an ack before the restore: %q", line)
			f := strings.SplitN(line, " ", 4)
			require.Len(t, f, 4, line)
			w, _ := strconv.Atoi(f[1])
			i, _ := strconv.Atoi(f[2])
			g := gens[w]
			if g == nil {
				g = newOpGen(h.seed, run, w)
				gens[w] = g
			}
			require.Equal(t, g.i, i, "worker %d acknowledged op %d out of order", w, i)
			op := g.next()
			require.Equal(t, op.String(), f[3], "the child and the parent disagree on op %d of worker %d", i, w)
			h.logf("run %d ack %s", run, op)
			for _, ch := range op.changes {
				if ch.value == "" {
					delete(h.state, ch.key)
				} else {
					h.state[ch.key] = ch.value
				}
			}
			h.acks++
		default:
			t.Fatalf("run %d: the child said %q; stderr %s", run, line, c.stderr.String())
		}
	}
	h.logf("run %d (phase %d) killed, restored=%v", run, phase, restored)
	if restored {
		// Each worker's next write may have been in flight.
		for w := range crashWorkers {
			g := gens[w]
			if g == nil {
				g = newOpGen(h.seed, run, w)
			}
			op := g.next()
			h.logf("run %d in flight %s", run, op)
			h.pending = append(h.pending, op)
		}
		h.inflight += len(h.pending)
	}
}

// check compares state found on a side or served by a restore with the
// reference, and returns what is wrong. A deleted key has the value "".
func (h *harness) check(got map[string]string, how strictness) []string {
	var problems []string
	touched := map[string]bool{}
	for _, op := range h.pending {
		for _, c := range op.changes {
			touched[c.key] = true
		}
	}
	for k, v := range h.state {
		if !touched[k] && got[k] != v {
			problems = append(problems, fmt.Sprintf("%s: has %q, want %q (acknowledged)", k, got[k], v))
		}
	}
	for k, v := range got {
		if _, ok := h.state[k]; !ok && !touched[k] {
			problems = append(problems, fmt.Sprintf("%s: has %q, which was deleted or never written", k, v))
		}
	}
	for _, op := range h.pending {
		old, applied := true, true
		for _, c := range op.changes {
			o, a := got[c.key] == h.state[c.key], got[c.key] == c.value
			if how == strictPerKey && !o && !a {
				problems = append(problems, fmt.Sprintf("%s: has %q, want %q (acknowledged) or %q (in flight)", c.key, got[c.key], h.state[c.key], c.value))
			}
			old, applied = old && o, applied && a
		}
		if how == strictAtomic && !old && !applied {
			var have []string
			for _, c := range op.changes {
				have = append(have, fmt.Sprintf("%s=%q (before: %q)", c.key, got[c.key], h.state[c.key]))
			}
			problems = append(problems, fmt.Sprintf("in-flight %q is neither wholly there nor wholly absent: %s", op, strings.Join(have, ", ")))
		}
	}
	slices.Sort(problems)
	return problems
}

// checkFile loads a checkpoint file (the checkpoint, or the legacy file) as
// the next process would, with the lock, and checks what it holds.
func (h *harness) checkFile(t *testing.T, side, path string, how strictness) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	f, err := checkpoint.Open[string, string](ctx, path)
	cancel()
	require.NoError(t, err, "the dead child's lock must be free")
	s, err := f.Load(context.Background())
	require.NoError(t, f.Close())
	if errors.Is(err, checkpoint.ErrNotExist) {
		s.Entries = map[string]string{}
	} else if err != nil {
		t.Errorf("the %s does not load: %v", side, err)
		return
	}
	for _, p := range h.check(s.Entries, how) {
		t.Errorf("%s file: %s\nhistory of the key:\n%s", side, p, h.historyOf(strings.SplitN(p, ":", 2)[0]))
	}
}
