package vpccni_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/aws/amazon-vpc-cni-k8s/pkg/ipamd/datastore"
	"github.com/aws/amazon-vpc-cni-k8s/pkg/utils/logger"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/examples/vpccni"
	"github.com/phaseshift/phaseshift/migrate"
)

// A node is ipamd's state directory: ipam.json, which the released binary
// reads and writes, and phaseshift's checkpoint beside it.
type node struct {
	dir, legacy, ckpt string
	log               logger.Logger
}

func newNode(t testing.TB) *node {
	t.Helper()
	return nodeAt(t.TempDir())
}

// nodeAt is the node whose state lives in dir.
func nodeAt(dir string) *node {
	return &node{
		dir:    dir,
		legacy: filepath.Join(dir, "ipam.json"),
		ckpt:   filepath.Join(dir, "ipam.phaseshift.json"),
		// ipamd's logger writes to a file (its only other choice is stdout,
		// which the child process of the kill test speaks on).
		log: logger.New(&logger.Configuration{LogLevel: "error", LogLocation: filepath.Join(dir, "ipamd.log")}),
	}
}

// The node's ENI: a /28 prefix per 16 addresses (prefix delegation), as
// many as the allocations need and one more (a single one for fewer than
// 16: an address a DEL freed is then the next ADD's, as on a full node).
const eniID = "eni-0123456789abcdef0"

func prefixes(n int) int { return n/16 + 1 }

// start builds ipamd's DataStore over backing, as nodeInit does: the ENI
// and its prefixes first, then ReadBackingStore. An IP freed is handed out
// again at once (IP_COOLDOWN_PERIOD=0), as a busy node does once the
// cooldown has passed.
func (n *node) start(t testing.TB, backing datastore.Checkpointer, allocations int) (*datastore.DataStore, error) {
	t.Helper()
	ds, err := n.newDataStore(backing, allocations)
	require.NoError(t, err)
	return ds, ds.ReadBackingStore(false)
}

// newDataStore is start without ReadBackingStore.
func (n *node) newDataStore(backing datastore.Checkpointer, allocations int) (*datastore.DataStore, error) {
	ds := datastore.NewDataStore(n.log, backing, true, 0)
	if err := ds.AddENI(eniID, 0, true, false, false, 0, "subnet-1"); err != nil {
		return nil, err
	}
	for i := range prefixes(allocations) {
		_, cidr, err := net.ParseCIDR(address(16*i) + "/28")
		if err != nil {
			return nil, err
		}
		if err := ds.AddIPv4CidrToStore(eniID, *cidr, true); err != nil {
			return nil, err
		}
	}
	return ds, nil
}

// address is the node's i-th address: the (i%16)-th of the (i/16)-th prefix.
func address(i int) string {
	p := i / 16
	return fmt.Sprintf("10.%d.%d.%d", 1+p>>12, (p>>4)&0xff, (p&0xf)<<4+i%16)
}

// open returns a Checkpointer in phase p over the node's files; the test
// closes it.
func (n *node) open(t testing.TB, p migrate.Phase) *vpccni.Checkpointer {
	t.Helper()
	cp, err := vpccni.Open(context.Background(), vpccni.Config{Phase: p, LegacyPath: n.legacy, CheckpointPath: n.ckpt, Version: "test"})
	require.NoError(t, err)
	return cp
}

// key is the i-th pod's key. The pods have no namespace and name: ipamd
// then does not look for their host veths (there are none here).
func key(container string) datastore.IPAMKey {
	return datastore.IPAMKey{NetworkName: "aws-cni", ContainerID: container, IfName: "eth0"}
}

func assign(t testing.TB, ds *datastore.DataStore, container string) string {
	t.Helper()
	ip, _, _, err := ds.AssignPodIPv4Address(key(container), datastore.IPAMMetadata{})
	require.NoError(t, err, "ADD %s", container)
	return ip
}

func unassign(t testing.TB, ds *datastore.DataStore, container string) string {
	t.Helper()
	_, ip, _, _, _, err := ds.UnassignPodIPAddress(key(container))
	require.NoError(t, err, "DEL %s", container)
	return ip
}

// allocated returns what ds serves: container ID -> address.
func allocated(ds *datastore.DataStore) map[string]string {
	m := map[string]string{}
	for _, a := range ds.AllocatedIPs() {
		m[a.IPAMKey.ContainerID] = a.IP
	}
	return m
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestMain(m *testing.M) {
	if os.Getenv(envRole) == "allocator" {
		os.Exit(allocatorChild())
	}
	// ipamd reads its cooldown once, when a DataStore is made.
	os.Setenv("IP_COOLDOWN_PERIOD", "0")
	os.Exit(m.Run())
}
