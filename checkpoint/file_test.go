package checkpoint_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/fsys/fsystest"
	"github.com/phaseshift/phaseshift/internal/testcni"
)

// podKey is the CNI spec's IPAM key: (network name, container ID, ifname).
type podKey = testcni.Key

type alloc struct {
	IP    netip.Addr `json:"ip"`
	Since time.Time  `json:"since"`
}

func key(id string) podKey { return testcni.Real(id) }

func entriesN(n int) map[podKey]alloc {
	m := make(map[podKey]alloc, n)
	base := netip.MustParseAddr("10.0.0.1")
	for i := 0; i < n; i++ {
		base = base.Next()
		m[key(fmt.Sprintf("c%03d", i))] = alloc{IP: base, Since: time.Date(2026, 11, 30, 8, 0, i, 0, time.UTC)}
	}
	return m
}

// openFile opens a checkpoint in a fresh directory and closes it at cleanup.
func openFile(t *testing.T, opts ...checkpoint.Option) (*checkpoint.File[podKey, alloc], string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state", "ipam.json")
	f, err := checkpoint.Open[podKey, alloc](context.Background(), path, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	return f, path
}

func TestRoundTripStructKeys(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t)

	_, err := f.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNotExist)
	require.ErrorIs(t, err, fs.ErrNotExist, "ErrNotExist matches fs.ErrNotExist too")

	want := entriesN(5)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{
		Meta:    checkpoint.Meta{Phase: "expand", Writer: "ipamd v1.7.0"},
		Entries: want,
	}))
	got, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, got.Entries)
	assert.Equal(t, "expand", got.Meta.Phase)
	assert.Equal(t, "ipamd v1.7.0", got.Meta.Writer)
	assert.Equal(t, 2, got.Meta.Format, "the journal's format, the default")
	assert.Equal(t, 1, got.Meta.Schema)
	assert.Equal(t, uint64(1), got.Meta.Seq)
	assert.WithinDuration(t, time.Now(), got.Meta.SavedAt, time.Minute)

	// The file is plain JSON with the documented fields.
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &doc), "the checkpoint must be valid JSON for jq")
	for _, field := range []string{"format", "schema", "phase", "writer", "bootID", "seq", "savedAt", "entries", "checksum"} {
		assert.Contains(t, doc, field)
	}
	var list []struct {
		Key   podKey `json:"key"`
		Value alloc  `json:"value"`
	}
	require.NoError(t, json.Unmarshal(doc["entries"], &list))
	assert.Len(t, list, 5)
	assert.Equal(t, 5+1, strings.Count(string(doc["entries"]), "\n"), "one entry per line")
}

func TestEmptySnapshot(t *testing.T) {
	ctx := context.Background()
	f, _ := openFile(t)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{}))
	got, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Empty(t, got.Entries)
	assert.NotNil(t, got.Entries, "Load returns a usable map even when empty")
}

func TestSequenceAndPrev(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t)
	for i := 1; i <= 3; i++ {
		require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(i)}))
	}
	got, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(3), got.Meta.Seq)
	assert.Len(t, got.Entries, 3)

	prev := loadPath(t, path+".prev")
	assert.Equal(t, uint64(2), prev.Meta.Seq, ".prev holds the save before the last one")
	assert.Len(t, prev.Entries, 2)

	// The sequence continues across Files.
	require.NoError(t, f.Close())
	g, err := checkpoint.Open[podKey, alloc](ctx, path)
	require.NoError(t, err)
	defer g.Close()
	require.NoError(t, g.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{{Key: key("x"), Value: alloc{}}}))
	got = loadPath(t, path)
	assert.Equal(t, uint64(4), got.Meta.Seq, "Commit before any Load reads the file first and continues its sequence")
	assert.Len(t, got.Entries, 4)
}

// loadPath loads a checkpoint file by path with a File of its own.
func loadPath(t *testing.T, path string) checkpoint.Snapshot[podKey, alloc] {
	t.Helper()
	// Copy it, and its journal if it has one, next to a fresh lock, so the
	// caller's File keeps its lock.
	dir := t.TempDir()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	cp := filepath.Join(dir, "copy.json")
	require.NoError(t, os.WriteFile(cp, data, 0o600))
	if j, err := os.ReadFile(path + ".journal"); err == nil {
		require.NoError(t, os.WriteFile(cp+".journal", j, 0o600))
	}
	g, err := checkpoint.Open[podKey, alloc](context.Background(), cp)
	require.NoError(t, err)
	defer g.Close()
	s, err := g.Load(context.Background())
	require.NoError(t, err)
	return s
}

func TestCommit(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(4)}))
	want := entriesN(4)

	changes := []checkpoint.Change[podKey, alloc]{
		{Key: key("c000"), Delete: true},
		{Key: key("c002"), Value: alloc{IP: netip.MustParseAddr("10.9.9.9")}},
		{Key: key("new"), Value: alloc{IP: netip.MustParseAddr("10.0.1.1")}},
		{Key: key("absent"), Delete: true},
		{Key: key("c003"), Delete: true},
		{Key: key("c003"), Value: alloc{IP: netip.MustParseAddr("10.0.3.3")}},
	}
	delete(want, key("c000"))
	want[key("c002")] = alloc{IP: netip.MustParseAddr("10.9.9.9")}
	want[key("new")] = alloc{IP: netip.MustParseAddr("10.0.1.1")}
	want[key("c003")] = alloc{IP: netip.MustParseAddr("10.0.3.3")}
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{Phase: "migrate"}, changes))

	got := loadPath(t, path)
	assert.Equal(t, want, got.Entries)
	assert.Equal(t, "migrate", got.Meta.Phase)
	assert.Equal(t, uint64(2), got.Meta.Seq)

	// A second commit builds on the first.
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{{Key: key("c001"), Delete: true}}))
	delete(want, key("c001"))
	assert.Equal(t, want, loadPath(t, path).Entries)
}

func TestCommitEncodeErrorChangesNothing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "f.json")
	f, err := checkpoint.Open[string, float64](ctx, path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[string, float64]{Entries: map[string]float64{"a": 1}}))
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	nan := 0.0
	nan = nan / nan
	err = f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, float64]{{Key: "b", Value: 2}, {Key: "c", Value: nan}})
	require.ErrorIs(t, err, checkpoint.ErrEncode)
	assert.Contains(t, err.Error(), `key "c"`)
	var ee *checkpoint.EncodeError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, "c", ee.Key)
	assert.Equal(t, 1, ee.Index, "the position of the change in Commit's changes")
	assert.False(t, ee.InKey)
	err = f.Save(ctx, checkpoint.Snapshot[string, float64]{Entries: map[string]float64{"c": nan}})
	require.ErrorIs(t, err, checkpoint.ErrEncode)

	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before, after, "a failed encode must not touch the file")
	require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, float64]{{Key: "b", Value: 2}}))
	s, err := f.Load(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]float64{"a": 1, "b": 2}, s.Entries, "the failed commit left nothing behind")
}

// TestEveryByteFlipAndTruncationIsCorrupt damages a real checkpoint at every
// position, in several ways, and at every length.
func TestEveryByteFlipAndTruncationIsCorrupt(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Meta: checkpoint.Meta{Phase: "expand"}, Entries: entriesN(3)}))
	good, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	dir := t.TempDir()
	target := filepath.Join(dir, "c.json")
	g, err := checkpoint.Open[podKey, alloc](ctx, target)
	require.NoError(t, err)
	defer g.Close()
	check := func(data []byte, what string) {
		t.Helper()
		require.NoError(t, os.WriteFile(target, data, 0o600))
		_, err := g.Load(ctx)
		if !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Fatalf("%s: Load returned %v, want ErrCorrupt", what, err)
		}
		if !strings.Contains(err.Error(), target) {
			t.Fatalf("%s: the error %q does not name the path", what, err)
		}
	}
	for i := range good {
		for _, mask := range []byte{0x01, 0x20, 0x80, 0xff} {
			bad := append([]byte(nil), good...)
			bad[i] ^= mask
			check(bad, fmt.Sprintf("byte %d ^ %#x", i, mask))
		}
	}
	for n := 0; n < len(good); n++ {
		check(good[:n], fmt.Sprintf("truncated to %d of %d bytes", n, len(good)))
	}
	check(append(append([]byte(nil), good...), '\n'), "a byte appended")
	check(append(append([]byte(nil), good...), good...), "the file twice")

	require.NoError(t, os.WriteFile(target, good, 0o600))
	_, err = g.Load(ctx)
	require.NoError(t, err, "the undamaged file still loads")
}

func TestUnreadableFileIsNotOverwritten(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(2)}))
	require.NoError(t, f.Close())

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	data[len(data)/2] ^= 1
	require.NoError(t, os.WriteFile(path, data, 0o600))

	for _, loadFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("loadFirst=%v", loadFirst), func(t *testing.T) {
			g, err := checkpoint.Open[podKey, alloc](ctx, path)
			require.NoError(t, err)
			defer g.Close()
			if loadFirst {
				_, err := g.Load(ctx)
				require.ErrorIs(t, err, checkpoint.ErrCorrupt)
			}
			err = g.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(1)})
			require.ErrorIs(t, err, checkpoint.ErrUnreadable)
			require.ErrorIs(t, err, checkpoint.ErrCorrupt, "the refusal carries the reason")
			assert.Contains(t, err.Error(), "Quarantine")
			err = g.Commit(ctx, checkpoint.Meta{}, nil)
			require.ErrorIs(t, err, checkpoint.ErrUnreadable)
			still, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, data, still, "the unreadable file must be left alone")
		})
	}

	g, err := checkpoint.Open[podKey, alloc](ctx, path)
	require.NoError(t, err)
	defer g.Close()
	_, err = g.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	moved, err := g.Quarantine(ctx)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(moved, path+".corrupt-"), moved)
	kept, err := os.ReadFile(moved)
	require.NoError(t, err)
	assert.Equal(t, data, kept, "quarantine keeps the bytes for inspection")
	_, err = os.Stat(path)
	require.ErrorIs(t, err, fs.ErrNotExist)

	require.NoError(t, g.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(1)}))
	s, err := g.Load(ctx)
	require.NoError(t, err)
	assert.Len(t, s.Entries, 1)
	assert.Equal(t, uint64(1), s.Meta.Seq)

	_, err = g.Quarantine(ctx)
	require.NoError(t, err)
	_, err = g.Quarantine(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNotExist, "nothing left to quarantine")
}

func TestBadEntries(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "vm.json")
	// Write a file whose checksum holds but one value is not a vm for the
	// reader: a writer with raw values can do that.
	w, err := checkpoint.Open[string, json.RawMessage](ctx, path)
	require.NoError(t, err)
	require.NoError(t, w.Save(ctx, checkpoint.Snapshot[string, json.RawMessage]{Entries: map[string]json.RawMessage{
		"vm-1": json.RawMessage(`{"console":"/run/vm-1.sock","tokens":["t1"]}`),
		"vm-2": json.RawMessage(`{"console":"/run/vm-2.sock","tokens":"secret-token-value"}`),
		"vm-3": json.RawMessage(`{"console":"/run/vm-3.sock","tokens":[]}`),
	}}))
	require.NoError(t, w.Close())

	type vm struct {
		Console string   `json:"console"`
		Tokens  []string `json:"tokens"`
	}
	r, err := checkpoint.Open[string, vm](ctx, path)
	require.NoError(t, err)
	defer r.Close()
	s, err := r.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrBadEntry)
	var be *checkpoint.BadEntriesError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, 3, be.Total)
	require.Len(t, be.Entries, 1)
	assert.Equal(t, `"vm-2"`, be.Entries[0].Key)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), `"vm-2"`)
	assert.NotContains(t, err.Error(), "secret-token-value", "errors never carry values")
	assert.Equal(t, map[string]vm{
		"vm-1": {Console: "/run/vm-1.sock", Tokens: []string{"t1"}},
		"vm-3": {Console: "/run/vm-3.sock", Tokens: []string{}},
	}, s.Entries, "the readable entries are returned")

	err = r.Save(ctx, checkpoint.Snapshot[string, vm]{Entries: s.Entries})
	require.ErrorIs(t, err, checkpoint.ErrUnreadable, "a file with an unreadable entry is not replaced: the entry would be lost")
}

func TestOpenCreatesPrivateDirectoryAndFiles(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(1)}))
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(2)}))
	fi, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o700), fi.Mode().Perm())
	for _, p := range []string{path, path + ".prev", path + ".lock"} {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, fs.FileMode(0o600), fi.Mode().Perm(), p)
	}
}

func TestSymlinkIsNotFollowed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	require.NoError(t, os.WriteFile(victim, []byte("precious\n"), 0o644))
	path := filepath.Join(dir, "state.json")
	require.NoError(t, os.Symlink(victim, path))

	f, err := checkpoint.Open[podKey, alloc](ctx, path)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Load(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "symlink")
	require.ErrorIs(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{}), checkpoint.ErrUnreadable)
	data, err := os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, "precious\n", string(data), "the symlink's target must never be written")

	// A symlinked lock file is refused too.
	lpath := filepath.Join(dir, "other.json")
	require.NoError(t, os.Symlink(victim, lpath+".lock"))
	_, err = checkpoint.Open[podKey, alloc](ctx, lpath)
	require.Error(t, err)
	data, err = os.ReadFile(victim)
	require.NoError(t, err)
	assert.Equal(t, "precious\n", string(data))
}

func TestLeftoverTempFilesRemovedAtOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "ipam.json")
	leftovers := []string{".ipam.json.tmp-0123456789abcdef", ".ipam.json.tmp-ffffffffffffffff", ".ipam.json.prev-tmp"}
	keep := []string{
		"ipam.json.corrupt-20261130T080000.000000000Z", ".ipam.jsonx1", "other.json", ".other.json42",
		// Temporary files of other checkpoints, some with names that
		// begin with this one's.
		".ipam.json1.tmp-0123456789abcdef", ".ipam.json.x.tmp-0123456789abcdef", ".other.json.tmp-0123456789abcdef",
		".ipam.json.tmp-0123456789abcdef.tmp-0123456789abcdef",
		// Not temporary names at all.
		".ipam.json.tmp-0123456789ABCDEF", ".ipam.json.tmp-0123", ".ipam.json.tmp-0123456789abcdef0",
		// What renameio used to make: ambiguous (".ipam.json123456" may
		// be a temporary file of "ipam.json1"), so never removed.
		".ipam.json123456", ".ipam.json9",
	}
	for _, n := range append(leftovers, keep...) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600))
	}
	f, err := checkpoint.Open[podKey, alloc](ctx, path)
	require.NoError(t, err)
	defer f.Close()
	for _, n := range leftovers {
		_, err := os.Stat(filepath.Join(dir, n))
		assert.ErrorIs(t, err, fs.ErrNotExist, "%s is a leftover and should be gone", n)
	}
	for _, n := range keep {
		_, err := os.Stat(filepath.Join(dir, n))
		assert.NoError(t, err, "%s is not ours to remove", n)
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.json")
	f, err := checkpoint.Open[podKey, alloc](ctx, path)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, f.Close())
	_, err = f.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrClosed)
	require.ErrorIs(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{}), checkpoint.ErrClosed)
	require.ErrorIs(t, f.Commit(ctx, checkpoint.Meta{}, nil), checkpoint.ErrClosed)
	_, err = f.Quarantine(ctx)
	require.ErrorIs(t, err, checkpoint.ErrClosed)
}

func TestOpenValidatesOptions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	up := func(k, v json.RawMessage) (json.RawMessage, json.RawMessage, error) { return k, v, nil }
	for _, tc := range []struct {
		name    string
		path    string
		opts    []checkpoint.Option
		want    string
		invalid bool // the error matches ErrInvalidOption, and Memory.Reopen refuses the same options
	}{
		{"empty path", "", nil, "path is empty", false},
		{"schema zero", "a.json", []checkpoint.Option{checkpoint.WithSchema(0)}, "schema version 0 is invalid", true},
		{"gap in chain", "b.json", []checkpoint.Option{checkpoint.WithSchema(4), checkpoint.WithUpgrade(1, up), checkpoint.WithUpgrade(3, up)}, "gap: missing 2→3", true},
		{"upgrade past current", "c.json", []checkpoint.Option{checkpoint.WithSchema(2), checkpoint.WithUpgrade(2, up)}, "does not lead to the current schema", true},
		{"nil upgrade", "d.json", []checkpoint.Option{checkpoint.WithSchema(2), checkpoint.WithUpgrade(1, nil)}, "nil", true},
		{"mode without owner rw", "e.json", []checkpoint.Option{checkpoint.WithFileMode(0o400)}, "file mode", true},
		{"negative lock wait", "g.json", []checkpoint.Option{checkpoint.WithLockWait(-time.Second)}, "checkpoint.WithLockWait(-1s)", true},
		{"nil option", "h.json", []checkpoint.Option{checkpoint.WithLockWait(0), nil}, "option 2 of 2 is nil", true},
		{"journal on and off", "i.json", []checkpoint.Option{checkpoint.WithJournal(), checkpoint.WithoutJournal()}, "checkpoint.WithoutJournal(): checkpoint.WithJournal() was given too: give one", true},
		{"boot id source fails", "f.json", []checkpoint.Option{checkpoint.WithBootID(func() (string, error) { return "", errors.New("no procfs") })}, "no procfs", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.path
			if p != "" {
				p = filepath.Join(dir, p)
			}
			_, err := checkpoint.Open[podKey, alloc](ctx, p, tc.opts...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			if !tc.invalid {
				return
			}
			assert.ErrorIs(t, err, checkpoint.ErrInvalidOption)
			_, err = checkpoint.NewMemory[podKey, alloc]().Reopen(tc.opts...)
			require.ErrorIs(t, err, checkpoint.ErrInvalidOption)
			assert.Contains(t, err.Error(), tc.want)
			if p != "" {
				assert.NoFileExists(t, p, "nothing is created on a mistake")
			}
		})
	}
}

func TestBootIDStamped(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t, checkpoint.WithBootID(func() (string, error) { return "boot-1", nil }))
	assert.Equal(t, "boot-1", f.BootID())
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{}))
	assert.Equal(t, "boot-1", loadPath(t, path).Meta.BootID)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Meta: checkpoint.Meta{BootID: "caller"}}))
	assert.Equal(t, "caller", loadPath(t, path).Meta.BootID, "a BootID the caller set wins")

	id, err := checkpoint.KernelBootID()
	if err != nil {
		t.Skipf("no kernel boot ID here: %v", err)
	}
	assert.Len(t, id, 36, "a UUID")
}

// TestSaveFaults injects a failure at every step of Save through the
// file-system seam and checks that the error names the step and the path,
// that the checkpoint still loads as before, and that the next save works.
func TestSaveFaults(t *testing.T) {
	for _, tc := range []struct {
		op, step   string
		err        error
		onPath     string // "ckpt", "dir", "prev-tmp", "prev" or ""
		newVisible bool   // the failure comes after the rename
	}{
		{op: fsystest.OpCreate, step: "create temporary file", err: syscall.ENOSPC},
		{op: fsystest.OpWrite, step: "write", err: syscall.ENOSPC},
		{op: fsystest.OpWrite, step: "write", err: syscall.EIO},
		{op: fsystest.ShortWrite, step: "write", err: nil},
		{op: fsystest.OpFsync, step: "fsync", err: syscall.EIO},
		{op: fsystest.OpClose, step: "close", err: syscall.EIO},
		{op: fsystest.OpRename, step: "rename", err: syscall.EROFS, onPath: "ckpt"},
		{op: fsystest.OpLink, step: "keep previous", err: syscall.EIO, onPath: "prev-tmp"},
		{op: fsystest.OpRename, step: "keep previous", err: syscall.EIO, onPath: "prev"},
		{op: fsystest.OpSyncDir, step: "fsync directory", err: syscall.EIO, onPath: "dir", newVisible: true},
	} {
		name := tc.op
		if tc.err != nil {
			name += "/" + tc.err.Error()
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			faulty := &fsystest.Faulty{}
			dir := t.TempDir()
			path := filepath.Join(dir, "ipam.json")
			f, err := checkpoint.Open[podKey, alloc](ctx, path, fsystest.WithFS(faulty))
			require.NoError(t, err)
			defer f.Close()
			require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(2)}))
			before, err := os.ReadFile(path)
			require.NoError(t, err)

			target := map[string]string{"ckpt": path, "dir": dir, "prev-tmp": filepath.Join(dir, ".ipam.json.prev-tmp"), "prev": path + ".prev", "": ""}[tc.onPath]
			if tc.op == fsystest.OpWrite || tc.op == fsystest.ShortWrite || tc.op == fsystest.OpFsync || tc.op == fsystest.OpClose || tc.op == fsystest.OpCreate {
				target = path
			}
			faulty.Fail(tc.op, target, tc.err, 1)
			for _, viaCommit := range []bool{false, true} {
				if viaCommit {
					faulty.Fail(tc.op, target, tc.err, 1)
				}
				var err error
				if viaCommit {
					err = f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{{Key: key("c000"), Delete: true}})
				} else {
					err = f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(5)})
				}
				require.Error(t, err)
				assert.Contains(t, err.Error(), "save: "+tc.step)
				assert.Contains(t, err.Error(), path)
				if tc.err != nil {
					assert.ErrorIs(t, err, tc.err)
				}
				if !tc.newVisible {
					after, rerr := os.ReadFile(path)
					require.NoError(t, rerr)
					assert.Equal(t, before, after, "the previous checkpoint must be intact")
				}
				names, rerr := os.ReadDir(dir)
				require.NoError(t, rerr)
				for _, n := range names {
					assert.False(t, strings.HasPrefix(n.Name(), ".ipam.json") && n.Name() != ".ipam.json.prev-tmp", "temporary file %s left behind", n.Name())
				}
			}

			// The fault has cleared: the next write works and builds on
			// the last successful one, not on the failed ones.
			require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{{Key: key("z"), Value: alloc{}}}))
			got := loadPath(t, path)
			want := entriesN(2)
			want[key("z")] = alloc{}
			assert.Equal(t, want, got.Entries)
		})
	}
}

func TestLoadReadFault(t *testing.T) {
	ctx := context.Background()
	faulty := &fsystest.Faulty{}
	path := filepath.Join(t.TempDir(), "ipam.json")
	f, err := checkpoint.Open[podKey, alloc](ctx, path, fsystest.WithFS(faulty))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(2)}))

	faulty.Fail(fsystest.OpRead, path, syscall.EIO, 1)
	_, err = f.Load(ctx)
	require.ErrorIs(t, err, syscall.EIO)
	assert.Contains(t, err.Error(), "checkpoint load "+path)
	require.ErrorIs(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{}), checkpoint.ErrUnreadable, "a file that could not be read is not replaced")
	s, err := f.Load(ctx)
	require.NoError(t, err, "the read fault cleared")
	assert.Len(t, s.Entries, 2)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{}))
}

func TestOpenFaults(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, op := range []string{fsystest.OpMkdir, fsystest.OpLock, fsystest.OpReadDir} {
		faulty := &fsystest.Faulty{}
		faulty.Fail(op, "", syscall.EACCES, 1)
		_, err := checkpoint.Open[podKey, alloc](ctx, filepath.Join(dir, op, "c.json"), fsystest.WithFS(faulty))
		require.ErrorIs(t, err, syscall.EACCES, op)
		assert.Contains(t, err.Error(), "checkpoint open", op)
	}
	// A failed Open does not keep the lock.
	f, err := checkpoint.Open[podKey, alloc](ctx, filepath.Join(dir, fsystest.OpReadDir, "c.json"), checkpoint.WithLockWait(0))
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// The lock tests re-execute the test binary: as a child that holds the lock
// until killed, or as a child that tries to take it.
const (
	envHoldLock = "PHASESHIFT_TEST_HOLD_LOCK"
	envTryLock  = "PHASESHIFT_TEST_TRY_LOCK"
)

func TestMain(m *testing.M) {
	if p := os.Getenv(envHoldLock); p != "" {
		f, err := checkpoint.Open[podKey, alloc](context.Background(), p)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		fmt.Println("locked")
		_ = f
		select {} // hold until killed
	}
	if p := os.Getenv(envTryLock); p != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		f, err := checkpoint.Open[podKey, alloc](ctx, p)
		if errors.Is(err, checkpoint.ErrLocked) {
			fmt.Println(err)
			os.Exit(4)
		}
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		f.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func startLockHolder(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHoldLock+"="+path)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "locked\n", line)
	return cmd
}

func TestLockSameProcess(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t)

	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	_, err := checkpoint.Open[podKey, alloc](wctx, path)
	require.ErrorIs(t, err, checkpoint.ErrLocked)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "Open waits until the context is done")
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), fmt.Sprintf("by process %d", os.Getpid()))

	_, err = checkpoint.Open[podKey, alloc](ctx, path, checkpoint.WithLockWait(0))
	require.ErrorIs(t, err, checkpoint.ErrLocked, "WithLockWait(0) tries once")

	// Open waits for the holder to go: the holder closes once Open says,
	// in its log, that it is waiting.
	waiting := make(chan struct{})
	var once sync.Once
	discard := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.DebugLevel)
	log := zap.New(discard, zap.Hooks(func(e zapcore.Entry) error {
		if strings.Contains(e.Message, "waiting for the checkpoint's lock") {
			once.Do(func() { close(waiting) })
		}
		return nil
	}))
	done := make(chan error, 1)
	go func() {
		g, err := checkpoint.Open[podKey, alloc](ctx, path, checkpoint.WithLogger(log))
		if err == nil {
			err = g.Close()
		}
		done <- err
	}()
	<-waiting
	require.NoError(t, f.Close())
	select {
	case err := <-done:
		require.NoError(t, err, "the waiting Open gets the lock after Close")
	case <-time.After(10 * time.Second):
		t.Fatal("Open did not take the lock after Close")
	}
}

func TestLockAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ipam.json")
	child := startLockHolder(t, path)

	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := checkpoint.Open[podKey, alloc](wctx, path)
	require.ErrorIs(t, err, checkpoint.ErrLocked)
	assert.Contains(t, err.Error(), fmt.Sprintf("by process %d", child.Process.Pid))

	// The kernel drops a flock when its holder dies, even by SIGKILL.
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	wctx2, cancel2 := context.WithTimeout(ctx, 5*time.Second)
	defer cancel2()
	f, err := checkpoint.Open[podKey, alloc](wctx2, path)
	require.NoError(t, err, "the lock of a killed process is free")

	// And the other way round: a child cannot take our lock.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envTryLock+"="+path)
	out, _ := cmd.CombinedOutput()
	require.Equal(t, 4, cmd.ProcessState.ExitCode(), "child output: %s", out)
	assert.Contains(t, string(out), "checkpoint is locked")
	require.NoError(t, f.Close())
	cmd = exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envTryLock+"="+path)
	out, _ = cmd.CombinedOutput()
	require.Equal(t, 0, cmd.ProcessState.ExitCode(), "after Close the child gets the lock: %s", out)
}

func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{}))
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 10; i++ {
				k := key(fmt.Sprintf("g%d-%d", g, i))
				if err := f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{{Key: k, Value: alloc{}}}); err != nil {
					t.Error(err)
				}
				if _, err := f.Load(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
	s := loadPath(t, path)
	assert.Len(t, s.Entries, 40)
	assert.Equal(t, uint64(41), s.Meta.Seq)
}

// TestLockWaitIsLogged: Open that finds another instance holding the lock
// says so in the log at once, with the holder's PID, and again when it
// takes the lock - a daemon stuck behind an old instance during a rolling
// update is not silent, WithLockWait or not (issue 21, item 6).
func TestLockWaitIsLogged(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.json")
	holder, err := checkpoint.Open[string, int](ctx, path)
	require.NoError(t, err)

	waiting, took := make(chan zapcore.Entry, 1), make(chan zapcore.Entry, 1)
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core, zap.Hooks(func(e zapcore.Entry) error {
		switch {
		case strings.Contains(e.Message, "waiting for the checkpoint's lock"):
			select {
			case waiting <- e:
			default:
			}
		case strings.Contains(e.Message, "took the checkpoint's lock"):
			took <- e
		}
		return nil
	}))
	opened := make(chan error, 1)
	go func() {
		f, err := checkpoint.Open[string, int](ctx, path, checkpoint.WithLogger(log)) // no WithLockWait: waits for ctx
		if err == nil {
			err = f.Close()
		}
		opened <- err
	}()
	select {
	case <-waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("Open waited for the lock without a word")
	}
	entries := logs.FilterMessageSnippet("waiting for the checkpoint's lock").All()
	require.NotEmpty(t, entries)
	fields := entries[0].ContextMap()
	assert.Equal(t, strconv.Itoa(os.Getpid()), fields["holderPID"], "the holder's PID")
	assert.Equal(t, path, fields["path"])
	assert.Contains(t, fields["waiting"], "WithLockWait", "says how to bound the wait")

	require.NoError(t, holder.Close())
	require.NoError(t, <-opened)
	select {
	case <-took:
	default:
		t.Fatal("taking the lock after a wait is not logged")
	}
}

// TestOpenEmptyPath: an empty path is a configuration mistake like a bad
// option, and matches ErrInvalidOption.
func TestOpenEmptyPath(t *testing.T) {
	_, err := checkpoint.Open[string, int](context.Background(), "")
	require.ErrorIs(t, err, checkpoint.ErrInvalidOption)
	assert.Contains(t, err.Error(), "the path is empty")
	assert.True(t, strings.HasPrefix(err.Error(), "checkpoint: "), "the message names its package once: %s", err)
}
