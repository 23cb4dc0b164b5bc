package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Ports of plugins v1.7.1, plugins/ipam/host-local/backend/allocator/
// allocator_test.go, "host-local ip allocator". The originals drive an
// IPAllocator over backend/testing.FakeStore, whose map of reserved
// addresses and last reserved address they set up front. The ports give
// the same to an exec'd plugin: an address reserved is one an earlier ADD
// asked for (CNI_ARGS IP=), and the last reserved address is host-local's
// last_reserved_ip.0 file, written by the test. A RangeIter walked with
// Next is a run of ADDs, each taking the next address, until the set is
// full.

// allocConf is a network configuration with the range sets given (JSON).
func allocConf(network, ranges string) string {
	return fmt.Sprintf(`{"cniVersion": "1.1.0", "name": %q, "type": "bridge", "ipam": {"type": "host-local", "ranges": %s}}`, network, ranges)
}

// mkallocRanges is mkalloc's range set: 192.168.1.0/29.
const mkallocRanges = `[[{"subnet": "192.168.1.0/29"}]]`

// reserve makes ips taken, as FakeStore's map of reserved addresses does:
// each by an ADD that asks for it, for a container of its own.
func reserve(t *testing.T, p *plugin, conf string, ips ...string) {
	t.Helper()
	for _, ip := range ips {
		p.mustAdd(conf, "held-"+strings.NewReplacer(".", "-", ":", "-").Replace(ip), "eth0", "IP="+ip)
	}
}

// addAll runs ADDs for new containers until one fails, and returns the
// addresses they got and the failure.
func addAll(t *testing.T, p *plugin, conf string, max int) ([]string, error) {
	t.Helper()
	var got []string
	for i := range max {
		res, _, err := p.add(conf, fmt.Sprintf("walk%d", i), "eth0", "")
		if err != nil {
			return got, err
		}
		got = append(got, ips(res)...)
	}
	return got, nil
}

// allocator_test.go, "RangeIter should loop correctly from the beginning".
func TestUpstreamRangeIterLoopsFromTheBeginning(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := allocConf("alloc", mkallocRanges)
		got, err := addAll(t, p, conf, 10)
		assert.Equal(t, []string{"192.168.1.2", "192.168.1.3", "192.168.1.4", "192.168.1.5", "192.168.1.6"}, got)
		assert.EqualError(t, err, "failed to allocate for range 0: no IP addresses available in range set: 192.168.1.1-192.168.1.6")
	})
}

// allocator_test.go, "RangeIter should loop correctly from the end": the
// last reserved address is the range's last, released since.
func TestUpstreamRangeIterLoopsFromTheEnd(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := allocConf("alloc", mkallocRanges)
		p.mustAdd(conf, "ID", "eth0", "IP=192.168.1.6")
		require.NoError(t, p.del(conf, "ID", "eth0"))
		got, err := addAll(t, p, conf, 10)
		assert.Equal(t, []string{"192.168.1.2", "192.168.1.3", "192.168.1.4", "192.168.1.5", "192.168.1.6"}, got)
		assert.Error(t, err)
	})
}

// allocator_test.go, "RangeIter should loop correctly from the middle".
func TestUpstreamRangeIterLoopsFromTheMiddle(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := allocConf("alloc", mkallocRanges)
		p.mustAdd(conf, "ID", "eth0", "IP=192.168.1.3")
		require.NoError(t, p.del(conf, "ID", "eth0"))
		got, err := addAll(t, p, conf, 10)
		assert.Equal(t, []string{"192.168.1.4", "192.168.1.5", "192.168.1.6", "192.168.1.2", "192.168.1.3"}, got)
		assert.Error(t, err)
	})
}

// allocator_test.go, "when has free ip should allocate ips in round
// robin": each case on a network of its own, its reserved addresses
// taken first, then its last reserved address written (or removed: the
// case has none).
func TestUpstreamAllocatesIPsInRoundRobin(t *testing.T) {
	t.Parallel()
	cases := []struct {
		subnets      []string
		ipmap        []string
		expectResult string
		lastIP       string
	}{
		// fresh start
		{subnets: []string{"10.0.0.0/29"}, expectResult: "10.0.0.2"},
		{subnets: []string{"2001:db8:1::0/64"}, expectResult: "2001:db8:1::2"},
		{subnets: []string{"10.0.0.0/30"}, expectResult: "10.0.0.2"},
		{subnets: []string{"10.0.0.0/29"}, ipmap: []string{"10.0.0.2"}, expectResult: "10.0.0.3"},
		// next ip of last reserved ip
		{subnets: []string{"10.0.0.0/29"}, expectResult: "10.0.0.6", lastIP: "10.0.0.5"},
		{subnets: []string{"10.0.0.0/29"}, ipmap: []string{"10.0.0.4", "10.0.0.5"}, expectResult: "10.0.0.6", lastIP: "10.0.0.3"},
		// round robin to the beginning
		{subnets: []string{"10.0.0.0/29"}, ipmap: []string{"10.0.0.6"}, expectResult: "10.0.0.2", lastIP: "10.0.0.5"},
		// lastIP is out of range
		{subnets: []string{"10.0.0.0/29"}, ipmap: []string{"10.0.0.2"}, expectResult: "10.0.0.3", lastIP: "10.0.0.128"},
		// subnet is completely full except for lastip: wrap around and reserve lastIP
		{subnets: []string{"10.0.0.0/29"}, ipmap: []string{"10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.6"}, expectResult: "10.0.0.3", lastIP: "10.0.0.3"},
		// allocate from multiple subnets
		{subnets: []string{"10.0.0.0/30", "10.0.1.0/30"}, expectResult: "10.0.0.2"},
		// advance to next subnet
		{subnets: []string{"10.0.0.0/30", "10.0.1.0/30"}, lastIP: "10.0.0.2", expectResult: "10.0.1.2"},
		// roll to start subnet
		{subnets: []string{"10.0.0.0/30", "10.0.1.0/30", "10.0.2.0/30"}, lastIP: "10.0.2.2", expectResult: "10.0.0.2"},
	}
	upstream(t, func(t *testing.T, p *plugin) {
		for idx, tc := range cases {
			var set []string
			for _, s := range tc.subnets {
				set = append(set, fmt.Sprintf(`{"subnet": %q}`, s))
			}
			network := fmt.Sprintf("rr%d", idx)
			conf := allocConf(network, "[["+strings.Join(set, ", ")+"]]")
			reserve(t, p, conf, tc.ipmap...)
			if tc.lastIP != "" {
				p.setLastReserved(network, 0, tc.lastIP)
			} else {
				require.NoError(t, os.RemoveAll(filepath.Join(p.dataDir, network, "last_reserved_ip.0")))
			}
			res := p.mustAdd(conf, "ID", "eth0", "")
			assert.Equal(t, tc.expectResult, ips(res)[0], "case %d", idx)
		}
	})
}

// allocator_test.go, "when has free ip should not allocate the broadcast
// address".
func TestUpstreamDoesNotAllocateTheBroadcastAddress(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := allocConf("alloc", mkallocRanges)
		for i := 2; i < 7; i++ {
			res := p.mustAdd(conf, fmt.Sprintf("ID%d", i), "eth0", "")
			assert.Equal(t, fmt.Sprintf("192.168.1.%d/29", i), res.IPs[0].Address.String())
		}
		p.addErr(conf, "ID8", "eth0", "")
	})
}

// allocator_test.go, "when has free ip should allocate in a round-robin
// fashion".
func TestUpstreamAllocatesInARoundRobinFashion(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := allocConf("alloc", mkallocRanges)
		res := p.mustAdd(conf, "ID", "eth0", "")
		assert.Equal(t, "192.168.1.2/29", res.IPs[0].Address.String())
		require.NoError(t, p.del(conf, "ID", "eth0"))
		res = p.mustAdd(conf, "ID", "eth0", "")
		assert.Equal(t, "192.168.1.3/29", res.IPs[0].Address.String())
	})
}

// allocator_test.go, "when requesting a specific IP must allocate the
// requested IP".
func TestUpstreamAllocatesTheRequestedIP(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		res := p.mustAdd(allocConf("alloc", mkallocRanges), "ID", "eth0", "IP=192.168.1.5")
		assert.Equal(t, []string{"192.168.1.5"}, ips(res))
	})
}

// allocator_test.go, "when requesting a specific IP must fail when the
// requested IP is allocated": to the same container, whose second ADD
// asks for it again.
func TestUpstreamFailsWhenTheRequestedIPIsAllocated(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := allocConf("alloc", mkallocRanges)
		res := p.mustAdd(conf, "ID", "eth0", "IP=192.168.1.5")
		assert.Equal(t, []string{"192.168.1.5"}, ips(res))
		err := p.addErr(conf, "ID", "eth0", "IP=192.168.1.5")
		assert.EqualError(t, err, "failed to allocate for range 0: requested IP address 192.168.1.5 is not available in range set 192.168.1.1-192.168.1.6")
	})
}

// allocator_test.go, "when requesting a specific IP must return an error
// when the requested IP is after RangeEnd". The original moves RangeEnd
// after canonicalising; the port configures it.
func TestUpstreamRequestedIPAfterRangeEnd(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := allocConf("alloc", `[[{"subnet": "192.168.1.0/29", "rangeEnd": "192.168.1.4"}]]`)
		err := p.addErr(conf, "ID", "eth0", "IP=192.168.1.5")
		assert.EqualError(t, err, "failed to allocate all requested IPs: 192.168.1.5")
	})
}

// allocator_test.go, "when requesting a specific IP must return an error
// when the requested IP is before RangeStart".
func TestUpstreamRequestedIPBeforeRangeStart(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := allocConf("alloc", `[[{"subnet": "192.168.1.0/29", "rangeStart": "192.168.1.3"}]]`)
		err := p.addErr(conf, "ID", "eth0", "IP=192.168.1.2")
		assert.EqualError(t, err, "failed to allocate all requested IPs: 192.168.1.2")
	})
}

// allocator_test.go, "when out of ips returns a meaningful error".
func TestUpstreamOutOfIPsReturnsAMeaningfulError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		subnets []string
		ipmap   []string
	}{
		{subnets: []string{"10.0.0.0/30"}, ipmap: []string{"10.0.0.2"}},
		{subnets: []string{"10.0.0.0/29"}, ipmap: []string{"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"}},
		{subnets: []string{"10.0.0.0/30", "10.0.1.0/30"}, ipmap: []string{"10.0.0.2", "10.0.1.2"}},
	}
	upstream(t, func(t *testing.T, p *plugin) {
		for idx, tc := range cases {
			var set []string
			for _, s := range tc.subnets {
				set = append(set, fmt.Sprintf(`{"subnet": %q}`, s))
			}
			conf := allocConf(fmt.Sprintf("full%d", idx), "[["+strings.Join(set, ", ")+"]]")
			reserve(t, p, conf, tc.ipmap...)
			err := p.addErr(conf, "ID", "eth0", "")
			assert.True(t, strings.HasPrefix(err.Error(), "failed to allocate for range 0: no IP addresses available in range set"), "case %d: %v", idx, err)
		}
	})
}

// multiRanges is newAllocatorWithMultiRanges's range set: two ranges of
// four addresses, from each subnet's network address. The original's
// subnets, 192.168.1.1/30 and 192.168.2.1/30, have host bits set, which
// its ignored Canonicalize error lets through and a network
// configuration does not; and with Canonicalize failed, its ranges have
// no gateway. The port's subnets are /29s whose gateways lie outside the
// ranges, so that, as there, every address from RangeStart to RangeEnd
// is handed out.
const multiRanges = `[[
	{"subnet": "192.168.1.0/29", "rangeStart": "192.168.1.0", "rangeEnd": "192.168.1.3", "gateway": "192.168.1.6"},
	{"subnet": "192.168.2.0/29", "rangeStart": "192.168.2.0", "rangeEnd": "192.168.2.3", "gateway": "192.168.2.6"}]]`

// allocator_test.go, "when lastReservedIP is at the end of one of multi
// ranges should use the first IP of next range as startIP after Next":
// the walk starts at the next range's first address and ends when it
// comes back to it.
func TestUpstreamLastReservedAtTheEndOfOneOfMultiRanges(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := allocConf("alloc", multiRanges)
		p.mustAdd(conf, "ID", "eth0", "IP=192.168.1.3")
		got, err := addAll(t, p, conf, 10)
		assert.Equal(t, []string{"192.168.2.0", "192.168.2.1", "192.168.2.2", "192.168.2.3", "192.168.1.0", "192.168.1.1", "192.168.1.2"}, got)
		assert.Error(t, err)
	})
}

// allocator_test.go, "when no lastReservedIP should use the first IP of
// the first range as startIP after Next".
func TestUpstreamNoLastReservedIP(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		got, err := addAll(t, p, allocConf("alloc", multiRanges), 10)
		assert.Equal(t, []string{"192.168.1.0", "192.168.1.1", "192.168.1.2", "192.168.1.3", "192.168.2.0", "192.168.2.1", "192.168.2.2", "192.168.2.3"}, got)
		assert.Error(t, err)
	})
}
