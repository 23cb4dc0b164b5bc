package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// captureStdout points os.Stdout, where a plugin prints its result, at a
// file until the test ends, and returns a function that decodes every
// result printed so far.
func captureStdout(t *testing.T) func() []current.Result {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stdout")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	require.NoError(t, err)
	saved := os.Stdout
	os.Stdout = f
	t.Cleanup(func() { os.Stdout = saved; f.Close() })
	return func() []current.Result {
		r, err := os.Open(path)
		require.NoError(t, err)
		defer r.Close()
		var out []current.Result
		for dec := json.NewDecoder(r); ; {
			var res current.Result
			if err := dec.Decode(&res); errors.Is(err, io.EOF) {
				return out
			} else if !assert.NoError(t, err) {
				return out
			}
			out = append(out, res)
		}
	}
}

// TestInProcess runs every command in this test binary, in each phase,
// four ADDs at once among them, so that the race detector (go test -race)
// watches the plugin's own code, which the other tests exec as a separate,
// uninstrumented binary.
func TestInProcess(t *testing.T) {
	t.Setenv(envBootID, "boot-1")
	for _, phase := range allPhases {
		t.Run(phase, func(t *testing.T) {
			results := captureStdout(t)
			conf := fmt.Sprintf(`{"cniVersion": "1.1.0", "name": "mynet", "type": "bridge",
				"ipam": {"type": "phaseshift-host-local", "dataDir": %q, "subnet": "10.22.0.0/24", "phase": %q}}`, t.TempDir(), phase)
			args := func(id string) *skel.CmdArgs {
				return &skel.CmdArgs{ContainerID: id, IfName: "eth0", StdinData: []byte(conf)}
			}
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = cmdAdd(args(fmt.Sprintf("c%d", i)))
				}()
			}
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
			seen := map[string]bool{}
			for _, r := range results() {
				require.Len(t, r.IPs, 1)
				a := r.IPs[0].Address.String()
				assert.False(t, seen[a], "%s given twice", a)
				seen[a] = true
			}
			assert.Len(t, seen, 4)

			require.NoError(t, cmdCheck(args("c0")))
			require.NoError(t, cmdStatus(args("")))
			require.NoError(t, cmdDel(args("c0")))
			assert.Error(t, cmdCheck(args("c0")))
			gc := []byte(conf[:len(conf)-1] + `, "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}]}`)
			require.NoError(t, cmdGC(&skel.CmdArgs{StdinData: gc}))
			require.NoError(t, cmdCheck(args("c1")))
			assert.Error(t, cmdCheck(args("c2")), "released by GC")
		})
	}
}
