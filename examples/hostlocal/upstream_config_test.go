package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Ports of plugins v1.7.1, plugins/ipam/host-local/backend/allocator/
// config_test.go, "IPAM config". The originals compare what
// LoadIPAMConfig returns; the ports exec ADD with the same configuration
// and read the same facts from the answer: the result's addresses and
// gateways (each range set's first free address, or the address asked
// for), the range set spelt out by the error of an ADD that asks for an
// address already taken, and the addresses an ADD could not place, which
// host-local lists in a random order.

// notAvailable asks for ip, which an earlier ADD got, and returns the
// range set the error spells out for range set i.
func notAvailable(t *testing.T, p *plugin, conf string, i int, ip string) string {
	t.Helper()
	err := p.addErr(conf, "again-"+strings.NewReplacer(".", "-", ":", "-").Replace(ip), "eth0", "IP="+ip)
	prefix := "failed to allocate for range " + string(rune('0'+i)) + ": requested IP address " + ip + " is not available in range set "
	require.True(t, strings.HasPrefix(err.Error(), prefix), "%v", err)
	return strings.TrimPrefix(err.Error(), prefix)
}

// unplaced returns the addresses an ADD's "failed to allocate all
// requested IPs" error lists.
func unplaced(t *testing.T, err error) []string {
	t.Helper()
	const prefix = "failed to allocate all requested IPs: "
	require.True(t, strings.HasPrefix(err.Error(), prefix), "%v", err)
	return strings.Fields(strings.TrimPrefix(err.Error(), prefix))
}

// gateways returns the gateways of a result, as strings, in order.
func gateways(t *testing.T, p *plugin, conf string, out []byte) []string {
	t.Helper()
	res := p.result(conf, out)
	g := make([]string, len(res.IPs))
	for i, ipc := range res.IPs {
		g[i] = ipc.Gateway.String()
	}
	return g
}

// config_test.go, "Should parse an old-style config".
func TestUpstreamParsesAnOldStyleConfig(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := `{"cniVersion": "0.3.1", "name": "mynet", "type": "ipvlan", "master": "foo0",
			"ipam": {"type": "host-local", "subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9", "rangeEnd": "10.1.2.20", "gateway": "10.1.2.30"}}`
		res, out, err := p.add(conf, "a", "eth0", "")
		require.NoError(t, err)
		assert.Contains(t, string(out), `"cniVersion": "0.3.1"`)
		assert.Equal(t, []string{"10.1.2.9"}, ips(res))
		assert.Equal(t, "10.1.2.9/24", res.IPs[0].Address.String())
		assert.Equal(t, []string{"10.1.2.30"}, gateways(t, p, conf, out))
		assert.Equal(t, "10.1.2.9-10.1.2.20", notAvailable(t, p, conf, 0, "10.1.2.9"))
	})
}

// config_test.go, "Should parse a new-style config".
func TestUpstreamParsesANewStyleConfig(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := `{"cniVersion": "0.3.1", "name": "mynet", "type": "ipvlan", "master": "foo0",
			"ipam": {"type": "host-local", "ranges": [
				[{"subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9", "rangeEnd": "10.1.2.20", "gateway": "10.1.2.30"}, {"subnet": "10.1.4.0/24"}],
				[{"subnet": "11.1.2.0/24", "rangeStart": "11.1.2.9", "rangeEnd": "11.1.2.20", "gateway": "11.1.2.30"}]]}}`
		res, out, err := p.add(conf, "a", "eth0", "")
		require.NoError(t, err)
		assert.Equal(t, []string{"10.1.2.9", "11.1.2.9"}, ips(res))
		assert.Equal(t, []string{"10.1.2.30", "11.1.2.30"}, gateways(t, p, conf, out))
		assert.Equal(t, "10.1.2.9-10.1.2.20,10.1.4.1-10.1.4.254", notAvailable(t, p, conf, 0, "10.1.2.9"))
		assert.Equal(t, "11.1.2.9-11.1.2.20", notAvailable(t, p, conf, 1, "11.1.2.9"))
		// 10.1.4.0/24's gateway is its first address, which is in its range.
		err = p.addErr(conf, "b", "eth0", "IP=10.1.4.1")
		assert.EqualError(t, err, "failed to allocate for range 0: requested ip 10.1.4.1 is subnet's gateway")
	})
}

// config_test.go, "Should parse a mixed config with runtime args": the
// runtime's ipRanges first, then the old-style range, then "ranges".
func TestUpstreamParsesAMixedConfigWithRuntimeArgs(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := `{"cniVersion": "0.3.1", "name": "mynet", "type": "ipvlan", "master": "foo0",
			"runtimeConfig": {"irrelevant": "a", "ipRanges": [[{"subnet": "12.1.3.0/24"}]]},
			"ipam": {"type": "host-local", "subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9", "rangeEnd": "10.1.2.20", "gateway": "10.1.2.30",
				"ranges": [[{"subnet": "11.1.2.0/24", "rangeStart": "11.1.2.9", "rangeEnd": "11.1.2.20", "gateway": "11.1.2.30"}]]}}`
		res, out, err := p.add(conf, "a", "eth0", "")
		require.NoError(t, err)
		assert.Equal(t, []string{"12.1.3.2", "10.1.2.9", "11.1.2.9"}, ips(res))
		assert.Equal(t, []string{"12.1.3.1", "10.1.2.30", "11.1.2.30"}, gateways(t, p, conf, out))
		assert.Equal(t, "12.1.3.1-12.1.3.254", notAvailable(t, p, conf, 0, "12.1.3.2"))
	})
}

// cniArgsConf is the configuration of "Should parse CNI_ARGS env".
const cniArgsConf = `{"cniVersion": "0.3.1", "name": "mynet", "type": "ipvlan", "master": "foo0",
	"ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9", "rangeEnd": "10.1.2.20", "gateway": "10.1.2.30"}]]}}`

// config_test.go, "Should parse CNI_ARGS env without prefix".
func TestUpstreamParsesCNIArgsWithoutPrefix(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		assert.Equal(t, []string{"10.1.2.10"}, ips(p.mustAdd(cniArgsConf, "a", "eth0", "IP=10.1.2.10")))
	})
}

// config_test.go, "Should parse CNI_ARGS env with prefix".
func TestUpstreamParsesCNIArgsWithPrefix(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		assert.Equal(t, []string{"10.1.2.11"}, ips(p.mustAdd(cniArgsConf, "a", "eth0", "IP=10.1.2.11/24")))
	})
}

// configArgsConf is the configuration of "Should parse config args",
// with the addresses of args.cni.ips.
func configArgsConf(ips string) string {
	return `{"cniVersion": "0.3.1", "name": "mynet", "type": "ipvlan", "master": "foo0",
		"args": {"cni": {"ips": ` + ips + `}},
		"ipam": {"type": "host-local", "ranges": [
			[{"subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9", "rangeEnd": "10.1.2.20", "gateway": "10.1.2.30"}],
			[{"subnet": "11.1.2.0/24", "rangeStart": "11.1.2.9", "rangeEnd": "11.1.2.20", "gateway": "11.1.2.30"}],
			[{"subnet": "2001:db8:1::/64"}]]}}`
}

// checkConfigArgs checks an ADD of "Should parse config args": of the
// four addresses asked for (IP= in CNI_ARGS, then args.cni.ips), range set
// 0 takes one of its two (host-local: either, at random), range set 2 its
// one, and 11.11.11.11 is in no range set; so the ADD fails, listing it
// and range set 0's other, each once.
func checkConfigArgs(t *testing.T, p *plugin, conf, cniArgs string) {
	t.Helper()
	p.loose = true
	got := unplaced(t, p.addErr(conf, "a", "eth0", cniArgs))
	assert.Contains(t, got, "11.11.11.11")
	others := slices.DeleteFunc(slices.Clone(got), func(s string) bool { return s == "11.11.11.11" })
	if assert.Len(t, others, 1, "%v", got) {
		assert.Contains(t, []string{"10.1.2.10", "10.1.2.11"}, others[0])
	}
}

// config_test.go, "Should parse config args without prefix".
func TestUpstreamParsesConfigArgsWithoutPrefix(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		checkConfigArgs(t, p, configArgsConf(`["10.1.2.11", "11.11.11.11", "2001:db8:1::11"]`), "IP=10.1.2.10")
	})
}

// config_test.go, "Should parse config args with prefix".
func TestUpstreamParsesConfigArgsWithPrefix(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		checkConfigArgs(t, p, configArgsConf(`["10.1.2.11/24", "11.11.11.11/24", "2001:db8:1::11/64"]`), "IP=10.1.2.10/24")
	})
}

// config_test.go, "Should detect overlap between rangesets".
func TestUpstreamDetectsOverlapBetweenRangesets(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := allocConf("mynet", `[
			[{"subnet": "10.1.2.0/24"}, {"subnet": "10.2.2.0/24"}],
			[{"subnet": "10.1.4.0/24"}, {"subnet": "10.1.6.0/24"}, {"subnet": "10.1.8.0/24"}, {"subnet": "10.1.2.0/24"}]]`)
		assert.EqualError(t, p.addErr(conf, "a", "eth0", ""), "range set 0 overlaps with 1")
	})
}

// config_test.go, "Should detect overlap within rangeset".
func TestUpstreamDetectsOverlapWithinRangeset(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := allocConf("mynet", `[[{"subnet": "10.1.0.0/22"}, {"subnet": "10.1.2.0/24"}]]`)
		assert.EqualError(t, p.addErr(conf, "a", "eth0", ""), "invalid range set 0: subnets 10.1.0.1-10.1.3.254 and 10.1.2.1-10.1.2.254 overlap")
	})
}

// config_test.go, "should error on rangesets with different families".
func TestUpstreamErrorsOnRangesetsWithDifferentFamilies(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := allocConf("mynet", `[[{"subnet": "10.1.0.0/22"}, {"subnet": "2001:db8:5::/64"}]]`)
		assert.EqualError(t, p.addErr(conf, "a", "eth0", ""), "invalid range set 0: mixed address families")
	})
}

// config_test.go, "Should should error on too many ranges".
func TestUpstreamErrorsOnTooManyRanges(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := `{"cniVersion": "0.2.0", "name": "mynet", "type": "ipvlan", "master": "foo0",
			"ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "11.1.2.0/24"}]]}}`
		assert.EqualError(t, p.addErr(conf, "a", "eth0", ""), "CNI version 0.2.0 does not support more than 1 address per family")
	})
}

// config_test.go, "Should allow one v4 and v6 range for 0.2.0".
func TestUpstreamAllowsOneV4AndV6RangeFor020(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := `{"cniVersion": "0.2.0", "name": "mynet", "type": "ipvlan", "master": "foo0",
			"ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "2001:db8:1::/48"}]]}}`
		assert.Equal(t, []string{"10.1.2.2", "2001:db8:1::2"}, ips(p.mustAdd(conf, "a", "eth0", "")))
	})
}

// config_test.go, "Should parse custom IPs from runtime configuration":
// none of the three is in the network's range, so the ADD lists them all
// (host-local: in a random order).
func TestUpstreamParsesCustomIPsFromRuntimeConfiguration(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		conf := `{"cniVersion": "0.3.1", "name": "mynet", "type": "ipvlan", "master": "foo0",
			"runtimeConfig": {"ips": ["192.168.0.1", "192.168.0.5/24", "2001:db8::1/64"]},
			"ipam": {"type": "host-local", "subnet": "10.1.2.0/24"}}`
		p.loose = true
		assert.ElementsMatch(t, []string{"192.168.0.1", "192.168.0.5", "2001:db8::1"}, unplaced(t, p.addErr(conf, "a", "eth0", "")))
	})
}
