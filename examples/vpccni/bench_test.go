package vpccni_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/aws/amazon-vpc-cni-k8s/pkg/ipamd/datastore"

	"github.com/phaseshift/phaseshift/internal/benchref"
	"github.com/phaseshift/phaseshift/migrate"
)

// BenchmarkChurn is pod churn on ipamd's real DataStore holding n
// allocations, over w goroutines: each operation DELs a pod and ADDs
// another, two writes of the whole state to the backing store. It runs the
// Checkpointer (phase 2, which writes ipam.json and the checkpoint, and
// phase 3, the checkpoint alone) and, in the same run, in turn with it,
// on its own node, ipamd as released: their JSONFile. ms/write and
// cpu-ms/write are the Checkpointer's wall and CPU time per write (the
// process's CPU: every goroutine, the garbage collector included);
// jsonfile-ms/write and jsonfile-cpu-ms/write are their JSONFile's;
// x-jsonfile and x-jsonfile-cpu are the ratios (lower is better).
//
//	GOWORK=off go test -run '^$' -bench . -count 3 .
func BenchmarkChurn(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, w := range []int{1, 64} {
			for _, p := range []migrate.Phase{migrate.PhaseMigrate, migrate.PhaseContract} {
				b.Run(fmt.Sprintf("allocations=%d/writers=%d/phase=%d", n, w, p), func(b *testing.B) {
					churn(b, n, w, p)
				})
			}
		}
	}
}

func churn(b *testing.B, n, w int, p migrate.Phase) {
	ours, ref := newNode(b), newNode(b)
	seed(b, ours, n)
	seed(b, ref, n)
	cp := ours.open(b, migrate.PhaseExpand) // rebuilds the checkpoint from ipam.json
	dsOurs, err := ours.start(b, cp, n+w)
	if err != nil {
		b.Fatal(err)
	}
	cp.Close()
	cp = ours.open(b, p)
	defer cp.Close()
	if dsOurs, err = ours.start(b, cp, n+w); err != nil {
		b.Fatal(err)
	}
	dsRef, err := ref.start(b, datastore.NewJSONFile(ref.legacy), n+w)
	if err != nil {
		b.Fatal(err)
	}
	if len(allocated(dsOurs)) != n || len(allocated(dsRef)) != n {
		b.Fatalf("restored %d and %d of %d", len(allocated(dsOurs)), len(allocated(dsRef)), n)
	}
	// Each of the w goroutines churns one pod slot of its own.
	type slots []string
	names := func() slots {
		s := make(slots, w)
		for g := range w {
			s[g] = fmt.Sprintf("c%d", g)
		}
		return s
	}
	oursSlots, refSlots := names(), names()
	op := func(ds *datastore.DataStore, s slots) func(i int) error {
		return func(i int) error {
			g := i % w
			if _, _, _, _, _, err := ds.UnassignPodIPAddress(key(s[g])); err != nil {
				return err
			}
			s[g] = fmt.Sprintf("s%d-%d", g, i)
			_, _, _, err := ds.AssignPodIPv4Address(key(s[g]), datastore.IPAMMetadata{})
			return err
		}
	}
	var oc, rc benchref.Clock
	b.ReportAllocs()
	b.ResetTimer()
	slice := max(1, min(b.N, 4*w))
	for done := 0; done < b.N; done += slice {
		k := min(slice, b.N-done)
		if err := oc.Run(func() error { return parallel(w, k, done, op(dsOurs, oursSlots)) }); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := rc.Run(func() error { return parallel(w, k, done, op(dsRef, refSlots)) }); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	writes := float64(2 * b.N)
	b.ReportMetric(float64(oc.Total.Microseconds())/1e3/writes, "ms/write")
	b.ReportMetric(float64(oc.CPU.Microseconds())/1e3/writes, "cpu-ms/write")
	b.ReportMetric(float64(rc.Total.Microseconds())/1e3/writes, "jsonfile-ms/write")
	b.ReportMetric(float64(rc.CPU.Microseconds())/1e3/writes, "jsonfile-cpu-ms/write")
	b.ReportMetric(float64(oc.Total)/float64(rc.Total), "x-jsonfile")
	b.ReportMetric(float64(oc.CPU)/float64(rc.CPU), "x-jsonfile-cpu")
}

// seed writes ipam.json with n allocations, as ipamd would have left it.
func seed(b *testing.B, n *node, count int) {
	b.Helper()
	// One write of the whole state, rather than one per allocation.
	data := datastore.CheckpointData{Version: datastore.CheckpointFormatVersion}
	for i := range count {
		data.Allocations = append(data.Allocations, datastore.CheckpointEntry{IPAMKey: key(fmt.Sprintf("c%d", i)),
			IPv4: address(i), AllocationTimestamp: int64(i)})
	}
	if err := datastore.NewJSONFile(n.legacy).Checkpoint(&data); err != nil {
		b.Fatal(err)
	}
}

// parallel runs ops from..from+k-1 over w goroutines; goroutine g runs the
// ops whose index is g modulo w, in order.
func parallel(w, k, from int, op func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, w)
	for g := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := from; i < from+k; i++ {
				if i%w != g {
					continue
				}
				if err := op(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
