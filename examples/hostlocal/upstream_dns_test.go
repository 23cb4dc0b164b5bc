package main

import (
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/assert"
)

// Ports of plugins v1.7.1, plugins/ipam/host-local/dns_test.go, "parsing
// resolv.conf". The originals call parseResolvConf on a file; the ports
// give the file as the network's resolvConf and read the DNS of the ADD's
// result.

// resolvDNS returns the DNS an ADD gives with contents as resolvConf.
func resolvDNS(t *testing.T, p *plugin, contents string) types.DNS {
	t.Helper()
	writeResolvConf(t, p, contents)
	conf := `{"cniVersion": "1.1.0", "name": "dns", "type": "bridge",
		"ipam": {"type": "host-local", "subnet": "10.1.2.0/24", "resolvConf": "` + p.dataDir + `/resolv.conf"}}`
	return p.mustAdd(conf, "a", "eth0", "").DNS
}

// dns_test.go, "parses a simple resolv.conf file".
func TestUpstreamParsesASimpleResolvConf(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		dns := resolvDNS(t, p, `
		nameserver 192.0.2.0
		nameserver 192.0.2.1
		`)
		assert.Equal(t, types.DNS{Nameservers: []string{"192.0.2.0", "192.0.2.1"}}, dns)
	})
}

// dns_test.go, "ignores comments".
func TestUpstreamResolvConfIgnoresComments(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		dns := resolvDNS(t, p, `
nameserver 192.0.2.0
;nameserver 192.0.2.1
`)
		assert.Equal(t, types.DNS{Nameservers: []string{"192.0.2.0"}}, dns)
	})
}

// dns_test.go, "parses all fields".
func TestUpstreamResolvConfParsesAllFields(t *testing.T) {
	t.Parallel()
	upstream(t, func(t *testing.T, p *plugin) {
		dns := resolvDNS(t, p, `
nameserver 192.0.2.0
nameserver 192.0.2.2
domain example.com
;nameserver comment
#nameserver comment
search example.net example.org
search example.gov
options one two three
options four
`)
		assert.Equal(t, types.DNS{
			Nameservers: []string{"192.0.2.0", "192.0.2.2"},
			Domain:      "example.com",
			Search:      []string{"example.net", "example.org", "example.gov"},
			Options:     []string{"one", "two", "three", "four"},
		}, dns)
	})
}
