package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Ports of plugins v1.7.1, plugins/ipam/host-local/host_local_test.go,
// "host-local Operations": each test in every CNI version, as there. The
// original calls cmdAdd and cmdDel in process with skel.CmdArgs; the
// ports exec the plugin with the same configuration, container ID and
// interface. Where the original reads host-local's files, the ports read
// them for every runner that keeps them (host-local, phases 0 to 2) and
// the checkpoint for every runner that keeps one (phases 1 to 3): phase 3
// leaves host-local's files alone by design.

// specVersionHasIPVersion is testutils.SpecVersionHasIPVersion: the
// versions whose results give each address a "version".
func specVersionHasIPVersion(ver string) bool {
	return slices.Contains([]string{"0.3.0", "0.3.1", "0.4.0"}, ver)
}

// specVersionHasMultipleIPs is testutils.SpecVersionHasMultipleIPs.
func specVersionHasMultipleIPs(ver string) bool {
	ok, _ := version.GreaterThanOrEqualTo(ver, "0.3.0")
	return ok
}

func writeResolvConf(t *testing.T, p *plugin, contents string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(p.dataDir, "resolv.conf"), []byte(contents), 0o644))
}

// host_local_test.go, "[%s] allocates and releases addresses with ADD/DEL".
func TestUpstreamAllocatesAndReleasesWithADDDEL(t *testing.T) {
	t.Parallel()
	for _, ver := range allSpecVersions {
		t.Run(ver, func(t *testing.T) {
			upstream(t, func(t *testing.T, p *plugin) {
				writeResolvConf(t, p, "nameserver 192.0.2.3")
				conf := fmt.Sprintf(`{
					"cniVersion": "%s", "name": "mynet", "type": "ipvlan", "master": "foo0",
					"ipam": {
						"type": "host-local", "dataDir": "%s", "resolvConf": "%s/resolv.conf",
						"ranges": [
							[{ "subnet": "10.1.2.0/24" }, {"subnet": "10.2.2.0/24"}],
							[{ "subnet": "2001:db8:1::0/64" }]
						],
						"routes": [
							{"dst": "0.0.0.0/0"},
							{"dst": "::/0"},
							{"dst": "192.168.0.0/16", "gw": "1.1.1.1"},
							{"dst": "2001:db8:2::0/64", "gw": "2001:db8:3::1"}
						]
					}
				}`, ver, p.dataDir, p.dataDir)
				res, raw, err := p.add(conf, "dummy", "eth0", "")
				require.NoError(t, err)
				if specVersionHasIPVersion(ver) {
					assert.Contains(t, string(raw), `"version":`)
				}
				require.Len(t, res.IPs, 2)
				assert.Equal(t, "10.1.2.2/24", res.IPs[0].Address.String())
				assert.Equal(t, "10.1.2.1", res.IPs[0].Gateway.String())
				assert.Equal(t, "2001:db8:1::2/64", res.IPs[1].Address.String())
				assert.Equal(t, "2001:db8:1::1", res.IPs[1].Gateway.String())
				var routes []string
				for _, r := range res.Routes {
					routes = append(routes, r.String())
				}
				for _, want := range []*types.Route{
					{Dst: mustCIDR(t, "0.0.0.0/0")},
					{Dst: mustCIDR(t, "::/0")},
					{Dst: mustCIDR(t, "192.168.0.0/16"), GW: mustCIDR(t, "1.1.1.1/32").IP},
					{Dst: mustCIDR(t, "2001:db8:2::0/64"), GW: mustCIDR(t, "2001:db8:3::1/128").IP},
				} {
					assert.Contains(t, routes, want.String())
				}
				p.assertHeld("mynet", "10.1.2.2", "dummy", "eth0")
				p.assertHeld("mynet", "2001:db8:1::2", "dummy", "eth0")
				assert.Equal(t, "10.1.2.2", p.lastReserved("mynet", 0))
				assert.Equal(t, "2001:db8:1::2", p.lastReserved("mynet", 1))

				require.NoError(t, p.del(conf, "dummy", "eth0"))
				p.assertFree("mynet", "10.1.2.2")
				p.assertFree("mynet", "2001:db8:1::2")
			})
		})
	}
}

// host_local_test.go, "[%s] allocates and releases addresses on specific
// interface with ADD/DEL".
func TestUpstreamAllocatesAndReleasesOnSpecificInterface(t *testing.T) {
	t.Parallel()
	for _, ver := range allSpecVersions {
		t.Run(ver, func(t *testing.T) {
			upstream(t, func(t *testing.T, p *plugin) {
				writeResolvConf(t, p, "nameserver 192.0.2.3")
				confN := func(network, master, subnet string) string {
					return fmt.Sprintf(`{
						"cniVersion": "%s", "name": "%s", "type": "ipvlan", "master": "%s",
						"ipam": {"type": "host-local", "dataDir": "%s", "resolvConf": "%s/resolv.conf", "ranges": [[{ "subnet": "%s" }]]}
					}`, ver, network, master, p.dataDir, p.dataDir, subnet)
				}
				conf0, conf1 := confN("mynet0", "foo0", "10.1.2.0/24"), confN("mynet1", "foo1", "10.2.2.0/24")
				_, raw, err := p.add(conf0, "dummy", "eth0", "")
				require.NoError(t, err)
				if specVersionHasIPVersion(ver) {
					assert.Contains(t, string(raw), `"version":`)
				}
				_, raw, err = p.add(conf1, "dummy", "eth1", "")
				require.NoError(t, err)
				if specVersionHasIPVersion(ver) {
					assert.Contains(t, string(raw), `"version":`)
				}
				p.assertHeld("mynet0", "10.1.2.2", "dummy", "eth0")
				p.assertHeld("mynet1", "10.2.2.2", "dummy", "eth1")

				require.NoError(t, p.del(conf0, "dummy", "eth0"))
				p.assertFree("mynet0", "10.1.2.2")
				p.assertHeld("mynet1", "10.2.2.2", "dummy", "eth1") // eth1's is not released with eth0's

				require.NoError(t, p.del(conf1, "dummy", "eth1"))
				p.assertFree("mynet1", "10.2.2.2")
			})
		})
	}
}

// host_local_test.go, "[%s] repeat allocating addresses on specific
// interface for same container ID with ADD".
func TestUpstreamRepeatAllocatingForSameContainerID(t *testing.T) {
	t.Parallel()
	for _, ver := range allSpecVersions {
		t.Run(ver, func(t *testing.T) {
			upstream(t, func(t *testing.T, p *plugin) {
				conf := fmt.Sprintf(`{
					"cniVersion": "%s", "name": "mynet0", "type": "ipvlan", "master": "foo0",
					"ipam": {"type": "host-local", "dataDir": "%s", "ranges": [[{ "subnet": "10.1.2.0/24" }]]}
				}`, ver, p.dataDir)
				res0, raw, err := p.add(conf, "dummy", "eth0", "")
				require.NoError(t, err)
				if specVersionHasIPVersion(ver) {
					assert.Contains(t, string(raw), `"version":`)
				}
				assert.Equal(t, []string{"10.1.2.2"}, ips(res0))

				p.addErr(conf, "dummy", "eth0", "") // the same container ID again

				res1, raw, err := p.add(conf, "dummy1", "eth0", "")
				require.NoError(t, err)
				if specVersionHasIPVersion(ver) {
					assert.Contains(t, string(raw), `"version":`)
				}
				assert.Equal(t, "10.1.2.3/24", res1.IPs[0].Address.String())

				p.addErr(conf, "dummy", "eth0", "") // and once more

				require.NoError(t, p.del(conf, "dummy", "eth0"))
				p.assertFree("mynet0", "10.1.2.2")
				require.NoError(t, p.del(conf, "dummy1", "eth0"))
			})
		})
	}
}

// host_local_test.go, "[%s] verify DEL works on backwards compatible
// allocate": host-local's file rewritten as plugins before v0.8.0 wrote
// it, naming the container alone, is released by a DEL that names the
// interface too. Phase 3 does not read host-local's files, so there the
// rewrite changes nothing and the DEL releases the checkpoint's entry.
func TestUpstreamDELWorksOnBackwardsCompatibleAllocate(t *testing.T) {
	t.Parallel()
	for _, ver := range allSpecVersions {
		t.Run(ver, func(t *testing.T) {
			upstream(t, func(t *testing.T, p *plugin) {
				writeResolvConf(t, p, "nameserver 192.0.2.3")
				conf := fmt.Sprintf(`{
					"cniVersion": "%s", "name": "mynet", "type": "ipvlan", "master": "foo",
					"ipam": {"type": "host-local", "dataDir": "%s", "resolvConf": "%s/resolv.conf", "ranges": [[{ "subnet": "10.1.2.0/24" }]]}
				}`, ver, p.dataDir, p.dataDir)
				_, raw, err := p.add(conf, "dummy", "eth0", "")
				require.NoError(t, err)
				if specVersionHasIPVersion(ver) {
					assert.Contains(t, string(raw), `"version":`)
				}
				p.assertHeld("mynet", "10.1.2.2", "dummy", "eth0")
				ipFile := filepath.Join(p.dataDir, "mynet", "10.1.2.2")
				if p.writesFiles() {
					require.NoError(t, os.WriteFile(ipFile, []byte(strings.TrimSpace("dummy")), 0o644))
				}

				require.NoError(t, p.del(conf, "dummy", "eth0"))
				assert.NoFileExists(t, ipFile)
				p.assertFree("mynet", "10.1.2.2")
			})
		})
	}
}

// host_local_test.go, "[%s] doesn't error when passed an unknown ID on
// DEL".
func TestUpstreamDELOfUnknownID(t *testing.T) {
	t.Parallel()
	for _, ver := range allSpecVersions {
		t.Run(ver, func(t *testing.T) {
			upstream(t, func(t *testing.T, p *plugin) {
				conf := fmt.Sprintf(`{
					"cniVersion": "%s", "name": "mynet", "type": "ipvlan", "master": "foo0",
					"ipam": {"type": "host-local", "subnet": "10.1.2.0/24", "dataDir": "%s"}
				}`, ver, p.dataDir)
				require.NoError(t, p.del(conf, "dummy", "eth0"))
			})
		})
	}
}

// host_local_test.go, "[%s] ignores whitespace in disk files": the
// original passes the container ID "   dummy\n " to cmdAdd directly and
// finds "dummy" in the file. An exec'd plugin never sees such an ID: skel
// refuses it before the plugin runs (CNI code 4, "invalid characters in
// containerID"), for host-local as for this plugin, and that is what the
// port checks; the trimming itself has no exec'd equivalent.
func TestUpstreamIgnoresWhitespaceInDiskFiles(t *testing.T) {
	t.Parallel()
	for _, ver := range allSpecVersions {
		t.Run(ver, func(t *testing.T) {
			upstream(t, func(t *testing.T, p *plugin) {
				conf := fmt.Sprintf(`{
					"cniVersion": "%s", "name": "mynet", "type": "ipvlan", "master": "foo0",
					"ipam": {"type": "host-local", "subnet": "10.1.2.0/24", "dataDir": "%s"}
				}`, ver, p.dataDir)
				err := p.addErr(conf, "   dummy\n ", "eth0", "")
				assert.Equal(t, uint(types.ErrInvalidEnvironmentVariables), cniCodeOf(err))
				assert.ErrorContains(t, err, "invalid characters in containerID")
				require.NoError(t, p.del(conf, "dummy", "eth0"))
			})
		})
	}
}

// host_local_test.go, "[%s] does not output an error message upon initial
// subnet creation": nothing about the round-robin hint, which a fresh
// network has none of, on stderr.
func TestUpstreamNoErrorMessageUponInitialSubnetCreation(t *testing.T) {
	t.Parallel()
	for _, ver := range allSpecVersions {
		t.Run(ver, func(t *testing.T) {
			upstream(t, func(t *testing.T, p *plugin) {
				conf := fmt.Sprintf(`{
					"cniVersion": "%s", "name": "mynet", "type": "ipvlan", "master": "foo0",
					"ipam": {"type": "host-local", "subnet": "10.1.2.0/24", "dataDir": "%s"}
				}`, ver, p.dataDir)
				out, err, stderr := p.execPlugin("ADD", conf, "testing", "eth0", "")
				require.NoError(t, err)
				assert.NotContains(t, string(out)+stderr, "Error retrieving last reserved ip")
			})
		})
	}
}

// host_local_test.go, "[%s] allocates a custom IP when requested by
// config args".
func TestUpstreamAllocatesCustomIPFromConfigArgs(t *testing.T) {
	t.Parallel()
	for _, ver := range allSpecVersions {
		t.Run(ver, func(t *testing.T) {
			upstream(t, func(t *testing.T, p *plugin) {
				conf := fmt.Sprintf(`{
					"cniVersion": "%s", "name": "mynet", "type": "ipvlan", "master": "foo0",
					"ipam": {"type": "host-local", "dataDir": "%s", "ranges": [[{ "subnet": "10.1.2.0/24" }]]},
					"args": {"cni": {"ips": ["10.1.2.88"]}}
				}`, ver, p.dataDir)
				res := p.mustAdd(conf, "dummy", "eth0", "")
				assert.Equal(t, []string{"10.1.2.88"}, ips(res))
			})
		})
	}
}

// host_local_test.go, "[%s] allocates custom IPs from multiple ranges".
func TestUpstreamAllocatesCustomIPsFromMultipleRanges(t *testing.T) {
	t.Parallel()
	for _, ver := range allSpecVersions {
		t.Run(ver, func(t *testing.T) {
			upstream(t, func(t *testing.T, p *plugin) {
				writeResolvConf(t, p, "nameserver 192.0.2.3")
				conf := fmt.Sprintf(`{
					"cniVersion": "%s", "name": "mynet", "type": "ipvlan", "master": "foo0",
					"ipam": {"type": "host-local", "dataDir": "%s", "ranges": [[{ "subnet": "10.1.2.0/24" }], [{ "subnet": "10.1.3.0/24" }]]},
					"args": {"cni": {"ips": ["10.1.2.88", "10.1.3.77"]}}
				}`, ver, p.dataDir)
				if !specVersionHasMultipleIPs(ver) {
					err := p.addErr(conf, "dummy", "eth0", "")
					assert.EqualError(t, err, fmt.Sprintf("CNI version %s does not support more than 1 address per family", ver))
					return
				}
				res := p.mustAdd(conf, "dummy", "eth0", "")
				assert.Equal(t, []string{"10.1.2.88", "10.1.3.77"}, ips(res))
			})
		})
	}
}

// host_local_test.go, "[%s] allocates custom IPs from multiple protocols".
func TestUpstreamAllocatesCustomIPsFromMultipleProtocols(t *testing.T) {
	t.Parallel()
	for _, ver := range allSpecVersions {
		t.Run(ver, func(t *testing.T) {
			upstream(t, func(t *testing.T, p *plugin) {
				writeResolvConf(t, p, "nameserver 192.0.2.3")
				conf := fmt.Sprintf(`{
					"cniVersion": "%s", "name": "mynet", "type": "ipvlan", "master": "foo0",
					"ipam": {"type": "host-local", "dataDir": "%s",
						"ranges": [[{"subnet":"172.16.1.0/24"}, { "subnet": "10.1.2.0/24" }], [{ "subnet": "2001:db8:1::/48" }]]},
					"args": {"cni": {"ips": ["10.1.2.88", "2001:db8:1::999"]}}
				}`, ver, p.dataDir)
				res := p.mustAdd(conf, "dummy", "eth0", "")
				assert.Equal(t, []string{"10.1.2.88", "2001:db8:1::999"}, ips(res))
			})
		})
	}
}

// host_local_test.go, "[%s] fails if a requested custom IP is not used":
// two requested addresses in one range set. host-local takes either
// (its requests are a map), so the message's list is compared loosely.
func TestUpstreamFailsIfRequestedCustomIPIsNotUsed(t *testing.T) {
	t.Parallel()
	for _, ver := range allSpecVersions {
		t.Run(ver, func(t *testing.T) {
			upstream(t, func(t *testing.T, p *plugin) {
				conf := fmt.Sprintf(`{
					"cniVersion": "%s", "name": "mynet", "type": "ipvlan", "master": "foo0",
					"ipam": {"type": "host-local", "dataDir": "%s", "ranges": [[{ "subnet": "10.1.2.0/24" }], [{ "subnet": "10.1.3.0/24" }]]},
					"args": {"cni": {"ips": ["10.1.2.88", "10.1.2.77"]}}
				}`, ver, p.dataDir)
				if !specVersionHasMultipleIPs(ver) {
					err := p.addErr(conf, "dummy", "eth0", "")
					assert.EqualError(t, err, fmt.Sprintf("CNI version %s does not support more than 1 address per family", ver))
					return
				}
				p.loose = true
				err := p.addErr(conf, "dummy", "eth0", "")
				assert.True(t, strings.HasPrefix(err.Error(), "failed to allocate all requested IPs: 10.1.2."), err.Error())
			})
		})
	}
}
