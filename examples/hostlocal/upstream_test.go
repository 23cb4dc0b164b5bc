package main

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// The upstream_*_test.go files port host-local's own tests (plugins
// v1.7.1, plugins/ipam/host-local: host_local_test.go, dns_test.go and
// backend/allocator/*_test.go), one Go test per Ginkgo It (and one for
// the DescribeTable), each citing the original's file and name. Where the
// original calls host-local's Go functions (Range.Canonicalize,
// LoadIPAMConfig, the allocator over a fake store), the port execs a
// plugin binary with a network configuration that makes the same function
// decide, and reads the decision from what the plugin prints: the
// addresses and gateways of its result, and the range set that its
// "requested IP address ... is not available in range set <start>-<end>"
// error spells out. What no exec can show is said at the test.
//
// Every port runs against the real host-local built from the module cache
// (the control) and this plugin in each phase, each on a data directory
// of its own, and then compares every exec's outcome with host-local's:
// the same bytes on stdout, or the same CNI error code and message.

// upstreamRunners are who runs every ported test: host-local first, the
// reference of the others.
var upstreamRunners = []runner{hl, ps("legacy"), ps("expand"), ps("migrate"), ps("contract")}

// allSpecVersions is testutils.AllSpecVersions of the plugins module:
// host_local_test.go runs each test in each of them.
var allSpecVersions = []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// plugin is one runner on a node of its own, as one ported test sees it.
type plugin struct {
	t       *testing.T
	r       runner
	bin     string // CNI_PATH
	dataDir string // host-local's dataDir: put in every configuration
	execs   []outcome
	loose   bool // the next exec's message ends in a list that host-local makes at random
}

// outcome is what one exec answered.
type outcome struct {
	what  string // command, container and interface, for messages
	out   string // what a success printed
	code  uint   // a failure's CNI code
	msg   string // a failure's message
	loose bool   // compare msg up to its last ": ", before a list host-local makes at random
}

// upstream runs body once per runner, in parallel, each on a data
// directory of its own, and then checks that every exec of this plugin
// answered as host-local's did.
func upstream(t *testing.T, body func(t *testing.T, p *plugin)) {
	t.Helper()
	bin := plugins(t)
	got := make([][]outcome, len(upstreamRunners))
	t.Run("runners", func(t *testing.T) {
		// The runners run at once, not as parallel subtests, which
		// -parallel would limit to one per core: an exec mostly waits on
		// fsync and process start.
		var wg sync.WaitGroup
		for i, r := range upstreamRunners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.Run(r.String(), func(t *testing.T) {
					p := &plugin{t: t, r: r, bin: bin, dataDir: t.TempDir()}
					body(t, p)
					got[i] = p.execs
				})
			}()
		}
		wg.Wait()
	})
	if t.Failed() {
		return
	}
	ref := got[0]
	for i, execs := range got[1:] {
		r := upstreamRunners[i+1]
		if !assert.Len(t, execs, len(ref), "%s made another number of execs than host-local", r) {
			continue
		}
		for j, o := range execs {
			want := ref[j]
			require.Equal(t, want.what, o.what, "%s, exec %d", r, j)
			assert.Equal(t, want.code, o.code, "%s, exec %d (%s): the CNI code; host-local: %q, %s: %q", r, j, o.what, want.msg, r, o.msg)
			if want.loose {
				assert.Equal(t, beforeList(want.msg), beforeList(o.msg), "%s, exec %d (%s): the message before its list", r, j, o.what)
			} else {
				assert.Equal(t, want.msg, o.msg, "%s, exec %d (%s): the message", r, j, o.what)
			}
			assert.Equal(t, want.out, o.out, "%s, exec %d (%s): the result", r, j, o.what)
		}
	}
}

// beforeList is a message up to its last ": ".
func beforeList(msg string) string {
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[:i]
	}
	return msg
}

// conf returns the network configuration JSON for this runner: ipam.type
// is the runner's plugin, ipam.dataDir the node's, and for this plugin
// ipam.phase the runner's phase.
func (p *plugin) conf(raw string) []byte {
	p.t.Helper()
	var m map[string]any
	require.NoError(p.t, json.Unmarshal([]byte(raw), &m), "the test's configuration")
	ipam, ok := m["ipam"].(map[string]any)
	require.True(p.t, ok, "the test's configuration has no ipam section")
	ipam["type"] = p.r.plugin
	ipam["dataDir"] = p.dataDir
	if p.r.plugin == ourPlugin {
		ipam["phase"] = p.r.phase
	}
	b, err := json.Marshal(m)
	require.NoError(p.t, err)
	return b
}

// execPlugin execs the runner's plugin as pkg/invoke does, records the
// outcome, and returns what it printed, its CNI error, and its stderr.
func (p *plugin) execPlugin(cmd, conf, id, ifname, cniArgs string) ([]byte, error, string) {
	p.t.Helper()
	var stderr strings.Builder
	args := &invoke.Args{Command: cmd, ContainerID: id, NetNS: "/var/run/netns/test", IfName: ifname, PluginArgsStr: cniArgs, Path: p.bin}
	out, err := (&invoke.RawExec{Stderr: &stderr}).ExecPlugin(context.Background(), filepath.Join(p.bin, p.r.plugin), p.conf(conf), args.AsEnv())
	o := outcome{what: strings.Join([]string{cmd, id, ifname, cniArgs}, " "), out: string(out), loose: p.loose}
	p.loose = false
	if err != nil {
		var e *types.Error
		require.True(p.t, errors.As(err, &e), "%s: not a CNI error: %v", o.what, err)
		o.code, o.msg = e.Code, e.Error()
	}
	p.execs = append(p.execs, o)
	return out, err, stderr.String()
}

// add execs ADD and returns the result, converted to the current
// version, or the error.
func (p *plugin) add(conf, id, ifname, cniArgs string) (*current.Result, []byte, error) {
	p.t.Helper()
	out, err, _ := p.execPlugin("ADD", conf, id, ifname, cniArgs)
	if err != nil {
		return nil, nil, err
	}
	return p.result(conf, out), out, nil
}

// mustAdd execs ADD and fails the test if it fails.
func (p *plugin) mustAdd(conf, id, ifname, cniArgs string) *current.Result {
	p.t.Helper()
	res, _, err := p.add(conf, id, ifname, cniArgs)
	require.NoError(p.t, err, "ADD %s %s %s", id, ifname, cniArgs)
	return res
}

// addErr execs ADD, fails the test if it succeeds, and returns the error.
func (p *plugin) addErr(conf, id, ifname, cniArgs string) error {
	p.t.Helper()
	_, _, err := p.add(conf, id, ifname, cniArgs)
	require.Error(p.t, err, "ADD %s %s %s", id, ifname, cniArgs)
	return err
}

func (p *plugin) del(conf, id, ifname string) error {
	p.t.Helper()
	_, err, _ := p.execPlugin("DEL", conf, id, ifname, "")
	return err
}

// result parses what ADD printed, in the configuration's CNI version, and
// converts it to the current version.
func (p *plugin) result(conf string, out []byte) *current.Result {
	p.t.Helper()
	var v struct {
		CNIVersion string `json:"cniVersion"`
	}
	require.NoError(p.t, json.Unmarshal([]byte(conf), &v))
	r, err := version.NewResult(v.CNIVersion, out)
	require.NoError(p.t, err, "%s", out)
	res, err := current.GetResult(r)
	require.NoError(p.t, err)
	return res
}

// writesFiles reports whether the runner keeps host-local's files: all
// but phase 3, which leaves them alone by design.
func (p *plugin) writesFiles() bool { return p.r.plugin == hostLocal || p.r.phase != "contract" }

// writesCheckpoint reports whether the runner keeps the checkpoint's
// entries: phases 1 to 3.
func (p *plugin) writesCheckpoint() bool {
	return p.r.plugin == ourPlugin && p.r.phase != "legacy"
}

// assertHeld checks that ip is allocated to the attachment where the
// runner keeps allocations: host-local's file (named after the address,
// holding "<id>\r\n<ifname>") and the checkpoint.
func (p *plugin) assertHeld(network, ip, id, ifname string) {
	p.t.Helper()
	if p.writesFiles() {
		contents, err := os.ReadFile(filepath.Join(p.dataDir, network, ip))
		if assert.NoError(p.t, err, "host-local's file for %s", ip) {
			assert.Equal(p.t, id+"\r\n"+ifname, string(contents))
		}
	}
	if p.writesCheckpoint() {
		got, ok := p.checkpointed(network)[key{Network: network, ContainerID: id, IfName: ifname}]
		assert.True(p.t, ok && slices.Contains(got.IPs, netip.MustParseAddr(ip)), "the checkpoint does not give %s to %s/%s: %v", ip, id, ifname, got)
	}
}

// assertFree checks that no allocation holds ip.
func (p *plugin) assertFree(network, ip string) {
	p.t.Helper()
	if p.writesFiles() {
		assert.NoFileExists(p.t, filepath.Join(p.dataDir, network, ip))
	}
	if p.writesCheckpoint() {
		for k, v := range p.checkpointed(network) {
			assert.NotContains(p.t, v.IPs, netip.MustParseAddr(ip), "the checkpoint still gives %s to %v", ip, k)
		}
	}
}

// checkpointed reads the network's checkpoint at its default path.
func (p *plugin) checkpointed(network string) map[key]alloc {
	p.t.Helper()
	f, err := checkpoint.Open[key, alloc](context.Background(), filepath.Join(p.dataDir, checkpointDir, network+".json"))
	require.NoError(p.t, err)
	defer f.Close()
	snap, err := f.Load(context.Background())
	if errors.Is(err, checkpoint.ErrNotExist) {
		return nil
	}
	require.NoError(p.t, err)
	return snap.Entries
}

// lastReserved reads host-local's round-robin hint, which every runner
// keeps (phase 3 included).
func (p *plugin) lastReserved(network string, rangeSet int) string {
	p.t.Helper()
	b, err := os.ReadFile(filepath.Join(p.dataDir, network, "last_reserved_ip."+string(rune('0'+rangeSet))))
	require.NoError(p.t, err)
	return string(b)
}

// setLastReserved writes host-local's round-robin hint, as the store of
// the allocator tests (backend/testing.FakeStore) is given one.
func (p *plugin) setLastReserved(network string, rangeSet int, ip string) {
	p.t.Helper()
	dir := filepath.Join(p.dataDir, network)
	require.NoError(p.t, os.MkdirAll(dir, 0o755))
	require.NoError(p.t, os.WriteFile(filepath.Join(dir, "last_reserved_ip."+string(rune('0'+rangeSet))), []byte(ip), 0o600))
}

// cniCodeOf is the code of a CNI error, or 0.
func cniCodeOf(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// ips returns the addresses of a result, as strings, in order.
func ips(res *current.Result) []string {
	out := make([]string, len(res.IPs))
	for i, ipc := range res.IPs {
		out[i] = ipc.Address.IP.String()
	}
	return out
}

// mustCIDR is host_local_test.go's: an address with its prefix length.
func mustCIDR(t *testing.T, s string) net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	require.NoError(t, err)
	n.IP = ip
	return *n
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
