package checkpoint_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/fsys/fsystest"
)

// A checkpoint of at least 64 KiB compacts its journal in the background
// (see compact.go): the commit that grows the journal past its bound
// appends, and a goroutine writes the new file while commits go on. These
// tests hold each compaction (fsystest.WithCompactions) and run its two
// parts, the write of the new file and its install, when they choose, so
// that every state between them is seen; TestJournalBackgroundConcurrent
// lets them run in their goroutines.

// heldCompactions keeps every background compaction a File starts until
// the test runs its steps.
type heldCompactions struct {
	mu   sync.Mutex
	jobs []*heldCompaction // every one started
	next int               // the first not yet taken
}

// heldCompaction is one compaction's steps and how many have run; write
// runs the first (the new file written), install the others.
type heldCompaction struct {
	steps []func()
	ran   int
}

func (j *heldCompaction) step(n int) {
	for ; n > 0 && j.ran < len(j.steps); n-- {
		j.ran++
		j.steps[j.ran-1]()
	}
}

func (j *heldCompaction) write()   { j.step(1) }
func (j *heldCompaction) install() { j.step(len(j.steps)) }

func (h *heldCompactions) run(steps []func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.jobs = append(h.jobs, &heldCompaction{steps: steps})
}

// take returns the oldest compaction not yet taken.
func (h *heldCompactions) take(t *testing.T) *heldCompaction {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Less(t, h.next, len(h.jobs), "no compaction was started")
	h.next++
	return h.jobs[h.next-1]
}

func (h *heldCompactions) pending() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.jobs) - h.next
}

// finish runs what is left of every compaction: Close waits for them.
func (h *heldCompactions) finish() {
	h.mu.Lock()
	jobs := h.jobs
	h.mu.Unlock()
	for _, j := range jobs {
		j.install()
	}
}

// bigState returns entries of about 100 KiB: a checkpoint that compacts in
// the background.
func bigState() map[string]string {
	m := map[string]string{}
	for i := range 200 {
		m[fmt.Sprintf("k%03d", i)] = strings.Repeat("x", 500)
	}
	return m
}

// bgFile opens a checkpoint at a new path with its compactions held, and
// saves bigState in it (twice, so that .prev holds a file too). The File
// is closed at the test's cleanup.
func bgFile(t *testing.T, opts ...checkpoint.Option) (*checkpoint.File[string, string], string, *heldCompactions, map[string]string) {
	t.Helper()
	ctx := context.Background()
	h := &heldCompactions{}
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, append([]checkpoint.Option{fsystest.WithCompactions(h.run)}, opts...)...)
	require.NoError(t, err)
	// Compactions the test left held run (and are abandoned) before the
	// File closes, which waits for them.
	t.Cleanup(func() {
		h.finish()
		require.NoError(t, f.Close())
	})
	want := bigState()
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"first": "save"}}))
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: want}))
	return f, path, h, want
}

// commitUntilCompacting commits puts of 1 KiB values until one starts a
// compaction, and returns how many it made. Every one of them returns
// before the file is rewritten.
func commitUntilCompacting(t *testing.T, f *checkpoint.File[string, string], path string, want map[string]string) int {
	t.Helper()
	ctx := context.Background()
	seq := seqOfFile(t, path)
	for i := 0; ; i++ {
		require.Less(t, i, 200, "no commit started a compaction")
		k, v := fmt.Sprintf("c%03d", i), strings.Repeat(string(rune('a'+i%26)), 1024)
		require.NoError(t, f.Commit(ctx, checkpoint.Meta{Phase: "contract"}, []strChange{sput(k, v)}))
		want[k] = v
		require.Equal(t, seq, seqOfFile(t, path), "a commit rewrote the file")
		if f.Journal().Compacting {
			return i + 1
		}
	}
}

// commitN commits n puts of small values.
func commitN(t *testing.T, f *checkpoint.File[string, string], want map[string]string, prefix string, n int) {
	t.Helper()
	for i := range n {
		k := fmt.Sprintf("%s%d", prefix, i)
		require.NoError(t, f.Commit(context.Background(), checkpoint.Meta{Phase: "contract"}, []strChange{sput(k, "v")}))
		want[k] = "v"
	}
}

// loadCopy copies every file of path's directory to a new one, as a crash
// would leave them, and loads the checkpoint there with a new File.
func loadCopy(t *testing.T, path string) (checkpoint.Snapshot[string, string], error) {
	t.Helper()
	dst := t.TempDir()
	names, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(filepath.Dir(path), n.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, n.Name()), data, 0o600))
	}
	g, err := checkpoint.Open[string, string](context.Background(), filepath.Join(dst, filepath.Base(path)))
	require.NoError(t, err)
	defer g.Close()
	return g.Load(context.Background())
}

// journalBases returns the base of every record of path's journal.
func journalBases(t *testing.T, path string) []uint64 {
	t.Helper()
	data, err := os.ReadFile(path + ".journal")
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var bases []uint64
	for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var r struct{ Base uint64 }
		require.NoError(t, json.Unmarshal(line, &r))
		bases = append(bases, r.Base)
	}
	return bases
}

// temps returns the temporary files beside path.
func temps(t *testing.T, path string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".*"))
	require.NoError(t, err)
	return m
}

func repeatBase(base uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = base
	}
	return out
}

// TestJournalCompactsInBackground attacks "no commit waits for a
// compaction" and "Compaction never replays a commit twice or loses one"
// for a compaction in the background, step by step: the commit that grows
// the journal past its bound appends and returns with the file unchanged;
// commits made while the compaction runs follow its snapshot (base H); a
// crash at every step (a copy of the files) loads exactly what was
// committed; once installed, the file has Seq H, .prev is the file before,
// and the journal holds exactly the records since H.
func TestJournalCompactsInBackground(t *testing.T) {
	defer goleak.VerifyNone(t)
	f, path, h, want := bgFile(t)
	fileSeq := seqOfFile(t, path)
	n := commitUntilCompacting(t, f, path, want)
	head := fileSeq + uint64(n)
	before := mustRead(t, path)
	assert.Equal(t, repeatBase(fileSeq, n), journalBases(t, path), "the records up to the snapshot follow the file")
	assert.Greater(t, f.Journal().Bytes, max(int64(len(before))/5, 32<<10), "the commit that crossed the bound appended")

	check := func(step string) {
		t.Helper()
		s, err := loadCopy(t, path)
		require.NoError(t, err, "a crash %s", step)
		assert.Equal(t, want, s.Entries, "a crash %s", step)
	}
	check("once the compaction started")

	job := h.take(t)
	commitN(t, f, want, "during-", 3)
	assert.Equal(t, append(repeatBase(fileSeq, n), repeatBase(head, 3)...), journalBases(t, path), "records made during the compaction follow its snapshot")
	check("before the new file is written: the old file, then records of both bases")

	job.write()
	require.Len(t, temps(t, path), 2, "the new file, and a link to the old .prev, wait in temporary files")
	assert.Equal(t, before, mustRead(t, path), "the file is not replaced before the install")
	commitN(t, f, want, "written-", 2)
	check("with the new file written, not renamed")

	// Every step after, with a commit after each but the last two (the
	// new journal renamed into place, what is left removed).
	since := 5
	for i := 1; i < len(job.steps); i++ {
		job.step(1)
		if i < len(job.steps)-2 {
			commitN(t, f, want, fmt.Sprintf("step%d-", i), 1)
			since++
		}
		check(fmt.Sprintf("after step %d of the compaction", i+1))
		if i == 1 {
			assert.Equal(t, head, seqOfFile(t, path), "the new file is in place")
			assert.True(t, f.Journal().Compacting, "until its journal is")
		}
	}
	assert.Empty(t, temps(t, path))
	assert.Equal(t, head, seqOfFile(t, path), "the new file holds the state at the snapshot")
	assert.Equal(t, before, mustRead(t, path+".prev"), ".prev is the file before")
	assert.Equal(t, repeatBase(head, since), journalBases(t, path), "the journal holds the records since the snapshot, and only those")
	st := f.Journal()
	assert.False(t, st.Compacting)
	assert.NoError(t, st.CompactionError)
	assert.Equal(t, since, st.Records)
	assert.Zero(t, st.Stale)
	assert.Equal(t, int64(len(mustRead(t, path+".journal"))), st.Bytes)
	assert.Equal(t, int64(len(mustRead(t, path))), st.FileSize)
	assert.Equal(t, st.FileSize+st.Bytes, f.Size())
	check("once installed")

	commitN(t, f, want, "after-", 2)
	assert.Equal(t, repeatBase(head, since+2), journalBases(t, path))
	assert.Zero(t, h.pending(), "one compaction")
	require.NoError(t, f.Close())
	s, err := loadCopy(t, path)
	require.NoError(t, err)
	assert.Equal(t, want, s.Entries)
	assert.Equal(t, head+uint64(since)+2, s.Meta.Seq, "one seq per commit")
}

// TestJournalCompactionAbandoned attacks "a save, a Load, a Quarantine or
// Close while a compaction runs abandons it": the new file is never
// renamed into place, its temporary file is removed, the file's Seq never
// goes back, and what loads is what was committed, for each of them,
// before the new file is written and after.
func TestJournalCompactionAbandoned(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx := context.Background()
	for _, written := range []bool{false, true} {
		for _, tc := range []struct {
			name string
			act  func(t *testing.T, f *checkpoint.File[string, string], want map[string]string)
		}{
			{"save", func(t *testing.T, f *checkpoint.File[string, string], want map[string]string) {
				clear(want)
				want["saved"] = "1"
				require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: maps.Clone(want)}))
			}},
			{"load", func(t *testing.T, f *checkpoint.File[string, string], want map[string]string) {
				s, err := f.Load(ctx)
				require.NoError(t, err)
				assert.Equal(t, want, s.Entries)
			}},
			{"quarantine", func(t *testing.T, f *checkpoint.File[string, string], want map[string]string) {
				_, err := f.Quarantine(ctx)
				require.NoError(t, err)
				clear(want)
			}},
		} {
			t.Run(fmt.Sprintf("%s, new file written=%v", tc.name, written), func(t *testing.T) {
				f, path, h, want := bgFile(t)
				commitUntilCompacting(t, f, path, want)
				job := h.take(t)
				if written {
					job.write()
				}
				tc.act(t, f, want)
				assert.False(t, f.Journal().Compacting)
				var seq uint64
				if tc.name != "quarantine" {
					seq = seqOfFile(t, path)
				}
				if !written {
					job.write()
				}
				job.install()
				assert.Empty(t, temps(t, path), "the abandoned compaction removed its temporary file")
				if tc.name != "quarantine" {
					assert.Equal(t, seq, seqOfFile(t, path), "the abandoned compaction did not replace the file")
				} else {
					assert.NoFileExists(t, path)
				}
				commitN(t, f, want, "next-", 2)
				s, err := loadCopy(t, path)
				require.NoError(t, err)
				assert.Equal(t, want, s.Entries)
			})
		}
	}
	t.Run("close", func(t *testing.T) {
		f, path, h, want := bgFile(t)
		commitUntilCompacting(t, f, path, want)
		job := h.take(t)
		job.write()
		closed := make(chan error, 1)
		go func() { closed <- f.Close() }()
		// Close waits for the compaction's goroutine to finish with its
		// temporary file: it cannot return before install has run.
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) before the compaction's goroutine was done", err)
		default:
		}
		job.install()
		require.NoError(t, <-closed)
		assert.Empty(t, temps(t, path))
		s, err := loadCopy(t, path)
		require.NoError(t, err)
		assert.Equal(t, want, s.Entries)
	})
}

// TestJournalCompactionFails attacks what a background compaction that
// fails leaves (a disk full): the commits that came before and after it
// succeed and load; JournalStatus says why it failed; records go on
// following its snapshot; the next compaction starts once the journal has
// grown by another bound, and succeeds. A journal that cannot be replaced
// after the new file is installed keeps its old records, stale, and still
// loads, and JournalStatus says why.
func TestJournalCompactionFails(t *testing.T) {
	defer goleak.VerifyNone(t)
	t.Run("the new file", func(t *testing.T) {
		faulty := &fsystest.Faulty{}
		f, path, h, want := bgFile(t, fsystest.WithFS(faulty))
		fileSeq := seqOfFile(t, path)
		n := commitUntilCompacting(t, f, path, want)
		head := fileSeq + uint64(n)
		faulty.Fail(fsystest.OpWrite, path, syscall.ENOSPC, 1)
		job := h.take(t)
		job.write()
		job.install()
		st := f.Journal()
		assert.False(t, st.Compacting)
		require.ErrorIs(t, st.CompactionError, syscall.ENOSPC)
		assert.Contains(t, st.CompactionError.Error(), "compact: write")
		assert.Empty(t, temps(t, path))
		assert.Equal(t, fileSeq, seqOfFile(t, path))

		// Commits go on, following the failed compaction's snapshot, and
		// the next one waits for another bound.
		commitN(t, f, want, "after-", 3)
		assert.Equal(t, append(repeatBase(fileSeq, n), repeatBase(head, 3)...), journalBases(t, path))
		assert.Zero(t, h.pending(), "no compaction right after a failed one")
		s, err := loadCopy(t, path)
		require.NoError(t, err)
		assert.Equal(t, want, s.Entries)

		m := commitUntilCompacting(t, f, path, want)
		assert.Greater(t, m, n/2, "the next compaction waits for the journal to grow by another bound")
		job = h.take(t)
		job.write()
		job.install()
		assert.NoError(t, f.Journal().CompactionError)
		assert.Equal(t, head+3+uint64(m), seqOfFile(t, path))
		assert.Empty(t, journalBases(t, path), "no record since the snapshot: the journal is gone")
		require.NoError(t, f.Close())
		s, err = loadCopy(t, path)
		require.NoError(t, err)
		assert.Equal(t, want, s.Entries)
	})
	t.Run("the journal", func(t *testing.T) {
		faulty := &fsystest.Faulty{}
		f, path, h, want := bgFile(t, fsystest.WithFS(faulty))
		fileSeq := seqOfFile(t, path)
		n := commitUntilCompacting(t, f, path, want)
		head := fileSeq + uint64(n)
		job := h.take(t)
		job.write()
		commitN(t, f, want, "during-", 2)
		// The next temporary file created is the new journal's.
		faulty.Fail(fsystest.OpCreate, path, syscall.ENOSPC, 1)
		job.install()
		require.ErrorIs(t, f.Journal().CompactionError, syscall.ENOSPC, "the journal was not compacted")
		assert.Contains(t, f.Journal().CompactionError.Error(), "compact: create temporary journal")
		assert.Equal(t, head, seqOfFile(t, path), "the file was")
		assert.Empty(t, temps(t, path))
		assert.Equal(t, append(repeatBase(fileSeq, n), repeatBase(head, 2)...), journalBases(t, path), "the journal kept its records")
		assert.Equal(t, n, f.Journal().Stale, "the records before the snapshot are stale")
		commitN(t, f, want, "after-", 2)
		assert.Zero(t, h.pending(), "the next compaction waits for another bound")
		s, err := loadCopy(t, path)
		require.NoError(t, err)
		assert.Equal(t, want, s.Entries)
	})
}

// reseal recomputes the checksum of a journal record line (without its
// newline), as a careful hand edit would.
func reseal(t *testing.T, line []byte) []byte {
	t.Helper()
	at := bytes.LastIndex(line, []byte(`,"crc32c":"`))
	require.Positive(t, at)
	return fmt.Appendf(line[:at:at], `,"crc32c":"%08x"}`, crc32.Checksum(line[:at], crc32.MakeTable(crc32.Castagnoli)))
}

// TestJournalReplayContinuesACompactionsSnapshot attacks replay's rule for
// records a compaction appended after its snapshot (see the package
// documentation's Replay): over the old file, a record whose base is the
// seq the replay has reached continues it, and so do the records of that
// base after it; a base that is neither the base of the records before it
// nor the seq reached is corruption, and so, still, is an older file put
// back under such a journal.
func TestJournalReplayContinuesACompactionsSnapshot(t *testing.T) {
	defer goleak.VerifyNone(t)
	f, path, h, want := bgFile(t)
	fileSeq := seqOfFile(t, path)
	n := commitUntilCompacting(t, f, path, want)
	head := fileSeq + uint64(n)
	job := h.take(t)
	commitN(t, f, want, "during-", 3)
	journal := mustRead(t, path+".journal")
	file := mustRead(t, path)
	prev := mustRead(t, path+".prev")
	job.write()
	job.install()
	require.NoError(t, f.Close())

	// The state a crash before the rename leaves.
	at := func(t *testing.T, file, journal []byte) (checkpoint.Snapshot[string, string], error) {
		t.Helper()
		p := filepath.Join(t.TempDir(), "s.json")
		require.NoError(t, os.WriteFile(p, file, 0o600))
		require.NoError(t, os.WriteFile(p+".journal", journal, 0o600))
		return loadCopy(t, p)
	}
	s, err := at(t, file, journal)
	require.NoError(t, err)
	assert.Equal(t, want, s.Entries)
	assert.Equal(t, head+3, s.Meta.Seq)

	lines := bytes.SplitAfter(journal, []byte("\n"))
	lines = lines[:len(lines)-1]
	require.Len(t, lines, n+3)
	// rebase gives the records at is the base base.
	rebase := func(base uint64, at ...int) []byte {
		out := make([][]byte, len(lines))
		copy(out, lines)
		for _, i := range at {
			line := bytes.TrimSuffix(lines[i], []byte("\n"))
			old := fmt.Appendf(nil, `"base":%d,`, head)
			require.True(t, bytes.Contains(line, old))
			edited := bytes.Replace(line, old, fmt.Appendf(nil, `"base":%d,`, base), 1)
			out[i] = append(reseal(t, edited), '\n')
		}
		return bytes.Join(out, nil)
	}
	// The second and third records after the snapshot, based on the seq
	// reached before them (H+1): a continuation too, by the same rule.
	s, err = at(t, file, rebase(head+1, n+1, n+2))
	require.NoError(t, err)
	assert.Equal(t, want, s.Entries)
	// The third alone: after a record of base H+1, neither that base nor
	// the seq reached (H+2).
	_, err = at(t, file, rebase(head+1, n+1))
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	assert.Contains(t, err.Error(), "follows seq "+fmt.Sprint(head)+", after records that follow seq")
	// The first, based on a seq the replay has not reached, and not the
	// file's either.
	_, err = at(t, file, rebase(head+1, n))
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	assert.Contains(t, err.Error(), "after records that follow seq")
	// An older file put back under that journal.
	_, err = at(t, prev, journal)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	assert.Contains(t, err.Error(), "replaced by an older file")
}

// TestJournalBackgroundConcurrent: commits from many goroutines over a
// checkpoint that compacts in the background, its compactions running in
// their own goroutines, replay to exactly what was acknowledged, one seq
// per commit; Close in the middle of whatever runs leaves no goroutine.
func TestJournalBackgroundConcurrent(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path)
	require.NoError(t, err)
	base := bigState()
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: base}))
	const writers, each = 8, 60
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			var err error
			for i := 0; i < each && err == nil; i++ {
				err = f.Commit(ctx, checkpoint.Meta{}, []strChange{sput(fmt.Sprintf("w%d-%d", w, i), strings.Repeat("y", 1024)), sdel(fmt.Sprintf("w%d-%d", w, i-1))})
			}
			errs <- err
		}()
	}
	for range writers {
		require.NoError(t, <-errs)
	}
	require.NoError(t, f.Close())
	assert.Empty(t, temps(t, path))
	g, err := checkpoint.Open[string, string](ctx, path)
	require.NoError(t, err)
	defer g.Close()
	s, err := g.Load(ctx)
	require.NoError(t, err)
	want := maps.Clone(base)
	for w := range writers {
		want[fmt.Sprintf("w%d-%d", w, each-1)] = strings.Repeat("y", 1024)
	}
	assert.Equal(t, want, s.Entries)
	assert.Nil(t, g.Journal().Torn)
	assert.Equal(t, uint64(1+writers*each), s.Meta.Seq, "one seq per commit, none lost")
	assert.Less(t, g.Journal().Bytes, int64(writers*each*1100), "compactions ran: the journal does not hold every commit")
}

// TestJournalCompactionFollowsItsFile attacks what a background
// compaction's install leaves for the checks of the next append: the File
// follows the new file, so a cp of .prev onto it afterwards (which keeps
// its inode) is caught, and the next commit writes the whole file rather
// than append to records that no longer follow it.
func TestJournalCompactionFollowsItsFile(t *testing.T) {
	defer goleak.VerifyNone(t)
	cp, err := exec.LookPath("cp")
	if err != nil {
		t.Skip("no cp on this machine:", err)
	}
	f, path, h, want := bgFile(t)
	commitUntilCompacting(t, f, path, want)
	h.take(t).install()
	commitN(t, f, want, "after-", 1)
	require.NotEmpty(t, journalBases(t, path), "the commit after the compaction appended")
	ino := inode(t, path)
	out, err := exec.Command(cp, path+".prev", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, ino, inode(t, path), "written over in place")
	commitN(t, f, want, "over-", 2)
	s, err := loadCopy(t, path)
	require.NoError(t, err, "acknowledged commits left the checkpoint unreadable")
	assert.Equal(t, want, s.Entries)
}

// TestJournalCompactionLockLost attacks "One owner" for a compaction in
// the background: when the lock file was removed and another File took
// the lock at its path while the new file was written, the install
// renames nothing, says why (ErrLocked), and removes its temporary files.
func TestJournalCompactionLockLost(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx := context.Background()
	f, path, h, want := bgFile(t)
	commitUntilCompacting(t, f, path, want)
	job := h.take(t)
	job.write()
	seq, file := seqOfFile(t, path), mustRead(t, path)
	require.NoError(t, os.Remove(path+".lock"))
	other, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithLockWait(0))
	require.NoError(t, err, "the lock file is gone: another File takes the lock at its path")
	defer other.Close()
	job.install()
	st := f.Journal()
	require.ErrorIs(t, st.CompactionError, checkpoint.ErrLocked)
	assert.False(t, st.Compacting)
	assert.Equal(t, seq, seqOfFile(t, path), "nothing was renamed")
	assert.Equal(t, file, mustRead(t, path))
	assert.Empty(t, temps(t, path))
	s, err := other.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, s.Entries)
}
