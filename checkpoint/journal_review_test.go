package checkpoint_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// Adversarial tests of WithJournal's documented claims (doc.go, "The
// journal", Guarantees and Caveats; journal.go).

type strChange = checkpoint.Change[string, string]

func sput(k, v string) strChange { return strChange{Key: k, Value: v} }
func sdel(k string) strChange    { return strChange{Key: k, Delete: true} }

// applyChanges is the model: what a commit of changes does to a map.
func applyChanges(m map[string]string, changes []strChange) {
	for _, c := range changes {
		if c.Delete {
			delete(m, c.Key)
		} else {
			m[c.Key] = c.Value
		}
	}
}

// mixedCommits puts, deletes and re-puts the same key within one commit,
// in every order: the journal must replay them in the order given.
var mixedCommits = [][]strChange{
	{sput("x", "1"), sdel("x")},                  // born and gone in one commit
	{sdel("a"), sput("a", "2")},                  // deleted then back
	{sput("b", "1"), sput("b", "2"), sdel("b")},  // changed twice then deleted
	{sput("y", "1"), sdel("y"), sput("y", "3")},  // put, delete, put
	{sdel("missing"), sdel("missing")},           // nothing to delete, twice
	{sput("a", "9"), sdel("a"), sdel("a")},       // a double delete
	{sput("c", "new"), sdel("c"), sput("c", "")}, // back with an empty value
}

// TestReviewJournalPutAndDeleteOfOneKeyInOneCommit attacks "Load replays
// the journal over the file" and "serves exactly what was committed" with
// commits that change and delete the same key in one Commit, on File and
// Memory, and checks both hold the same journal bytes' effect (parity).
func TestReviewJournalPutAndDeleteOfOneKeyInOneCommit(t *testing.T) {
	ctx := context.Background()
	start := map[string]string{"a": "1", "b": "0", "c": "0", "keep": "k"}
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	m := checkpointtest.NewMemory[string, string](t, checkpoint.WithJournal())
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: start}))
	require.NoError(t, m.Save(ctx, checkpoint.Snapshot[string, string]{Entries: start}))
	want := map[string]string{}
	for k, v := range start {
		want[k] = v
	}
	for i, changes := range mixedCommits {
		require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, changes), "commit %d", i)
		require.NoError(t, m.Commit(ctx, checkpoint.Meta{}, changes), "commit %d", i)
		applyChanges(want, changes)
	}
	assert.Equal(t, len(mixedCommits), f.Journal().Records, "every commit went to the journal")
	require.NoError(t, f.Close())

	g, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer g.Close()
	s, err := g.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, s.Entries, "File: replay gives what was committed")
	assert.Equal(t, uint64(1+len(mixedCommits)), s.Meta.Seq)

	r := checkpointtest.Reopen(t, m)
	ms, err := r.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, ms.Entries, "Memory: replay gives what was committed")
	j, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	// The same records, but for the time of each commit and its checksum.
	norm := regexp.MustCompile(`"(savedAt|crc32c|bootID)":"[^"]*"`)
	assert.Equal(t, norm.ReplaceAllString(string(j), ""), norm.ReplaceAllString(string(checkpointtest.Journal(m)), ""), "Memory keeps a journal as File does")
	assert.Equal(t, g.Journal().Records, r.Journal().Records)

	// The File's journal replayed by Memory gives the same state: one format.
	checkpointtest.SetJournal(r, j)
	ms, err = r.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, ms.Entries)
}

// TestReviewJournalCommitAfterStaleLoad attacks "Lines whose base is below
// the file's Seq ... are skipped" and "compacted ... after a Load that
// found anything but whole records that follow the file": a save whose
// journal removal was lost (the old journal came back), then a Load, a
// Commit, and a restart. No stale record may be replayed, the commit must
// survive, and the stale records must be gone.
func TestReviewJournalCommitAfterStaleLoad(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("stale1", "x")}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sdel("a")}))
	old, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	// The save folds the journal into a file that does not hold stale1 nor
	// the delete of a (Save replaces the whole state).
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "2"}}))
	require.NoError(t, f.Close())
	require.NoError(t, os.WriteFile(path+".journal", old, 0o600)) // the removal did not reach the disk

	g, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	s, err := g.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "2"}, s.Entries, "stale records are not replayed")
	assert.Equal(t, 2, g.Journal().Stale)
	assert.Equal(t, 0, g.Journal().Records)
	require.NoError(t, g.Commit(ctx, checkpoint.Meta{}, []strChange{sput("b", "3")}))
	_, err = os.Stat(path + ".journal")
	assert.ErrorIs(t, err, os.ErrNotExist, "the commit after a stale Load folded the journal away")
	require.NoError(t, g.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "4")}))
	require.NoError(t, g.Close())

	h, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer h.Close()
	s, err = h.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "2", "b": "3", "c": "4"}, s.Entries)
	assert.Zero(t, h.Journal().Stale)
	assert.Equal(t, 1, h.Journal().Records, "the commit after the fold was appended")
}

// TestReviewJournalQuarantineJournalAlone attacks "a journal whose file is
// missing is corruption: Load fails with ErrCorrupt, Save and Commit refuse
// (ErrUnreadable), and Quarantine moves ... the journal aside": with no
// file at all, only a journal.
func TestReviewJournalQuarantineJournalAlone(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("b", "2")}))
	require.NoError(t, f.Close())
	j, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))

	g, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer g.Close()
	_, err = g.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt, "a journal without its file")
	assert.ErrorIs(t, g.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "3")}), checkpoint.ErrUnreadable)
	assert.ErrorIs(t, g.Save(ctx, checkpoint.Snapshot[string, string]{}), checkpoint.ErrUnreadable)
	_, err = os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist, "the refusals wrote nothing")

	dst, err := g.Quarantine(ctx)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(dst, path+".corrupt-"), dst)
	assert.True(t, strings.HasSuffix(dst, ".journal"), "the journal keeps its suffix: %s", dst)
	moved, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.Equal(t, j, moved, "the journal is kept aside, byte for byte")
	_, err = os.Stat(path + ".journal")
	assert.ErrorIs(t, err, os.ErrNotExist)

	s, err := g.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNotExist, "after Quarantine, nothing")
	assert.Empty(t, s.Entries)
	require.NoError(t, g.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "3")}))
	s, err = g.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"c": "3"}, s.Entries, "a fresh start, without the quarantined journal")
}

// TestReviewJournalSymlinkNotFollowed attacks "a symlink planted at any
// name this package uses is reported or replaced, never followed" for the
// journal: a symlink at path+".journal" to a file of the attacker's. Load
// must not read through it as the journal, and a Commit must not append to
// its target.
func TestReviewJournalSymlinkNotFollowed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("b", "2")}))
	real, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	target := filepath.Join(dir, "victim")
	require.NoError(t, os.WriteFile(target, real, 0o600)) // a valid journal, even
	require.NoError(t, os.Remove(path+".journal"))
	require.NoError(t, os.Symlink(target, path+".journal"))

	_, err = f.Load(ctx)
	require.Error(t, err, "a symlinked journal is reported, not read through")
	assert.Contains(t, err.Error(), path+".journal")

	// A File that has not read it yet: its Commit must not append to the
	// symlink's target.
	require.NoError(t, os.Remove(path+".journal"))
	_, err = f.Load(ctx)
	require.NoError(t, err)
	require.NoError(t, os.Symlink(target, path+".journal"))
	err = f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "3")})
	after, rerr := os.ReadFile(target)
	require.NoError(t, rerr)
	assert.Equal(t, real, after, "the symlink's target is never written (commit error: %v)", err)
}

// savedAtRe finds a record's savedAt, whose length varies (RFC 3339 with
// the trailing zeros of its nanoseconds trimmed).
var savedAtRe = regexp.MustCompile(`"savedAt":"([^"]*)"`)

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

// TestReviewJournalCompactionBoundExactly attacks "the commit that would
// grow it past a fifth of the file's size (at least 32 KiB)" compacts: a
// commit that makes the journal exactly the bound is appended, one byte
// more compacts; for a small file (the 32 KiB floor) and a big one (a
// fifth).
func TestReviewJournalCompactionBoundExactly(t *testing.T) {
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

// upgradeKeyFromValue is a schema 1 -> 2 upgrade that moves part of the
// value into the key, as a CNI plugin would move the interface name from
// the value into the key: key "c" with value "eth0" becomes "c/eth0".
func upgradeKeyFromValue(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) {
	var ks, vs string
	if err := json.Unmarshal(k, &ks); err != nil {
		return nil, nil, err
	}
	if err := json.Unmarshal(v, &vs); err != nil {
		return nil, nil, err
	}
	nk, err := json.Marshal(ks + "/" + vs)
	return nk, v, err
}

// TestReviewJournalUpgradeWithAKeyFromTheValue attacks "a binary with a
// newer schema upgrades the lines on replay as it does the file's
// entries": an upgrade whose new key depends on the value, over a journal
// that changed the value of a key the file holds. Upgrading the file that
// a save would have written (the journal folded) and replaying the
// journal over the old file must give the same state: one entry per old
// key, never the old value's entry beside the new one.
func TestReviewJournalUpgradeWithAKeyFromTheValue(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "eth0", "b": "eth0", "c": "eth0"}}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("a", "eth1")}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("b", "eth1"), sdel("b")}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "eth1"), sput("c", "eth2")}))
	require.NoError(t, f.Close())
	// What the old binary holds, upgraded as a folded file would be.
	want := map[string]string{"a/eth1": "eth1", "c/eth2": "eth2"}

	g, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal(), checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, upgradeKeyFromValue))
	require.NoError(t, err)
	defer g.Close()
	s, err := g.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, s.Entries, "replay over the old file is the upgrade of the folded state")
	require.NoError(t, g.Commit(ctx, checkpoint.Meta{}, []strChange{sput("d/eth0", "eth0")}))
	want["d/eth0"] = "eth0"
	require.NoError(t, g.Close())
	h, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal(), checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, upgradeKeyFromValue))
	require.NoError(t, err)
	defer h.Close()
	s, err = h.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, s.Entries, "and its first commit writes that state")
}

// TestReviewJournalErrorsNeverQuoteValues attacks "Errors and logs name
// paths, keys ..., never a value" for the journal: a record whose value
// does not decode, one with a field the type lacks, a damaged record
// before the last and a torn last record, each with a secret in its
// value; neither the error nor the log may hold it.
func TestReviewJournalErrorsNeverQuoteValues(t *testing.T) {
	ctx := context.Background()
	const secret = "s3cr3t-T0KEN"
	dir := t.TempDir()
	path := filepath.Join(dir, "s.json")
	w, err := checkpoint.Open[string, any](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	require.NoError(t, w.Save(ctx, checkpoint.Snapshot[string, any]{Entries: map[string]any{"a": map[string]any{"n": 1}}}))
	require.NoError(t, w.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, any]{{Key: "b", Value: map[string]any{"n": secret}}}))
	require.NoError(t, w.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, any]{{Key: "c", Value: map[string]any{"n": 2, "tok": secret}}}))
	require.NoError(t, w.Close())
	journal, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	require.Contains(t, string(journal), secret)

	type val struct {
		N int `json:"n"`
	}
	check := func(name string, opts ...checkpoint.Option) error {
		t.Helper()
		core, logs := observer.New(zap.DebugLevel)
		r, err := checkpoint.Open[string, val](ctx, path, append(opts, checkpoint.WithJournal(), checkpoint.WithLogger(zap.New(core)))...)
		require.NoError(t, err)
		defer r.Close()
		_, lerr := r.Load(ctx)
		require.Error(t, lerr, name)
		assert.NotContains(t, lerr.Error(), secret, name)
		assert.NotContains(t, fmt.Sprintf("%+v", lerr), secret, name)
		cerr := r.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, val]{{Key: "z", Value: val{}}})
		if cerr != nil {
			assert.NotContains(t, cerr.Error(), secret, name)
		}
		for _, e := range logs.All() {
			assert.NotContains(t, e.Message, secret, name)
			for _, f := range e.Context {
				assert.NotContains(t, fmt.Sprint(f.Interface, f.String), secret, name)
			}
		}
		return lerr
	}
	// b's value is a string where an int is expected; c has a field val lacks.
	err = check("undecodable value")
	assert.True(t, errors.Is(err, checkpoint.ErrBadEntry) || errors.Is(err, checkpoint.ErrNewerSchema), "%v", err)
	err = check("unknown field dropped", checkpoint.WithDropUnknownFields())
	assert.ErrorIs(t, err, checkpoint.ErrBadEntry)

	// Damage the first record's value (corruption) and cut the last in
	// the middle of its secret (torn).
	first := bytes.IndexByte(journal, '\n')
	bad := bytes.Clone(journal)
	at := bytes.Index(bad, []byte(secret))
	require.Less(t, at, first)
	bad[at] ^= 0x20
	cut := bytes.LastIndex(journal, []byte(secret)) + 4
	bad = bad[:cut]
	require.NoError(t, os.WriteFile(path+".journal", bad, 0o600))
	err = check("damaged record")
	assert.ErrorIs(t, err, checkpoint.ErrCorrupt)

	// Only the torn tail: Load succeeds, and the torn record's report and
	// log hold no value.
	require.NoError(t, os.WriteFile(path+".journal", journal[:cut], 0o600))
	core, logs := observer.New(zap.DebugLevel)
	r, err := checkpoint.Open[string, any](ctx, path, checkpoint.WithJournal(), checkpoint.WithLogger(zap.New(core)))
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Load(ctx)
	require.NoError(t, err)
	require.NotNil(t, r.Journal().Torn)
	assert.NotContains(t, r.Journal().Torn.Error(), secret)
	assert.NotContains(t, r.Journal().Torn.Reason, "s3cr")
	require.Positive(t, logs.Len())
	for _, e := range logs.All() {
		assert.NotContains(t, e.Message, "s3cr")
		for _, f := range e.Context {
			assert.NotContains(t, fmt.Sprint(f.Interface, f.String), "s3cr")
		}
	}
}

// TestReviewJournalTrickyStrings attacks the record's parsing ("a raw
// ,"changes":[ cannot occur inside a JSON string", splitOps' tracking of
// strings): keys, values, phase and writer that hold the record's own
// delimiters, escapes, newlines and non-ASCII, and an empty commit.
func TestReviewJournalTrickyStrings(t *testing.T) {
	ctx := context.Background()
	tricky := []string{
		"", `,"changes":[`, `"},{"delete":{"key":"x","value":"y"}}`, `\`, `\\"`, `]`, `}]`, "[{", "line\nbreak",
		"\u2028\u2029", "é€😀", "\x00\x1f", `,"crc32c":"00000000"}`, "\n",
	}
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"base": "b", tricky[2]: "old"}}))
	want := map[string]string{"base": "b", tricky[2]: "old"}
	for i, s := range tricky {
		changes := []strChange{sput(s, tricky[(i+1)%len(tricky)]), sput("v"+s, s)}
		if i%3 == 2 {
			changes = append(changes, sdel(tricky[i-1]))
		}
		require.NoError(t, f.Commit(ctx, checkpoint.Meta{Phase: s, Writer: s}, changes), "commit %d", i)
		applyChanges(want, changes)
	}
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{Phase: "empty"}, nil), "a commit with no changes")
	require.Equal(t, len(tricky)+1, f.Journal().Records, "all went to the journal")
	require.NoError(t, f.Close())

	g, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer g.Close()
	s, err := g.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, s.Entries)
	assert.Nil(t, g.Journal().Torn)
	assert.Equal(t, len(tricky)+1, g.Journal().Records)
	assert.Equal(t, "empty", s.Meta.Phase, "the empty commit's Meta is the last")
	assert.Equal(t, uint64(len(tricky)+2), s.Meta.Seq)
}

// TestReviewJournalLoadMeta attacks "Load's Meta is the last line's
// (Phase, Writer, BootID, Seq, SavedAt), with the file's Format and
// Schema", including under an upgrade (Schema stays the file's, as the
// Caveats say), and JournalStatus's counters across a compaction.
func TestReviewJournalLoadMeta(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	boot := func(id string) checkpoint.Option {
		return checkpoint.WithBootID(func() (string, error) { return id, nil })
	}
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal(), boot("boot-1"))
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Meta: checkpoint.Meta{Phase: "expand", Writer: "w1"}, Entries: map[string]string{"a": "eth0"}}))
	saved := loadPath2(t, path)
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{Phase: "migrate", Writer: "w2"}, []strChange{sput("b", "eth0")}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{Phase: "contract", Writer: "w3", BootID: "caller-boot"}, []strChange{sput("c", "eth0")}))
	st := f.Journal()
	assert.True(t, st.Enabled)
	assert.Equal(t, 2, st.Records)
	fi, err := os.Stat(path + ".journal")
	require.NoError(t, err)
	assert.Equal(t, fi.Size(), st.Bytes, "Bytes is the journal's size as written")
	ffi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, ffi.Size(), st.FileSize)
	assert.Equal(t, ffi.Size()+fi.Size(), f.Size(), "Size counts the file and its journal")
	require.NoError(t, f.Close())

	for _, tc := range []struct {
		name   string
		opts   []checkpoint.Option
		schema int
	}{
		{"same schema", []checkpoint.Option{checkpoint.WithJournal(), boot("boot-2")}, 1},
		{"upgrade", []checkpoint.Option{checkpoint.WithJournal(), boot("boot-2"), checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, upgradeKeyFromValue)}, 1},
		{"without the option", []checkpoint.Option{boot("boot-2")}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := checkpoint.Open[string, string](ctx, path, tc.opts...)
			require.NoError(t, err)
			defer g.Close()
			s, err := g.Load(ctx)
			require.NoError(t, err)
			m := s.Meta
			assert.Equal(t, "contract", m.Phase)
			assert.Equal(t, "w3", m.Writer)
			assert.Equal(t, "caller-boot", m.BootID, "the BootID the last commit gave")
			assert.Equal(t, saved.Seq+2, m.Seq)
			assert.Equal(t, 2, m.Format, "the file's format")
			assert.Equal(t, tc.schema, m.Schema, "the file's schema")
			assert.True(t, m.SavedAt.After(saved.SavedAt) || m.SavedAt.Equal(saved.SavedAt))
			assert.NotEqual(t, saved.SavedAt, time.Time{})
			assert.Equal(t, 2, g.Journal().Records)
		})
	}
	// The second Meta's commit had no BootID: the File's own.
	g, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal(), boot("boot-3"))
	require.NoError(t, err)
	defer g.Close()
	_, err = g.Load(ctx)
	require.NoError(t, err)
	require.NoError(t, g.Commit(ctx, checkpoint.Meta{Phase: "contract"}, []strChange{sdel("a")}))
	require.NoError(t, g.Save(ctx, checkpoint.Snapshot[string, string]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: map[string]string{"z": "1"}}))
	st = g.Journal()
	assert.Zero(t, st.Records, "a save leaves no records")
	assert.Zero(t, st.Bytes)
	require.NoError(t, g.Commit(ctx, checkpoint.Meta{Phase: "contract"}, []strChange{sput("y", "2")}))
	s, err := g.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, "boot-3", s.Meta.BootID, "a commit without a BootID records the File's")
}

// loadPath2 reads path's header with a plain Open/Load (no journal).
func loadPath2(t *testing.T, path string) checkpoint.Meta {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	m := checkpoint.NewMemory[string, string]()
	checkpointtest.SetBytes(m, data)
	s, err := m.Load(context.Background())
	require.NoError(t, err)
	return s.Meta
}

// TestReviewJournalChangedUnderAnOpenFile attacks "that the journal is as
// long as this File left it (if not, the commit writes the whole file
// instead)": the journal cut short or removed by hand under an open File.
// The commit succeeds and what the File acknowledged, all of it, is on
// disk after.
func TestReviewJournalChangedUnderAnOpenFile(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		do   func(t *testing.T, journal string)
	}{
		{"cut", func(t *testing.T, journal string) {
			data, err := os.ReadFile(journal)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(journal, data[:bytes.IndexByte(data, '\n')+1], 0o600))
		}},
		{"removed", func(t *testing.T, journal string) { require.NoError(t, os.Remove(journal)) }},
		{"emptied", func(t *testing.T, journal string) { require.NoError(t, os.WriteFile(journal, nil, 0o600)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "s.json")
			f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
			require.NoError(t, err)
			defer f.Close()
			require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("b", "2")}))
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "3")}))
			tc.do(t, path+".journal")
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("d", "4")}))
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sdel("a")}))
			require.NoError(t, f.Close())
			g, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
			require.NoError(t, err)
			defer g.Close()
			s, err := g.Load(ctx)
			require.NoError(t, err)
			assert.Equal(t, map[string]string{"b": "2", "c": "3", "d": "4"}, s.Entries, "every acknowledged commit")
			assert.Equal(t, uint64(5), s.Meta.Seq)
		})
	}
}

// TestReviewJournalQuarantineTogether attacks "Quarantine moves the file
// and the journal aside together (path+".corrupt-<time>" and the same
// name + ".journal")" on a real file with a corrupt journal, and checks
// that the kept pair loads as it was.
func TestReviewJournalQuarantineTogether(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("b", "2")}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "3")}))
	file, err := os.ReadFile(path)
	require.NoError(t, err)
	j, err := os.ReadFile(path + ".journal")
	require.NoError(t, err)
	bad := bytes.Clone(j)
	bad[5] ^= 1 // the first of two records
	require.NoError(t, os.WriteFile(path+".journal", bad, 0o600))
	_, err = f.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	require.ErrorIs(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("d", "4")}), checkpoint.ErrUnreadable)
	assert.Equal(t, bad, mustRead(t, path+".journal"), "a refused commit leaves the journal alone")

	dst, err := f.Quarantine(ctx)
	require.NoError(t, err)
	assert.Equal(t, file, mustRead(t, dst))
	assert.Equal(t, bad, mustRead(t, dst+".journal"), "the journal beside its file, under the same name")
	assert.NoFileExists(t, path)
	assert.NoFileExists(t, path+".journal")
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("d", "4")}))
	s, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"d": "4"}, s.Entries)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

// TestReviewJournalEmptyWithoutFile attacks "a journal whose file is
// missing is corruption" at its edge: an empty journal without its file
// holds no records, so Load reports no checkpoint, and the next commit
// starts afresh and removes it.
func TestReviewJournalEmptyWithoutFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, os.WriteFile(path+".journal", nil, 0o600))
	_, err = f.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNotExist)
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("a", "1")}))
	assert.NoFileExists(t, path+".journal", "the empty journal was removed by the first save")
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("b", "2")}))
	s, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"a": "1", "b": "2"}, s.Entries)
	assert.Equal(t, 1, f.Journal().Records)
}

// TestReviewJournalMemoryFileParityOnDamage attacks "Memory keeps a
// journal as File does" where they could differ: the same torn tail gives
// the same report, and a journal left alone without its file is corrupt
// on both and quarantined by both.
func TestReviewJournalMemoryFileParityOnDamage(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer f.Close()
	m := checkpointtest.NewMemory[string, string](t, checkpoint.WithJournal())
	start := checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}
	require.NoError(t, f.Save(ctx, start))
	require.NoError(t, m.Save(ctx, start))
	// The same bytes on both, so that the records are identical.
	checkpointtest.SetBytes(m, mustRead(t, path))
	_, err = m.Load(ctx)
	require.NoError(t, err)
	for _, c := range []strChange{sput("b", "2"), sput("c", "3")} {
		require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{c}))
	}
	j := mustRead(t, path+".journal")
	torn := j[:len(j)-7]
	require.NoError(t, os.WriteFile(path+".journal", torn, 0o600))
	checkpointtest.SetJournal(m, torn)
	fs, ferr := f.Load(ctx)
	ms, merr := m.Load(ctx)
	require.NoError(t, ferr)
	require.NoError(t, merr)
	assert.Equal(t, fs.Entries, ms.Entries)
	assert.Equal(t, map[string]string{"a": "1", "b": "2"}, ms.Entries)
	require.NotNil(t, f.Journal().Torn)
	require.NotNil(t, m.Journal().Torn)
	assert.Equal(t, f.Journal().Torn.Offset, m.Journal().Torn.Offset)
	assert.Equal(t, f.Journal().Torn.Bytes, m.Journal().Torn.Bytes)
	assert.Equal(t, f.Journal().Torn.Reason, m.Journal().Torn.Reason)
	assert.Equal(t, f.Journal().Records, m.Journal().Records)

	// The journal without its file.
	require.NoError(t, os.Remove(path))
	checkpointtest.Remove(m)
	require.NotNil(t, checkpointtest.Journal(m), "Remove takes the file alone")
	_, ferr = f.Load(ctx)
	_, merr = m.Load(ctx)
	assert.ErrorIs(t, ferr, checkpoint.ErrCorrupt)
	assert.ErrorIs(t, merr, checkpoint.ErrCorrupt)
	_, ferr = f.Quarantine(ctx)
	_, merr = m.Quarantine(ctx)
	require.NoError(t, ferr)
	require.NoError(t, merr)
	assert.Nil(t, checkpointtest.Journal(m))
	assert.NoFileExists(t, path+".journal")
	_, ferr = f.Load(ctx)
	_, merr = m.Load(ctx)
	assert.ErrorIs(t, ferr, checkpoint.ErrNotExist)
	assert.ErrorIs(t, merr, checkpoint.ErrNotExist)
}

// TestReviewJournalFileReplacedUnderTheDaemon attacks "it checks ... that
// the checkpoint the journal follows is still at its path" (Durable
// appends): an operator copies .prev over the checkpoint by hand,
// bypassing the lock, while a WithJournal File has it open and appends.
// An acknowledged commit must not be appended to a journal that no longer
// follows the file at the path: the restart would find the checkpoint
// corrupt and serve none of them.
func TestReviewJournalFileReplacedUnderTheDaemon(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.json")
	f, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1", "b": "2"}}))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("c", "3")}))
	// cp state.json.prev state.json (a copy: a new inode, an older seq).
	require.NoError(t, os.WriteFile(path+".tmp-by-hand", mustRead(t, path+".prev"), 0o600))
	require.NoError(t, os.Rename(path+".tmp-by-hand", path))
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("d", "4")}))
	require.NoError(t, f.Close())

	g, err := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	require.NoError(t, err)
	defer g.Close()
	s, err := g.Load(ctx)
	require.NoError(t, err, "an acknowledged commit left the checkpoint unreadable")
	assert.Equal(t, map[string]string{"a": "1", "b": "2", "c": "3", "d": "4"}, s.Entries)
}

// TestReviewJournalConcurrentCommits attacks "Commits run one at a time,
// so a crash or power cut leaves at most the last line incomplete":
// commits from many goroutines, with compactions among them, replay to
// exactly what was acknowledged, with no damaged line.
func TestReviewJournalConcurrentCommits(t *testing.T) {
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

// TestReviewJournalFileMode attacks "The checkpoint, its .prev copy, its
// journal and the lock file are created 0600 (see WithFileMode)": the
// journal gets the file's mode, the default and a chosen one, whatever
// the umask lets through.
func TestReviewJournalFileMode(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []os.FileMode{0o600, 0o640} {
		path := filepath.Join(t.TempDir(), "s.json")
		opts := []checkpoint.Option{checkpoint.WithJournal()}
		if mode != 0o600 {
			opts = append(opts, checkpoint.WithFileMode(mode))
		}
		f, err := checkpoint.Open[string, string](ctx, path, opts...)
		require.NoError(t, err)
		require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"a": "1"}}))
		require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []strChange{sput("b", "2")}))
		require.NoError(t, f.Close())
		for _, name := range []string{path, path + ".journal"} {
			fi, err := os.Stat(name)
			require.NoError(t, err)
			assert.Equal(t, mode, fi.Mode().Perm(), name)
		}
	}
}

// TestReviewJournalFailedCompaction attacks "Compaction never replays a
// commit twice or loses one" when the compacting save fails: the commit
// that triggered it is reported failed and not served, every earlier one
// is, and the next commit writes the whole state.
func TestReviewJournalFailedCompaction(t *testing.T) {
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
