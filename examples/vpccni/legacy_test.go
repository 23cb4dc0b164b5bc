package vpccni_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/amazon-vpc-cni-k8s/pkg/ipamd/datastore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/examples/vpccni"
	"github.com/phaseshift/phaseshift/source"
)

// TestLegacyWriteThatFailsChangesNothing: a Write that cannot replace
// ipam.json (its directory is gone) fails, and the next Write, once the
// directory is back, writes what the file held with its own changes only:
// the failed one is not carried along. The released binary reads the file.
func TestLegacyWriteThatFailsChangesNothing(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "aws-node")
	require.NoError(t, os.Mkdir(dir, 0o755))
	path := filepath.Join(dir, "ipam.json")
	l := vpccni.NewLegacy(path)
	a := vpccni.Alloc{IPv4: "10.1.0.1"}
	require.NoError(t, l.Put(ctx, key("a"), a))

	require.NoError(t, os.Rename(dir, dir+".away"))
	err := l.Write(ctx, []source.Change[vpccni.Key, vpccni.Alloc]{{Key: key("b"), Value: vpccni.Alloc{IPv4: "10.1.0.2"}}, {Key: key("a"), Delete: true}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	require.NoError(t, os.Rename(dir+".away", dir))

	require.NoError(t, l.Put(ctx, key("c"), vpccni.Alloc{IPv4: "10.1.0.3"}))
	var data datastore.CheckpointData
	require.NoError(t, datastore.NewJSONFile(path).Restore(&data))
	got := map[string]string{}
	for _, e := range data.Allocations {
		got[e.ContainerID] = e.IPv4
	}
	assert.Equal(t, map[string]string{"a": "10.1.0.1", "c": "10.1.0.3"}, got)
}
