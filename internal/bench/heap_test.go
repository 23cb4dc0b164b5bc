package bench_test

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
)

// peakHeap runs f once and returns the largest growth of the heap while it
// ran (live objects and garbage not yet collected, sampled every 100µs) and
// the growth of the live heap once it returned (what f left reachable).
// It is package migrate's BenchmarkRestore's measure.
func peakHeap(f func()) (peak, live uint64) {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var top uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Microsecond)
		defer t.Stop()
		for {
			if v := read(); v > top {
				top = v
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(done)
	wg.Wait()
	if v := read(); v > top {
		top = v
	}
	runtime.GC()
	after := read()
	if top > base {
		peak = top - base
	}
	if after > base {
		live = after - base
	}
	return peak, live
}
