package hostlocal_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"

	"github.com/phaseshift/phaseshift/internal/benchref"
	"github.com/phaseshift/phaseshift/source/hostlocal"
)

// List and Put at 1,000 allocations on a real disk, with ratios to what
// host-local's own store does for the same job in the same run: GetByID,
// which reads every file as List does (host-local calls it on every ADD),
// and Lock+GetByID+Reserve+Unlock, the store's part of host-local's ADD,
// which fsyncs nothing (Put fsyncs the new file and the directory). Run:
//
//	go test -run '^$' -bench . -count 6 ./source/hostlocal | benchstat -

const benchAllocs = 1000

func benchAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 20, byte(i >> 8), byte(i)}) }

// benchNetwork fills a network with n allocations through the real store
// and returns a Source on it and the store.
func benchNetwork(b *testing.B, n int) (*hostlocal.Source, *disk.Store) {
	b.Helper()
	dataDir := b.TempDir()
	st, err := disk.New(network, dataDir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	for i := range n {
		if ok, err := st.Reserve(fmt.Sprintf("%064d", i), "eth0", benchAddr(i).AsSlice(), "0"); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	s, err := hostlocal.Open(dataDir, network)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if filepath.Dir(s.Dir()) != dataDir {
		b.Fatal("not the same directory")
	}
	return s, st
}

// interleave runs op (timed) and ref (on its own clock) in turn, b.N
// times, each followed by its undo, untimed.
func interleave(b *testing.B, op, undo, ref, refUndo func(i int) error) (ours, refc benchref.Clock) {
	b.Helper()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := ours.Run(func() error { return op(i) }); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := undo(i); err != nil {
			b.Fatal(err)
		}
		if err := refc.Run(func() error { return ref(i) }); err != nil {
			b.Fatal(err)
		}
		if err := refUndo(i); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	return ours, refc
}

func nothing(int) error { return nil }

// hostLocalAdd is the store's part of host-local's ADD for one range set
// (allocator.Get): Lock, GetByID, Reserve, Unlock.
func hostLocalAdd(st *disk.Store, ip netip.Addr) (add, undo func(i int) error) {
	add = func(i int) error {
		id := fmt.Sprintf("ref%d", i)
		if err := st.Lock(); err != nil {
			return err
		}
		defer st.Unlock()
		st.GetByID(id, "eth0")
		ok, err := st.Reserve(id, "eth0", ip.AsSlice(), "0")
		if err != nil || !ok {
			return fmt.Errorf("reserve: %v %v", ok, err)
		}
		return nil
	}
	undo = func(i int) error { return st.ReleaseByID(fmt.Sprintf("ref%d", i), "eth0") }
	return add, undo
}

func newKey(i int) hostlocal.Key {
	return hostlocal.Key{Network: network, ContainerID: fmt.Sprintf("new%d", i), IfName: "eth0"}
}

func BenchmarkList(b *testing.B) {
	ctx := context.Background()
	s, st := benchNetwork(b, benchAllocs)
	ours, ref := interleave(b, func(int) error {
		all, err := s.List(ctx)
		if err == nil && len(all) != benchAllocs {
			err = fmt.Errorf("listed %d of %d", len(all), benchAllocs)
		}
		return err
	}, nothing, func(int) error {
		st.GetByID("absent", "eth0")
		return nil
	}, nothing)
	b.ReportMetric(float64(ours.Total)/float64(ref.Total), "x-getbyid")
}

// Put alone, each taking the lock and reading the directory itself.
func BenchmarkPut(b *testing.B) {
	ctx := context.Background()
	s, st := benchNetwork(b, benchAllocs)
	ip := benchAddr(benchAllocs)
	add, undo := hostLocalAdd(st, ip)
	ours, ref := interleave(b, func(i int) error {
		return s.Put(ctx, newKey(i), hostlocal.NewAllocation(ip))
	}, func(i int) error {
		return s.Delete(ctx, newKey(i))
	}, add, undo)
	b.ReportMetric(float64(ours.Total)/float64(ref.Total), "x-hostlocal")
}

// The legacy side of one exec'd ADD in phases 0 to 2: Lock, List (what
// Restore reads), Put, Unlock. The Put reuses what List read under the
// lock.
func BenchmarkExecAdd(b *testing.B) {
	ctx := context.Background()
	s, st := benchNetwork(b, benchAllocs)
	ip := benchAddr(benchAllocs)
	add, undo := hostLocalAdd(st, ip)
	ours, ref := interleave(b, func(i int) error {
		if err := s.Lock(ctx); err != nil {
			return err
		}
		defer s.Unlock()
		if _, err := s.List(ctx); err != nil {
			return err
		}
		return s.Put(ctx, newKey(i), hostlocal.NewAllocation(ip))
	}, func(i int) error {
		return s.Delete(ctx, newKey(i))
	}, add, undo)
	b.ReportMetric(float64(ours.Total)/float64(ref.Total), "x-hostlocal")
}
