package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parityOp is one exec of a parity case.
type parityOp struct {
	cmd     string // ADD or DEL
	id      string
	cniArgs string
	fails   bool // what host-local does; the test checks it
}

// parityCase is a network configuration and a sequence of execs that
// host-local and this plugin must answer alike.
type parityCase struct {
	name       string
	cniVersion string // "1.1.0" if empty
	ipam       string // the ipam section without type and dataDir, JSON
	top        string // more top-level fields, JSON without braces ("runtimeConfig": ...)
	ops        []parityOp
}

func add(id string) parityOp           { return parityOp{cmd: "ADD", id: id} }
func addFails(id string) parityOp      { return parityOp{cmd: "ADD", id: id, fails: true} }
func del(id string) parityOp           { return parityOp{cmd: "DEL", id: id} }
func addArgs(id, args string) parityOp { return parityOp{cmd: "ADD", id: id, cniArgs: args} }
func addArgsFails(id, args string) parityOp {
	return parityOp{cmd: "ADD", id: id, cniArgs: args, fails: true}
}
func configFails(name, ipam string) parityCase {
	return parityCase{name: name, ipam: ipam, ops: []parityOp{addFails("x")}}
}

// The cases port host-local's own tests (plugins v1.7.1,
// plugins/ipam/host-local): host_local_test.go ("allocates and releases
// addresses with ADD/DEL", "allocates a custom IP when requested by config
// args", "allocates custom IPs from multiple ranges", "fails if a
// requested custom IP is not used"), backend/allocator/allocator_test.go
// ("should allocate ips in round robin", "should not allocate the
// broadcast address", "when out of ips", "when lastReservedIP is at the
// end of one of multi ranges"), config_test.go ("Should parse an
// old-style config", "Should parse CNI_ARGS env", "Should detect overlap
// between rangesets", "Should detect overlap within rangeset", "should
// error on rangesets with different families", "Should should error on
// too many ranges", "Should parse custom IPs from runtime configuration")
// and range_test.go ("Should reject a network that's too small", "should
// reject ipv4 network with host bit set", "should reject invalid
// RangeStart and RangeEnd specifications").
var parityCases = []parityCase{
	{name: "old-style single range, round-robin past a release", ipam: `"subnet": "10.1.2.0/24"`,
		ops: []parityOp{add("a"), add("b"), del("a"), add("c"), addFails("b")}},
	{name: "dual-stack, several ranges per set", ipam: `"ranges": [[{"subnet": "10.1.2.0/30"}, {"subnet": "10.1.3.0/30"}], [{"subnet": "2001:db8:1::/126"}]]`,
		ops: []parityOp{add("a"), add("b"), addFails("c"), del("a"), add("d")}},
	{name: "rangeStart, rangeEnd and a gateway inside the range", ipam: `"ranges": [[{"subnet": "10.1.2.0/24", "rangeStart": "10.1.2.40", "rangeEnd": "10.1.2.42", "gateway": "10.1.2.41"}]]`,
		ops: []parityOp{add("a"), add("b"), addFails("c"), del("a"), add("c")}},
	{name: "IPv6 uses the last address", ipam: `"ranges": [[{"subnet": "2001:db8::/126"}]]`,
		ops: []parityOp{add("a"), add("b"), addFails("c")}},
	{name: "routes, resolvConf and an old result version", cniVersion: "0.3.1", ipam: `"subnet": "10.1.2.0/24", "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.1.2.1"}], "resolvConf": "RESOLVCONF"`,
		ops: []parityOp{add("a")}},
	{name: "a requested address in CNI_ARGS", ipam: `"subnet": "10.1.2.0/24"`,
		ops: []parityOp{addArgs("a", "IP=10.1.2.9"), addArgsFails("b", "IP=10.1.2.9"), addArgs("c", "IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.1.2.10"),
			addArgsFails("d", "K8S_POD_NAME=p"), addArgsFails("e", "IP=10.1.2.1"), add("g"),
			// Last: host-local allocates from the range before it finds
			// the request unmet, and releases the address but not its
			// round-robin hint; this plugin commits nothing (a caveat).
			addArgsFails("f", "IP=10.9.9.9")}},
	{name: "requested addresses in args", ipam: `"ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "2001:db8:1::/64"}]]`,
		top: `"args": {"cni": {"ips": ["10.1.2.10", "2001:db8:1::10"]}}`, ops: []parityOp{add("a"), addFails("b")}},
	{name: "a requested address in runtimeConfig", ipam: `"ranges": [[{"subnet": "10.1.2.0/24"}]]`,
		top: `"runtimeConfig": {"ips": ["10.1.2.11/24"]}`, ops: []parityOp{add("a"), addFails("b")}},
	{name: "two requested addresses in one set", ipam: `"ranges": [[{"subnet": "10.1.2.0/24"}]]`,
		top: `"args": {"cni": {"ips": ["10.1.2.10"]}}, "runtimeConfig": {"ips": ["10.1.2.11"]}`, ops: []parityOp{addFails("a")}},
	{name: "runtimeConfig ipRanges come first", ipam: `"ranges": [[{"subnet": "10.1.2.0/24"}]]`,
		top: `"runtimeConfig": {"ipRanges": [[{"subnet": "10.1.9.0/24"}]]}`, ops: []parityOp{add("a"), add("b")}},
	configFails("no ranges", `"routes": []`),
	configFails("overlapping range sets", `"ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "10.1.2.128/25"}]]`),
	configFails("overlap within a set", `"ranges": [[{"subnet": "10.1.2.0/24"}, {"subnet": "10.1.2.0/25"}]]`),
	configFails("mixed families in a set", `"ranges": [[{"subnet": "10.1.2.0/24"}, {"subnet": "2001:db8::/64"}]]`),
	configFails("a network too small", `"ranges": [[{"subnet": "10.1.2.0/31"}]]`),
	configFails("host bits set", `"ranges": [[{"subnet": "10.1.2.5/24"}]]`),
	configFails("rangeStart outside the subnet", `"ranges": [[{"subnet": "10.1.2.0/24", "rangeStart": "10.1.3.1"}]]`),
	configFails("rangeEnd before rangeStart", `"ranges": [[{"subnet": "10.1.2.0/24", "rangeStart": "10.1.2.50", "rangeEnd": "10.1.2.40"}]]`),
	configFails("a bad address", `"ranges": [[{"subnet": "10.1.2.0/24", "gateway": "10.1.2"}]]`),
	{name: "two IPv4 sets need CNI 0.3.0", cniVersion: "0.2.0", ipam: `"ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "10.1.3.0/24"}]]`, ops: []parityOp{addFails("a")}},
}

// TestParityWithHostLocal runs each case with the real host-local and
// with this plugin in phases 0 and 3, each on its own node, and compares
// every answer byte for byte (the result an ADD prints) or, for a failure,
// that both fail.
func TestParityWithHostLocal(t *testing.T) {
	bin := plugins(t)
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(resolv, []byte("nameserver 10.1.0.53\nsearch a.example b.example\noptions ndots:2\n# done\n"), 0o644))
	for _, c := range parityCases {
		t.Run(c.name, func(t *testing.T) {
			var ref []string
			for _, r := range []runner{hl, ps("legacy"), ps("contract")} {
				got := runParity(t, bin, r, c, resolv)
				if r == hl {
					ref = got
					for i, op := range c.ops {
						require.Equal(t, op.fails, strings.HasPrefix(got[i], "error"), "host-local, op %d (%s %s): %s", i, op.cmd, op.id, got[i])
					}
					continue
				}
				for i := range ref {
					if strings.HasPrefix(ref[i], "error") {
						assert.True(t, strings.HasPrefix(got[i], "error"), "%s, op %d: host-local failed (%s), this plugin answered %s", r, i, ref[i], got[i])
						continue
					}
					assert.Equal(t, ref[i], got[i], "%s, op %d", r, i)
				}
			}
		})
	}
}

// runParity runs c's ops with r on a fresh data directory and returns
// each op's answer: what it printed, or "error: ..." when it failed.
func runParity(t *testing.T, bin string, r runner, c parityCase, resolv string) []string {
	t.Helper()
	dataDir := t.TempDir()
	ipam := `{"type": "` + r.plugin + `", "dataDir": ` + quote(dataDir)
	if r.plugin == ourPlugin {
		ipam += `, "phase": ` + quote(r.phase)
	}
	ipam += ", " + strings.ReplaceAll(c.ipam, "RESOLVCONF", resolv) + "}"
	version := c.cniVersion
	if version == "" {
		version = "1.1.0"
	}
	conf := `{"cniVersion": ` + quote(version) + `, "name": "parity", "type": "bridge", "ipam": ` + ipam
	if c.top != "" {
		conf += ", " + c.top
	}
	conf += "}"
	var out []string
	for _, op := range c.ops {
		args := &invoke.Args{Command: op.cmd, ContainerID: op.id, NetNS: "/var/run/netns/" + op.id, IfName: "eth0", PluginArgsStr: op.cniArgs, Path: bin}
		res, err := (&invoke.RawExec{}).ExecPlugin(context.Background(), filepath.Join(bin, r.plugin), []byte(conf), args.AsEnv())
		if err != nil {
			out = append(out, "error: "+err.Error())
			continue
		}
		out = append(out, string(res))
	}
	return out
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
