package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// A record the program would never have stored - an address outside its
// pool, left by a hand edit - is a bad entry: Load returns the others and
// names the key, never the value.
func ExampleWithValidate() {
	ctx := context.Background()
	pool := netip.MustParsePrefix("10.0.0.0/24")
	inPool := func(pod string, ip netip.Addr) error {
		if !pool.Contains(ip) {
			return errors.New("the address is outside the pool")
		}
		return nil
	}

	old := checkpoint.NewMemory[string, netip.Addr]()
	_ = old.Save(ctx, checkpoint.Snapshot[string, netip.Addr]{Entries: map[string]netip.Addr{
		"pod-a": netip.MustParseAddr("10.0.0.7"),
		"pod-b": netip.MustParseAddr("192.168.9.9"),
	}})

	m, err := old.Reopen(checkpoint.WithValidate(inPool))
	if err != nil {
		fmt.Println(err)
		return
	}
	snap, err := m.Load(ctx)
	fmt.Println(snap.Entries)
	var bad *checkpoint.BadEntriesError
	if errors.As(err, &bad) {
		for _, e := range bad.Entries {
			fmt.Println(e.Key, e.Err) // e.Index, its place in the file, is left out: map order
		}
	}
	// Output:
	// map[pod-a:10.0.0.7]
	// "pod-b" rejected by the WithValidate function: the address is outside the pool
}
