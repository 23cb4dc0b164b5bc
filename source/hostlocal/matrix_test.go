package hostlocal_test

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

	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
	"github.com/phaseshift/phaseshift/source/hostlocal"
)

type (
	hkey   = hostlocal.Key
	hvalue = hostlocal.Allocation
)

// The rollout matrix over host-local's real files: every sequence of
// phases up to 3 steps, with crashes, cut writes, reboots and injected
// faults, restores exactly what was acknowledged when the Store's legacy is
// a Source.
//
// migratetest models the legacy side with its own fake, which it rewinds
// to the instant of a crash and empties at a reboot. So the factory first
// makes host-local's files hold what the fake holds (through the Source,
// and checks that they then list exactly that), and the Store reads and
// writes the files through the Source, with every write applied to the
// fake first (where the harness injects its faults and cuts) and read back
// from the files after.
func TestMatrix(t *testing.T) {
	// On tmpfs where there is one: the matrix checks what is restored, not
	// what survives a power cut, and makes a thousand fsynced writes.
	src := openSourceIn(t, tmpfsDir(t), hostlocal.WithRangeIndex(func(a netip.Addr) (int, bool) {
		if a.Is4() {
			return 0, true
		}
		return 1, true
	}))
	cfg := migratetest.Config[hkey, hvalue]{
		New: func(p migrate.Phase, legacy source.Reader[hkey, hvalue], cp migrate.Checkpoint[hkey, hvalue]) (migrate.Config[hkey, hvalue], error) {
			fake := legacy.(interface {
				source.Reader[hkey, hvalue]
				source.Writer[hkey, hvalue]
			})
			if err := mirror(t, src, fake); err != nil {
				return migrate.Config[hkey, hvalue]{}, err
			}
			// host-local's files hold whole values, written explicitly: the
			// default Merge lets them win.
			return migrate.Config[hkey, hvalue]{Legacy: &tee{t: t, files: src, fake: fake}, Checkpoint: cp}, nil
		},
		Key: func(i int) hkey { return key(fmt.Sprintf("c%d", i), "eth0") },
		// Each key draws its addresses from subnets of its own, so that a
		// value never collides with another key's.
		Value: func(rng *rand.Rand, k hkey) hvalue {
			i, _ := strconv.Atoi(strings.TrimPrefix(k.ContainerID, "c"))
			ips := []netip.Addr{netip.AddrFrom4([4]byte{10, byte(i), 0, byte(2 + rng.IntN(3))})}
			if rng.IntN(2) == 0 {
				ips = append(ips, netip.AddrFrom16([16]byte{0: 0xfd, 7: byte(i), 15: byte(2 + rng.IntN(3))}))
			}
			return hostlocal.NewAllocation(ips...)
		},
		Explicit: true,
		MaxLen:   3,
		Keys:     5,
		Seed:     15,
	}
	res := migratetest.Matrix(t, cfg)
	assert.Positive(t, res.Writes)
	assert.Positive(t, res.Crashes)
	assert.Positive(t, res.Reboots)
}

// mirror makes the files hold exactly what the harness's fake holds.
func mirror(t *testing.T, files *hostlocal.Source, fake source.Reader[hkey, hvalue]) error {
	ctx := context.Background()
	want, err := fake.List(ctx)
	if err != nil {
		return err
	}
	have, err := files.List(ctx)
	if err != nil {
		return err
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			if err := files.Delete(ctx, k); err != nil {
				return err
			}
		}
	}
	for k, v := range want {
		if err := files.Put(ctx, k, v); err != nil {
			return err
		}
	}
	got, err := files.List(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the files do not list what was put")
	return nil
}

// tee is the legacy side the Store sees: the files, with every write made
// on the harness's fake first.
type tee struct {
	t     *testing.T
	files *hostlocal.Source
	fake  interface {
		source.Reader[hkey, hvalue]
		source.Writer[hkey, hvalue]
	}
}

func (l *tee) List(ctx context.Context) (map[hkey]hvalue, error) { return l.files.List(ctx) }

// LegacyKind: host-local's files.
func (l *tee) LegacyKind() source.Kind { return source.Durable }

func (l *tee) Put(ctx context.Context, k hkey, v hvalue) error {
	if err := l.fake.Put(ctx, k, v); err != nil {
		return err
	}
	if err := l.files.Put(ctx, k, v); err != nil {
		l.t.Errorf("Put %s on the files: %v", k, err)
		return err
	}
	got, err := l.files.List(ctx)
	assert.NoError(l.t, err)
	assert.Equal(l.t, v, got[k], "Put %s: the files list something else", k)
	return nil
}

func (l *tee) Delete(ctx context.Context, k hkey) error {
	if err := l.fake.Delete(ctx, k); err != nil {
		return err
	}
	if err := l.files.Delete(ctx, k); err != nil {
		l.t.Errorf("Delete %s on the files: %v", k, err)
		return err
	}
	got, err := l.files.List(ctx)
	assert.NoError(l.t, err)
	assert.NotContains(l.t, got, k, "Delete %s: the files still list it", k)
	return nil
}

// tmpfsDir returns a fresh directory on /dev/shm if it is a writable
// directory, or under t.TempDir otherwise.
func tmpfsDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "hostlocal-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
