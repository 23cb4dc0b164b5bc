package hostlocal_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source/hostlocal"
)

// A Source reads and writes host-local's files for one network.
func ExampleSource() {
	ctx := context.Background()
	dataDir, _ := os.MkdirTemp("", "cni-networks") // /var/lib/cni/networks on a node
	defer os.RemoveAll(dataDir)

	// The network configuration's ranges: IPv4 first, then IPv6.
	rangeIndex := func(a netip.Addr) (int, bool) {
		if a.Is4() {
			return 0, true
		}
		return 1, true
	}
	src, err := hostlocal.Open(dataDir, "mynet", hostlocal.WithRangeIndex(rangeIndex))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer src.Close()

	k := hostlocal.Key{Network: "mynet", ContainerID: "4f1c0e5a", IfName: "eth0"}
	a := hostlocal.NewAllocation(netip.MustParseAddr("fd00::2"), netip.MustParseAddr("10.1.0.2"))
	if err := src.Put(ctx, k, a); err != nil {
		fmt.Println(err)
		return
	}
	content, _ := os.ReadFile(filepath.Join(src.Dir(), "10.1.0.2"))
	fmt.Printf("file 10.1.0.2: %q\n", content)

	all, _ := src.List(ctx)
	fmt.Println(len(all), all[k].IPs)
	last, _ := src.LastReserved(ctx, 1)
	fmt.Println("next IPv6 allocation starts after", last)

	other := hostlocal.Key{Network: "mynet", ContainerID: "9b1e33c1", IfName: "eth0"}
	fmt.Println(src.Put(ctx, other, hostlocal.NewAllocation(netip.MustParseAddr("10.1.0.2"))) != nil)
	// Output:
	// file 10.1.0.2: "4f1c0e5a\r\neth0"
	// 1 [10.1.0.2 fd00::2]
	// next IPv6 allocation starts after fd00::2
	// true
}

// One exec of an IPAM plugin in phase 1, moving from host-local's files to
// a checkpoint: the checkpoint's lock first, then host-local's, held from
// before Restore to after the write.
func Example_exec() {
	ctx := context.Background()
	dataDir, _ := os.MkdirTemp("", "cni-networks")
	defer os.RemoveAll(dataDir)

	// An allocation host-local made before the plugin was replaced.
	old, _ := hostlocal.Open(dataDir, "mynet")
	_ = old.Put(ctx, hostlocal.Key{Network: "mynet", ContainerID: "c-old", IfName: "eth0"}, hostlocal.NewAllocation(netip.MustParseAddr("10.1.0.2")))
	old.Close()

	// 1. The checkpoint's lock.
	cp, err := checkpoint.Open[hostlocal.Key, hostlocal.Allocation](ctx, filepath.Join(dataDir, "mynet.checkpoint.json"))
	if err != nil {
		fmt.Println(err)
		return
	}
	// 2. host-local's, before Restore reads its files.
	src, err := hostlocal.Open(dataDir, "mynet")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer src.Close() // 4. releases host-local's lock
	if err := src.Lock(ctx); err != nil {
		fmt.Println(err)
		return
	}
	store, err := migrate.New(migrate.Config[hostlocal.Key, hostlocal.Allocation]{
		Phase:      migrate.PhaseExpand,
		Legacy:     src,
		Checkpoint: cp,
		Merge:      migrate.PreferLegacy[hostlocal.Key, hostlocal.Allocation],
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close() // 4. releases the checkpoint's lock

	// 3. Restore, then the one write of this exec.
	report, err := store.Restore(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("restored", report.Restored, "from", report.ReadFrom)
	k := hostlocal.Key{Network: "mynet", ContainerID: "c-new", IfName: "eth0"}
	if err := store.Put(ctx, k, hostlocal.NewAllocation(netip.MustParseAddr("10.1.0.3"))); err != nil {
		fmt.Println(err)
		return
	}
	files, _ := src.List(ctx)
	fmt.Println("host-local's files:", len(files), "allocations")
	// Output:
	// restored 1 from legacy
	// host-local's files: 2 allocations
}
