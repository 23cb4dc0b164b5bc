package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
)

var allPhases = []string{"legacy", "expand", "migrate", "contract"}

// execRaw execs this plugin with command cmd and stdin conf, as
// pkg/invoke does, and returns what it printed, or its CNI error.
func (n *node) execRaw(cmd, id string, conf []byte) ([]byte, error) {
	args := &invoke.Args{Command: cmd, ContainerID: id, NetNS: "/var/run/netns/" + id, IfName: "eth0", Path: n.binDir}
	return (&invoke.RawExec{}).ExecPlugin(ctxFor(n.tb), filepath.Join(n.binDir, ourPlugin), conf, args.AsEnv())
}

// cniCode returns the code of a CNI error.
func cniCode(t *testing.T, err error) uint {
	t.Helper()
	var e *types.Error
	require.True(t, errors.As(err, &e), "not a CNI error: %v", err)
	return e.Code
}

// Ported from host-local's host_local_test.go, "verify DEL works on
// backwards compatible allocate": a file written before plugins v0.8.0
// names the container alone, and DEL with an interface name releases it.
func TestDELReleasesPreV080File(t *testing.T) {
	for _, phase := range []string{"legacy", "expand", "migrate"} {
		t.Run(phase, func(t *testing.T) {
			n := newNode(t)
			dir := filepath.Join(n.dataDir, testNetwork)
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "10.22.0.9"), []byte("dummy\n"), 0o600))
			require.NoError(t, n.check(ps(phase), "dummy"), "CHECK finds it too")
			require.NoError(t, n.del(ps(phase), "dummy"))
			assert.NoFileExists(t, filepath.Join(dir, "10.22.0.9"))
			if phase != "legacy" {
				got, _ := n.checkpointed()
				assert.Empty(t, got)
			}
		})
	}
}

// Ported from host-local's "doesn't error when passed an unknown ID on
// DEL", in every phase.
func TestDELUnknown(t *testing.T) {
	n := newNode(t)
	for _, phase := range allPhases {
		assert.NoError(t, n.del(ps(phase), "never-added"), phase)
	}
}

// Ported from host-local's "repeat allocating addresses on specific
// interface for same container ID with ADD": a second ADD of the same
// attachment fails; another interface of the same container gets its
// own address.
func TestADDTwice(t *testing.T) {
	for _, phase := range allPhases {
		t.Run(phase, func(t *testing.T) {
			n := newNode(t)
			a, err := n.add(ps(phase), "c1")
			require.NoError(t, err)
			_, err = n.add(ps(phase), "c1")
			assert.ErrorContains(t, err, "duplicate allocation is not allowed")
			conf := n.ipamConf(ps(phase))
			args := &invoke.Args{Command: "ADD", ContainerID: "c1", NetNS: "/var/run/netns/c1", IfName: "eth1", Path: n.binDir}
			out, err := (&invoke.RawExec{}).ExecPlugin(ctxFor(t), filepath.Join(n.binDir, ourPlugin), conf, args.AsEnv())
			require.NoError(t, err)
			assert.NotContains(t, string(out), a.String())
		})
	}
}

// CHECK fails for an attachment with no address, and when the previous
// result the runtime passes gives it an address it does not hold.
func TestCHECK(t *testing.T) {
	for _, phase := range allPhases {
		t.Run(phase, func(t *testing.T) {
			n := newNode(t)
			a, err := n.add(ps(phase), "c1")
			require.NoError(t, err)
			require.NoError(t, n.check(ps(phase), "c1"))

			_, err = n.execRaw("CHECK", "c2", n.ipamConf(ps(phase)))
			assert.EqualError(t, err, "host-local: Failed to find address added by container c2")

			var conf map[string]any
			require.NoError(t, json.Unmarshal(n.ipamConf(ps(phase)), &conf))
			conf["prevResult"] = map[string]any{"cniVersion": "1.1.0", "ips": []any{map[string]any{"address": a.Next().String() + "/24"}}}
			b, err := json.Marshal(conf)
			require.NoError(t, err)
			_, err = n.execRaw("CHECK", "c1", b)
			assert.ErrorContains(t, err, "not allocated to it")

			conf["prevResult"] = map[string]any{"cniVersion": "1.1.0", "ips": []any{map[string]any{"address": a.String() + "/24"}, map[string]any{"address": "192.0.2.7/24"}}}
			b, err = json.Marshal(conf)
			require.NoError(t, err)
			_, err = n.execRaw("CHECK", "c1", b)
			assert.NoError(t, err, "an address outside the plugin's ranges is another plugin's")
		})
	}
}

// GC releases exactly what is not valid, a pre-v0.8.0 file by its
// container, in every phase; a GC without the list of valid attachments
// is refused rather than taken as "release everything".
func TestGC(t *testing.T) {
	for _, phase := range allPhases {
		t.Run(phase, func(t *testing.T) {
			n := newNode(t)
			if phase != "contract" {
				dir := filepath.Join(n.dataDir, testNetwork)
				require.NoError(t, os.MkdirAll(dir, 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(dir, "10.22.0.200"), []byte("old-kept"), 0o600))
				require.NoError(t, os.WriteFile(filepath.Join(dir, "10.22.0.201"), []byte("old-gone"), 0o600))
			}
			for _, id := range []string{"keep1", "keep2", "gone1", "gone2"} {
				_, err := n.delegateAdd(ps(phase), id) // no libcni cache: only GC releases them
				require.NoError(t, err)
			}
			gc := func(stdin map[string]any) error {
				var conf map[string]any
				require.NoError(t, json.Unmarshal(n.ipamConf(ps(phase)), &conf))
				for k, v := range stdin {
					conf[k] = v
				}
				b, err := json.Marshal(conf)
				require.NoError(t, err)
				_, err = n.execRaw("GC", "", b)
				return err
			}
			err := gc(nil)
			require.Error(t, err)
			assert.Equal(t, uint(types.ErrInvalidNetworkConfig), cniCode(t, err))
			assert.Contains(t, err.Error(), "cni.dev/valid-attachments")

			valid := []types.GCAttachment{{ContainerID: "keep1", IfName: "eth0"}, {ContainerID: "keep2", IfName: "eth0"}, {ContainerID: "old-kept", IfName: "eth0"}}
			require.NoError(t, gc(map[string]any{"cni.dev/valid-attachments": valid}))
			var sides []map[string]netip.Addr
			if phase != "contract" {
				sides = append(sides, n.files())
			}
			if phase != "legacy" {
				got, _ := n.checkpointed()
				sides = append(sides, got)
			}
			want := []string{"keep1", "keep2"}
			if phase != "contract" {
				want = append(want, "old-kept")
			}
			for _, got := range sides {
				assert.ElementsMatch(t, want, keysOf(got))
			}
			if phase != "contract" {
				assert.FileExists(t, filepath.Join(n.dataDir, testNetwork, "10.22.0.200"))
				assert.NoFileExists(t, filepath.Join(n.dataDir, testNetwork, "10.22.0.201"))
			}
		})
	}
}

func keysOf(m map[string]netip.Addr) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// STATUS says whether an ADD can succeed: yes on a fresh node; no (code
// 50) when a range set is full or when restore refuses, with the reason.
func TestSTATUS(t *testing.T) {
	n := newNode(t)
	require.NoError(t, n.status(ps("contract")))

	n.ranges = `[[{"subnet": "10.22.0.0/30"}]]` // one address: .2
	_, err := n.add(ps("expand"), "c1")
	require.NoError(t, err)
	err = n.status(ps("expand"))
	require.Error(t, err)
	assert.Equal(t, uint(errPluginNotAvailable), cniCode(t, err))
	assert.Contains(t, err.Error(), "no IP addresses available")

	n = newNode(t)
	_, err = n.add(ps("legacy"), "c1")
	require.NoError(t, err)
	err = n.status(ps("contract"))
	require.Error(t, err, "phase 3 right after phase 0 would serve a stale checkpoint")
	assert.Equal(t, uint(errPluginNotAvailable), cniCode(t, err))
	assert.Contains(t, err.Error(), "restore")
	require.NoError(t, n.status(ps("migrate")))
	require.NoError(t, n.status(ps("contract")), "a phase-2 run read host-local's files in full since")
}

// An exec waits for the checkpoint's lock, and when the runtime gives up
// and signals it, it exits with "try again later" (CNI code 11), or for
// STATUS "not available" (50), instead of being killed halfway; once the
// lock is free, ADDs succeed.
func TestLockWaitEndsWithTryAgain(t *testing.T) {
	n := newNode(t)
	held, err := checkpoint.Open[key, alloc](context.Background(), n.checkpointPath())
	require.NoError(t, err)
	defer held.Close()

	for cmd, code := range map[string]uint{"ADD": types.ErrTryAgainLater, "STATUS": errPluginNotAvailable} {
		e := n.execSignalled(cmd, n.ipamConf(ps("migrate")))
		assert.Equal(t, code, e.Code, "%s: %s", cmd, e.Msg)
		assert.Contains(t, e.Msg, "lock", cmd)
	}

	require.NoError(t, held.Close())
	_, err = n.add(ps("migrate"), "c1")
	require.NoError(t, err)
}

// execSignalled starts this plugin with cmd, sends it SIGTERM once it says
// (on stderr) that it is waiting for the checkpoint's lock, and returns the
// CNI error it printed.
func (n *node) execSignalled(cmd string, conf []byte) types.Error {
	n.tb.Helper()
	args := &invoke.Args{Command: cmd, ContainerID: "c1", NetNS: "/var/run/netns/c1", IfName: "eth0", Path: n.binDir}
	c := exec.Command(filepath.Join(n.binDir, ourPlugin))
	c.Env = args.AsEnv()
	c.Stdin = bytes.NewReader(conf)
	var stdout bytes.Buffer
	c.Stdout = &stdout
	stderr, err := c.StderrPipe()
	require.NoError(n.tb, err)
	require.NoError(n.tb, c.Start())
	waiting := bufio.NewScanner(stderr)
	for waiting.Scan() && !strings.Contains(waiting.Text(), "waiting for the checkpoint's lock") {
	}
	require.NoError(n.tb, c.Process.Signal(syscall.SIGTERM))
	_, _ = io.Copy(io.Discard, stderr) // until it exits; Wait closes the pipe
	var exit *exec.ExitError
	require.ErrorAs(n.tb, c.Wait(), &exit, "stdout: %s", stdout.String())
	var e types.Error
	require.NoError(n.tb, json.Unmarshal(stdout.Bytes(), &e), stdout.String())
	return e
}
