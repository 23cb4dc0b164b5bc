package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

const k2 = `{"network":"aws-cni","containerID":"c2","ifName":"eth0"}`

// keyJSON is kk as the command takes a key.
func keyJSON(t *testing.T, kk key) string {
	t.Helper()
	b, err := json.Marshal(kk)
	require.NoError(t, err)
	return string(b)
}

// delete removes the entry durably: the daemon's Load no longer finds it,
// every other entry and the header's phase, writer and boot ID are as they
// were, .prev and a quarantined copy hold the file it replaced.
func TestDelete(t *testing.T) {
	path := save(t, t.TempDir(), entries(3), entries(4))
	before := readBytes(t, path)

	r := run(t, "delete", "--json", path, k2)
	require.Equal(t, 0, r.code, r.stderr)
	var out repairOut
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, "delete", out.Action)
	assert.Equal(t, k(2), out.Key)
	assert.Equal(t, uint64(3), out.Header.Seq)
	assert.Equal(t, 3, out.Entries)

	got := mustLoad(t, path)
	want := entries(4)
	delete(want, k(2))
	assert.Equal(t, want, got.Entries)
	assert.Equal(t, uint64(3), got.Meta.Seq)
	assert.Equal(t, schema, got.Meta.Schema)
	assert.Equal(t, "migrate", got.Meta.Phase)
	assert.Equal(t, "ipamd v1.8.0", got.Meta.Writer)
	assert.Equal(t, "boot-1", got.Meta.BootID)

	assert.Equal(t, before, readBytes(t, path+".prev"), ".prev is the file replaced")
	require.Equal(t, []string{out.Kept}, kept(t, path))
	assert.Equal(t, before, readBytes(t, out.Kept), "the quarantined copy is the file replaced")

	r = run(t, "delete", path, k2)
	assert.Equal(t, 1, r.code, "a second delete finds nothing")
	assert.Contains(t, r.stderr, "no entry with key")
	assert.Len(t, kept(t, path), 1, "nothing changed, nothing kept")
}

func TestDeleteText(t *testing.T) {
	path := save(t, t.TempDir(), entries(3))
	r := run(t, "delete", path, `{"containerID":"c2","network":"aws-cni","ifName":"eth0"}`)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "deleted the entry of key "+k2+" from "+path+" (now seq 2, 2 entries)")
	assert.Contains(t, r.stdout, "the file it replaced (intact) is kept as "+path+".before-delete-")
}

// A daemon holding the lock: delete waits --lock-wait, fails with exit 7
// naming the holder, and changes nothing; once the daemon is gone it works.
func TestDeleteLocked(t *testing.T) {
	path := save(t, t.TempDir(), entries(3))
	before := readBytes(t, path)
	daemon := holdLock(t, path)

	r := run(t, "delete", "--lock-wait", "100ms", path, k2)
	assert.Equal(t, 7, r.code)
	assert.Contains(t, r.stderr, fmt.Sprintf("held by PID %d", os.Getpid()))
	assert.Contains(t, r.stderr, "Stop it first")
	assert.Contains(t, r.stderr, "--lock-wait")
	assert.Equal(t, before, readBytes(t, path))
	assert.Empty(t, kept(t, path))

	// It waits, saying for whom: the daemon exits once delete says it is
	// waiting.
	cmd := exec.Command(command(t), "delete", "--lock-wait", "20s", path, k2)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stderr).ReadString('\n')
	require.NoError(t, err)
	assert.Contains(t, line, fmt.Sprintf("held by PID %d", os.Getpid()))
	assert.Contains(t, line, "waiting up to 20s")
	require.NoError(t, daemon.Close())
	_, _ = io.Copy(io.Discard, stderr)
	require.NoError(t, cmd.Wait(), "delete takes the lock once the daemon is gone")
	assert.NotContains(t, mustLoad(t, path).Entries, k(2))
}

// delete works on an intact file only, and on a path that exists; a bad
// key is a usage error.
func TestDeleteNeedsIntactFileAndExistingPath(t *testing.T) {
	path := save(t, t.TempDir(), entries(3))
	edit(t, path, "10.0.0.1", "10.0.0.8")
	before := readBytes(t, path)
	r := run(t, "delete", path, k2)
	assert.Equal(t, 4, r.code)
	assert.Contains(t, r.stderr, "reseal")
	assert.Equal(t, before, readBytes(t, path))
	assert.Empty(t, kept(t, path))

	missingDir := filepath.Join(t.TempDir(), "gone", "state.json")
	r = run(t, "delete", missingDir, k2)
	assert.Equal(t, 3, r.code)
	assert.NoDirExists(t, filepath.Dir(missingDir), "a repair of nothing creates nothing")

	r = run(t, "delete", filepath.Join(t.TempDir(), "state.json"), k2)
	assert.Equal(t, 3, r.code)

	r = run(t, "delete", path, `{"containerID":`)
	assert.Equal(t, 2, r.code)
}

// A repair whose write fails exits 8, says which step, and leaves the file
// as it was. (Here .prev is a directory, so the save cannot keep the
// replaced file as .prev; root ignores permissions, which rules them out.)
func TestRepairFailureExits8(t *testing.T) {
	path := save(t, t.TempDir(), entries(3))
	before := readBytes(t, path)
	require.NoError(t, os.MkdirAll(filepath.Join(path+".prev", "x"), 0o700))

	r := run(t, "delete", path, k2)
	assert.Equal(t, 8, r.code, r.stdout)
	assert.Contains(t, r.stderr, "deleting the entry, the file is unchanged")
	assert.Contains(t, r.stderr, "keep previous")
	assert.Equal(t, before, readBytes(t, path))
	assert.Equal(t, entries(3), mustLoad(t, path).Entries)
}

// A kept copy whose journal ends in a torn record (a commit a crash cut
// short) is listed with that record named as torn.
func TestKeptCopyWithATornJournal(t *testing.T) {
	path := journaled(t, t.TempDir())
	f, err := os.OpenFile(path+".journal", os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"journal":1,"base":1,"seq":4,"sch`)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	r := run(t, "delete", path, keyJSON(t, k(1)))
	require.Equal(t, 0, r.code, r.stderr)
	r = run(t, "inspect", path)
	assert.Contains(t, r.stdout, "with its journal (3 records, the last torn)")
}

func TestDeleteFoldsTheJournal(t *testing.T) {
	path := journaled(t, t.TempDir())

	r := run(t, "delete", path, `{"network":"aws-cni","containerID":"c1","ifName":"eth0"}`)
	require.Equal(t, 0, r.code, r.stderr)
	want := journalState()
	delete(want, k(1))
	assert.Equal(t, want, mustLoad(t, path).Entries)
	assert.NoFileExists(t, path+".journal", "the journal is folded into the file")

	kept := kept(t, path)
	require.Len(t, kept, 2, "the replaced file and its journal")
	assert.FileExists(t, kept[0]+".journal")
	r = run(t, "inspect", path)
	assert.Contains(t, r.stdout, "with its journal (2 records)", "inspect reads a kept copy with its journal")
	assert.Contains(t, r.stdout, "kept copies: 1")
	assert.Contains(t, r.stdout, "; kept before delete at ")

	// The daemon goes on with its journal over the repaired file.
	ctx := context.Background()
	f, err := checkpoint.Open[key, value](ctx, path, append(checkpointtest.Schema(schema), checkpoint.WithJournal())...)
	require.NoError(t, err)
	defer f.Close()
	s, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, s.Entries)
	assert.Equal(t, "contract", s.Meta.Phase, "the repair keeps the phase of the last commit")
}

// TestDeleteJournaledWhileLocked attacks "The repairs take the
// checkpoint's lock (... failing with exit 7 and the holder's PID)" on a
// journaled checkpoint whose daemon (WithJournal) is running: nothing may
// change, neither the file nor its journal, and no copy is quarantined;
// and the daemon's next commit still appends to a journal it can replay.
func TestDeleteJournaledWhileLocked(t *testing.T) {
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
	assert.Empty(t, kept(t, path))

	require.NoError(t, daemon.Commit(ctx, checkpoint.Meta{Phase: "contract"}, []checkpoint.Change[key, value]{{Key: k(9), Value: v(9)}}))
	assert.Equal(t, 3, daemon.Journal().Records, "the daemon still appends")
	require.NoError(t, daemon.Close())
	want := journalState()
	want[k(9)] = v(9)
	assert.Equal(t, want, mustLoadJournaled(t, path).Entries)
}

// TestDeleteKeysOfTheJournal attacks "every verb reads the file with
// its journal replayed" and "give it a seq above every seq they saw" for
// delete: a key that only a journal record put is found and deleted; a
// key a journal record deleted is "no such key" (exit 1), changing
// nothing; the new file's seq is above the journal's last.
func TestDeleteKeysOfTheJournal(t *testing.T) {
	path := journaled(t, t.TempDir())
	file, journal := readBytes(t, path), readBytes(t, path+".journal")

	r := run(t, "delete", path, keyJSON(t, k(0))) // deleted by the journal
	assert.Equal(t, 1, r.code, r.stderr)
	assert.Equal(t, file, readBytes(t, path))
	assert.Equal(t, journal, readBytes(t, path+".journal"))
	assert.Empty(t, kept(t, path))

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

// TestDeleteOverATornJournal attacks "delete ... fold[s] the journal
// into the file" when the journal ends with a torn record: the torn bytes
// are not folded (they were never acknowledged), the repair loads without
// a torn report, and the torn journal is kept with the copy.
func TestDeleteOverATornJournal(t *testing.T) {
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
	var keptJournal []byte
	for _, q := range kept(t, path) {
		if bytes.HasSuffix([]byte(q), []byte(".journal")) {
			keptJournal = readBytes(t, q)
		}
	}
	assert.Equal(t, torn, keptJournal, "the torn journal is kept with the copy")
}
