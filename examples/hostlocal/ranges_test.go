package main

import (
	"encoding/json"
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
		raw = append(raw, mustRangeJSON(t, `{"subnet": "`+s+`"}`))
	}
	s, err := newRangeSet(raw)
	require.NoError(t, err)
	return s
}

// mustRangeJSON reads a range as the network configuration writes it.
func mustRangeJSON(t *testing.T, s string) rangeJSON {
	t.Helper()
	var r rangeJSON
	require.NoError(t, json.Unmarshal([]byte(s), &r))
	return r
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

// Host-local's Range.Canonicalize (range_test.go, exec'd against the
// real host-local by upstream_range_test.go), at the function: defaults,
// and what a range must be, with host-local's messages.
func TestNewRange(t *testing.T) {
	for _, c := range []struct {
		name                string
		in                  string // the range's JSON
		start, end, gw, err string
	}{
		{name: "IPv4 defaults", in: `{"subnet": "192.0.2.0/24"}`, start: "192.0.2.1", end: "192.0.2.254", gw: "192.0.2.1"},
		{name: "a smaller IPv4 subnet", in: `{"subnet": "192.0.2.0/25"}`, start: "192.0.2.1", end: "192.0.2.126", gw: "192.0.2.1"},
		{name: "IPv6 defaults", in: `{"subnet": "2001:db8:1::/64"}`, start: "2001:db8:1::1", end: "2001:db8:1:0:ffff:ffff:ffff:ffff", gw: "2001:db8:1::1"},
		{name: "all fields", in: `{"subnet": "192.0.2.0/24", "rangeStart": "192.0.2.40", "rangeEnd": "192.0.2.50", "gateway": "192.0.2.254"}`, start: "192.0.2.40", end: "192.0.2.50", gw: "192.0.2.254"},
		{name: "the network address as the start", in: `{"subnet": "192.0.2.0/30", "rangeStart": "192.0.2.0", "rangeEnd": "192.0.2.3"}`, start: "192.0.2.0", end: "192.0.2.3", gw: "192.0.2.1"},
		{name: "a gateway of the other family", in: `{"subnet": "192.0.2.0/24", "gateway": "2001:db8::1"}`, start: "192.0.2.1", end: "192.0.2.254", gw: "2001:db8::1"},
		{name: "an IPv4-mapped subnet", in: `{"subnet": "::ffff:192.0.2.0/120"}`, err: "IPNet IP and Mask version mismatch"},
		{name: "an IPv4-mapped subnet too small", in: `{"subnet": "::ffff:192.0.2.0/127"}`, err: "Network 192.0.2.0/31 too small to allocate from"},
		{name: "masked IPv4 address", in: `{"subnet": "192.0.2.12/24"}`, err: "Network has host bits set. For a subnet mask of length 24 the network address is 192.0.2.0"},
		{name: "masked IPv6 address", in: `{"subnet": "2001:db8:1::12/64"}`, err: "Network has host bits set. For a subnet mask of length 64 the network address is 2001:db8:1::"},
		{name: "too small", in: `{"subnet": "192.0.2.0/31"}`, err: "Network 192.0.2.0/31 too small to allocate from"},
		{name: "no subnet", in: `{"rangeStart": "192.0.2.1"}`, err: "IP <nil> not v4 nor v6"},
		{name: "start outside", in: `{"subnet": "192.0.2.0/24", "rangeStart": "192.0.3.1"}`, err: "RangeStart 192.0.3.1 not in network 192.0.2.0/24"},
		{name: "end outside", in: `{"subnet": "192.0.2.0/24", "rangeEnd": "192.0.3.1"}`, err: "RangeEnd 192.0.3.1 not in network 192.0.2.0/24"},
		{name: "end before start", in: `{"subnet": "192.0.2.0/24", "rangeStart": "192.0.2.50", "rangeEnd": "192.0.2.40"}`, err: "RangeStart 192.0.2.50 not in network 192.0.2.0/24"},
		{name: "end before the default start", in: `{"subnet": "192.0.2.0/24", "rangeEnd": "192.0.2.0"}`, err: "RangeEnd 192.0.2.0 not in network 192.0.2.0/24"},
		{name: "start of the other family", in: `{"subnet": "192.0.2.0/24", "rangeStart": "2001:db8::1"}`, err: "RangeStart 2001:db8::1 not in network 192.0.2.0/24"},
		{name: "end of the other family", in: `{"subnet": "192.0.2.0/24", "rangeEnd": "2001:db8::1"}`, err: "RangeEnd 2001:db8::1 not in network 192.0.2.0/24"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := newRange(mustRangeJSON(t, c.in))
			if c.err != "" {
				assert.EqualError(t, err, c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.start, r.start.String())
			assert.Equal(t, c.end, r.end.String())
			assert.Equal(t, c.gw, r.gateway.String())
		})
	}

	// What the configuration's parser refuses, with net.IP's and
	// types.IPNet's own messages.
	for in, want := range map[string]string{
		`{"subnet": "192.0.2.0"}`:                          "invalid CIDR address: 192.0.2.0",
		`{"subnet": "fe80::%eth0/64"}`:                     "invalid CIDR address: fe80::%eth0/64",
		`{"subnet": "192.0.2.0/24", "gateway": "192.0.2"}`: "invalid IP address: 192.0.2",
	} {
		var r rangeJSON
		assert.EqualError(t, json.Unmarshal([]byte(in), &r), want, in)
	}
}
