package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Ports of plugins v1.7.1, plugins/ipam/host-local/backend/allocator/
// range_set_test.go, "range sets".

// range_set_test.go, "should detect set membership correctly": an
// address of the set's first range is handed out with that range's
// subnet and gateway (RangeFor found it); one in no range is not placed.
// RangeFor's own error ("192.168.99.99 not in range set ...") reaches no
// exec: host-local asks RangeFor only about addresses the set contains.
func TestUpstreamDetectsSetMembership(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := allocConf("sets", `[[{"subnet": "192.168.0.0/24"}, {"subnet": "172.16.1.0/24"}]]`)
		_, out, err := p.add(conf, "a", "eth0", "IP=192.168.0.55")
		if assert.NoError(t, err) {
			res := p.result(conf, out)
			assert.Equal(t, "192.168.0.55/24", res.IPs[0].Address.String())
			assert.Equal(t, []string{"192.168.0.1"}, gateways(t, p, conf, out))
		}
		assert.EqualError(t, p.addErr(conf, "b", "eth0", "IP=192.168.99.99"), "failed to allocate all requested IPs: 192.168.99.99")
		assert.Equal(t, "192.168.0.1-192.168.0.254,172.16.1.1-172.16.1.254", notAvailable(t, p, conf, 0, "192.168.0.55"))
	})
}

// range_set_test.go, "should discover overlaps within a set".
func TestUpstreamDiscoversOverlapsWithinASet(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := allocConf("sets", `[[{"subnet": "192.168.0.0/20"}, {"subnet": "192.168.2.0/24"}]]`)
		assert.EqualError(t, p.addErr(conf, "a", "eth0", ""), "invalid range set 0: subnets 192.168.0.1-192.168.15.254 and 192.168.2.1-192.168.2.254 overlap")
	})
}

// range_set_test.go, "should discover overlaps outside a set": as two
// range sets of a network, in both orders.
func TestUpstreamDiscoversOverlapsOutsideASet(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		for _, sets := range []string{
			`[[{"subnet": "192.168.0.0/20"}], [{"subnet": "192.168.2.0/24"}]]`,
			`[[{"subnet": "192.168.2.0/24"}], [{"subnet": "192.168.0.0/20"}]]`,
		} {
			assert.EqualError(t, p.addErr(allocConf("sets", sets), "a", "eth0", ""), "range set 0 overlaps with 1")
		}
	})
}
