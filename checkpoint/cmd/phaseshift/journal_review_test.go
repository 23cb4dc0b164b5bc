package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// Adversarial tests of the command's claims about journaled checkpoints
// (README "For the operator", the verbs' --help).

func keyJSON(t *testing.T, kk key) string {
	t.Helper()
	b, err := json.Marshal(kk)
	require.NoError(t, err)
	return string(b)
}

// TestReviewDeleteJournaledWhileLocked attacks "The repairs take the
// checkpoint's lock (... failing with exit 7 and the holder's PID)" on a
// journaled checkpoint whose daemon (WithJournal) is running: nothing may
// change, neither the file nor its journal, and no copy is quarantined;
// and the daemon's next commit still appends to a journal it can replay.
func TestReviewDeleteJournaledWhileLocked(t *testing.T) {
	ctx := context.Background()
	path := journaled(t, t.TempDir())
	daemon, err := checkpoint.Open[key, value](ctx, path, append(checkpointtest.Schema(schema), checkpoint.WithJournal())...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = daemon.Close() })
	_, err = daemon.Load(ctx)
	require.NoError(t, err)
	file, journal := readBytes(t, path), readBytes(t, path+".journal")

	r := run(t, "delete", "--lock-wait", "100ms", path, keyJSON(t, k(3)))
	assert.Equal(t, 7, r.code, r.stderr)
	assert.Contains(t, r.stderr, fmt.Sprintf("held by PID %d", os.Getpid()))
	assert.Equal(t, file, readBytes(t, path), "the file is untouched")
	assert.Equal(t, journal, readBytes(t, path+".journal"), "the journal is untouched")
	assert.Empty(t, quarantined(t, path))

	require.NoError(t, daemon.Commit(ctx, checkpoint.Meta{Phase: "contract"}, []checkpoint.Change[key, value]{{Key: k(9), Value: v(9)}}))
	assert.Equal(t, 3, daemon.Journal().Records, "the daemon still appends")
	require.NoError(t, daemon.Close())
	want := journalState()
	want[k(9)] = v(9)
	assert.Equal(t, want, mustLoadJournaled(t, path).Entries)
}

// mustLoadJournaled reads path as a daemon WithJournal would.
func mustLoadJournaled(t *testing.T, path string) checkpoint.Snapshot[key, value] {
	t.Helper()
	f, err := checkpoint.Open[key, value](context.Background(), path, append(checkpointtest.Schema(schema), checkpoint.WithJournal())...)
	require.NoError(t, err)
	defer f.Close()
	s, err := f.Load(context.Background())
	require.NoError(t, err)
	return s
}

// TestReviewDeleteKeysOfTheJournal attacks "every verb reads the file with
// its journal replayed" and "give it a seq above every seq they saw" for
// delete: a key that only a journal record put is found and deleted; a
// key a journal record deleted is "no such key" (exit 1), changing
// nothing; the new file's seq is above the journal's last.
func TestReviewDeleteKeysOfTheJournal(t *testing.T) {
	path := journaled(t, t.TempDir())
	file, journal := readBytes(t, path), readBytes(t, path+".journal")

	r := run(t, "delete", path, keyJSON(t, k(0))) // deleted by the journal
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Equal(t, file, readBytes(t, path))
	assert.Equal(t, journal, readBytes(t, path+".journal"))
	assert.Empty(t, quarantined(t, path))

	r = run(t, "inspect", "--json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var before struct {
		Journal struct {
			Seq uint64 `json:"seq"`
		} `json:"journal"`
	}
	decodeJSON(t, r.stdout, &before)
	require.NotZero(t, before.Journal.Seq)

	r = run(t, "get", path, keyJSON(t, k(3))) // put by the journal only
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, v(3).Token, "get finds a key only the journal put")
	r = run(t, "get", path, keyJSON(t, k(0)))
	assert.Equal(t, 1, r.code, "get: a key the journal deleted is not there")

	r = run(t, "delete", path, keyJSON(t, k(3)))
	require.Equal(t, 0, r.code, r.stderr)
	want := journalState()
	delete(want, k(3))
	s := mustLoadJournaled(t, path)
	assert.Equal(t, want, s.Entries)
	assert.Greater(t, s.Meta.Seq, before.Journal.Seq, "the repaired file's seq is above the journal's")
	assert.NoFileExists(t, path+".journal")

	// The old journal put back (a removal lost to a crash) is stale, not
	// replayed over the repair.
	require.NoError(t, os.WriteFile(path+".journal", journal, 0o600))
	assert.Equal(t, want, mustLoadJournaled(t, path).Entries)
	r = run(t, "list", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, want, lines(t, r.stdout))
}

// TestReviewDiffJournaledAndPrev attacks "every verb reads the file with
// its journal replayed" for diff: A is a journaled file, B its .prev (the
// file before the last save, without the journal's commits); and a
// quarantined copy is read with its own journal.
func TestReviewDiffJournaledAndPrev(t *testing.T) {
	prevState := entries(2)                                       // c0, c1
	path := journaled(t, t.TempDir(), prevState, entries(3))      // file c0..c2, journal: +c3, -c0
	r := run(t, "diff", "--json", "--values", path, path+".prev") // A: c1..c3; B: c0, c1
	require.Equal(t, 1, r.code, r.stderr)
	var out diffOut
	decodeJSON(t, r.stdout, &out)
	var onlyA, onlyB []key
	for _, e := range out.OnlyInA {
		onlyA = append(onlyA, e.Key)
	}
	for _, e := range out.OnlyInB {
		onlyB = append(onlyB, e.Key)
	}
	assert.ElementsMatch(t, []key{k(2), k(3)}, onlyA, "c3 comes from the journal")
	assert.ElementsMatch(t, []key{k(0)}, onlyB, "c0 was deleted by the journal")
	assert.Empty(t, out.Different)

	r = run(t, "diff", path, path)
	assert.Equal(t, 0, r.code, r.stderr)

	// delete keeps the replaced file with its journal; diff reads the copy
	// with it, so the copy differs from the repair by the deleted key only.
	r = run(t, "delete", path, keyJSON(t, k(1)))
	require.Equal(t, 0, r.code, r.stderr)
	kept := quarantined(t, path)
	var copyPath string
	for _, q := range kept {
		if !bytes.HasSuffix([]byte(q), []byte(".journal")) {
			copyPath = q
		}
	}
	require.NotEmpty(t, copyPath)
	r = run(t, "diff", "--json", path, copyPath)
	require.Equal(t, 1, r.code, r.stderr)
	out = diffOut{}
	decodeJSON(t, r.stdout, &out)
	assert.Empty(t, out.OnlyInA)
	require.Len(t, out.OnlyInB, 1)
	assert.Equal(t, k(1), out.OnlyInB[0].Key)
	assert.Empty(t, out.Different)
}

// TestReviewJournalValuesNeverInStderr attacks "Errors ... never show a
// value" with journals whose records hold secrets: a damaged record
// before the last (corrupt), and a torn last record; every verb's stderr
// (checked by run) and inspect's stdout must not show them.
func TestReviewJournalValuesNeverInStderr(t *testing.T) {
	path := journaled(t, t.TempDir())
	journal := readBytes(t, path+".journal")
	require.Contains(t, string(journal), secret)
	damaged := bytes.Clone(journal)
	at := bytes.Index(damaged, []byte(secret))
	require.Less(t, at, bytes.IndexByte(damaged, '\n'), "the secret is in the first record")
	damaged[at+1] ^= 0x01
	require.NoError(t, os.WriteFile(path+".journal", damaged, 0o600))
	for _, args := range [][]string{
		{"verify", path}, {"inspect", path}, {"inspect", "--json", path}, {"list", path},
		{"get", path, keyJSON(t, k(3))}, {"delete", path, keyJSON(t, k(1))}, {"diff", path, path},
		{"reseal", "--i-edited-this-file-by-hand", path},
	} {
		r := run(t, args...)
		assert.NotEqual(t, 0, r.code, "%v: a damaged journal is not intact", args)
		assert.Contains(t, r.stderr+r.stdout, "journal", "%v names the journal", args)
		if args[0] == "inspect" || args[0] == "verify" {
			assert.NotContains(t, r.stdout, secret, "%v", args)
		}
	}
	assert.Empty(t, quarantined(t, path), "no repair ran on a damaged journal")

	// Torn: the last record cut in the middle of its value.
	last := bytes.LastIndex(journal, []byte(secret))
	require.Greater(t, last, bytes.IndexByte(journal, '\n'))
	require.NoError(t, os.WriteFile(path+".journal", journal[:last+len(secret)-2], 0o600))
	for _, args := range [][]string{{"verify", path}, {"inspect", path}, {"inspect", "--json", path}} {
		r := run(t, args...)
		assert.Equal(t, 0, r.code, "%v: a torn tail is discarded: %s", args, r.stderr)
		assert.NotContains(t, r.stdout, "tok-sec", "%v", args)
		assert.NotContains(t, r.stderr, "tok-sec", "%v", args)
	}
}

// TestReviewResealSeqAboveTheJournal attacks "a seq above both PATH's and
// PATH.prev's" (and the README's "above every seq they saw") for reseal
// over a journal: the resealed file's seq must be above the journal's
// last record, or a daemon would see its seq go back.
func TestReviewResealSeqAboveTheJournal(t *testing.T) {
	path := journaled(t, t.TempDir())
	before := mustLoadJournaled(t, path).Meta.Seq
	edit(t, path, `"ip":"10.0.0.2"`, `"ip":"10.0.0.99"`)
	r := run(t, "reseal", "--i-edited-this-file-by-hand", path)
	require.Equal(t, 0, r.code, r.stderr)
	s := mustLoadJournaled(t, path)
	assert.Greater(t, s.Meta.Seq, before, "the resealed seq is above the journal's last")
	assert.Equal(t, "ipamd v1.9.0", s.Meta.Writer, "the last record's writer")
}

// TestReviewDeleteOverATornJournal attacks "delete ... fold[s] the journal
// into the file" when the journal ends with a torn record: the torn bytes
// are not folded (they were never acknowledged), the repair loads without
// a torn report, and the torn journal is kept with the copy.
func TestReviewDeleteOverATornJournal(t *testing.T) {
	path := journaled(t, t.TempDir())
	j := readBytes(t, path+".journal")
	torn := j[:len(j)-9] // the delete of c0 cut short: c0 is still there
	require.NoError(t, os.WriteFile(path+".journal", torn, 0o600))
	want := journalState()
	want[k(0)] = v(0)
	r := run(t, "list", path)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, want, lines(t, r.stdout))

	r = run(t, "delete", path, keyJSON(t, k(1)))
	require.Equal(t, 0, r.code, r.stderr)
	delete(want, k(1))
	ctx := context.Background()
	f, err := checkpoint.Open[key, value](ctx, path, append(checkpointtest.Schema(schema), checkpoint.WithJournal())...)
	require.NoError(t, err)
	defer f.Close()
	s, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, s.Entries)
	assert.Nil(t, f.Journal().Torn, "the torn bytes are gone")
	assert.NoFileExists(t, path+".journal")
	var kept []byte
	for _, q := range quarantined(t, path) {
		if bytes.HasSuffix([]byte(q), []byte(".journal")) {
			kept = readBytes(t, q)
		}
	}
	assert.Equal(t, torn, kept, "the torn journal is kept with the copy")
}
