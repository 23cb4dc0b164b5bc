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
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// inspectOut is inspect's --json output, as a script reads it.
type inspectOut struct {
	Path     string
	Verdict  string
	Exit     int
	Size     int64
	Entries  int
	Checksum string
	Header   *struct {
		Format, Schema        int
		Phase, Writer, BootID string
		Seq                   uint64
		SavedAt               time.Time
	}
	Lock struct {
		Exists      bool
		Held        *bool
		PID         int
		RecordedPID int
		Note        string
	}
	Prev *struct {
		Verdict string
		Entries int
		Header  *struct{ Seq uint64 }
	}
	Kept []struct {
		Path    string
		Verdict string
		Header  *struct{ Seq uint64 }
		Why     string
		Verb    string
		KeptAt  time.Time
	}
}

func TestInspectShowsHeaderSiblingsAndLock(t *testing.T) {
	dir := t.TempDir()
	path := save(t, dir, entries(1))
	// A quarantined copy, made by the library as a daemon's restore does,
	// of a file that was seq 1.
	f, err := checkpoint.Open[key, value](context.Background(), path, checkpointtest.Schema(schema)...)
	require.NoError(t, err)
	before := time.Now().UTC().Add(-time.Second)
	moved, err := f.Quarantine(context.Background())
	require.NoError(t, err)
	require.NoError(t, f.Close())
	path = save(t, dir, entries(2), entries(3)) // seq 1 and 2 again: .prev is seq 1
	size := int64(len(readBytes(t, path)))

	r := run(t, "inspect", "--json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var out inspectOut
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, "intact", out.Verdict)
	assert.Equal(t, "ok", out.Checksum)
	assert.Equal(t, 3, out.Entries)
	assert.Equal(t, size, out.Size)
	require.NotNil(t, out.Header)
	assert.Equal(t, 1, out.Header.Format)
	assert.Equal(t, schema, out.Header.Schema)
	assert.Equal(t, "migrate", out.Header.Phase)
	assert.Equal(t, "ipamd v1.8.0", out.Header.Writer)
	assert.Equal(t, "boot-1", out.Header.BootID)
	assert.Equal(t, uint64(2), out.Header.Seq)
	assert.WithinDuration(t, time.Now(), out.Header.SavedAt, time.Minute)
	require.NotNil(t, out.Prev)
	assert.Equal(t, "intact", out.Prev.Verdict)
	assert.Equal(t, 2, out.Prev.Entries)
	assert.Equal(t, uint64(1), out.Prev.Header.Seq)
	require.Len(t, out.Kept, 1)
	assert.Equal(t, moved, out.Kept[0].Path)
	assert.Equal(t, uint64(1), out.Kept[0].Header.Seq)
	assert.Equal(t, "quarantine", out.Kept[0].Why)
	assert.Empty(t, out.Kept[0].Verb)
	assert.WithinDuration(t, before, out.Kept[0].KeptAt, time.Minute)
	// Nobody holds the lock; the file names its last holder, this test.
	require.NotNil(t, out.Lock.Held)
	assert.False(t, *out.Lock.Held)
	assert.Equal(t, os.Getpid(), out.Lock.RecordedPID)

	r = run(t, "inspect", path)
	require.Equal(t, 0, r.code)
	for _, want := range []string{"verdict:   intact", "seq:       2", "phase:     migrate", "writer:    ipamd v1.8.0",
		"boot ID:   boot-1", "entries:   3", fmt.Sprintf("size:      %d bytes", size), "checksum:  ok",
		"lock:      not held", "state.json.prev: intact, seq 1", "kept copies: 1", filepath.Base(moved) + ": intact, seq 1", "; quarantined at "} {
		assert.Contains(t, r.stdout, want)
	}
}

// The lock holder is found in /proc/locks: a checkpoint.File open in this
// process, which is another process to the command.
func TestInspectNamesTheLockHolder(t *testing.T) {
	path := save(t, t.TempDir(), entries(2))
	holdLock(t, path)

	r := run(t, "inspect", "--json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var out inspectOut
	decodeJSON(t, r.stdout, &out)
	require.NotNil(t, out.Lock.Held)
	assert.True(t, *out.Lock.Held)
	assert.Equal(t, os.Getpid(), out.Lock.PID)

	r = run(t, "inspect", path)
	assert.Contains(t, r.stdout, fmt.Sprintf("lock:      held by PID %d", os.Getpid()))
}

// A lock file whose PID is stale (its holder exited) is not taken for a
// held lock; the PID is shown as the last holder's.
func TestInspectStaleLockFile(t *testing.T) {
	path := save(t, t.TempDir(), entries(2))
	require.NoError(t, os.WriteFile(path+".lock", []byte("999999\n"), 0o600))
	r := run(t, "inspect", path)
	require.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "lock:      not held (its last holder was PID 999999)")
}

// A corrupt file: inspect still shows its header (who wrote it), the
// checksum verdict, and exits with the verdict; with no file at all it
// shows .prev.
func TestInspectCorruptAndMissing(t *testing.T) {
	path := save(t, t.TempDir(), entries(2), entries(3))
	edit(t, path, "10.0.0.1", "10.0.0.7")

	r := run(t, "inspect", "--json", path)
	assert.Equal(t, 4, r.code)
	var out inspectOut
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, "corrupt", out.Verdict)
	assert.Equal(t, 4, out.Exit)
	assert.Contains(t, out.Checksum, "bad: ")
	assert.Contains(t, out.Checksum, "checksum mismatch")
	require.NotNil(t, out.Header, "the header of a hand-edited file is still read")
	assert.Equal(t, uint64(2), out.Header.Seq)
	assert.Equal(t, "ipamd v1.8.0", out.Header.Writer)

	require.NoError(t, os.Remove(path))
	r = run(t, "inspect", path)
	assert.Equal(t, 3, r.code)
	assert.Contains(t, r.stdout, "verdict:   missing")
	assert.Contains(t, r.stdout, "state.json.prev: intact, seq 1, ")
}

// TestInspectSaysWhyTheCheckpointIsBehind: a checkpoint marked behind
// legacy by a run that could not list legacy (a runtime outage) says so,
// and says the phase that ran, not "legacy" (issue 21, item 5); phase 0's
// own mark says phase 0.
func TestInspectSaysWhyTheCheckpointIsBehind(t *testing.T) {
	for _, c := range []struct{ phase, behind string }{
		{"migrate", "phase 2 (migrate) could not read legacy in full"},
		{"legacy", "phase 0 (legacy) ran, which writes legacy only"},
	} {
		t.Run(c.phase, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			f, err := checkpoint.Open[key, value](context.Background(), path, checkpointtest.Schema(schema)...)
			require.NoError(t, err)
			require.NoError(t, f.Save(context.Background(), checkpoint.Snapshot[key, value]{
				Meta: checkpoint.Meta{Phase: c.phase, Behind: c.behind}, Entries: entries(1)}))
			require.NoError(t, f.Close())
			r := run(t, "inspect", path)
			require.Equal(t, 0, r.code, r.stderr)
			assert.Contains(t, r.stdout, "phase:     "+c.phase+"\n")
			assert.Contains(t, r.stdout, "behind:    "+c.behind+"\n")
			r = run(t, "inspect", "--json", path)
			assert.Contains(t, r.stdout, `"behind":"`+c.behind+`"`)
		})
	}
	r := run(t, "inspect", save(t, t.TempDir(), entries(1)))
	assert.NotContains(t, r.stdout, "behind:", "a checkpoint level with legacy says nothing of it")
}
