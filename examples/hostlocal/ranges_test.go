package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustSet(t *testing.T, subnets ...string) rangeSet {
	t.Helper()
	var raw []rangeJSON
	for _, s := range subnets {
		raw = append(raw, rangeJSON{Subnet: s})
	}
	s, err := newRangeSet(raw)
	require.NoError(t, err)
	return s
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// walkAll returns every address the iterator gives, in order.
func walkAll(it *rangeIter) []netip.Addr {
	var out []netip.Addr
	for a := it.next(); a.IsValid(); a = it.next() {
		out = append(out, a)
	}
	return out
}

// Ported from host-local's allocator_test.go, Context "RangeIter": a /29
// gives .2 to .6 (.1 is the gateway, .7 the broadcast), starting after
// the last reserved address and wrapping around to it.
func TestRangeIter(t *testing.T) {
	set := mustSet(t, "192.168.1.0/29")
	for _, c := range []struct {
		name string
		last string
		want []string
	}{
		{"from the beginning", "", []string{"192.168.1.2", "192.168.1.3", "192.168.1.4", "192.168.1.5", "192.168.1.6"}},
		{"from the end", "192.168.1.6", []string{"192.168.1.2", "192.168.1.3", "192.168.1.4", "192.168.1.5", "192.168.1.6"}},
		{"from the middle", "192.168.1.3", []string{"192.168.1.4", "192.168.1.5", "192.168.1.6", "192.168.1.2", "192.168.1.3"}},
		{"from outside the set", "10.0.0.1", []string{"192.168.1.2", "192.168.1.3", "192.168.1.4", "192.168.1.5", "192.168.1.6"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var last netip.Addr
			if c.last != "" {
				last = netip.MustParseAddr(c.last)
			}
			assert.Equal(t, addrs(c.want...), walkAll(set.iter(last)))
		})
	}
}

// Ported from host-local's allocator_test.go, "should allocate ips in
// round robin": which address an ADD gets from the state and
// last_reserved_ip.
func TestFreeRoundRobin(t *testing.T) {
	for _, c := range []struct {
		name    string
		subnets []string
		used    []string
		last    string
		want    string
	}{
		{"fresh start", []string{"10.0.0.0/29"}, nil, "", "10.0.0.2"},
		{"fresh start, IPv6", []string{"2001:db8:1::0/64"}, nil, "", "2001:db8:1::2"},
		{"a /30", []string{"10.0.0.0/30"}, nil, "", "10.0.0.2"},
		{"the first taken", []string{"10.0.0.0/29"}, []string{"10.0.0.2"}, "", "10.0.0.3"},
		{"next after the last reserved", []string{"10.0.0.0/29"}, nil, "10.0.0.5", "10.0.0.6"},
		{"skips taken ones after the last reserved", []string{"10.0.0.0/29"}, []string{"10.0.0.4", "10.0.0.5"}, "10.0.0.3", "10.0.0.6"},
		{"round robin to the beginning", []string{"10.0.0.0/29"}, []string{"10.0.0.6"}, "10.0.0.5", "10.0.0.2"},
		{"last reserved out of range", []string{"10.0.0.0/29"}, []string{"10.0.0.2"}, "10.0.0.128", "10.0.0.3"},
		{"full but the last reserved", []string{"10.0.0.0/29"}, []string{"10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.6"}, "10.0.0.3", "10.0.0.3"},
		{"several subnets", []string{"10.0.0.0/30", "10.0.1.0/30"}, nil, "", "10.0.0.2"},
		{"advance to the next subnet", []string{"10.0.0.0/30", "10.0.1.0/30"}, nil, "10.0.0.2", "10.0.1.2"},
		{"roll to the first subnet", []string{"10.0.0.0/30", "10.0.1.0/30", "10.0.2.0/30"}, nil, "10.0.2.2", "10.0.0.2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := testAllocator(t, c.last, mustSet(t, c.subnets...))
			used := map[netip.Addr]struct{}{}
			for _, u := range addrs(c.used...) {
				used[u] = struct{}{}
			}
			got, err := a.free(0, used)
			require.NoError(t, err)
			assert.Equal(t, netip.MustParseAddr(c.want), got)
		})
	}
	t.Run("full", func(t *testing.T) {
		a := testAllocator(t, "", mustSet(t, "10.0.0.0/30"))
		_, err := a.free(0, map[netip.Addr]struct{}{netip.MustParseAddr("10.0.0.2"): {}})
		assert.ErrorContains(t, err, "no IP addresses available in range set: 10.0.0.1-10.0.0.2")
	})
}

// testAllocator is an allocator for range set 0 with last_reserved_ip.0
// holding last ("" for none).
func testAllocator(t *testing.T, last string, sets ...rangeSet) *allocator {
	t.Helper()
	c := &config{network: "net", dataDir: t.TempDir(), ranges: sets}
	if last != "" {
		require.NoError(t, os.MkdirAll(filepath.Join(c.dataDir, c.network), 0o755))
		require.NoError(t, os.WriteFile(c.lastReservedPath(0), []byte(last), 0o600))
	}
	return &allocator{c: c}
}

// A file in host-local's directory holds its address even when it cannot
// be read as an allocation (host-local killed between creating and
// writing it): its Reserve refuses the address, and so does the
// allocator in the phases that use the files.
func TestTakenByUnreadableFile(t *testing.T) {
	a := testAllocator(t, "", mustSet(t, "10.0.0.0/29"))
	a.dir = filepath.Join(a.c.dataDir, a.c.network)
	require.NoError(t, os.MkdirAll(a.dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(a.dir, "10.0.0.2"), nil, 0o600))
	got, err := a.free(0, map[netip.Addr]struct{}{})
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("10.0.0.3"), got)

	a.dir = "" // phase 3 does not consult the files
	got, err = a.free(0, map[netip.Addr]struct{}{})
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("10.0.0.2"), got)
}

// Ported from host-local's range_test.go: defaults, and what a range
// must be.
func TestNewRange(t *testing.T) {
	for _, c := range []struct {
		name                    string
		in                      rangeJSON
		start, end, gw, errPart string
	}{
		{name: "IPv4 defaults", in: rangeJSON{Subnet: "192.0.2.0/24"}, start: "192.0.2.1", end: "192.0.2.254", gw: "192.0.2.1"},
		{name: "a smaller IPv4 subnet", in: rangeJSON{Subnet: "192.0.2.0/25"}, start: "192.0.2.1", end: "192.0.2.126", gw: "192.0.2.1"},
		{name: "IPv6 defaults", in: rangeJSON{Subnet: "2001:db8:1::/64"}, start: "2001:db8:1::1", end: "2001:db8:1:0:ffff:ffff:ffff:ffff", gw: "2001:db8:1::1"},
		{name: "all fields", in: rangeJSON{Subnet: "192.0.2.0/24", RangeStart: "192.0.2.40", RangeEnd: "192.0.2.50", Gateway: "192.0.2.254"}, start: "192.0.2.40", end: "192.0.2.50", gw: "192.0.2.254"},
		{name: "an IPv4-mapped subnet is IPv4", in: rangeJSON{Subnet: "::ffff:192.0.2.0/120"}, start: "192.0.2.1", end: "192.0.2.254", gw: "192.0.2.1"},
		{name: "masked IPv4 address", in: rangeJSON{Subnet: "192.0.2.12/24"}, errPart: "host bits set"},
		{name: "masked IPv6 address", in: rangeJSON{Subnet: "2001:db8:1::12/64"}, errPart: "host bits set"},
		{name: "too small", in: rangeJSON{Subnet: "192.0.2.0/31"}, errPart: "too small"},
		{name: "no prefix", in: rangeJSON{Subnet: "192.0.2.0"}, errPart: "invalid subnet"},
		{name: "a zone", in: rangeJSON{Subnet: "fe80::%eth0/64"}, errPart: "invalid subnet"},
		{name: "start outside", in: rangeJSON{Subnet: "192.0.2.0/24", RangeStart: "192.0.3.1"}, errPart: "rangeStart"},
		{name: "end outside", in: rangeJSON{Subnet: "192.0.2.0/24", RangeEnd: "192.0.3.1"}, errPart: "rangeEnd"},
		{name: "end before start", in: rangeJSON{Subnet: "192.0.2.0/24", RangeStart: "192.0.2.50", RangeEnd: "192.0.2.40"}, errPart: "rangeEnd"},
		{name: "start of the other family", in: rangeJSON{Subnet: "192.0.2.0/24", RangeStart: "2001:db8::1"}, errPart: "rangeStart"},
		{name: "bad gateway", in: rangeJSON{Subnet: "192.0.2.0/24", Gateway: "192.0.2"}, errPart: "gateway"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := newRange(c.in)
			if c.errPart != "" {
				assert.ErrorContains(t, err, c.errPart)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.start, r.start.String())
			assert.Equal(t, c.end, r.end.String())
			assert.Equal(t, c.gw, r.gateway.String())
		})
	}
}
