package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

// The rollout of the plugin's Store, proved with migratetest: every
// sequence of phases, with crashes, reboots and failed writes between, over
// exactly the configuration each exec builds (storeConfig), on a checkpoint
// opened as openSession opens it (checkpointOptions), with host-local's
// real files as the legacy, opened and locked per exec by openLegacy. This
// is the worked example of the README's "Prove it for your own adapters" for
// an explicit legacy on disk and a process per call.
//
// Every step is one exec: it restores, makes one write (an ADD's Update, a
// DEL) and exits, cleanly, by a crash, or with the node's reboot.
// migratetest keeps its own model of legacy, where it injects failed writes
// and crash instants, and makes host-local's files hold what the model
// holds at every exec's start (Config.OpenLegacy); so a reboot empties the
// files, as the runtime's DELs or CNI GC of the containers that died with
// it would.

const rolloutNetwork = "rollout-net"

// rolloutNetConf is a network of two range sets, IPv4 and IPv6, whose
// host-local files live in dataDir.
func rolloutNetConf(t *testing.T, dataDir string) *config {
	t.Helper()
	c, err := loadConfig(fmt.Appendf(nil, `{"cniVersion": "1.1.0", "name": %q, "ipam": {"type": %q, "dataDir": %q,
		"ranges": [[{"subnet": "10.1.0.0/16"}], [{"subnet": "fd00:1::/64"}]]}}`, rolloutNetwork, ourPlugin, dataDir), "")
	require.NoError(t, err)
	return c
}

// rolloutMatrix is the matrix over storeConfig, with host-local's files in a
// fresh directory (on tmpfs where there is one: the matrix checks what is
// restored, not what survives a power cut, and makes thousands of
// fsynced writes).
func rolloutMatrix(t *testing.T) migratetest.Config[key, alloc] {
	c := rolloutNetConf(t, tmpfsDir(t))
	return migratetest.Config[key, alloc]{
		New: func(p migrate.Phase, legacy source.Reader[key, alloc], cp migrate.Checkpoint[key, alloc]) (migrate.Config[key, alloc], error) {
			return storeConfig(p, legacy, cp, nil), nil
		},
		OpenLegacy: func() (source.Reader[key, alloc], error) {
			src, err := openLegacy(context.Background(), c)
			if err != nil {
				return nil, err
			}
			return src, nil
		},
		CheckpointOptions: func(bool) []checkpoint.Option { return checkpointOptions() },
		Key: func(i int) key {
			return key{Network: rolloutNetwork, ContainerID: "c" + strconv.Itoa(i), IfName: "eth0"}
		},
		// An address in each range set, or only an IPv4 one, from
		// addresses of the key's own: no two keys ever want one address
		// (host-local refuses that), and a key's value can change.
		Value: func(rng *rand.Rand, k key) alloc {
			i, _ := strconv.Atoi(strings.TrimPrefix(k.ContainerID, "c"))
			ips := []netip.Addr{netip.AddrFrom4([4]byte{10, 1, byte(i), byte(2 + rng.IntN(3))})}
			if rng.IntN(2) == 0 {
				ips = append(ips, netip.AddrFrom16([16]byte{0: 0xfd, 1: 0x00, 3: 0x01, 13: byte(i), 15: byte(2 + rng.IntN(3))}))
			}
			return alloc{IPs: ips}
		},
		// No two containers hold one address: the harness checks that
		// after every step, and hands an address a DEL freed to a later
		// ADD of another container, as host-local does.
		Unique: addresses,
		// host-local's files are written by the Store (and by host-local).
		Explicit: true,
		// One write per exec.
		OpsPerStep: 1,
		Keys:       5,
		Seed:       28,
	}
}

func matrixLen(t *testing.T) int {
	if testing.Short() {
		return 3
	}
	return 4
}

// TestRollout runs the plugin's configuration through every sequence of up
// to 4 execs (340 sequences; up to 3, 84 sequences, with -short), each
// exec in any phase, in the worlds it meets: host-local itself in phase 0,
// or this plugin configured with phase 0; listings that cannot read a file;
// a corrupt checkpoint.
func TestRollout(t *testing.T) {
	t.Run("host-local in phase 0, partial listings", func(t *testing.T) {
		cfg := rolloutMatrix(t)
		cfg.PartialListings = true
		cfg.MaxLen = matrixLen(t)
		res := migratetest.Matrix(t, cfg)
		assert.Positive(t, res.Crashes)
		assert.Positive(t, res.Reboots)
		assert.Positive(t, res.Unjudged, "host-local right after phase 3 is outside the promise")
	})
	t.Run("this plugin in phase 0, corruption", func(t *testing.T) {
		cfg := rolloutMatrix(t)
		cfg.NewBinaryInPhase0, cfg.Corruption, cfg.Seed = true, true, 29
		cfg.MaxLen = matrixLen(t)
		res := migratetest.Matrix(t, cfg)
		assert.Zero(t, res.Unjudged, "with phase 0's mark every sequence is within the promise")
		assert.Positive(t, res.Refused["phase 3 over a checkpoint behind legacy"])
		assert.Positive(t, res.Refused["a corrupt checkpoint that is the sole copy"])
	})
}

// misconfigured is the matrix over storeConfig changed by change: what a
// user who copied openSession's configuration and changed it would run.
func misconfigured(t *testing.T, change func(*migrate.Config[key, alloc])) migratetest.Config[key, alloc] {
	cfg := rolloutMatrix(t)
	inner := cfg.New
	cfg.New = func(p migrate.Phase, l source.Reader[key, alloc], cp migrate.Checkpoint[key, alloc]) (migrate.Config[key, alloc], error) {
		mc, err := inner(p, l, cp)
		change(&mc)
		return mc, err
	}
	return cfg
}

// shortest runs cfg, which must fail, and returns its shortest failing
// violation.
func shortest(t *testing.T, cfg migratetest.Config[key, alloc]) migratetest.Violation {
	t.Helper()
	res, err := migratetest.Check(cfg)
	require.Error(t, err, "the misconfiguration must fail the matrix")
	v := res.Violations[0]
	t.Logf("shortest failing sequence:\n%v", v)
	return v
}

// TestRolloutCatchesMisconfiguration: two changes a user might make to the
// plugin's configuration fail the matrix with a short sequence.
func TestRolloutCatchesMisconfiguration(t *testing.T) {
	t.Run("the checkpoint's value wins", func(t *testing.T) {
		// Merge: PreferCheckpoint, as if the checkpoint's record were the
		// richer one: what host-local (or a phase-0 exec) wrote since is
		// overruled by the checkpoint's older value.
		cfg := misconfigured(t, func(mc *migrate.Config[key, alloc]) { mc.Merge = migrate.PreferCheckpoint[key, alloc] })
		cfg.MaxLen = 4
		v := shortest(t, cfg)
		assert.LessOrEqual(t, len(v.Sequence), 4)
		assert.Regexp(t, "^(STALE|STEADY STATE)", v.Problems[0])
	})
	t.Run("no boot epoch", func(t *testing.T) {
		// The checkpoint opened without WithBootID: after a reboot, whose
		// containers died with it, phase 2 or 3 trusts what it held.
		cfg := rolloutMatrix(t)
		cfg.CheckpointOptions = func(bool) []checkpoint.Option { return nil }
		cfg.MaxLen, cfg.NoCrashes = 3, true
		v := shortest(t, cfg)
		assert.LessOrEqual(t, len(v.Sequence), 3)
		assert.Regexp(t, "^(INVENTED|STALE)", v.Problems[0])
		assert.Contains(t, v.Trace, "reboot")
	})
}

// tmpfsDir returns a fresh directory on /dev/shm if it is a writable
// directory, or under t.TempDir otherwise.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "phaseshift-hostlocal-rollout-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
