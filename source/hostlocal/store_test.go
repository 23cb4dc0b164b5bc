package hostlocal_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/source"
	"github.com/phaseshift/phaseshift/source/hostlocal"
)

// List reads what the plugins' own store wrote: single- and dual-stack
// keys, IPv6 names, several interfaces of one container, and the
// last_reserved_ip files, which are not allocations.
func TestListReadsTheRealStore(t *testing.T) {
	s := openSource(t)
	st := realStore(t, s)
	reserve(t, st, "c1", "eth0", "10.1.0.2", 0)
	reserve(t, st, "c1", "eth0", "fd00::2", 1)
	reserve(t, st, "c2", "eth0", "10.1.0.3", 0)
	reserve(t, st, "c2", "net1", "10.1.0.4", 0)
	reserve(t, st, "c3", "eth0", "2001:db8::a:0:0:1", 1)
	require.FileExists(t, filepath.Join(s.Dir(), "last_reserved_ip.0"))
	require.FileExists(t, filepath.Join(s.Dir(), "last_reserved_ip.1"))

	assert.Equal(t, map[hostlocal.Key]hostlocal.Allocation{
		key("c1", "eth0"): alloc("10.1.0.2", "fd00::2"),
		key("c2", "eth0"): alloc("10.1.0.3"),
		key("c2", "net1"): alloc("10.1.0.4"),
		key("c3", "eth0"): alloc("2001:db8::a:0:0:1"),
	}, list(t, s))

	ctx := context.Background()
	for i, want := range []string{"10.1.0.4", "2001:db8::a:0:0:1"} {
		got, err := s.LastReserved(ctx, i)
		require.NoError(t, err)
		real, err := st.LastReservedIP([]string{"0", "1"}[i])
		require.NoError(t, err)
		assert.Equal(t, want, got.String())
		assert.Equal(t, real.String(), got.String(), "LastReserved agrees with the store's LastReservedIP")
	}
	got, err := s.LastReserved(ctx, 2)
	require.NoError(t, err)
	assert.False(t, got.IsValid(), "no last_reserved_ip.2: the zero Addr")
}

// Put writes byte for byte what the real store writes for the same
// reservation, with and without WithRangeIndex, and the real store can
// find and release what Put wrote: an old host-local binary works on the
// files after a downgrade.
func TestPutWritesWhatTheRealStoreWrites(t *testing.T) {
	ctx := context.Background()
	byFamily := hostlocal.WithRangeIndex(func(a netip.Addr) (int, bool) {
		if a.Is4() {
			return 0, true
		}
		return 1, true
	})
	for _, tc := range []struct {
		name     string
		opts     []hostlocal.Option
		pointers bool
	}{
		{"with range index", []hostlocal.Option{byFamily}, true},
		{"without", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ours := openSource(t, tc.opts...)
			ref := openSource(t)
			st := realStore(t, ref)
			require.NoError(t, ours.Put(ctx, key("c1", "eth0"), alloc("10.1.0.2", "fd00::2")))
			require.NoError(t, ours.Put(ctx, key("c2", "eth1"), alloc("10.1.0.3")))
			reserve(t, st, "c1", "eth0", "10.1.0.2", 0)
			reserve(t, st, "c1", "eth0", "fd00::2", 1)
			reserve(t, st, "c2", "eth1", "10.1.0.3", 0)

			want := dirFiles(t, ref.Dir())
			if !tc.pointers {
				delete(want, "last_reserved_ip.0")
				delete(want, "last_reserved_ip.1")
			}
			assert.Equal(t, want, dirFiles(t, ours.Dir()))
			for _, name := range []string{"10.1.0.2", "fd00::2", "10.1.0.3"} {
				fi, err := os.Stat(filepath.Join(ours.Dir(), name))
				require.NoError(t, err)
				assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), name)
			}

			// The old binary's view of the same files.
			old := realStore(t, ours)
			var got []string
			for _, ip := range old.GetByID("c1", "eth0") {
				got = append(got, ip.String())
			}
			slices.Sort(got)
			assert.Equal(t, []string{"10.1.0.2", "fd00::2"}, got)
			require.NoError(t, old.ReleaseByID("c1", "eth0"))
			assert.Equal(t, map[hostlocal.Key]hostlocal.Allocation{key("c2", "eth1"): alloc("10.1.0.3")}, list(t, ours))
		})
	}
}

// Put, Delete and List agree, checked against the files themselves after
// every write: with each operation taking the lock for itself, and with
// Lock held throughout, where writes reuse what the last read found.
func TestRoundTrip(t *testing.T) {
	for _, locked := range []bool{false, true} {
		t.Run(map[bool]string{false: "lock per operation", true: "under Lock"}[locked], func(t *testing.T) {
			ctx := context.Background()
			s := openSource(t)
			if locked {
				require.NoError(t, s.Lock(ctx))
			}
			want := map[hostlocal.Key]hostlocal.Allocation{}
			check := func() {
				t.Helper()
				files := map[string]string{}
				for k, a := range want {
					for _, ip := range a.IPs {
						files[ip.String()] = k.ContainerID + "\r\n" + k.IfName
					}
				}
				assert.Equal(t, files, dirFiles(t, s.Dir()))
			}
			put := func(k hostlocal.Key, a hostlocal.Allocation) {
				t.Helper()
				require.NoError(t, s.Put(ctx, k, a))
				want[k] = a
				check()
			}
			del := func(k hostlocal.Key) {
				t.Helper()
				require.NoError(t, s.Delete(ctx, k))
				delete(want, k)
				check()
			}
			put(key("a", "eth0"), alloc("10.0.0.2"))
			assert.Equal(t, want, list(t, s))
			put(key("b", "eth0"), alloc("10.0.0.3", "fd00::3"))
			put(key("a", "eth0"), alloc("10.0.0.2")) // the same again: nothing changes
			put(key("a", "eth0"), alloc("10.0.0.4", "fd00::4"))
			put(key("b", "eth0"), alloc("fd00::3")) // drops one of its addresses
			require.ErrorIs(t, s.Put(ctx, key("c", "eth0"), alloc("10.0.0.4")), hostlocal.ErrReserved)
			check()
			put(key("a", "eth0"), alloc("10.0.0.2"))
			put(key("b", "eth0"), alloc("10.0.0.4")) // an address a released just now
			put(key("a", ""), alloc("10.0.0.9"))     // the pre-v0.8.0 form
			assert.Equal(t, want, list(t, s))
			del(key("a", "eth0"))
			del(key("a", "eth0")) // absent: not an error
			put(key("c", "eth0"), alloc("10.0.0.2"))
			del(key("a", ""))
			del(key("b", "eth0"))
			assert.Equal(t, want, list(t, s))
			del(key("c", "eth0"))
			assert.Empty(t, dirFiles(t, s.Dir()), "nothing left but the lock")
		})
	}
}

// Put never takes an address another key holds; it fails with
// ErrReserved, naming the file and the holder, and leaves everything as
// it was, including addresses it had reserved before it found the
// conflict.
func TestPutRefusesAnAddressHeldByAnotherKey(t *testing.T) {
	ctx := context.Background()
	s := openSource(t)
	require.NoError(t, s.Put(ctx, key("a", "eth0"), alloc("10.0.0.5")))
	require.NoError(t, s.Put(ctx, key("b", "eth0"), alloc("10.0.0.2")))
	before := dirFiles(t, s.Dir())

	for _, tc := range []struct {
		name string
		k    hostlocal.Key
		a    hostlocal.Allocation
	}{
		{"new key", key("c", "eth0"), alloc("10.0.0.5")},
		{"new key, conflict after a reservation", key("c", "eth0"), alloc("10.0.0.3", "10.0.0.5", "fd00::1")},
		{"existing key", key("b", "eth0"), alloc("10.0.0.5")},
		{"same container, other interface", key("a", "eth1"), alloc("10.0.0.5")},
		{"same container, pre-v0.8.0 key", key("a", ""), alloc("10.0.0.5")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Put(ctx, tc.k, tc.a)
			require.ErrorIs(t, err, hostlocal.ErrReserved)
			assert.Contains(t, err.Error(), filepath.Join(s.Dir(), "10.0.0.5"))
			assert.Contains(t, err.Error(), key("a", "eth0").String())
			assert.Equal(t, before, dirFiles(t, s.Dir()))
		})
	}

	// An address whose file cannot be read is reserved all the same.
	require.NoError(t, os.WriteFile(filepath.Join(s.Dir(), "10.0.0.7"), nil, 0o600))
	err := s.Put(ctx, key("c", "eth0"), alloc("10.0.0.7"))
	require.ErrorIs(t, err, hostlocal.ErrReserved)
	assert.Contains(t, err.Error(), "cannot read")
}

// Delete removes exactly the key's files: not another interface of the
// container, and not its pre-v0.8.0 files, which host-local's own
// ReleaseByID would take as a fallback.
func TestDeleteRemovesExactlyTheKey(t *testing.T) {
	ctx := context.Background()
	s := openSource(t)
	dir := s.Dir()
	write := func(name, content string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600))
	}
	write("10.0.0.2", "c1\r\neth0")
	write("fd00::2", "c1\neth0") // the PR #203 form: the same key
	write("10.0.0.3", "c1\r\neth1")
	write("10.0.0.4", "c1")
	write("10.0.0.5", "c2\r\neth0")

	require.NoError(t, s.Delete(ctx, key("c1", "eth0")))
	assert.Equal(t, map[hostlocal.Key]hostlocal.Allocation{
		key("c1", "eth1"): alloc("10.0.0.3"),
		key("c1", ""):     alloc("10.0.0.4"),
		key("c2", "eth0"): alloc("10.0.0.5"),
	}, list(t, s))

	require.NoError(t, s.Delete(ctx, key("c1", "")))
	assert.NotContains(t, list(t, s), key("c1", ""))
	assert.Contains(t, list(t, s), key("c1", "eth1"))

	err := s.Delete(ctx, hostlocal.Key{Network: "other", ContainerID: "c2", IfName: "eth0"})
	require.ErrorIs(t, err, hostlocal.ErrInvalid)
	assert.Contains(t, list(t, s), key("c2", "eth0"))
}

// The values Put accepts are exactly those List can give back.
func TestPutRejectsWhatCannotRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openSource(t)
	good := alloc("10.0.0.2")
	for _, tc := range []struct {
		name string
		k    hostlocal.Key
		a    hostlocal.Allocation
		msg  string
	}{
		{"other network", hostlocal.Key{Network: "x", ContainerID: "c", IfName: "eth0"}, good, "network"},
		{"empty container ID", key("", "eth0"), good, "empty container ID"},
		{"space in container ID", key("c 1", "eth0"), good, "whitespace"},
		{"trailing newline", key("c1\n", "eth0"), good, "whitespace"},
		{"CRLF in interface", key("c1", "eth0\r\nx"), good, "whitespace"},
		{"NUL", key("c\x001", "eth0"), good, "control"},
		{"invalid UTF-8", key("c\xff", "eth0"), good, "UTF-8"},
		{"no addresses", key("c", "eth0"), hostlocal.Allocation{}, "no addresses"},
		{"zero address", key("c", "eth0"), hostlocal.Allocation{IPs: []netip.Addr{{}}}, "zero"},
		{"zone", key("c", "eth0"), alloc("fe80::1%eth0"), "zone"},
		{"IPv4-mapped", key("c", "eth0"), alloc("::ffff:10.0.0.2"), "Unmap"},
		{"unsorted", key("c", "eth0"), alloc("fd00::1", "10.0.0.2"), "NewAllocation"},
		{"duplicate", key("c", "eth0"), alloc("10.0.0.2", "10.0.0.2"), "NewAllocation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Put(ctx, tc.k, tc.a)
			require.ErrorIs(t, err, hostlocal.ErrInvalid)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	assert.Empty(t, dirFiles(t, s.Dir()))
	// NewAllocation builds the accepted form.
	a := hostlocal.NewAllocation(netip.MustParseAddr("fd00::1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::1"))
	assert.Equal(t, alloc("10.0.0.2", "fd00::1"), a)
	require.NoError(t, s.Put(ctx, key("c", "eth0"), a))
}

// A file named after an address that host-local would not have written, or
// that cannot be read as its owner, is a per-entry error naming its path;
// the rest is listed, and List's error is a *source.ListError.
func TestListReportsMalformedFiles(t *testing.T) {
	s := openSource(t)
	dir := s.Dir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	write("10.0.0.2", "good\r\neth0")
	write("fd00::2", "good\r\neth0")
	bad := []string{
		write("10.0.0.3", ""),
		write("10.0.0.4", " \r\n "),
		write("10.0.0.5", "a\r\nb\r\nc"),
		write("10.0.0.6", "c\xffd\r\neth0"),
		write("10.0.0.7", "c\x00\r\neth0"),
		write("10.0.0.8", string(make([]byte, 70<<10))),
		write("::ffff:10.0.0.9", "c\r\neth0"),
		write("fd00:0::9", "c\r\neth0"),
		write("FD00::A", "c\r\neth0"),
	}
	require.NoError(t, os.Symlink(filepath.Join(dir, "10.0.0.2"), filepath.Join(dir, "10.0.0.10")))
	bad = append(bad, filepath.Join(dir, "10.0.0.10"))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "10.0.0.11"), 0o700))
	bad = append(bad, filepath.Join(dir, "10.0.0.11"))
	// Not addresses: not host-local's allocations, skipped without an error.
	write("README", "notes")
	write("10.0.0.12.tmp", "x")
	write("last_reserved_ip", "10.0.0.2")
	write("last_reserved_ip.0", "garbage")

	got, err := s.List(context.Background())
	require.Error(t, err)
	assert.True(t, source.Partial(err), "a *source.ListError: %v", err)
	var le *source.ListError
	require.ErrorAs(t, err, &le)
	assert.Len(t, le.Errs, len(bad))
	for _, p := range bad {
		found := false
		for _, e := range le.Errs {
			if assert.ErrorIs(t, e, hostlocal.ErrMalformed) && errorNames(e, p) {
				found = true
			}
		}
		assert.True(t, found, "no error names %s: %v", p, err)
	}
	assert.Equal(t, map[hostlocal.Key]hostlocal.Allocation{key("good", "eth0"): alloc("10.0.0.2", "fd00::2")}, got)

	_, err = s.LastReserved(context.Background(), 0)
	require.ErrorIs(t, err, hostlocal.ErrMalformed)
	assert.Contains(t, err.Error(), "last_reserved_ip.0")
}

func errorNames(err error, path string) bool {
	var pe *os.PathError
	return errors.As(err, &pe) && pe.Path == path
}

func TestOpen(t *testing.T) {
	dataDir := t.TempDir()
	for _, name := range []string{"", ".", "..", "a/b", "a b", "a\x00b", "\xff"} {
		_, err := hostlocal.Open(dataDir, name)
		assert.ErrorIs(t, err, hostlocal.ErrInvalid, "%q", name)
	}
	_, err := hostlocal.Open(dataDir, network, hostlocal.WithRangeIndex(nil))
	assert.ErrorIs(t, err, hostlocal.ErrInvalid)
	entries, err := os.ReadDir(dataDir)
	require.NoError(t, err)
	assert.Empty(t, entries, "a refused Open creates nothing")

	s, err := hostlocal.Open(dataDir, network)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dataDir, network), s.Dir())
	assert.DirExists(t, s.Dir())
	assert.FileExists(t, filepath.Join(s.Dir(), "lock"))

	// Close is idempotent; everything else fails with ErrClosed.
	ctx := context.Background()
	require.NoError(t, s.Lock(ctx))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err = s.List(ctx)
	assert.ErrorIs(t, err, hostlocal.ErrClosed)
	assert.ErrorIs(t, s.Put(ctx, key("c", "eth0"), alloc("10.0.0.2")), hostlocal.ErrClosed)
	assert.ErrorIs(t, s.Delete(ctx, key("c", "eth0")), hostlocal.ErrClosed)
	assert.ErrorIs(t, s.Lock(ctx), hostlocal.ErrClosed)
	_, err = s.LastReserved(ctx, 0)
	assert.ErrorIs(t, err, hostlocal.ErrClosed)
	assert.NoError(t, s.Unlock())

	// Close released the lock.
	st, err := disk.New(network, dataDir)
	require.NoError(t, err)
	defer st.Close()
	assert.NoError(t, tryLock(filepath.Join(dataDir, network, "lock")))

	_, err = s.LastReserved(ctx, -1)
	assert.ErrorIs(t, err, hostlocal.ErrInvalid)
}

func TestCanceledContext(t *testing.T) {
	s := openSource(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.List(ctx)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, s.Put(ctx, key("c", "eth0"), alloc("10.0.0.2")), context.Canceled)
	assert.Empty(t, dirFiles(t, s.Dir()))
}

// List reads an owner as host-local compares it, after strings.TrimSpace,
// and host-local's own store finds the address under the key List gives.
func TestOwnerFormsAgreeWithHostLocal(t *testing.T) {
	for _, tc := range []struct {
		content string
		want    hostlocal.Key
	}{
		{"c1\r\neth0", key("c1", "eth0")},
		{"c1\r\neth0\n", key("c1", "eth0")},
		{"  c1\r\neth0 \t", key("c1", "eth0")},
		{"c1", key("c1", "")},
		{"c1\n", key("c1", "")},
		{"\tc1 ", key("c1", "")},
		{"c1\r\n", key("c1", "")},
	} {
		t.Run(tc.content, func(t *testing.T) {
			s := openSource(t)
			require.NoError(t, os.WriteFile(filepath.Join(s.Dir(), "10.0.0.2"), []byte(tc.content), 0o600))
			assert.Equal(t, map[hostlocal.Key]hostlocal.Allocation{tc.want: alloc("10.0.0.2")}, list(t, s))
			ifname := tc.want.IfName
			if ifname == "" {
				ifname = "any0" // an ID-only file belongs to every interface
			}
			ips := realStore(t, s).GetByID(tc.want.ContainerID, ifname)
			require.Len(t, ips, 1)
			assert.Equal(t, "10.0.0.2", ips[0].String())
		})
	}
}

// A Reserve that fails after creating the address's file (here: the
// last_reserved_ip file cannot be written) leaves nothing behind.
func TestPutUndoesAFailedReserve(t *testing.T) {
	ctx := context.Background()
	s := openSource(t, hostlocal.WithRangeIndex(func(netip.Addr) (int, bool) { return 0, true }))
	// A directory where Reserve writes last_reserved_ip.0 makes it fail.
	require.NoError(t, os.Mkdir(filepath.Join(s.Dir(), "last_reserved_ip.0"), 0o700))
	err := s.Put(ctx, key("c1", "eth0"), alloc("10.0.0.2", "10.0.0.3"))
	require.Error(t, err)
	assert.Empty(t, list(t, s))
	assert.NoFileExists(t, filepath.Join(s.Dir(), "10.0.0.2"))
}

// A directory that cannot be read fails List as a whole: not a partial
// listing, which a Store would take as evidence for what it could read.
func TestListFailsWithoutTheDirectory(t *testing.T) {
	ctx := context.Background()
	s := openSource(t)
	require.NoError(t, s.Put(ctx, key("c1", "eth0"), alloc("10.0.0.2")))
	require.NoError(t, s.Lock(ctx)) // so that the lock file need not be opened again
	require.NoError(t, os.RemoveAll(s.Dir()))
	got, err := s.List(ctx)
	require.Error(t, err)
	assert.False(t, source.Partial(err), "%v", err)
	assert.Contains(t, err.Error(), s.Dir())
	assert.Nil(t, got)
	assert.Error(t, s.Put(ctx, key("c1", "eth0"), alloc("10.0.0.3")))
}
