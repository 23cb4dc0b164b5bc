package robustness_test

// The node world (node_world_test.go) over a real checkpoint file, with the
// operator's verbs of cmd/phaseshift as events: the built command is run
// against the file in a temporary directory, as an operator runs it on a
// node, between two runs of the daemon. The node stays the oracle: after a
// verb and a restart, what the daemon serves must keep migratetest.Node's
// invariants, or Restore must refuse. A verb the operator runs with a flag
// that accepts a loss (--accept-loss, --drop-damaged-records) excuses the
// live holders whose entries neither the file it leaves nor legacy holds:
// those the operator agreed to lose. Only those, and only until they are
// written again: every other holder must still be served.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/testbin"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
)

// nodeVerb is one operator verb, with the flags an operator gives it.
type nodeVerb struct {
	args   []string // the verb and its flags; PATH (and COPY) follow
	prev   bool     // needs PATH.prev (restore-prev)
	copy   bool     // takes the newest kept copy as COPY (restore-kept)
	marked bool     // needs a file marked behind (clear-mark)
	rotten bool     // needs a damaged journal (repair-journal)
	loses  bool     // its flags accept a loss
	legacy bool     // says that legacy holds every acknowledged write (--legacy-current)
}

// nodeVerbs are the verbs the world's operator runs: each one's flags are
// those its --help gives for the case (restore-prev and restore-kept over
// an intact file that holds entries the copy lacks need both).
var nodeVerbs = []nodeVerb{
	{args: []string{"restore-prev", "--replace-intact", "--accept-loss"}, prev: true, loses: true},
	{args: []string{"restore-kept", "--replace-intact", "--accept-loss"}, copy: true, loses: true},
	{args: []string{"repair-journal", "--drop-damaged-records"}, rotten: true, loses: true},
	{args: []string{"clear-mark", "--legacy-current"}, marked: true, legacy: true},
	{args: []string{"clear-mark", "--accept-loss"}, marked: true, loses: true},
}

// openDisk opens the daemon's handle on the checkpoint: a reopened Memory,
// or the real file.
func (w *nodeWorld) openDisk(older bool) (nodeDisk, error) {
	if w.path == "" {
		return w.disk.Reopen(w.options(older)...)
	}
	return checkpoint.Open[string, string](w.ctx, w.path, append(w.options(older), checkpoint.WithLockWait(5*time.Second))...)
}

// fileSides shows the real file's side and legacy's, to tell whether a
// refusal changed one: the file, its journal, .prev, and the names of
// the kept copies.
func (w *nodeWorld) fileSides() string {
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return "(none)"
		}
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("checkpoint %s journal %s prev %s kept %v legacy %s",
		read(w.path), read(w.path+".journal"), read(w.path+".prev"), w.keptCopies(), w.legacyImage())
}

// keptCopies are the copies kept beside the file (quarantined, or
// replaced by a repair), without their journals, by name.
func (w *nodeWorld) keptCopies() []string {
	var names []string
	for _, pattern := range []string{".corrupt-*", ".before-*"} {
		m, _ := filepath.Glob(w.path + pattern)
		for _, p := range m {
			if !strings.HasSuffix(p, ".journal") {
				names = append(names, filepath.Base(p))
			}
		}
	}
	slices.Sort(names)
	return names
}

// newestKept is the kept copy kept last: their names end in the UTC time
// they were kept.
func (w *nodeWorld) newestKept() string {
	names := w.keptCopies()
	if len(names) == 0 {
		return ""
	}
	stamp := func(n string) string { return n[strings.LastIndex(n, "-")+1:] }
	return slices.MaxFunc(names, func(a, b string) int { return strings.Compare(stamp(a), stamp(b)) })
}

// journalRecords counts the lines of the real file's journal.
func (w *nodeWorld) journalRecords() int {
	b, err := os.ReadFile(w.path + ".journal")
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}

// marked says whether the file or its journal carries a "behind" mark.
func (w *nodeWorld) marked() bool {
	for _, p := range []string{w.path, w.path + ".journal"} {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(`"behind":`)) {
			return true
		}
	}
	return false
}

// verbCanRun says whether the operator would run v now: over a real file,
// with what the verb acts on there, and --legacy-current only where it is
// true.
func (w *nodeWorld) verbCanRun(v nodeVerb) bool {
	switch {
	case w.path == "":
		return false
	case v.copy && len(w.keptCopies()) == 0:
		return false
	case v.prev && !exists(w.path+".prev"):
		return false
	case v.rotten && !w.rotten:
		return false
	case v.marked && !w.marked():
		return false
	case v.legacy && !w.legacyCurrent():
		return false
	}
	return exists(w.path) || v.copy || v.prev
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// legacyImageMap is what legacy holds for a daemon that starts now: the
// runtime's listing, the explicit legacy's readable records, or nothing
// for a registry that dies with its daemon. ok is false when a record
// cannot be read.
func (w *nodeWorld) legacyImageMap() (m map[string]string, ok bool) {
	switch {
	case w.kind == kindObserving:
		return maps.Clone(w.listed), true
	case w.kind.registry():
		return map[string]string{}, true
	}
	m, err := (&nodeFiles{w: w}).read(false)
	return m, err == nil
}

// legacyCurrent is the truth of clear-mark --legacy-current's claim: legacy
// holds every acknowledged write (for an explicit legacy, no entry whose
// holder is gone either, unless a write to it is unsettled).
func (w *nodeWorld) legacyCurrent() bool {
	lg, ok := w.legacyImageMap()
	if !ok {
		return false
	}
	for _, k := range w.node.Holders() {
		v, _ := w.node.Holds(k)
		if lg[k] != v {
			return false
		}
	}
	if !w.kind.explicit() {
		return true
	}
	for k := range lg {
		if _, live := w.node.Holds(k); !live && !w.open[k] {
			return false
		}
	}
	return true
}

// verb stops the daemon (the repairs need its lock) and runs v with the
// built command. A verb that refuses (any exit but 0) must leave every
// file as it was.
func (w *nodeWorld) verb(v nodeVerb) {
	w.stop()
	args := append(slices.Clone(v.args), w.path)
	if v.copy {
		args = append(args, w.newestKept())
	}
	before := w.fileSides()
	ctx, cancel := context.WithTimeout(w.ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		panic(fmt.Sprintf("node world: running phaseshift: %v", err))
	}
	name := strings.Join(v.args, " ")
	if err != nil {
		w.verbExits = append(w.verbExits, fmt.Sprintf("%s: exit %d", name, ee.ExitCode()))
		w.logf("      exit %d: %s", ee.ExitCode(), firstLine(stderr.String()))
		if after := w.fileSides(); after != before {
			w.found(migratetest.NodeViolation{Invariant: "refused verb changed a file", Detail: "the verb exited non-zero but a file changed:\n        before: " + before + "\n        after:  " + after})
		}
		return
	}
	w.verbExits = append(w.verbExits, name+": exit 0")
	w.logf("      done: %s", firstLine(stdout.String()))
	if v.args[0] != "clear-mark" {
		w.rotten = false // the journal went with the file the verb replaced
	}
	if v.loses {
		w.excuseLosses()
	}
}

// excuseLosses marks the live holders whose entries the file a verb left
// lacks, and legacy too: the operator accepted losing them.
func (w *nodeWorld) excuseLosses() {
	f, err := checkpoint.Open[string, string](w.ctx, w.path, w.options(false)...)
	if err != nil {
		panic(fmt.Sprintf("node world: opening the checkpoint after a verb: %v", err))
	}
	snap, err := f.Load(w.ctx)
	_ = f.Close()
	if err != nil {
		w.logf("      the file the verb left does not load: %v", err)
		return
	}
	lg, _ := w.legacyImageMap()
	for _, k := range slices.Sorted(slices.Values(w.node.Holders())) {
		v, _ := w.node.Holds(k)
		if snap.Entries[k] != v && lg[k] != v {
			w.excused[k] = true
			w.logf("      the operator accepted losing %s", k)
		}
	}
}

// rot flips a byte in the middle of the journal's record before its last:
// bit rot that Load cannot take for a torn last write.
func (w *nodeWorld) rot() {
	b, err := os.ReadFile(w.path + ".journal")
	if err != nil {
		panic(fmt.Sprintf("node world: reading the journal: %v", err))
	}
	recs := bytes.SplitAfter(b, []byte("\n"))
	i := len(recs) - 3 // the last element is empty: after the last newline
	start := len(bytes.Join(recs[:i], nil))
	b[start+len(recs[i])/2] ^= 0x01
	if err := os.WriteFile(w.path+".journal", b, 0o600); err != nil {
		panic(fmt.Sprintf("node world: writing the journal: %v", err))
	}
	w.rotten = true
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// verbScenario is a history played before the explored events: it leaves
// the verbs something to act on.
type verbScenario struct {
	name   string
	events []nodeEvent
}

func evStart(p migrate.Phase) nodeEvent { return nodeEvent{op: opStart, phase: p} }
func evAdd(k int) nodeEvent             { return nodeEvent{op: opAdd, key: k, n: 1} }
func evDel(k int) nodeEvent             { return nodeEvent{op: opDel, key: k} }

// verbScenarios: two pods committed in phase 2 (.prev behind the
// journal); phase 3 after phase 2, with pod-a deleted and its address
// given to pod-b (.prev is phase 2's file, behind phase 3's commits);
// a schema rollback that quarantined the file, then pod-a deleted and its
// address given to pod-c (issue 41's path 3); and bit rot in the journal
// of three commits (path 2).
var verbScenarios = []verbScenario{
	{"phase 2", []nodeEvent{evStart(migrate.PhaseMigrate), evAdd(0), evAdd(1)}},
	{"phase 3 after 2", []nodeEvent{evStart(migrate.PhaseMigrate), evAdd(0), evStart(migrate.PhaseContract), evDel(0), evAdd(1)}},
	{"rollback", []nodeEvent{evStart(migrate.PhaseMigrate), evAdd(0), evAdd(1), {op: opRollback, phase: migrate.PhaseMigrate}, evDel(0), evAdd(2)}},
	{"rot", []nodeEvent{evStart(migrate.PhaseMigrate), evAdd(0), evAdd(1), evAdd(2), {op: opRot}}},
}

// verbAlphabet is what may follow a scenario: every verb, restarts in
// phases 1 to 3 (and 0 when long), a DEL of each pod, an ADD of pod-c,
// and a reboot; when long, also the schema rollback, the old binary and
// bit rot.
func verbAlphabet(kind legacyKind, long bool) []nodeEvent {
	var es []nodeEvent
	for i := range nodeVerbs {
		es = append(es, nodeEvent{op: opVerb, n: i})
	}
	for p := migrate.PhaseExpand; p <= migrate.PhaseContract; p++ {
		es = append(es, evStart(p))
	}
	for k := range nodeKeys {
		es = append(es, evDel(k))
	}
	es = append(es, evAdd(2), nodeEvent{op: opReboot})
	if long {
		es = append(es, evStart(migrate.PhaseLegacy), nodeEvent{op: opRollback, phase: migrate.PhaseMigrate}, nodeEvent{op: opRot}, evAdd(0), evAdd(1))
		if !kind.registry() {
			es = append(es, nodeEvent{op: opOld})
		}
	}
	return es
}

// TestNodeWorldVerbs plays, for each kind of legacy and each scenario of
// verbScenarios, every sequence of up to 3 events of verbAlphabet over a
// real checkpoint file, with the operator's verbs run by the built
// cmd/phaseshift, and judges every restore and acknowledged write against
// the node. By default it takes the three kinds of legacy that differ
// here (an explicit legacy written in place differs from one replaced
// whole only under kills, which the memory world plays; a source.Map is
// volatile with or without Config.VolatileLegacy), and about 30 seconds
// on 2 cores. PHASESHIFT_LONG_TESTS=1 takes all five and widens the
// alphabet (phase 0, the schema rollback, the old binary, bit rot, ADDs of
// every pod).
func TestNodeWorldVerbs(t *testing.T) {
	long := os.Getenv("PHASESHIFT_LONG_TESTS") == "1"
	bin, err := testbin.Build(t.TempDir(), "phaseshift", "github.com/phaseshift/phaseshift/cmd/phaseshift", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	kinds := []legacyKind{kindObserving, kindFile, kindRegistry}
	if long {
		kinds = append(kinds, kindInPlace, kindRegistryVolatile)
	}
	for _, kind := range kinds {
		t.Run(strings.ReplaceAll(kind.String(), " ", "_"), func(t *testing.T) {
			t.Parallel()
			exploreVerbs(t, kind, bin, 3, long)
		})
	}
}

func exploreVerbs(t *testing.T, kind legacyKind, bin string, depth int, long bool) {
	began := time.Now()
	alphabet := verbAlphabet(kind, long)
	base := verbsBase(t)
	var failures []nodeFinding
	played, leaks, refusals, accepted := 0, 0, 0, 0
	exits := map[string]int{} // verb and exit status -> runs
	for _, sc := range verbScenarios {
		if w, _ := playVerbs(kind, base, bin, sc, nil); w.unplayable {
			// A volatile registry's Restore refuses the newer schema
			// rather than serve nothing: there is no rollback to play.
			t.Logf("%s: scenario %q does not apply:\n%s", kind, sc.name, strings.Join(w.trace, "\n"))
			failures = append(failures, w.findings...)
			continue
		}
		level := [][]nodeEvent{nil}
		for length := 1; length <= depth; length++ {
			var next [][]nodeEvent
			for _, prefix := range level {
				for _, e := range alphabet {
					seq := append(slices.Clone(prefix), e)
					w, ok := playVerbs(kind, base, bin, sc, seq)
					if !ok {
						continue
					}
					played++
					leaks += w.leaks
					refusals += w.refusals
					accepted += w.accepted
					for _, x := range w.verbExits {
						exits[x]++
					}
					if len(w.findings) == 0 {
						next = append(next, seq)
						continue
					}
					failures = append(failures, w.findings...)
				}
			}
			level = next
		}
	}
	// A minimal violation after events the memory world has too (no verb,
	// no bit rot) is TestNodeWorldExhaustive's to judge: counted here, not
	// failed twice; so is one after a verb that contains such a sequence.
	theirs := 0
	minimal := slices.DeleteFunc(minimalFindings(failures), func(f nodeFinding) bool {
		mine := slices.ContainsFunc(f.events, func(e nodeEvent) bool { return e.op == opVerb || e.op == opRot })
		if !mine {
			theirs++
		}
		return !mine
	})
	t.Logf("%s: %d sequences of up to %d events after %d scenarios in %v; %d restores refused; %d reported leaks; %d accepted losses; %d violations; %d minimal after a verb or bit rot, %d after neither (TestNodeWorldExhaustive's)",
		kind, played, depth, len(verbScenarios), time.Since(began).Round(time.Millisecond), refusals, leaks, accepted, len(failures), len(minimal), theirs)
	for _, x := range slices.Sorted(maps.Keys(exits)) {
		t.Logf("%s: phaseshift %s: %d runs", kind, x, exits[x])
	}
	judgeGaps(t, kind, minimal, func(f nodeFinding) {
		t.Errorf("%s: %s\n    after: %s\n%s", kind, f.v, nodeSeqString(f.events), strings.Join(f.trace, "\n"))
	})
}

// playVerbs plays scenario sc and then seq on a fresh world of kind over a
// real file in a new directory under base; ok is false when some event of
// seq could not happen.
func playVerbs(kind legacyKind, base, bin string, sc verbScenario, seq []nodeEvent) (w *nodeWorld, ok bool) {
	dir, err := os.MkdirTemp(base, "node")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	w = newNodeWorldAt(kind, filepath.Join(dir, "state.json"), bin)
	defer w.stop()
	w.logf("(scenario %q)", sc.name)
	for _, e := range sc.events {
		if !w.apply(e) {
			w.logf("(the scenario stops here: %s cannot happen)", e)
			w.unplayable = true
			return w, false
		}
	}
	for _, e := range seq {
		if !w.apply(e) {
			return w, false
		}
	}
	return w, true
}

// verbsBase is where the worlds' files go: a directory on tmpfs when the
// machine has one (/dev/shm), as a node's /var/run is, where fsync costs
// nothing and the runs stay fast; else the test's temporary directory.
func verbsBase(t *testing.T) string {
	if dir, err := os.MkdirTemp("/dev/shm", "phaseshift-node-verbs-"); err == nil {
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		return dir
	}
	return t.TempDir()
}
