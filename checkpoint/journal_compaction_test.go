package checkpoint_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// When a journal is compacted into its file, and what a compaction that
// fails or runs among other commits leaves.

// commitToSize commits one put to m whose record is predicted to leave the
// journal exactly want bytes long, assuming its savedAt has all nine
// digits of nanoseconds; it returns the journal's size after the commit
// and false when the prediction could not hold (a shorter savedAt).
func commitToSize(t *testing.T, m *checkpoint.Memory[string, string], want int64) (int64, bool) {
	t.Helper()
	ctx := context.Background()
	j := checkpointtest.Journal(m)
	last := j[bytes.LastIndexByte(j[:len(j)-1], '\n')+1:]
	const probe = "p"
	require.Contains(t, string(last), `{"key":"`+probe+`","value":"`)
	// The last record put probe with a value of 'v's: its length minus the
	// value and the savedAt is the same for the next one (same key, same
	// base, seq of the same number of digits).
	ts := savedAtRe.FindSubmatch(last)
	require.NotNil(t, ts)
	vm := regexp.MustCompile(`"value":"(v*)"`).FindSubmatch(last)
	require.NotNil(t, vm)
	vlen := len(vm[1])
	overhead := int64(len(last) - vlen - len(ts[1]))
	n := want - int64(len(j)) - overhead - int64(len("2006-01-02T15:04:05.123456789Z"))
	require.Positive(t, n)
	value := strings.Repeat("v", int(n))
	require.NoError(t, m.Commit(ctx, checkpoint.Meta{}, []strChange{sput(probe, value)}))
	got := int64(len(checkpointtest.Journal(m)))
	if got == 0 {
		return 0, true // compacted: the record was not shorter than predicted
	}
	nl := bytes.LastIndexByte(checkpointtest.Journal(m)[:got-1], '\n')
	rec := checkpointtest.Journal(m)[nl+1:]
	ts = savedAtRe.FindSubmatch(rec)
	return got, len(ts[1]) == 30
}

// TestJournalCompactionBoundExactly attacks "the commit that would
// grow it past a fifth of the file's size (at least 32 KiB)" compacts: a
// commit that makes the journal exactly the bound is appended, one byte
// more compacts; for a small file (the 32 KiB floor) and a big one (a
// fifth).
func TestJournalCompactionBoundExactly(t *testing.T) {
	ctx := context.Background()
	big := map[string]string{}
	for i := range 3000 {
		big[fmt.Sprintf("k%05d", i)] = strings.Repeat("x", 80)
	}
	for _, tc := range []struct {
		name    string
		entries map[string]string
	}{{"floor", map[string]string{"a": "b"}}, {"fifth", big}} {
		t.Run(tc.name, func(t *testing.T) {
			for _, over := range []int64{0, 1} {
				held := false
				for try := 0; try < 40 && !held; try++ {
					m := checkpointtest.NewMemory[string, string](t, checkpoint.WithJournal())
					require.NoError(t, m.Save(ctx, checkpoint.Snapshot[string, string]{Entries: tc.entries}))
					require.NoError(t, m.Commit(ctx, checkpoint.Meta{}, []strChange{sput("p", "vvvv")}))
					fileSize := m.Journal().FileSize
					bound := max(fileSize/5, 32<<10)
					if tc.name == "fifth" {
						require.Greater(t, fileSize/5, int64(32<<10), "the file is big enough for a fifth to count")
					}
					seq := m.Journal().Records
					got, exact := commitToSize(t, m, bound+over)
					if !exact {
						continue // a savedAt with trailing zeros: try again
					}
					held = true
					if over == 0 {
						assert.Equal(t, bound, got, "a journal of exactly the bound is appended to")
						assert.Equal(t, seq+1, m.Journal().Records)
						assert.Equal(t, fileSize, m.Journal().FileSize, "the file was not rewritten")
					} else {
						assert.Zero(t, got, "one byte past the bound compacts")
						assert.Greater(t, m.Journal().FileSize, fileSize, "the file was rewritten with the commits")
					}
					s, err := checkpointtest.Reopen(t, m).Load(ctx)
					require.NoError(t, err)
					assert.Len(t, s.Entries, len(tc.entries)+1)
				}
				require.True(t, held, "no try had a savedAt of full length")
			}
		})
	}
}

// TestJournalFailedCompaction attacks "Compaction never replays a
// commit twice or loses one" when the compacting save fails: the commit
// that triggered it is reported failed and not served, every earlier one
// is, and the next commit writes the whole state.
func TestJournalFailedCompaction(t *testing.T) {
	ctx := context.Background()
	m := checkpointtest.NewMemory[string, string](t, checkpoint.WithJournal())
	require.NoError(t, m.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
	big := strings.Repeat("x", 8<<10)
	want := map[string]string{"a": "1"}
	for i := 0; ; i++ {
		k := fmt.Sprintf("k%d", i)
		before := m.Journal()
		if before.Bytes+int64(len(big))+300 > max(before.FileSize/5, 32<<10) {
			// This commit compacts: make its save fail.
			checkpointtest.FailSaves(m, 1, nil)
			err := m.Commit(ctx, checkpoint.Meta{}, []strChange{sput(k, big), sdel("a")})
			require.Error(t, err)
			assert.NotContains(t, err.Error(), "journal write", "the compacting save failed, not an append")
			assert.Equal(t, before.Bytes, int64(len(checkpointtest.Journal(m))), "the failed compaction left the journal")
			break
		}
		require.NoError(t, m.Commit(ctx, checkpoint.Meta{}, []strChange{sput(k, big)}))
		want[k] = big
	}
	s, err := checkpointtest.Reopen(t, m).Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, s.Entries, "every acknowledged commit, not the failed one")
	require.NoError(t, m.Commit(ctx, checkpoint.Meta{}, []strChange{sput("after", "1")}))
	want["after"] = "1"
	assert.Nil(t, checkpointtest.Journal(m), "the next commit wrote the whole state")
	r := checkpointtest.Reopen(t, m)
	s, err = r.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, s.Entries)
	assert.Zero(t, r.Journal().Stale)
}

// TestJournalConcurrentCommits attacks "Commits run one at a time,
// so a crash or power cut leaves at most the last line incomplete":
// commits from many goroutines, with compactions among them, replay to
// exactly what was acknowledged, with no damaged line.
func TestJournalConcurrentCommits(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{}}))
	const writers, each = 8, 40
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			var err error
			for i := 0; i < each && err == nil; i++ {
				k := fmt.Sprintf("w%d-%d", w, i)
				err = f.Commit(ctx, checkpoint.Meta{}, []strChange{sput(k, strings.Repeat("x", 400)), sdel(fmt.Sprintf("w%d-%d", w, i-1))})
			}
			errs <- err
		}()
	}
	for range writers {
		require.NoError(t, <-errs)
	}
	require.NoError(t, f.Close())
	g, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer g.Close()
	s, err := g.Load(ctx)
	require.NoError(t, err)
	want := map[string]string{}
	for w := range writers {
		want[fmt.Sprintf("w%d-%d", w, each-1)] = strings.Repeat("x", 400)
	}
	assert.Equal(t, want, s.Entries)
	assert.Nil(t, g.Journal().Torn)
	assert.Equal(t, uint64(1+writers*each), s.Meta.Seq, "one seq per commit, none lost")
}

// savedAtRe finds a record's savedAt, whose length varies (RFC 3339 with
// the trailing zeros of its nanoseconds trimmed).
var savedAtRe = regexp.MustCompile(`"savedAt":"([^"]*)"`)
