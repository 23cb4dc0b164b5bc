package checkpoint_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/internal/fsys/fsystest"
)

func put(k podKey, v alloc) checkpoint.Change[podKey, alloc] {
	return checkpoint.Change[podKey, alloc]{Key: k, Value: v}
}

func del(k podKey) checkpoint.Change[podKey, alloc] {
	return checkpoint.Change[podKey, alloc]{Key: k, Delete: true}
}

// reopen closes f and opens path again with opts, as a restart would, and
// loads it.
func reopen(t *testing.T, f *checkpoint.File[podKey, alloc], path string, opts ...checkpoint.Option) (*checkpoint.File[podKey, alloc], checkpoint.Snapshot[podKey, alloc], error) {
	t.Helper()
	require.NoError(t, f.Close())
	g, err := checkpoint.Open[podKey, alloc](context.Background(), path, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { g.Close() })
	s, err := g.Load(context.Background())
	return g, s, err
}

// TestJournalCommitAppends checks the journal's basic promise: a commit
// leaves the file as it was and appends one line; a restart replays the
// lines and serves exactly what was committed, with the last commit's Meta.
func TestJournalCommitAppends(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t, checkpoint.WithJournal())
	want := entriesN(20)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Meta: checkpoint.Meta{Phase: "expand"}, Entries: want}))
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	_, err = os.Stat(path + ".journal")
	require.ErrorIs(t, err, os.ErrNotExist, "a save leaves no journal")

	v := alloc{IP: want[key("c001")].IP.Next().Next()}
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{Phase: "migrate", Writer: "w2"}, []checkpoint.Change[podKey, alloc]{put(key("c001"), v), del(key("c002")), del(key("absent")), put(key("new"), v)}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{Phase: "contract", Writer: "w3"}, []checkpoint.Change[podKey, alloc]{del(key("new")), put(key("c003"), v)}))
	want[key("c001")], want[key("c003")] = v, v
	delete(want, key("c002"))

	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, file, after, "commits leave the file alone")
	j, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(j), "\n"), "\n")
	require.Len(t, lines, 2, "one line per commit")
	for _, l := range lines {
		assert.True(t, json.Valid([]byte(l)), "each line is JSON that jq reads")
	}
	assert.Contains(t, lines[0], `{"delete":{"key":`, "a delete names the entry it deletes")
	assert.NotContains(t, lines[0], `"absent"`, "a delete of a missing key is not recorded")
	fi, err := os.Stat(path + ".journal")
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the journal is as private as the file")
	st := f.Journal()
	assert.True(t, st.Enabled)
	assert.Equal(t, 2, st.Records)
	assert.Equal(t, int64(len(j)), st.Bytes)
	assert.Equal(t, int64(len(file)+len(j)), f.Size(), "Size counts the journal")

	_, s, err := reopen(t, f, path)
	require.NoError(t, err, "a File without WithJournal replays it too")
	assert.Equal(t, want, s.Entries)
	assert.Equal(t, uint64(3), s.Meta.Seq, "each commit is a save: Seq counts it")
	assert.Equal(t, "contract", s.Meta.Phase, "Meta is the last commit's")
	assert.Equal(t, "w3", s.Meta.Writer)
	assert.Equal(t, 2, s.Meta.Format, "a file written WithJournal has format 2")
}

// TestJournalIsTheDefault: without options, a File and a Memory append
// commits to the journal and write format 2; WithoutJournal replaces the
// file at every commit and writes format 1; WithJournal, given alone or
// twice, is the default.
func TestJournalIsTheDefault(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		opts    []checkpoint.Option
		journal bool
	}{
		{"default", nil, true},
		{"WithJournal", []checkpoint.Option{checkpoint.WithJournal(), checkpoint.WithJournal()}, true},
		{"WithoutJournal", []checkpoint.Option{checkpoint.WithoutJournal()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			format := map[bool]int{true: 2, false: 1}[tc.journal]
			f, path := openFile(t, tc.opts...)
			m, err := checkpoint.NewMemory[podKey, alloc]().Reopen(tc.opts...)
			require.NoError(t, err)
			if tc.opts == nil {
				m = checkpoint.NewMemory[podKey, alloc]()
			}
			for _, c := range []interface {
				Save(context.Context, checkpoint.Snapshot[podKey, alloc]) error
				Commit(context.Context, checkpoint.Meta, []checkpoint.Change[podKey, alloc]) error
				Journal() checkpoint.JournalStatus
			}{f, m} {
				require.NoError(t, c.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(2)}))
				require.NoError(t, c.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{del(key("c000"))}))
				st := c.Journal()
				assert.Equal(t, tc.journal, st.Enabled)
				assert.Equal(t, map[bool]int{true: 1, false: 0}[tc.journal], st.Records)
			}
			_, err = os.Stat(path + ".journal")
			assert.Equal(t, tc.journal, err == nil, "a journal beside the file: %v", err)
			assert.Equal(t, format, loadPath(t, path).Meta.Format)
			assert.Equal(t, tc.journal, len(checkpointtest.Journal(m)) > 0, "Memory keeps a journal as File does")
			assert.Contains(t, string(m.Bytes()), fmt.Sprintf(`"format": %d,`, format))
		})
	}
}

// TestJournalFoldedWithoutJournal: a File opened WithoutJournal folds a
// journal it found into the file at its next commit, which writes format 1
// again, for a binary that knows no journal.
func TestJournalFoldedWithoutJournal(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t, checkpoint.WithJournal())
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(3)}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{del(key("c000"))}))
	g, s, err := reopen(t, f, path, checkpoint.WithoutJournal())
	require.NoError(t, err)
	require.Len(t, s.Entries, 2)
	require.NoError(t, g.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{del(key("c001"))}))
	_, err = os.Stat(path + ".journal")
	assert.ErrorIs(t, err, os.ErrNotExist, "the commit folded the journal into the file")
	m := checkpoint.NewMemory[podKey, alloc]()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	checkpointtest.SetBytes(m, b)
	s, err = m.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, s.Meta.Format, "without the journal, format 1")
	assert.Equal(t, map[podKey]alloc{key("c002"): entriesN(3)[key("c002")]}, s.Entries)
	assert.Equal(t, uint64(3), s.Meta.Seq)
}

// journalFile makes a File WithJournal with a saved file and n commits of
// one put each, closes it, and returns the path, the bytes of the journal
// and the state after each commit (states[0] is the saved one).
func journalFile(t *testing.T, n int) (path string, journal []byte, states []map[podKey]alloc) {
	t.Helper()
	ctx := context.Background()
	f, path := openFile(t, checkpoint.WithJournal())
	cur := entriesN(4)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: cur}))
	states = append(states, clone(cur))
	for i := range n {
		k := key(fmt.Sprintf("j%d", i))
		v := alloc{IP: cur[key("c000")].IP.Next()}
		ch := []checkpoint.Change[podKey, alloc]{put(k, v)}
		if i%3 == 2 {
			ch = append(ch, del(key(fmt.Sprintf("j%d", i-1))))
			delete(cur, key(fmt.Sprintf("j%d", i-1)))
		}
		require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, ch))
		cur[k] = v
		states = append(states, clone(cur))
	}
	require.NoError(t, f.Close())
	journal, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	return path, journal, states
}

func clone(m map[podKey]alloc) map[podKey]alloc {
	c := make(map[podKey]alloc, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// TestJournalTornTail cuts the journal at every byte: a crash during an
// append leaves a prefix of it. Load must serve exactly the state of the
// whole records before the cut, report the rest as a torn record (a
// *TornJournalError in Journal().Torn, and a log line), and the next
// commit must rewrite the file and drop the journal, so that the torn
// bytes never sit in front of an acknowledged record.
//
// Shown to fail: making replay treat a torn last line as corruption fails
// every cut inside a record with "checkpoint is corrupt"; skipping the
// jdirty flag on a torn tail (appending after it) fails the "after the
// next commit" check with a corrupt journal.
func TestJournalTornTail(t *testing.T) {
	ctx := context.Background()
	path, journal, states := journalFile(t, 4)
	ends := []int{0}
	for i, b := range journal {
		if b == '\n' {
			ends = append(ends, i+1)
		}
	}
	require.Len(t, ends, 5)
	// Every byte is cut in TestJournalTornTailEveryByte, on Memory (the
	// same code); here, on a real file, the cuts that differ: at a record's
	// boundary, just after it, in its middle, just before its newline.
	var cuts []int
	for i := 0; i+1 < len(ends); i++ {
		cuts = append(cuts, ends[i], ends[i]+1, (ends[i]+ends[i+1])/2, ends[i+1]-1)
	}
	cuts = append(cuts, len(journal))
	for _, cut := range cuts {
		whole := 0
		for whole+1 < len(ends) && ends[whole+1] <= cut {
			whole++
		}
		require.NoError(t, os.WriteFile(path+".journal", journal[:cut], 0o600))
		core, logs := observer.New(zap.WarnLevel)
		g, err := checkpoint.Open[podKey, alloc](ctx, path, checkpoint.WithJournal(), checkpoint.WithLogger(zap.New(core)))
		require.NoError(t, err)
		s, err := g.Load(ctx)
		require.NoError(t, err, "cut at %d", cut)
		require.Equal(t, states[whole], s.Entries, "cut at %d: the whole records before it, no more", cut)
		st := g.Journal()
		if cut == ends[whole] {
			assert.Nil(t, st.Torn, "cut at %d: on a record boundary nothing is torn", cut)
		} else {
			require.NotNil(t, st.Torn, "cut at %d: the torn record is reported", cut)
			assert.ErrorIs(t, st.Torn, checkpoint.ErrTornJournal)
			assert.Equal(t, int64(ends[whole]), st.Torn.Offset)
			assert.Equal(t, int64(cut-ends[whole]), st.Torn.Bytes)
			assert.Equal(t, 1, logs.FilterMessageSnippet("torn").Len(), "and logged")
		}
		// The next commit must not append after the torn bytes.
		extra := alloc{IP: s.Entries[key("c000")].IP}
		require.NoError(t, g.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{put(key("after"), extra)}))
		require.NoError(t, g.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{put(key("after2"), extra)}))
		require.NoError(t, g.Close())
		want := clone(states[whole])
		want[key("after")], want[key("after2")] = extra, extra
		h, s2, err := reopen(t, g, path)
		require.NoError(t, err, "cut at %d, after the next commits", cut)
		assert.Equal(t, want, s2.Entries, "cut at %d, after the next commits", cut)
		assert.Nil(t, h.Journal().Torn)
		require.NoError(t, h.Close())
		// Put the original file back for the next cut.
		restoreOriginal(t, path, states[0])
	}
}

// TestJournalTornTailEveryByte cuts a journal at every byte, and also
// zeroes its tail from every byte (a file system that extended the file
// before it wrote the data): Load serves the whole records before the
// damage, reports the rest as torn, and the next commit leaves a journal
// that replays to exactly the acknowledged state.
func TestJournalTornTailEveryByte(t *testing.T) {
	ctx := context.Background()
	m := checkpointtest.NewMemory[string, int](t, checkpoint.WithJournal())
	require.NoError(t, m.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"a": 1}}))
	states := []map[string]int{{"a": 1}}
	for i := range 4 {
		ch := []checkpoint.Change[string, int]{{Key: fmt.Sprintf("k%d", i), Value: i}}
		if i == 2 {
			ch = append(ch, checkpoint.Change[string, int]{Key: "a", Delete: true})
		}
		require.NoError(t, m.Commit(ctx, checkpoint.Meta{}, ch))
		s, err := checkpointtest.Reopen(t, m).Load(ctx)
		require.NoError(t, err)
		states = append(states, s.Entries)
	}
	file, journal := m.Bytes(), checkpointtest.Journal(m)
	for cut := 0; cut <= len(journal); cut++ {
		whole := bytes.Count(journal[:cut], []byte("\n"))
		for _, damaged := range [][]byte{journal[:cut], append(bytes.Clone(journal[:cut]), make([]byte, len(journal)-cut)...)} {
			if cut == len(journal) && len(damaged) > cut {
				continue
			}
			r := checkpointtest.Reopen(t, m)
			checkpointtest.SetBytes(r, file)
			checkpointtest.SetJournal(r, damaged)
			s, err := r.Load(ctx)
			require.NoError(t, err, "cut at %d", cut)
			require.Equal(t, states[whole], s.Entries, "cut at %d of %d", cut, len(journal))
			clean := cut == len(damaged) && (cut == 0 || journal[cut-1] == '\n')
			require.Equal(t, !clean, r.Journal().Torn != nil, "cut at %d: torn reported", cut)
			require.NoError(t, r.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, int]{{Key: "z", Value: 26}}))
			s, err = checkpointtest.Reopen(t, r).Load(ctx)
			require.NoError(t, err, "cut at %d, after a commit", cut)
			want := maps.Clone(states[whole])
			want["z"] = 26
			require.Equal(t, want, s.Entries, "cut at %d, after a commit", cut)
		}
	}
}

// restoreOriginal writes the file back as journalFile saved it (seq 1).
func restoreOriginal(t *testing.T, path string, entries map[podKey]alloc) {
	t.Helper()
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.RemoveAll(path+".journal"))
	f, err := checkpoint.Open[podKey, alloc](context.Background(), path, checkpoint.WithJournal())
	require.NoError(t, err)
	require.NoError(t, f.Save(context.Background(), checkpoint.Snapshot[podKey, alloc]{Entries: entries}))
	require.NoError(t, f.Close())
}

// TestJournalDamageBeforeTheTailIsCorrupt flips a byte in every record but
// the last: that is not what a crash leaves, so Load fails with ErrCorrupt,
// Save and Commit refuse to write (ErrUnreadable), and Quarantine moves
// the file and the journal aside together, after which a Save starts
// afresh.
//
// Shown to fail: treating any bad line as a torn tail (discarding it and
// what follows) fails with "An error is expected but got nil".
func TestJournalDamageBeforeTheTailIsCorrupt(t *testing.T) {
	ctx := context.Background()
	path, journal, _ := journalFile(t, 3)
	lastStart := bytes.LastIndexByte(journal[:len(journal)-1], '\n') + 1
	for _, at := range []int{0, 10, lastStart / 2, lastStart - 2} {
		damaged := bytes.Clone(journal)
		damaged[at] ^= 0x04
		require.NoError(t, os.WriteFile(path+".journal", damaged, 0o600))
		f, err := checkpoint.Open[podKey, alloc](ctx, path, checkpoint.WithJournal())
		require.NoError(t, err)
		_, err = f.Load(ctx)
		require.ErrorIs(t, err, checkpoint.ErrCorrupt, "byte %d", at)
		assert.Contains(t, err.Error(), path+".journal")
		assert.ErrorIs(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{del(key("c000"))}), checkpoint.ErrUnreadable)
		assert.ErrorIs(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{}), checkpoint.ErrUnreadable)
		j, _ := os.ReadFile(path + ".journal")
		assert.Equal(t, damaged, j, "the journal is left alone")
		require.NoError(t, f.Close())
	}
	f, err := checkpoint.Open[podKey, alloc](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	before, _ := os.ReadFile(path)
	dst, err := f.Quarantine(ctx)
	require.NoError(t, err)
	q, _ := os.ReadFile(dst)
	assert.Equal(t, before, q, "the file is moved aside")
	qj, _ := os.ReadFile(dst + ".journal")
	assert.NotEmpty(t, qj, "and its journal with it")
	for _, p := range []string{path, path + ".journal"} {
		_, err := os.Stat(p)
		assert.ErrorIs(t, err, os.ErrNotExist, p)
	}
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(1)}))
}

// TestJournalRecordRules checks the rules that tie records to their file:
// records a save already folded in (base below the file's seq) are
// skipped; records that follow another file (an older one put back by
// hand), records out of order, and a journal whose file is missing are
// corruption.
func TestJournalRecordRules(t *testing.T) {
	ctx := context.Background()
	t.Run("stale records are skipped", func(t *testing.T) {
		// A crash after a save's rename and before it removed the journal.
		path, journal, states := journalFile(t, 3)
		f, s, err := reopen(t, nopFile(t, path), path, checkpoint.WithJournal())
		require.NoError(t, err)
		require.NoError(t, f.Save(ctx, s))
		require.NoError(t, os.WriteFile(path+".journal", journal, 0o600))
		g, s, err := reopen(t, f, path, checkpoint.WithJournal())
		require.NoError(t, err)
		assert.Equal(t, states[3], s.Entries)
		assert.Equal(t, 3, g.Journal().Stale)
		assert.Equal(t, 0, g.Journal().Records)
		v := alloc{IP: s.Entries[key("c000")].IP}
		require.NoError(t, g.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{put(key("z"), v)}))
		_, s, err = reopen(t, g, path)
		require.NoError(t, err)
		want := clone(states[3])
		want[key("z")] = v
		assert.Equal(t, want, s.Entries)
	})
	t.Run("a journal that follows another file", func(t *testing.T) {
		path, _, _ := journalFile(t, 2)
		f, s, err := reopen(t, nopFile(t, path), path, checkpoint.WithJournal())
		require.NoError(t, err)
		require.NoError(t, f.Save(ctx, s)) // seq 4; .prev is seq 1
		require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{del(key("c000"))}))
		require.NoError(t, f.Close())
		prev, err := os.ReadFile(path + ".prev")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, prev, 0o600)) // cp path.prev path
		_, _, err = reopen(t, nopFile(t, path), path, checkpoint.WithJournal())
		require.ErrorIs(t, err, checkpoint.ErrCorrupt)
		assert.Contains(t, err.Error(), "replaced by an older file")
	})
	t.Run("records out of order", func(t *testing.T) {
		path, journal, _ := journalFile(t, 3)
		lines := bytes.SplitAfter(journal, []byte("\n"))
		swapped := append(append(append([]byte{}, lines[1]...), lines[0]...), lines[2]...)
		require.NoError(t, os.WriteFile(path+".journal", swapped, 0o600))
		_, _, err := reopen(t, nopFile(t, path), path, checkpoint.WithJournal())
		require.ErrorIs(t, err, checkpoint.ErrCorrupt)
		assert.Contains(t, err.Error(), "want 2")
	})
	t.Run("a journal without its file", func(t *testing.T) {
		path, journal, _ := journalFile(t, 1)
		require.NoError(t, os.Remove(path))
		f, _, err := reopen(t, nopFile(t, path), path, checkpoint.WithJournal())
		require.ErrorIs(t, err, checkpoint.ErrCorrupt)
		assert.Contains(t, err.Error(), "missing")
		require.ErrorIs(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{}), checkpoint.ErrUnreadable)
		dst, err := f.Quarantine(ctx)
		require.NoError(t, err)
		q, _ := os.ReadFile(dst)
		assert.Equal(t, journal, q, "the journal is moved aside alone")
		require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{}))
	})
}

// nopFile returns a closed-over File for reopen to close: a placeholder
// when the test holds none open.
func nopFile(t *testing.T, path string) *checkpoint.File[podKey, alloc] {
	t.Helper()
	f, err := checkpoint.Open[podKey, alloc](context.Background(), path)
	require.NoError(t, err)
	return f
}

// TestJournalCompaction: the commit that would grow the journal past a
// fifth of the file (at least 32 KiB) writes the whole file instead and
// removes the journal; what a restart serves is unchanged throughout.
func TestJournalCompaction(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t, checkpoint.WithJournal())
	want := entriesN(100)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: want}))
	compactions := 0
	var maxJournal int64
	for i := range 600 {
		k := key(fmt.Sprintf("c%03d", i%100))
		v := alloc{IP: want[k].IP, Since: want[k].Since.Add(1)}
		seqBefore := seqOfFile(t, path)
		require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{put(k, v)}))
		want[k] = v
		if seqOfFile(t, path) != seqBefore {
			compactions++
			_, err := os.Stat(path + ".journal")
			assert.ErrorIs(t, err, os.ErrNotExist, "a compaction removes the journal")
		}
		maxJournal = max(maxJournal, f.Journal().Bytes)
	}
	assert.LessOrEqual(t, maxJournal, int64(32<<10), "the journal stays within its bound")
	assert.Greater(t, compactions, 2, "the journal was compacted as it grew")
	assert.Less(t, compactions, 60, "but not at every commit")
	_, s, err := reopen(t, f, path)
	require.NoError(t, err)
	assert.Equal(t, want, s.Entries)
	assert.Equal(t, uint64(601), s.Meta.Seq)
}

func seqOfFile(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var h struct{ Seq uint64 }
	require.NoError(t, json.Unmarshal(b, &h))
	return h.Seq
}

// TestJournalCheckpointRemovedWhileOpen: when the checkpoint (or the
// journal) is removed under an open File, the next commit writes the
// whole state again instead of appending records nobody could replay.
func TestJournalCheckpointRemovedWhileOpen(t *testing.T) {
	ctx := context.Background()
	for _, gone := range []string{"", ".journal"} {
		t.Run("rm"+gone, func(t *testing.T) {
			f, path := openFile(t, checkpoint.WithJournal())
			want := entriesN(5)
			require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: want}))
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{del(key("c000"))}))
			delete(want, key("c000"))
			require.NoError(t, os.Remove(path+gone))
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{del(key("c001"))}))
			delete(want, key("c001"))
			_, s, err := reopen(t, f, path)
			require.NoError(t, err)
			assert.Equal(t, want, s.Entries)
		})
	}
}

// TestJournalAppendFaults fails each step of an append: the commit fails
// naming the step and the journal, a restart serves the last acknowledged
// commit (the failed record was cut back out), and the next commit
// succeeds by rewriting the file.
//
// Shown to fail: removing cutBack's Truncate makes the fsync cases fail
// with "the failed commit is not served" (it was, after the restart).
func TestJournalAppendFaults(t *testing.T) {
	ctx := context.Background()
	for _, fault := range []struct {
		op, step string
		err      error
	}{
		{fsystest.OpAppend, "journal open", syscall.EMFILE},
		{fsystest.OpWrite, "journal write", syscall.ENOSPC},
		{fsystest.ShortWrite, "journal write", nil},
		{fsystest.OpFsync, "journal fsync", syscall.EIO},
		{fsystest.OpClose, "journal close", syscall.EIO},
		{fsystest.OpRead, "read checkpoint", syscall.EACCES},
	} {
		for _, first := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/%v/first=%v", fault.op, fault.err, first), func(t *testing.T) {
				faulty := &fsystest.Faulty{}
				f, path := openFile(t, checkpoint.WithJournal(), fsystest.WithFS(faulty))
				want := entriesN(3)
				require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: want}))
				if !first {
					require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{del(key("c000"))}))
					delete(want, key("c000"))
				}
				target := path + ".journal"
				if fault.op == fsystest.OpRead {
					target = path
				}
				faulty.Fail(fault.op, target, fault.err, 1)
				err := f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{del(key("c001"))})
				require.Error(t, err)
				assert.Contains(t, err.Error(), fault.step)
				if fault.err != nil {
					assert.ErrorIs(t, err, fault.err)
				}
				faulty.Clear()
				if fault.op != fsystest.OpClose { // the record is durable before the close fails
					g, s, err := reopen(t, f, path, checkpoint.WithJournal())
					require.NoError(t, err)
					assert.Equal(t, want, s.Entries, "the failed commit is not served")
					f = g
				} else {
					_, err := f.Load(ctx)
					require.NoError(t, err)
				}
				require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{del(key("c002"))}))
				_, s, err := reopen(t, f, path)
				require.NoError(t, err)
				delete(want, key("c002"))
				if fault.op == fsystest.OpClose {
					delete(want, key("c001"))
				}
				assert.Equal(t, want, s.Entries)
			})
		}
	}
}

// TestJournalSchemaUpgrade: records written with schema 1 are upgraded on
// replay by a binary with schema 2, deletes included (a delete carries the
// entry it deletes, so the upgrade finds the new key), and the first
// commit after rewrites the whole file in schema 2 rather than append
// schema-2 records to a schema-1 file.
func TestJournalSchemaUpgrade(t *testing.T) {
	ctx := context.Background()
	old := checkpointtest.NewMemory[string, string](t, checkpoint.WithJournal())
	require.NoError(t, old.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1", "b": "2"}}))
	require.NoError(t, old.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, string]{{Key: "c", Value: "3"}, {Key: "a", Delete: true}}))
	require.NotEmpty(t, checkpointtest.Journal(old))
	// Schema 2 upper-cases keys and doubles values.
	up := func(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) {
		var ks, vs string
		if err := json.Unmarshal(k, &ks); err != nil {
			return nil, nil, err
		}
		if err := json.Unmarshal(v, &vs); err != nil {
			return nil, nil, err
		}
		nk, _ := json.Marshal(strings.ToUpper(ks))
		nv, _ := json.Marshal(vs + vs)
		return nk, nv, nil
	}
	m := checkpointtest.Reopen(t, old, checkpoint.WithJournal(), checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, up))
	s, err := m.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"B": "22", "C": "33"}, s.Entries)
	require.NoError(t, m.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, string]{{Key: "D", Value: "4"}}))
	assert.Nil(t, checkpointtest.Journal(m), "the schema change rewrote the file")
	s, err = checkpointtest.Reopen(t, m).Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"B": "22", "C": "33", "D": "4"}, s.Entries)
	assert.Equal(t, 2, s.Meta.Schema)
	require.NoError(t, m.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, string]{{Key: "E", Value: "5"}}))
	assert.NotNil(t, checkpointtest.Journal(m), "and appends again after")
}

// TestJournalEntriesFollowTheFilesRules: a record's entries are held to the
// rules of the file's: fields the types lack are a type mismatch
// (ErrTypeMismatch, or dropped WithDropUnknownFields), an entry the
// WithValidate function rejects is a bad entry, and the key it wrote is not
// served with the file's older value.
func TestJournalEntriesFollowTheFilesRules(t *testing.T) {
	ctx := context.Background()
	type v2 struct {
		A int `json:"a"`
		B int `json:"b"`
	}
	type v1 struct {
		A int `json:"a"`
	}
	w := checkpointtest.NewMemory[string, v2](t, checkpoint.WithJournal())
	require.NoError(t, w.Save(ctx, checkpoint.Snapshot[string, v2]{Entries: map[string]v2{"x": {1, 0}, "y": {2, 0}}}))
	require.NoError(t, w.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, v2]{{Key: "x", Value: v2{3, 4}}}))

	r := checkpoint.NewMemory[string, v1]()
	checkpointtest.SetBytes(r, w.Bytes())
	checkpointtest.SetJournal(r, checkpointtest.Journal(w))
	_, err := r.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrTypeMismatch)
	assert.Contains(t, err.Error(), `"b"`)

	d := checkpointtest.Reopen(t, r, checkpoint.WithDropUnknownFields())
	s, err := d.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]v1{"x": {3}, "y": {2}}, s.Entries)

	bad := checkpointtest.Reopen(t, w, checkpoint.WithValidate(func(k string, v v2) error {
		if v.B != 0 {
			return errors.New("b must be zero")
		}
		return nil
	}))
	sb, err := bad.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrBadEntry)
	assert.Contains(t, err.Error(), "b must be zero")
	assert.Equal(t, map[string]v2{"y": {2, 0}}, sb.Entries, "x's older value is not served in place of its newer one")
}

// TestJournalMemory: Memory keeps the journal as File does, so that
// migratetest can run a Store on it: Reopen replays it, a torn tail set
// through checkpointtest is discarded and reported, and Quarantine moves
// both aside.
func TestJournalMemory(t *testing.T) {
	ctx := context.Background()
	m := checkpointtest.NewMemory[string, int](t, checkpoint.WithJournal(), checkpoint.WithBootID(func() (string, error) { return "boot-a", nil }))
	require.NoError(t, m.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"a": 1}}))
	saved := m.Bytes()
	require.NoError(t, m.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, int]{{Key: "b", Value: 2}}))
	require.NoError(t, m.Commit(ctx, checkpoint.Meta{Phase: "contract"}, []checkpoint.Change[string, int]{{Key: "c", Value: 3}}))
	assert.Equal(t, saved, m.Bytes(), "commits append to the journal")
	assert.Equal(t, 3, checkpointtest.Saves(m), "an append counts as a save")

	b := checkpointtest.Reopen(t, m, checkpoint.WithJournal(), checkpoint.WithBootID(func() (string, error) { return "boot-b", nil }))
	s, err := b.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"a": 1, "b": 2, "c": 3}, s.Entries)
	assert.Equal(t, "boot-a", s.Meta.BootID, "the boot of the last commit")
	assert.Equal(t, "contract", s.Meta.Phase)

	j := checkpointtest.Journal(m)
	checkpointtest.SetJournal(b, j[:len(j)-5])
	s, err = b.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"a": 1, "b": 2}, s.Entries)
	require.NotNil(t, b.Journal().Torn)

	checkpointtest.FailSaves(b, 1, nil)
	require.Error(t, b.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, int]{{Key: "d", Value: 4}}))
	require.NoError(t, b.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, int]{{Key: "e", Value: 5}}))
	assert.Nil(t, checkpointtest.Journal(b), "the torn tail was folded away by a rewrite")
	s, err = checkpointtest.Reopen(t, b).Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"a": 1, "b": 2, "e": 5}, s.Entries)

	require.NoError(t, b.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, int]{{Key: "f", Value: 6}}))
	checkpointtest.SetJournal(b, []byte("garbage\n"+string(checkpointtest.Journal(b))))
	_, err = b.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	_, err = b.Quarantine(ctx)
	require.NoError(t, err)
	assert.Nil(t, checkpointtest.Journal(b))
	assert.Nil(t, b.Bytes())
}

// TestJournalPathsAreLeftToTheirOwners: the journal's name is path +
// ".journal", so another checkpoint in the same directory keeps its own.
func TestJournalPathsAreLeftToTheirOwners(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, err := checkpoint.Open[string, int](ctx, filepath.Join(dir, "a.json"), checkpoint.WithJournal())
	require.NoError(t, err)
	defer a.Close()
	b, err := checkpoint.Open[string, int](ctx, filepath.Join(dir, "a.json.journal.json"), checkpoint.WithJournal())
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, a.Save(ctx, checkpoint.Snapshot[string, int]{}))
	require.NoError(t, b.Save(ctx, checkpoint.Snapshot[string, int]{}))
	require.NoError(t, a.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, int]{{Key: "x", Value: 1}}))
	require.NoError(t, b.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, int]{{Key: "y", Value: 2}}))
	require.NoError(t, a.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"x": 1}}))
	s, err := b.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"y": 2}, s.Entries)
}

// TestJournalMetaOfANewerFile: a binary that cannot read a newer file's
// entries still gets, with ErrNewerSchema, the Meta of the checkpoint's
// last commit, journal included, so that it can tell (as package migrate
// must) that phase 3 wrote it last.
//
// Shown to fail by migratetest's "registry, journal, schema bumps" world
// before journalMeta existed: a phase-1 binary of the older schema took a
// checkpoint whose file said "expand" and whose journal said "contract" for
// one that kept legacy current, and restored from the stale legacy.
func TestJournalMetaOfANewerFile(t *testing.T) {
	ctx := context.Background()
	newer := checkpointtest.NewMemory[string, int](t, checkpoint.WithJournal(), checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, func(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }))
	require.NoError(t, newer.Save(ctx, checkpoint.Snapshot[string, int]{Meta: checkpoint.Meta{Phase: "expand", Writer: "v2"}, Entries: map[string]int{"a": 1}}))
	require.NoError(t, newer.Commit(ctx, checkpoint.Meta{Phase: "contract", Writer: "v2"}, []checkpoint.Change[string, int]{{Key: "b", Value: 2}}))
	require.NoError(t, newer.Commit(ctx, checkpoint.Meta{Phase: "contract", Writer: "v2.1"}, []checkpoint.Change[string, int]{{Key: "c", Value: 3}}))

	older := checkpointtest.Reopen(t, newer)
	older, err := older.Reopen() // the same options: the newer binary reads it all
	require.NoError(t, err)
	s, err := older.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), s.Meta.Seq)

	old := checkpointtest.Reopen(t, newer, checkpoint.WithJournal()) // schema 1
	s, err = old.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNewerSchema)
	assert.Equal(t, "contract", s.Meta.Phase, "the last commit's phase, from the journal")
	assert.Equal(t, "v2.1", s.Meta.Writer)
	assert.Equal(t, uint64(3), s.Meta.Seq)
	assert.Equal(t, 2, s.Meta.Schema, "the file's schema")
}

// TestJournalAfterAnotherFileAppended: while this File's lock file was
// gone, another File appended to the journal without touching the file.
// This File's next commit must not append after records it never read,
// nor rewrite the file over them: it refuses (ErrUnreadable) until a Load
// has read them, as it does when another File replaced the file.
//
// Shown to fail: without disk.sameJournal, the save case fails (the other
// File's record is lost). The commit case is caught by sameJournal and,
// on its own, by appendJournal's check that the journal did not grow
// (which also covers a writer that takes no lock at all).
func TestJournalAfterAnotherFileAppended(t *testing.T) {
	ctx := context.Background()
	for _, op := range []string{"commit", "save"} {
		t.Run(op, func(t *testing.T) {
			f, path := openFile(t, checkpoint.WithJournal())
			require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(2)}))
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{put(key("mine"), alloc{})}))
			require.NoError(t, os.Remove(path+".lock"))

			g, err := checkpoint.Open[podKey, alloc](ctx, path, checkpoint.WithJournal(), checkpoint.WithLockWait(0))
			require.NoError(t, err, "the lock file is gone")
			_, err = g.Load(ctx)
			require.NoError(t, err)
			require.NoError(t, g.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{put(key("theirs"), alloc{})}))
			require.NoError(t, g.Close())

			if op == "commit" {
				err = f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{put(key("mine2"), alloc{})})
			} else {
				err = f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: map[podKey]alloc{key("mine2"): {}}})
			}
			require.ErrorIs(t, err, checkpoint.ErrUnreadable)
			s := loadWithJournal(t, path)
			assert.Contains(t, s.Entries, key("theirs"), "what the other File wrote is kept")
			assert.NotContains(t, s.Entries, key("mine2"))

			s, err = f.Load(ctx)
			require.NoError(t, err)
			assert.Contains(t, s.Entries, key("theirs"))
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{put(key("mine2"), alloc{})}), "after a Load, commits work again")
			s = loadWithJournal(t, path)
			assert.Contains(t, s.Entries, key("theirs"))
			assert.Contains(t, s.Entries, key("mine2"))
		})
	}
}

// loadWithJournal is loadPath with the journal copied too.
func loadWithJournal(t *testing.T, path string) checkpoint.Snapshot[podKey, alloc] {
	t.Helper()
	dir := t.TempDir()
	for _, suffix := range []string{"", ".journal"} {
		data, err := os.ReadFile(path + suffix)
		if suffix != "" && os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "copy.json"+suffix), data, 0o600))
	}
	g, err := checkpoint.Open[podKey, alloc](context.Background(), filepath.Join(dir, "copy.json"))
	require.NoError(t, err)
	defer g.Close()
	s, err := g.Load(context.Background())
	require.NoError(t, err)
	return s
}

// TestJournalFixtureLoadsForever reads a checkpoint written WithJournal by
// this version (testdata/format2-schema1-journal.json and its .journal: a
// saved file and two commits) for as long as the format is supported, as
// TestFixturesLoadForever does for single files. Never regenerate it.
func TestJournalFixtureLoadsForever(t *testing.T) {
	ctx := context.Background()
	const name = "format2-schema1-journal.json"
	src := filepath.Join("testdata", name)
	if *writeFixtures {
		if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
			tmp := filepath.Join(t.TempDir(), name)
			f, err := checkpoint.Open[podKey, alloc](ctx, tmp, checkpoint.WithJournal())
			require.NoError(t, err)
			require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Meta: checkpoint.Meta{Phase: "expand", Writer: "phaseshift fixture"}, Entries: fixtureAllocs()}))
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{Phase: "migrate", Writer: "phaseshift fixture"}, []checkpoint.Change[podKey, alloc]{
				put(key("c3"), alloc{IP: netip.MustParseAddr("10.0.0.9")}), del(key("77ab01")),
			}))
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{Phase: "contract", Writer: "phaseshift fixture"}, []checkpoint.Change[podKey, alloc]{
				put(key("4f1c9a"), alloc{IP: netip.MustParseAddr("10.0.0.22")}),
			}))
			require.NoError(t, f.Close())
			for _, suffix := range []string{"", ".journal"} {
				data, err := os.ReadFile(tmp + suffix)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(src+suffix, data, 0o644))
			}
		}
	}
	path := filepath.Join(t.TempDir(), name)
	for _, suffix := range []string{"", ".journal"} {
		data, err := os.ReadFile(src + suffix)
		require.NoError(t, err, "fixture missing: run go test ./checkpoint -run TestJournalFixtureLoadsForever -write-fixtures")
		require.NoError(t, os.WriteFile(path+suffix, data, 0o600))
	}
	f, err := checkpoint.Open[podKey, alloc](ctx, path)
	require.NoError(t, err)
	defer f.Close()
	s, err := f.Load(ctx)
	require.NoError(t, err)
	want := fixtureAllocs()
	delete(want, key("77ab01"))
	want[key("c3")] = alloc{IP: netip.MustParseAddr("10.0.0.9")}
	want[key("4f1c9a")] = alloc{IP: netip.MustParseAddr("10.0.0.22")}
	assert.Equal(t, want, s.Entries)
	assert.Equal(t, "contract", s.Meta.Phase)
	assert.Equal(t, 2, s.Meta.Format)
	assert.Equal(t, 1, s.Meta.Schema)
	assert.Equal(t, uint64(3), s.Meta.Seq)
	assert.Equal(t, 2, f.Journal().Records)
}

// TestJournalStartsWithARewrite: turning WithJournal on over a file written
// without it (format 1, which an older phaseshift would read without the
// journal) makes the first commit rewrite the file as format 2; only the
// commits after it append.
func TestJournalStartsWithARewrite(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t, checkpoint.WithoutJournal())
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(2)}))
	g, s, err := reopen(t, f, path, checkpoint.WithJournal())
	require.NoError(t, err)
	require.Equal(t, 1, s.Meta.Format)
	require.NoError(t, g.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{del(key("c000"))}))
	_, err = os.Stat(path + ".journal")
	require.ErrorIs(t, err, os.ErrNotExist, "the first commit rewrote the file")
	assert.Equal(t, 2, loadPath(t, path).Meta.Format)
	require.NoError(t, g.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{del(key("c001"))}))
	_, err = os.Stat(path + ".journal")
	require.NoError(t, err, "the next one appended")
	assert.Empty(t, loadWithJournal(t, path).Entries)
}
