package main

import (
	"context"
	"encoding/json"
	"fmt"
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
	cmd     string // ADD, DEL or CHECK
	id      string
	cniArgs string
	fails   bool   // what host-local does; the test checks it
	loose   bool   // host-local's message ends in a list it makes at random: compare up to it
	upTo    string // a documented difference: compare the message up to this text
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
func check(id string) parityOp      { return parityOp{cmd: "CHECK", id: id} }
func checkFails(id string) parityOp { return parityOp{cmd: "CHECK", id: id, fails: true} }
func configFails(name, ipam string) parityCase {
	return parityCase{name: name, ipam: ipam, ops: []parityOp{addFails("x")}}
}

// The cases are host-local's behaviour where its own tests (ported in
// upstream_*_test.go) do not go: round-robin past a release, several
// ranges per set, gateways inside the range, routes and DNS in an old
// result version, each way of asking for an address, CHECK, and the
// configurations host-local refuses, each refusal's text and code.
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
		top: `"args": {"cni": {"ips": ["10.1.2.10"]}}, "runtimeConfig": {"ips": ["10.1.2.11"]}`, ops: []parityOp{{cmd: "ADD", id: "a", fails: true, loose: true}}},
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
	configFails("a bad subnet", `"ranges": [[{"subnet": "10.1.2.0/33"}]]`),
	configFails("a range without a subnet", `"ranges": [[{"rangeStart": "10.1.2.1"}]]`),
	configFails("an IPv4-mapped subnet", `"ranges": [[{"subnet": "::ffff:10.1.2.0/120"}]]`),
	configFails("an IPv4-mapped subnet too small", `"ranges": [[{"subnet": "::ffff:10.1.2.0/127"}]]`),
	configFails("rangeEnd before the default start", `"ranges": [[{"subnet": "10.1.2.0/24", "rangeEnd": "10.1.2.0"}]]`),
	configFails("rangeStart of the other family", `"ranges": [[{"subnet": "10.1.2.0/24", "rangeStart": "2001:db8::1"}]]`),
	configFails("rangeEnd of the other family", `"ranges": [[{"subnet": "10.1.2.0/24", "rangeEnd": "2001:db8::1"}]]`),
	configFails("an empty range set", `"ranges": [[]]`),
	// A documented difference: encoding/json's message names the Go types
	// the configuration is read into, host-local's and this plugin's.
	{name: "ranges of the wrong type", ipam: `"ranges": {}`, ops: []parityOp{{cmd: "ADD", id: "x", fails: true, upTo: " into Go struct field "}}},
	{name: "an empty requested address", ipam: `"subnet": "10.1.2.0/24"`, top: `"args": {"cni": {"ips": [""]}}`, ops: []parityOp{addFails("a")}},
	{name: "a requested address that is no address", ipam: `"subnet": "10.1.2.0/24"`, top: `"runtimeConfig": {"ips": ["10.1.2"]}`, ops: []parityOp{addFails("a")}},
	{name: "CNI_ARGS host-local does not know or cannot read", ipam: `"subnet": "10.1.2.0/24"`,
		ops: []parityOp{addArgsFails("a", "FOO=bar"), addArgsFails("b", "IP=10.1.2"), addArgsFails("c", "IP")}},
	{name: "a gateway of the other family", ipam: `"ranges": [[{"subnet": "10.1.2.0/24", "gateway": "2001:db8::1"}]]`, ops: []parityOp{add("a")}},
	{name: "the network address as rangeStart", ipam: `"ranges": [[{"subnet": "10.1.2.0/30", "rangeStart": "10.1.2.0", "rangeEnd": "10.1.2.3"}]]`,
		ops: []parityOp{add("a"), add("b"), add("c"), addFails("d")}},
	{name: "a requested address its container holds", ipam: `"subnet": "10.1.2.0/24"`,
		ops: []parityOp{addArgs("a", "IP=10.1.2.7"), addArgsFails("a", "IP=10.1.2.7")}},
	{name: "CHECK", ipam: `"subnet": "10.1.2.0/24"`, ops: []parityOp{add("a"), check("a"), checkFails("b"), del("a"), checkFails("a")}},
	{name: "two IPv4 sets need CNI 0.3.0", cniVersion: "0.2.0", ipam: `"ranges": [[{"subnet": "10.1.2.0/24"}], [{"subnet": "10.1.3.0/24"}]]`, ops: []parityOp{addFails("a")}},
}

// TestParityWithHostLocal runs each case with the real host-local and
// with this plugin in each phase, each on its own node, and compares every
// answer byte for byte: the result an ADD prints, or a failure's CNI code
// and message.
func TestParityWithHostLocal(t *testing.T) {
	bin := plugins(t)
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(resolv, []byte("nameserver 10.1.0.53\nsearch a.example b.example\noptions ndots:2\n# done\n"), 0o644))
	for _, c := range parityCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var ref []string
			for _, r := range upstreamRunners {
				got := runParity(t, bin, r, c, resolv)
				if r == hl {
					ref = got
					for i, op := range c.ops {
						require.Equal(t, op.fails, strings.HasPrefix(got[i], "error"), "host-local, op %d (%s %s): %s", i, op.cmd, op.id, got[i])
					}
					continue
				}
				for i, op := range c.ops {
					if op.loose {
						assert.Equal(t, beforeList(ref[i]), beforeList(got[i]), "%s, op %d", r, i)
						continue
					}
					if op.upTo != "" {
						want, _, _ := strings.Cut(ref[i], op.upTo)
						have, _, _ := strings.Cut(got[i], op.upTo)
						assert.Equal(t, want, have, "%s, op %d", r, i)
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
			out = append(out, fmt.Sprintf("error %d: %v", cniCodeOf(err), err))
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
