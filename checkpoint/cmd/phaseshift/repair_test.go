package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
)

const k2 = `{"network":"aws-cni","containerID":"c2","ifName":"eth0"}`

// repairOut is a repair's --json output.
type repairOut struct {
	Path, Action, From, Replaced, Kept string
	Key                                key
	Header                             struct{ Seq uint64 }
	Entries                            int
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
	require.Equal(t, []string{out.Kept}, quarantined(t, path))
	assert.Equal(t, before, readBytes(t, out.Kept), "the quarantined copy is the file replaced")

	r = run(t, "delete", path, k2)
	assert.Equal(t, 1, r.code, "a second delete finds nothing")
	assert.Contains(t, r.stderr, "no entry with key")
	assert.Len(t, quarantined(t, path), 1, "nothing changed, nothing kept")
}

func TestDeleteText(t *testing.T) {
	path := save(t, t.TempDir(), entries(3))
	r := run(t, "delete", path, `{"containerID":"c2","network":"aws-cni","ifName":"eth0"}`)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "deleted the entry of key "+k2+" from "+path+" (now seq 2, 2 entries)")
	assert.Contains(t, r.stdout, "the file it replaced (intact) is kept as "+path+".corrupt-")
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
	assert.Empty(t, quarantined(t, path))

	// It waits: the daemon exits while delete is waiting.
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = daemon.Close()
	}()
	r = run(t, "delete", "--lock-wait", "20s", path, k2)
	assert.Equal(t, 0, r.code, r.stderr)
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
	assert.Empty(t, quarantined(t, path))

	missingDir := filepath.Join(t.TempDir(), "gone", "state.json")
	r = run(t, "delete", missingDir, k2)
	assert.Equal(t, 3, r.code)
	assert.NoDirExists(t, filepath.Dir(missingDir), "a repair of nothing creates nothing")

	r = run(t, "delete", filepath.Join(t.TempDir(), "state.json"), k2)
	assert.Equal(t, 3, r.code)

	r = run(t, "delete", path, `{"containerID":`)
	assert.Equal(t, 2, r.code)
}

// restore-prev puts .prev back, durably, above both seqs; the corrupt file
// is kept as a quarantined copy, byte for byte; .prev stays as it was.
func TestRestorePrev(t *testing.T) {
	path := save(t, t.TempDir(), entries(2), entries(3))
	prevBefore := readBytes(t, path+".prev")
	edit(t, path, `"ip":"10.0.0.1"`, `"ip":"10.0.0.5"`)
	bad := readBytes(t, path)
	_, err := load(t, path)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)

	r := run(t, "restore-prev", "--json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var out repairOut
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, "restore-prev", out.Action)
	assert.Equal(t, path+".prev", out.From)
	assert.Equal(t, "corrupt", out.Replaced)

	got := mustLoad(t, path)
	assert.Equal(t, entries(2), got.Entries)
	assert.Equal(t, uint64(3), got.Meta.Seq, "above both files' seqs (1 and 2)")
	assert.Equal(t, "ipamd v1.8.0", got.Meta.Writer)
	assert.Equal(t, schema, got.Meta.Schema)
	assert.Equal(t, prevBefore, readBytes(t, path+".prev"))
	require.Equal(t, []string{out.Kept}, quarantined(t, path))
	assert.Equal(t, bad, readBytes(t, out.Kept))

	// The daemon goes on from there: its next save is seq 4.
	f, err := checkpoint.Open[key, value](context.Background(), path, checkpoint.WithSchema(schema))
	require.NoError(t, err)
	_, err = f.Load(context.Background())
	require.NoError(t, err)
	require.NoError(t, f.Save(context.Background(), checkpoint.Snapshot[key, value]{Entries: entries(1)}))
	require.NoError(t, f.Close())
	assert.Equal(t, uint64(4), mustLoad(t, path).Meta.Seq)
}

func TestRestorePrevRefusals(t *testing.T) {
	t.Run("intact file without --replace-intact", func(t *testing.T) {
		path := save(t, t.TempDir(), entries(2), entries(3))
		before := readBytes(t, path)
		r := run(t, "restore-prev", path)
		assert.Equal(t, 9, r.code, "a refusal, not a usage error")
		assert.Contains(t, r.stderr, "--replace-intact")
		assert.NotContains(t, r.stderr, "usage:")
		assert.Equal(t, before, readBytes(t, path))

		r = run(t, "restore-prev", "--replace-intact", path)
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "restored "+path+" from "+path+".prev (seq 1, 2 entries), written as seq 3")
		assert.Equal(t, entries(2), mustLoad(t, path).Entries)
		require.Len(t, quarantined(t, path), 1)
		assert.Equal(t, before, readBytes(t, quarantined(t, path)[0]))
	})
	t.Run("missing file, .prev there", func(t *testing.T) {
		path := save(t, t.TempDir(), entries(2), entries(3))
		require.NoError(t, os.Remove(path))
		r := run(t, "restore-prev", path)
		require.Equal(t, 0, r.code, r.stderr)
		assert.Equal(t, entries(2), mustLoad(t, path).Entries)
		assert.Empty(t, quarantined(t, path), "nothing was replaced")
	})
	t.Run("no .prev", func(t *testing.T) {
		path := save(t, t.TempDir(), entries(2))
		edit(t, path, "10.0.0.1", "10.0.0.2")
		r := run(t, "restore-prev", path)
		assert.Equal(t, 3, r.code)
		assert.Contains(t, r.stderr, "cannot restore "+path+".prev")
	})
	t.Run("corrupt .prev", func(t *testing.T) {
		path := save(t, t.TempDir(), entries(2), entries(3))
		edit(t, path, "10.0.0.1", "10.0.0.2")
		edit(t, path+".prev", "10.0.0.1", "10.0.0.2")
		before := readBytes(t, path)
		r := run(t, "restore-prev", path)
		assert.Equal(t, 4, r.code)
		assert.Equal(t, before, readBytes(t, path))
		assert.Empty(t, quarantined(t, path))
	})
	t.Run("locked", func(t *testing.T) {
		path := save(t, t.TempDir(), entries(2), entries(3))
		holdLock(t, path)
		r := run(t, "restore-prev", "--lock-wait", "50ms", "--replace-intact", path)
		assert.Equal(t, 7, r.code)
	})
}

// reseal makes a hand edit load: the daemon sees the edited value, the
// hand-edited bytes are kept, .prev stays as it was.
func TestReseal(t *testing.T) {
	path := save(t, t.TempDir(), entries(2), entries(3))
	prevBefore := readBytes(t, path+".prev")
	edit(t, path, `"ip":"10.0.0.1"`, `"ip":"10.0.0.42"`)
	edited := readBytes(t, path)

	r := run(t, "reseal", path)
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "--i-edited-this-file-by-hand")
	assert.Contains(t, r.stderr, "phaseshift diff --ignore-checksum")
	assert.Equal(t, edited, readBytes(t, path))

	r = run(t, "reseal", "--json", "--i-edited-this-file-by-hand", path)
	require.Equal(t, 0, r.code, r.stderr)
	var out repairOut
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, "reseal", out.Action)

	got := mustLoad(t, path)
	want := entries(3)
	want[k(1)] = value{IP: "10.0.0.42", Token: v(1).Token}
	assert.Equal(t, want, got.Entries)
	assert.Equal(t, uint64(3), got.Meta.Seq)
	assert.Equal(t, "migrate", got.Meta.Phase)
	assert.Equal(t, prevBefore, readBytes(t, path+".prev"))
	require.Equal(t, []string{out.Kept}, quarantined(t, path))
	assert.Equal(t, edited, readBytes(t, out.Kept))

	r = run(t, "reseal", "--i-edited-this-file-by-hand", path)
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "nothing to reseal")
	assert.Len(t, quarantined(t, path), 1)
}

// An edit that breaks the file is not resealed, and nothing changes.
func TestResealRefusesABrokenEdit(t *testing.T) {
	cases := map[string][2]string{
		"a key twice":           {`"containerID":"c1"`, `"containerID":"c0"`},
		"bad JSON in a value":   {`"ip":"10.0.0.1"`, `"ip":10.0.0.1`},
		"an entry on two lines": {`"ifName":"eth0"},"value":{"ip":"10.0.0.1"`, "\"ifName\":\"eth0\"},\n\"value\":{\"ip\":\"10.0.0.1\""},
		"a header field added":  {`"seq": 2,`, `"seq": 2, "x": 1,`},
	}
	for name, ed := range cases {
		t.Run(name, func(t *testing.T) {
			path := save(t, t.TempDir(), entries(2), entries(3))
			edit(t, path, ed[0], ed[1])
			before := readBytes(t, path)
			r := run(t, "reseal", "--i-edited-this-file-by-hand", path)
			assert.Equal(t, 4, r.code, r.stdout)
			assert.Contains(t, r.stderr, "cannot reseal")
			assert.Equal(t, before, readBytes(t, path))
			assert.Empty(t, quarantined(t, path))
		})
	}
}

// Spacing an editor adds inside an entry's line is the writer's layout
// still; reseal writes the entry back compact.
func TestResealCompactsAnEditedLine(t *testing.T) {
	path := save(t, t.TempDir(), entries(2))
	edit(t, path, `"value":{"ip":"10.0.0.1"`, `"value": { "ip": "10.0.0.77"`)
	r := run(t, "reseal", "--i-edited-this-file-by-hand", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, string(readBytes(t, path)), `"value":{"ip":"10.0.0.77","token":"`+secret+`1"}}`)
	assert.Equal(t, "10.0.0.77", mustLoad(t, path).Entries[k(1)].IP)
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
