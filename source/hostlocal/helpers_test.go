package hostlocal_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/source/hostlocal"
)

const network = "mynet"

func key(id, ifname string) hostlocal.Key {
	return hostlocal.Key{Network: network, ContainerID: id, IfName: ifname}
}

func alloc(ips ...string) hostlocal.Allocation {
	a := hostlocal.Allocation{}
	for _, s := range ips {
		a.IPs = append(a.IPs, netip.MustParseAddr(s))
	}
	return a
}

// openSource opens the Source of network under a fresh data directory and
// closes it at cleanup, checking that every listed key and value
// round-trips through encoding/json.
func openSource(t *testing.T, opts ...hostlocal.Option) *hostlocal.Source {
	t.Helper()
	return openSourceIn(t, t.TempDir(), opts...)
}

func openSourceIn(t *testing.T, dataDir string, opts ...hostlocal.Option) *hostlocal.Source {
	t.Helper()
	s, err := hostlocal.Open(dataDir, network, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		got, _ := s.List(context.Background())
		for k, v := range got {
			assertJSONRoundTrip(t, k)
			assertJSONRoundTrip(t, v)
		}
		assert.NoError(t, s.Close())
	})
	return s
}

// realStore opens the plugins' own disk store on the Source's directory,
// as a host-local exec does.
func realStore(t *testing.T, s *hostlocal.Source) *disk.Store {
	t.Helper()
	st, err := disk.New(s.Network(), filepath.Dir(s.Dir()))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// reserve reserves ip for (id, ifname) through the real store, as
// host-local's allocator does for range set rangeID.
func reserve(t *testing.T, st *disk.Store, id, ifname, ip string, rangeID int) {
	t.Helper()
	require.NoError(t, st.Lock())
	defer st.Unlock()
	ok, err := st.Reserve(id, ifname, netip.MustParseAddr(ip).AsSlice(), strconv.Itoa(rangeID))
	require.NoError(t, err)
	require.True(t, ok, "the real store refused %s", ip)
}

// dirFiles returns every file of dir but the lock, with its content.
func dirFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		if e.Name() == "lock" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = string(b)
	}
	return out
}

func list(t *testing.T, s *hostlocal.Source) map[hostlocal.Key]hostlocal.Allocation {
	t.Helper()
	got, err := s.List(context.Background())
	require.NoError(t, err)
	return got
}
