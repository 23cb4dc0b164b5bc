package main

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/migrate"
)

func confWith(ipam string) []byte {
	return []byte(`{"cniVersion": "1.1.0", "name": "mynet", "type": "bridge", "ipam": {"type": "phaseshift-host-local", "subnet": "10.1.0.0/16"` + ipam + `}}`)
}

func TestLoadConfigDefaults(t *testing.T) {
	c, err := loadConfig(confWith(""), "")
	require.NoError(t, err)
	assert.Equal(t, migrate.PhaseLegacy, c.phase, "no phase is host-local's behaviour")
	assert.Equal(t, "/var/lib/cni/networks", c.dataDir)
	assert.Equal(t, "/var/lib/cni/networks/.phaseshift/mynet.json", c.checkpoint)
	assert.Equal(t, "/var/lib/cni/networks/mynet/last_reserved_ip.0", c.lastReservedPath(0))
	assert.False(t, c.validSet)

	c, err = loadConfig(confWith(`, "dataDir": "/run/cni"`), "")
	require.NoError(t, err)
	assert.Equal(t, "/run/cni/.phaseshift/mynet.json", c.checkpoint, "the default follows dataDir")
}

func TestLoadConfigPhase(t *testing.T) {
	for in, want := range map[string]migrate.Phase{
		`"legacy"`: migrate.PhaseLegacy, `"expand"`: migrate.PhaseExpand, `"Migrate"`: migrate.PhaseMigrate,
		`"contract"`: migrate.PhaseContract, `3`: migrate.PhaseContract, `"2"`: migrate.PhaseMigrate, `0`: migrate.PhaseLegacy,
	} {
		c, err := loadConfig(confWith(`, "phase": `+in), "")
		if assert.NoError(t, err, in) {
			assert.Equal(t, want, c.phase, in)
		}
	}
	for _, in := range []string{`"contracted"`, `4`, `-1`, `1.5`, `true`, `""`} {
		_, err := loadConfig(confWith(`, "phase": `+in), "")
		assert.ErrorContains(t, err, "phase", in)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	for name, c := range map[string]struct {
		stdin, args, want string
	}{
		"not JSON":               {stdin: `{`, want: "unexpected end of JSON input"},
		"no ipam":                {stdin: `{"cniVersion": "1.1.0", "name": "mynet"}`, want: "'ipam'"},
		"no name":                {stdin: `{"cniVersion": "1.1.0", "ipam": {"subnet": "10.1.0.0/16"}}`, want: "no name"},
		"a path as name":         {stdin: `{"cniVersion": "1.1.0", "name": "../etc", "ipam": {"subnet": "10.1.0.0/16"}}`, want: "not a valid CNI network name"},
		"relative checkpoint":    {stdin: string(confWith(`, "checkpoint": "state.json"`)), want: "absolute"},
		"unknown CNI_ARGS":       {stdin: string(confWith("")), args: "FOO=bar", want: "unknown args"},
		"bad CNI_ARGS IP":        {stdin: string(confWith("")), args: "IP=10.1.0", want: "invalid IP address"},
		"bad args.cni.ips":       {stdin: `{"cniVersion": "1.1.0", "name": "n", "ipam": {"subnet": "10.1.0.0/16"}, "args": {"cni": {"ips": ["x"]}}}`, want: "invalid IP address"},
		"empty runtimeConfig ip": {stdin: `{"cniVersion": "1.1.0", "name": "n", "ipam": {"subnet": "10.1.0.0/16"}, "runtimeConfig": {"ips": [""]}}`, want: "cannot understand ip"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := loadConfig([]byte(c.stdin), c.args)
			assert.ErrorContains(t, err, c.want)
		})
	}
}

// Requested addresses come from CNI_ARGS, then args.cni.ips, then
// runtimeConfig.ips, in host-local's forms (an address, or one with a
// prefix length, which is ignored).
func TestLoadConfigRequested(t *testing.T) {
	stdin := `{"cniVersion": "1.1.0", "name": "n", "ipam": {"subnet": "10.1.0.0/16"},
		"args": {"cni": {"ips": ["10.1.0.7/16", "::ffff:10.1.0.8"]}}, "runtimeConfig": {"ips": ["2001:db8::9"]}}`
	c, err := loadConfig([]byte(stdin), "IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.1.0.6")
	require.NoError(t, err)
	assert.Equal(t, addrs("10.1.0.6", "10.1.0.7", "10.1.0.8", "2001:db8::9"), c.requested)
}

// GC's list of valid attachments, under the name the CNI 1.1
// specification gives it or the one libcni also sends.
func TestLoadConfigValidAttachments(t *testing.T) {
	for _, field := range []string{"cni.dev/valid-attachments", "cni.dev/attachments"} {
		stdin := fmt.Sprintf(`{"cniVersion": "1.1.0", "name": "n", "ipam": {"subnet": "10.1.0.0/16"}, %q: [{"containerID": "c1", "ifname": "eth0"}]}`, field)
		c, err := loadConfig([]byte(stdin), "")
		require.NoError(t, err)
		assert.True(t, c.validSet, field)
		assert.Equal(t, []types.GCAttachment{{ContainerID: "c1", IfName: "eth0"}}, c.valid, field)
	}
	c, err := loadConfig([]byte(`{"cniVersion": "1.1.0", "name": "n", "ipam": {"subnet": "10.1.0.0/16"}, "cni.dev/valid-attachments": []}`), "")
	require.NoError(t, err)
	assert.True(t, c.validSet, "an empty list is a list")
}

// The result gives each address with its subnet's mask and its range's
// gateway, in range-set order.
func TestResult(t *testing.T) {
	c, err := loadConfig([]byte(`{"cniVersion": "1.1.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.1.0.0/16", "gateway": "10.1.0.254"}], [{"subnet": "2001:db8::/64"}]]}}`), "")
	require.NoError(t, err)
	r := c.result([]netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("2001:db8::5")})
	require.Len(t, r.IPs, 2)
	assert.Equal(t, "10.1.0.5/16", r.IPs[0].Address.String())
	assert.Equal(t, "10.1.0.254", r.IPs[0].Gateway.String())
	assert.Equal(t, "2001:db8::5/64", r.IPs[1].Address.String())
	assert.Equal(t, "2001:db8::1", r.IPs[1].Gateway.String())
}
