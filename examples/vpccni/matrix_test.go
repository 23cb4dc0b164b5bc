package vpccni_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/amazon-vpc-cni-k8s/pkg/ipamd/datastore"
	"github.com/stretchr/testify/assert"

	"github.com/phaseshift/phaseshift/examples/vpccni"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

// tmpfsDir is a fresh directory on tmpfs where there is one: the matrix
// checks what is restored, not what survives a power cut, and makes
// thousands of fsynced writes.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "phaseshift-vpccni-matrix-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// matrix is migratetest's matrix over the Checkpointer's configuration
// (vpccni.StoreConfig), with ipam.json, written by their JSONFile, as the
// legacy store (Config.OpenLegacy) and the rule that no two allocations
// hold one address (Config.Unique).
func matrix(t *testing.T) migratetest.Config[vpccni.Key, vpccni.Alloc] {
	path := filepath.Join(tmpfsDir(t), "ipam.json")
	return migratetest.Config[vpccni.Key, vpccni.Alloc]{
		New: func(p migrate.Phase, legacy source.Reader[vpccni.Key, vpccni.Alloc], cp migrate.Checkpoint[vpccni.Key, vpccni.Alloc]) (migrate.Config[vpccni.Key, vpccni.Alloc], error) {
			return vpccni.StoreConfig(p, legacy, cp), nil
		},
		OpenLegacy: func() (source.Reader[vpccni.Key, vpccni.Alloc], error) { return vpccni.NewLegacy(path), nil },
		Explicit:   true,
		Key:        func(i int) vpccni.Key { return key(fmt.Sprintf("%064x", i)) },
		// An address of a /16 far larger than the pool of keys, so that
		// the harness finds free ones, and hands a freed one to a later ADD.
		Value: func(rng *rand.Rand, _ vpccni.Key) vpccni.Alloc {
			n := rng.IntN(1 << 16)
			return vpccni.Alloc{IPv4: fmt.Sprintf("10.1.%d.%d", n>>8, n&0xff), AllocationTimestamp: rng.Int64(),
				Metadata: datastore.IPAMMetadata{K8SPodNamespace: "default", K8SPodName: fmt.Sprint("pod-", n), InterfacesCount: 1}}
		},
		Unique: vpccni.Addresses,
		Keys:   6,
		Seed:   36,
	}
}

// TestMatrix runs the configuration through every sequence of phases up to
// 4 steps (3 with -short), with crashes, reboots and failed writes between
// and within them, and the released binary in phase 0: every restore must
// serve what was acknowledged, and no two entries one address.
func TestMatrix(t *testing.T) {
	maxLen := 4
	if testing.Short() {
		maxLen = 3
	}
	t.Run("the released ipamd in phase 0", func(t *testing.T) {
		cfg := matrix(t)
		cfg.MaxLen = maxLen
		res := migratetest.Matrix(t, cfg)
		assert.Positive(t, res.Crashes)
		assert.Positive(t, res.Unjudged, "the released ipamd right after phase 3 is outside the promise")
	})
	t.Run("this library's phase 0, partial listings", func(t *testing.T) {
		cfg := matrix(t)
		cfg.MaxLen, cfg.NewBinaryInPhase0, cfg.PartialListings, cfg.Seed = maxLen, true, true, 37
		res := migratetest.Matrix(t, cfg)
		assert.Zero(t, res.Unjudged)
	})
}
