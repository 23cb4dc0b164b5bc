package migrate_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/benchref"
	"github.com/phaseshift/phaseshift/migrate"
)

// The benchmarks of a restore, on a real file in b.TempDir(), with ratios
// to a reference run in turn with them. The benchmarks of writes, which
// compare a Store with the AWS VPC CNI's checkpoint and with bbolt, are in
// module internal/bench (it requires bbolt, which this module must not).
//
// Run: go test -run '^$' -bench . -count 6 ./migrate | benchstat -

type (
	bkey = benchref.Key
	bval = benchref.Alloc
)

// writeFile writes a checkpoint of n entries in a fresh directory.
func writeFile(b *testing.B, n int) string {
	b.Helper()
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "ipam.json")
	f, err := checkpoint.Open[bkey, bval](ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Save(ctx, checkpoint.Snapshot[bkey, bval]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: benchref.Entries(n)}); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkRestore restores n entries from a file in phase 3 and compares
// with a bare json.Unmarshal of the same file into a slice, run in turn.
// peak-heap/file is the largest growth of the heap during one Restore, over
// the file's size; live-heap/file is what the restored Store keeps.
func BenchmarkRestore(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			ctx := context.Background()
			path := writeFile(b, n)
			data, err := os.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			unmarshal := func() error { return benchref.Unmarshal(data) }
			restore := func() (*migrate.Store[bkey, bval], error) {
				f, err := checkpoint.Open[bkey, bval](ctx, path)
				if err != nil {
					return nil, err
				}
				s, err := migrate.New(migrate.Config[bkey, bval]{Phase: migrate.PhaseContract, Checkpoint: f})
				if err != nil {
					return nil, err
				}
				if _, err := s.Restore(ctx); err != nil {
					return nil, err
				}
				return s, nil
			}
			var kept *migrate.Store[bkey, bval]
			peak, live := peakHeap(func() {
				if kept, err = restore(); err != nil {
					b.Fatal(err)
				}
			})
			kept.Close()
			var ours, ref benchref.Clock
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var s *migrate.Store[bkey, bval]
				if err := ours.Run(func() (err error) { s, err = restore(); return err }); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if s.Len() != n {
					b.Fatalf("restored %d of %d", s.Len(), n)
				}
				s.Close()
				if err := ref.Run(unmarshal); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(ours.Total)/float64(ref.Total), "x-unmarshal")
			b.ReportMetric(float64(peak)/float64(len(data)), "peak-heap/file")
			b.ReportMetric(float64(live)/float64(len(data)), "live-heap/file")
		})
	}
}

// peakHeap runs f once and returns the largest growth of the heap while it
// ran (live objects and garbage not yet collected, sampled every 100µs) and
// the growth of the live heap once it returned.
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
