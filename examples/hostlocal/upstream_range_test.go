package main

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Ports of plugins v1.7.1, plugins/ipam/host-local/backend/allocator/
// range_test.go, "IP ranges". The originals call Range.Canonicalize and
// Range.Contains; the ports exec ADD on a network of that one range and
// read what Canonicalize decided from the answer: its error, the
// gateway of the result, the first address handed out, and the range
// ("<start>-<end>") that an ADD asking for a taken address spells out.
// Contains is asked by ADDs that request the address: one in the range is
// handed out, one outside is not placed.

// rangeConf is a network of one range (JSON).
func rangeConf(r string) string { return allocConf("ranges", "[["+r+"]]") }

// checkDefaults checks a range's canonical form: the first ADD gets
// first with gateway gw, and the range is start-end.
func checkDefaults(t *testing.T, p *plugin, r, first, gw, startEnd string) {
	t.Helper()
	conf := rangeConf(r)
	_, out, err := p.add(conf, "a", "eth0", "")
	if !assert.NoError(t, err) {
		return
	}
	res := p.result(conf, out)
	assert.Equal(t, []string{first}, ips(res))
	assert.Equal(t, []string{gw}, gateways(t, p, conf, out))
	assert.Equal(t, startEnd, notAvailable(t, p, conf, 0, first))
}

// rangeErr checks that a network of the range r is refused with msg.
func rangeErr(t *testing.T, p *plugin, r, msg string) {
	t.Helper()
	assert.EqualError(t, p.addErr(rangeConf(r), "a", "eth0", ""), msg)
}

// range_test.go, "should generate sane defaults for ipv4 with a clean
// prefix".
func TestUpstreamSaneDefaultsForIPv4(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		checkDefaults(t, p, `{"subnet": "192.0.2.0/24"}`, "192.0.2.2", "192.0.2.1", "192.0.2.1-192.0.2.254")
	})
}

// range_test.go, "should generate sane defaults for a smaller ipv4
// subnet".
func TestUpstreamSaneDefaultsForASmallerIPv4Subnet(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		checkDefaults(t, p, `{"subnet": "192.0.2.0/25"}`, "192.0.2.2", "192.0.2.1", "192.0.2.1-192.0.2.126")
	})
}

// range_test.go, "should reject ipv4 subnet using a masked address".
func TestUpstreamRejectsIPv4SubnetUsingAMaskedAddress(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		rangeErr(t, p, `{"subnet": "192.0.2.12/24"}`, "invalid range set 0: Network has host bits set. For a subnet mask of length 24 the network address is 192.0.2.0")
	})
}

// range_test.go, "should reject ipv6 subnet using a masked address".
func TestUpstreamRejectsIPv6SubnetUsingAMaskedAddress(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		rangeErr(t, p, `{"subnet": "2001:DB8:1::24:19ff:fee1:c44a/64"}`, "invalid range set 0: Network has host bits set. For a subnet mask of length 64 the network address is 2001:db8:1::")
	})
}

// range_test.go, "should reject ipv6 prefix with host bit set".
func TestUpstreamRejectsIPv6PrefixWithHostBitSet(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		rangeErr(t, p, `{"subnet": "2001:DB8:24:19ff::/63"}`, "invalid range set 0: Network has host bits set. For a subnet mask of length 63 the network address is 2001:db8:24:19fe::")
	})
}

// range_test.go, "should reject ipv4 network with host bit set".
func TestUpstreamRejectsIPv4NetworkWithHostBitSet(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		rangeErr(t, p, `{"subnet": "192.168.127.0/23"}`, "invalid range set 0: Network has host bits set. For a subnet mask of length 23 the network address is 192.168.126.0")
	})
}

// range_test.go, "should generate sane defaults for ipv6 with a clean
// prefix".
func TestUpstreamSaneDefaultsForIPv6(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		checkDefaults(t, p, `{"subnet": "2001:DB8:1::/64"}`, "2001:db8:1::2", "2001:db8:1::1", "2001:db8:1::1-2001:db8:1:0:ffff:ffff:ffff:ffff")
	})
}

// range_test.go, "Should reject a network that's too small".
func TestUpstreamRejectsANetworkThatIsTooSmall(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		rangeErr(t, p, `{"subnet": "192.0.2.0/31"}`, "invalid range set 0: Network 192.0.2.0/31 too small to allocate from")
	})
}

// range_test.go, "should reject invalid RangeStart and RangeEnd
// specifications": the last one, a start after the end, blames the start.
func TestUpstreamRejectsInvalidRangeStartAndRangeEnd(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		rangeErr(t, p, `{"subnet": "192.0.2.0/24", "rangeStart": "192.0.3.0"}`, "invalid range set 0: RangeStart 192.0.3.0 not in network 192.0.2.0/24")
		rangeErr(t, p, `{"subnet": "192.0.2.0/24", "rangeEnd": "192.0.4.0"}`, "invalid range set 0: RangeEnd 192.0.4.0 not in network 192.0.2.0/24")
		rangeErr(t, p, `{"subnet": "192.0.2.0/24", "rangeStart": "192.0.2.50", "rangeEnd": "192.0.2.40"}`, "invalid range set 0: RangeStart 192.0.2.50 not in network 192.0.2.0/24")
	})
}

// range_test.go, "should parse all fields correctly".
func TestUpstreamParsesAllFieldsCorrectly(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		checkDefaults(t, p, `{"subnet": "192.0.2.0/24", "rangeStart": "192.0.2.40", "rangeEnd": "192.0.2.50", "gateway": "192.0.2.254"}`,
			"192.0.2.40", "192.0.2.254", "192.0.2.40-192.0.2.50")
	})
}

// checkContains asks for each address in turn, each for a container of
// its own: the ones in the range are handed out, the others not placed.
func checkContains(t *testing.T, p *plugin, r string, in map[string]bool) {
	t.Helper()
	conf := rangeConf(r)
	for _, ip := range sortedKeys(in) {
		id := "c" + fmt.Sprint(len(p.execs))
		if in[ip] {
			assert.Equal(t, []string{ip}, ips(p.mustAdd(conf, id, "eth0", "IP="+ip)))
		} else {
			assert.EqualError(t, p.addErr(conf, id, "eth0", "IP="+ip), "failed to allocate all requested IPs: "+ip)
		}
	}
}

// range_test.go, "should accept v4 IPs in range and reject IPs out of
// range".
func TestUpstreamAcceptsV4IPsInRange(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		checkContains(t, p, `{"subnet": "192.0.2.0/24", "rangeStart": "192.0.2.40", "rangeEnd": "192.0.2.50", "gateway": "192.0.2.254"}`, map[string]bool{
			"192.0.3.0": false, "192.0.2.39": false, "192.0.2.40": true, "192.0.2.50": true, "192.0.2.51": false,
		})
	})
}

// range_test.go, "should accept v6 IPs in range and reject IPs out of
// range".
func TestUpstreamAcceptsV6IPsInRange(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		checkContains(t, p, `{"subnet": "2001:DB8:1::/64", "rangeStart": "2001:db8:1::40", "rangeEnd": "2001:db8:1::50"}`, map[string]bool{
			"2001:db8:2::": false, "2001:db8:1::39": false, "2001:db8:1::40": true, "2001:db8:1::50": true, "2001:db8:1::51": false,
		})
	})
}

// range_test.go, DescribeTable "Detecting overlap": each pair as the two
// range sets of a network, in both orders (the original: "operation
// should be commutative"); an overlap fails the ADD, none lets it
// allocate.
func TestUpstreamDetectingOverlap(t *testing.T) {
	t.Parallel()
	entries := []struct {
		name     string
		r1, r2   string
		expected bool
	}{
		{"non-overlapping", `{"subnet": "10.0.0.0/24"}`, `{"subnet": "10.0.1.0/24"}`, false},
		{"different families", `{"subnet": "0.0.0.0/24"}`, `{"subnet": "::/24"}`, false}, // the bits overlap
		{"Identical", `{"subnet": "10.0.0.0/24"}`, `{"subnet": "10.0.0.0/24"}`, true},
		{"Containing", `{"subnet": "10.0.0.0/20"}`, `{"subnet": "10.0.1.0/24"}`, true},
		{"same subnet, non overlapping start + end", `{"subnet": "10.0.0.0/24", "rangeEnd": "10.0.0.127"}`, `{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.128"}`, false},
		{"same subnet, overlapping start + end", `{"subnet": "10.0.0.0/24", "rangeEnd": "10.0.0.127"}`, `{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.127"}`, true},
	}
	upstream(t, func(t *testing.T, p *plugin) {
		for i, e := range entries {
			for j, sets := range [][2]string{{e.r1, e.r2}, {e.r2, e.r1}} {
				conf := allocConf(fmt.Sprintf("overlap%d-%d", i, j), "[["+sets[0]+"], ["+sets[1]+"]]")
				_, _, err := p.add(conf, "a", "eth0", "")
				if e.expected {
					assert.EqualError(t, err, "range set 0 overlaps with 1", e.name)
				} else {
					assert.NoError(t, err, e.name)
				}
			}
		}
	})
}
