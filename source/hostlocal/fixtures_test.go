package hostlocal_test

import (
	"context"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/source/hostlocal"
)

// Container IDs of the fixtures.
const (
	idA = "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"
	idB = "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d"
	idC = "2e7d2c03a9507ae265ecf5b5356885a53393a2029d241394997265a1a25aefc6"
	idD = "18ac3e7343f016890c510e93f935261169d9e3f565436429830faf0934f4f8e4"
	idE = "3f79bb7b435b05321651daefd374cdc681dc06faa65e374e38337b88ca046dea"
	idF = "252f10c83610ebca1a059c0bae8255eba2f95be4d1d7bcfa89d7248a82d9f111"
	idG = "cd0aa9856147b6c5b4ff2b7dfee5da20aa38253099ef1b4a64aced233c9afe29"
	idH = "aaa9402664f1a41f40ebbc52c9993eb66aeb366602958fdfaa283b71e64db123"
)

// fixtures are the directories of testdata (see its README) and what List
// must make of each, with the last_reserved_ip.<i> each holds.
var fixtures = []struct {
	dir  string
	want map[hostlocal.Key]hostlocal.Allocation
	last []string
}{
	{"cni-v0.5", map[hostlocal.Key]hostlocal.Allocation{
		key(idA, ""): alloc("10.22.0.2"),
		key(idB, ""): alloc("10.22.0.3"),
	}, nil}, // its last_reserved_ip has no range index: no range set's
	{"plugins-v0.7", map[hostlocal.Key]hostlocal.Allocation{
		key(idC, ""): alloc("10.22.1.2", "fd00:22:1::2"),
		key(idD, ""): alloc("10.22.1.5"),
	}, []string{"10.22.1.5", "fd00:22:1::2"}},
	{"plugins-pr203", map[hostlocal.Key]hostlocal.Allocation{
		key(idE, "eth0"): alloc("10.22.2.7", "fd00:22:2::7"),
		key(idF, "net1"): alloc("10.22.2.8"),
	}, []string{"10.22.2.8", "fd00:22:2::7"}},
	{"plugins-v0.8", map[hostlocal.Key]hostlocal.Allocation{
		key(idG, "eth0"): alloc("10.22.3.9", "fd00:22:3::9"),
		key(idH, "eth0"): alloc("10.22.3.10"),
	}, []string{"10.22.3.10", "fd00:22:3::9"}},
}

// copyFixture copies testdata/<name> into dataDir, so that tests may
// change it. A later fixture's last_reserved_ip replaces an earlier one's,
// as on a node that ran one version after the other.
func copyFixture(t *testing.T, dataDir, name string) {
	t.Helper()
	src := filepath.Join("testdata", name)
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dataDir, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dataDir, rel), b, 0o644)
	})
	require.NoError(t, err)
}

// Every form host-local has written is listed, with its round-robin hints.
func TestFixtures(t *testing.T) {
	ctx := context.Background()
	for _, fx := range fixtures {
		t.Run(fx.dir, func(t *testing.T) {
			dataDir := t.TempDir()
			copyFixture(t, dataDir, fx.dir)
			s := openSourceIn(t, dataDir)
			assert.Equal(t, fx.want, list(t, s))
			for i := range 2 {
				got, err := s.LastReserved(ctx, i)
				require.NoError(t, err)
				if i < len(fx.last) {
					assert.Equal(t, fx.last[i], got.String())
				} else {
					assert.False(t, got.IsValid())
				}
			}
		})
	}
}

// A node upgraded through every version holds all forms at once.
func TestFixturesTogether(t *testing.T) {
	dataDir := t.TempDir()
	want := map[hostlocal.Key]hostlocal.Allocation{}
	for _, fx := range fixtures {
		copyFixture(t, dataDir, fx.dir)
		maps.Copy(want, fx.want)
	}
	s := openSourceIn(t, dataDir)
	assert.Equal(t, want, list(t, s))
}

// What host-local v1.7.1 itself makes of the old forms, which the package
// documentation's caveats rest on: it releases a container-ID-only file
// for any interface name of its container, and does not see the PR #203
// form at all, which Delete does remove.
func TestFixturesAsHostLocalSeesThem(t *testing.T) {
	ctx := context.Background()
	dataDir := t.TempDir()
	copyFixture(t, dataDir, "plugins-v0.7")
	copyFixture(t, dataDir, "plugins-pr203")
	st, err := disk.New(network, dataDir)
	require.NoError(t, err)
	defer st.Close()

	var ips []string
	for _, ip := range st.GetByID(idC, "eth7") {
		ips = append(ips, ip.String())
	}
	slices.Sort(ips)
	assert.Equal(t, []string{"10.22.1.2", "fd00:22:1::2"}, ips, "an ID-only file belongs to every interface of its container")
	assert.Empty(t, st.GetByID(idE, "eth0"), "host-local does not read the PR #203 form")

	require.NoError(t, st.ReleaseByID(idC, "eth7"))
	s := openSourceIn(t, dataDir)
	assert.NotContains(t, list(t, s), key(idC, ""))

	require.NoError(t, s.Delete(ctx, key(idE, "eth0")))
	assert.NotContains(t, list(t, s), key(idE, "eth0"))
	assert.Contains(t, list(t, s), key(idF, "net1"))
}
