package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDifferencesFromHostLocal execs the real host-local and this plugin
// in every phase on the cases where the package doc says they answer
// differently, and checks each difference is exactly the one the doc
// names: everywhere else, the parity and upstream tests find the same
// answer, code and message.
func TestDifferencesFromHostLocal(t *testing.T) {
	t.Parallel()
	bin := plugins(t)
	run := func(t *testing.T, r runner, dataDir, conf, id, cniArgs string) ([]byte, error) {
		t.Helper()
		p := &plugin{t: t, r: r, bin: bin, dataDir: dataDir}
		out, err, _ := p.execPlugin("ADD", conf, id, "eth0", cniArgs)
		return out, err
	}
	const subnet = `{"cniVersion": "1.1.0", "name": "diff", "type": "bridge", "ipam": {"type": "host-local", "subnet": "10.1.2.0/24"}}`

	t.Run("a second ADD of an attachment that asks for a free address", func(t *testing.T) {
		for _, r := range upstreamRunners {
			dir := t.TempDir()
			_, err := run(t, r, dir, subnet, "a", "IP=10.1.2.7")
			require.NoError(t, err, r)
			_, err = run(t, r, dir, subnet, "a", "IP=10.1.2.8")
			if r == hl {
				assert.NoError(t, err, "host-local gives the attachment a second allocation")
				continue
			}
			assert.EqualError(t, err, "10.1.2.7 has been allocated to a, duplicate allocation is not allowed", r)
			assert.Equal(t, uint(types.ErrInternal), cniCodeOf(err), r)
		}
	})

	t.Run("a second ADD of an attachment whose address is in no configured range", func(t *testing.T) {
		moved := strings.Replace(subnet, "10.1.2.0/24", "10.1.3.0/24", 1)
		for _, r := range upstreamRunners {
			dir := t.TempDir()
			_, err := run(t, r, dir, subnet, "a", "")
			require.NoError(t, err, r)
			_, err = run(t, r, dir, moved, "a", "")
			if r == hl {
				assert.NoError(t, err, "host-local gives the attachment a second allocation")
				continue
			}
			assert.EqualError(t, err, "10.1.2.2 has been allocated to a, duplicate allocation is not allowed", r)
		}
	})

	t.Run("a null among the requested addresses", func(t *testing.T) {
		conf := `{"cniVersion": "1.1.0", "name": "diff", "type": "bridge", "args": {"cni": {"ips": [null]}}, "ipam": {"type": "host-local", "subnet": "10.1.2.0/24"}}`
		for _, r := range upstreamRunners {
			_, err := run(t, r, t.TempDir(), conf, "a", "")
			if r == hl {
				// host-local dereferences the nil *ip.IP: a panic, and no
				// CNI error on stdout (pkg/invoke makes one of its stderr).
				assert.ErrorContains(t, err, "panic: runtime error: invalid memory address or nil pointer dereference")
				assert.Zero(t, cniCodeOf(err))
				continue
			}
			assert.EqualError(t, err, "cannot understand ip: IP <nil> not v4 nor v6", r)
			assert.Equal(t, uint(types.ErrInternal), cniCodeOf(err), r)
		}
	})

	t.Run("a field of the wrong JSON type", func(t *testing.T) {
		conf := `{"cniVersion": "1.1.0", "name": "diff", "type": "bridge", "ipam": {"type": "host-local", "ranges": {}}}`
		for _, r := range upstreamRunners {
			_, err := run(t, r, t.TempDir(), conf, "a", "")
			want := "json: cannot unmarshal object into Go struct field ipamJSON.ipam.ranges of type [][]main.rangeJSON"
			if r == hl {
				want = "json: cannot unmarshal object into Go struct field IPAMConfig.ipam.ranges of type []allocator.RangeSet"
			}
			assert.EqualError(t, err, want, r)
			assert.Equal(t, uint(types.ErrInternal), cniCodeOf(err), r)
		}
	})

	t.Run("this plugin's own fields", func(t *testing.T) {
		for ipam, want := range map[string]string{
			`"phase": "contracted"`:         "ipam.phase: ",
			`"checkpoint": "relative.json"`: `ipam.checkpoint "relative.json" is not an absolute path`,
		} {
			conf := `{"cniVersion": "1.1.0", "name": "diff", "type": "bridge", "ipam": {"type": "host-local", "subnet": "10.1.2.0/24", ` + ipam + `}}`
			_, err := run(t, hl, t.TempDir(), conf, "a", "")
			assert.NoError(t, err, "host-local ignores %s", ipam)
			args := &invoke.Args{Command: "ADD", ContainerID: "a", NetNS: "/var/run/netns/a", IfName: "eth0", Path: bin}
			stdin := strings.Replace(conf, `"type": "host-local"`, `"type": "`+ourPlugin+`", "dataDir": "`+t.TempDir()+`"`, 1)
			_, err = (&invoke.RawExec{}).ExecPlugin(context.Background(), filepath.Join(bin, ourPlugin), []byte(stdin), args.AsEnv())
			assert.ErrorContains(t, err, want)
			assert.Equal(t, uint(types.ErrInvalidNetworkConfig), cniCodeOf(err), ipam)
		}
	})
}
