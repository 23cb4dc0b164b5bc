package checkpoint_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What Load replays from a journal: the documented claims of WithJournal
// (doc.go, "The journal"; journal.go) attacked one by one.

type strChange = checkpoint.Change[string, string]

func sput(k, v string) strChange { return strChange{Key: k, Value: v} }

func sdel(k string) strChange { return strChange{Key: k, Delete: true} }

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

// TestJournalPutAndDeleteOfOneKeyInOneCommit attacks "Load replays
// the journal over the file" and "serves exactly what was committed" with
// commits that change and delete the same key in one Commit, on File and
// Memory, and checks both hold the same journal bytes' effect (parity).
func TestJournalPutAndDeleteOfOneKeyInOneCommit(t *testing.T) {
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

// TestJournalCommitAfterStaleLoad attacks "Lines whose base is below
// the file's Seq ... are skipped" and "compacted ... after a Load that
// found anything but whole records that follow the file": a save whose
// journal removal was lost (the old journal came back), then a Load, a
// Commit, and a restart. No stale record may be replayed, the commit must
// survive, and the stale records must be gone.
func TestJournalCommitAfterStaleLoad(t *testing.T) {
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

// TestJournalUpgradeWithAKeyFromTheValue attacks "a binary with a
// newer schema upgrades the lines on replay as it does the file's
// entries": an upgrade whose new key depends on the value, over a journal
// that changed the value of a key the file holds. Upgrading the file that
// a save would have written (the journal folded) and replaying the
// journal over the old file must give the same state: one entry per old
// key, never the old value's entry beside the new one.
func TestJournalUpgradeWithAKeyFromTheValue(t *testing.T) {
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

// TestJournalTrickyStrings attacks the record's parsing ("a raw
// ,"changes":[ cannot occur inside a JSON string", splitOps' tracking of
// strings): keys, values, phase and writer that hold the record's own
// delimiters, escapes, newlines and non-ASCII, and an empty commit.
func TestJournalTrickyStrings(t *testing.T) {
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

// TestJournalLoadMeta attacks "Load's Meta is the last line's
// (Phase, Writer, BootID, Seq, SavedAt), with the file's Format and
// Schema", including under an upgrade (Schema stays the file's, as the
// Caveats say), and JournalStatus's counters across a compaction.
func TestJournalLoadMeta(t *testing.T) {
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

// TestJournalMemoryFileParityOnDamage attacks "Memory keeps a
// journal as File does" where they could differ: the same torn tail gives
// the same report, and a journal left alone without its file is corrupt
// on both and quarantined by both.
func TestJournalMemoryFileParityOnDamage(t *testing.T) {
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
