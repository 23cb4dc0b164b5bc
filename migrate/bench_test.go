package migrate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
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

// The benchmarks run on a real file in b.TempDir(), fsync included, and
// report each figure as a ratio to two references measured in the same
// run on the same disk (package internal/benchref):
//
//   - x-limit: time per operation over the time of one durable atomic
//     replace of the same file's bytes, already encoded (the floor of any
//     durable checkpoint of that state);
//   - x-vs-ipamd: how many times more operations per second than the
//     pattern phaseshift replaces (one mutex, every entry re-encoded and
//     the file replaced at every mutation).
//
// Run: go test -run '^$' -bench . -count 6 ./migrate ./checkpoint | benchstat -

type (
	bkey = benchref.Key
	bval = benchref.Alloc
)

// benchStore returns a Store in phase 3 (the checkpoint only, like the
// ipamd pattern) restored from a file of n entries, its checkpoint opened
// with opts.
func benchStore(b *testing.B, n int, opts ...checkpoint.Option) (*migrate.Store[bkey, bval], string) {
	b.Helper()
	ctx := context.Background()
	path := writeFile(b, n)
	f, err := checkpoint.Open[bkey, bval](ctx, path, opts...)
	if err != nil {
		b.Fatal(err)
	}
	s, err := migrate.New(migrate.Config[bkey, bval]{Phase: migrate.PhaseContract, Checkpoint: f})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Restore(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, path
}

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

// refs are the two references at n entries, ready to run: one durable
// atomic replace of the encoded file (the limit), and one mutation with the
// ipamd pattern.
type refs struct {
	limit, ipamd func() error
}

func newRefs(b *testing.B, n int) refs {
	b.Helper()
	data, err := os.ReadFile(writeFile(b, n))
	if err != nil {
		b.Fatal(err)
	}
	dst := filepath.Join(b.TempDir(), "limit.json")
	p := benchref.NewIpamd(filepath.Join(b.TempDir(), "ipamd.json"), benchref.Entries(n))
	i := 0
	return refs{
		limit: func() error { return benchref.Replace(dst, data) },
		ipamd: func() error {
			i++
			return p.Put(benchref.KeyOf(i%n), benchref.ValueOf(i%n, i))
		},
	}
}

// step runs each reference once, untimed, next to one of the benchmark's
// own operations: the limit, and ipamdOps mutations of the ipamd pattern.
func (r refs) step(b *testing.B, limit, ipamd *benchref.Clock, ipamdOps int) {
	b.Helper()
	b.StopTimer()
	defer b.StartTimer()
	if err := limit.Run(r.limit); err != nil {
		b.Fatal(err)
	}
	err := ipamd.Run(func() error {
		for j := 0; j < ipamdOps; j++ {
			if err := r.ipamd(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// around runs op k times before and k times after the benchmark's own run
// (for runs that cannot interleave, such as many writers at once).
func around(b *testing.B, c *benchref.Clock, op func() error, k int, run func()) {
	b.Helper()
	b.StopTimer()
	for j := 0; j < k; j++ {
		if err := c.Run(op); err != nil {
			b.Fatal(err)
		}
	}
	b.StartTimer()
	run()
	b.StopTimer()
	for j := 0; j < k; j++ {
		if err := c.Run(op); err != nil {
			b.Fatal(err)
		}
	}
}

// seqOf reads the sequence number of a checkpoint file: the number of
// saves so far.
func seqOf(b *testing.B, path string) uint64 {
	b.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var h struct{ Seq uint64 }
	if err := json.Unmarshal(data, &h); err != nil {
		b.Fatal(err)
	}
	return h.Seq
}

// parallel runs n operations spread over w goroutines; goroutine g does
// operations g, g+w, g+2w...
func parallel(w, n int, op func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, w)
	for g := 0; g < w; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += w {
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

// report adds throughput, saves per operation, and the ratios: ours is
// the time of the benchmark's own operations, per operation.
func report(b *testing.B, ours time.Duration, limit, ipamd *benchref.Clock, saves uint64) {
	per := float64(ours) / float64(b.N)
	b.ReportMetric(float64(b.N)/ours.Seconds(), "ops/s")
	b.ReportMetric(float64(saves)/float64(b.N), "saves/op")
	b.ReportMetric(per/float64(limit.PerCall()), "x-limit")
	b.ReportMetric(float64(ipamd.PerCall())/per, "x-vs-ipamd")
}

// warm makes a few writes, so the run measures the steady state, not the
// first commit's buffers.
func warm(b *testing.B, s *migrate.Store[bkey, bval], n int) {
	b.Helper()
	for i := 0; i < 3; i++ {
		if err := s.Put(context.Background(), benchref.KeyOf(i%n), benchref.ValueOf(i%n, -1)); err != nil {
			b.Fatal(err)
		}
	}
}

// run is one benchmark of writes: a Store restored from n entries, the
// references, and a clock for each.
type run struct {
	s                  *migrate.Store[bkey, bval]
	path               string
	ref                refs
	seq0               uint64
	ours, limit, ipamd benchref.Clock
}

// start sets a run up and starts the timer; opts open the checkpoint.
func start(b *testing.B, n int, opts ...checkpoint.Option) *run {
	b.Helper()
	r := &run{ref: newRefs(b, n)}
	r.s, r.path = benchStore(b, n, opts...)
	warm(b, r.s, n)
	r.seq0 = seqOf(b, r.path)
	b.ReportAllocs()
	b.ResetTimer()
	return r
}

// finish stops the timer and reports; savesPerOp divides the saves counted
// in the file (2 when each operation is followed by an untimed one).
func (r *run) finish(b *testing.B, savesPerOp uint64) {
	b.Helper()
	b.StopTimer()
	report(b, r.ours.Total, &r.limit, &r.ipamd, (seqOf(b, r.path)-r.seq0)/savesPerOp)
}

func BenchmarkPut(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		for _, w := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("entries=%d/writers=%d", n, w), func(b *testing.B) {
				ctx := context.Background()
				r := start(b, n)
				put := func(i int) error { return r.s.Put(ctx, benchref.KeyOf(i%n), benchref.ValueOf(i%n, i)) }
				if w == 1 {
					// One writer: each Put next to one of each reference.
					for i := 0; i < b.N; i++ {
						if err := r.ours.Run(func() error { return put(i) }); err != nil {
							b.Fatal(err)
						}
						r.ref.step(b, &r.limit, &r.ipamd, 1)
					}
				} else {
					k := min(max(b.N/(8*w), 3), 100)
					around(b, &r.limit, r.ref.limit, k, func() {
						around(b, &r.ipamd, r.ref.ipamd, k, func() {
							if err := r.ours.Run(func() error { return parallel(w, b.N, put) }); err != nil {
								b.Fatal(err)
							}
						})
					})
				}
				r.finish(b, 1)
			})
		}
	}
}

func BenchmarkDelete(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			ctx := context.Background()
			r := start(b, n)
			for i := 0; i < b.N; i++ {
				k := benchref.KeyOf(i % n)
				if err := r.ours.Run(func() error { return r.s.Delete(ctx, k) }); err != nil {
					b.Fatal(err)
				}
				// Put it back, untimed, so the state keeps n entries.
				b.StopTimer()
				if err := r.s.Put(ctx, k, benchref.ValueOf(i%n, i)); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				r.ref.step(b, &r.limit, &r.ipamd, 1)
			}
			r.finish(b, 2)
		})
	}
}

func BenchmarkUpdate10(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			ctx := context.Background()
			r := start(b, n)
			for i := 0; i < b.N; i++ {
				err := r.ours.Run(func() error {
					return r.s.Update(ctx, func(tx *migrate.Tx[bkey, bval]) error {
						for j := 0; j < 10; j++ {
							k := (i*10 + j) % n
							tx.Put(benchref.KeyOf(k), benchref.ValueOf(k, i))
						}
						return nil
					})
				})
				if err != nil {
					b.Fatal(err)
				}
				// The ipamd pattern makes ten mutations, one file each.
				r.ref.step(b, &r.limit, &r.ipamd, 10)
			}
			r.finish(b, 1)
		})
	}
}

// BenchmarkAllocate is what an allocator does on every CNI ADD: an Update
// that finds a free address among the entries (through Tx.All) and
// records it, here for a pod whose old allocation it replaces so that the
// state keeps n entries. With many writers, the Updates are group
// committed. The ipamd pattern makes one mutation per allocation.
func BenchmarkAllocate(b *testing.B) { benchmarkAllocate(b) }

// benchmarkAllocate is BenchmarkAllocate with the checkpoint opened with
// opts.
func benchmarkAllocate(b *testing.B, opts ...checkpoint.Option) {
	for _, n := range []int{1000} {
		for _, w := range []int{1, 64} {
			b.Run(fmt.Sprintf("entries=%d/writers=%d", n, w), func(b *testing.B) {
				ctx := context.Background()
				r := start(b, n, opts...)
				alloc := func(i int) error { return r.s.Update(ctx, allocateUpdate(i, n)) }
				if w == 1 {
					for i := 0; i < b.N; i++ {
						if err := r.ours.Run(func() error { return alloc(i) }); err != nil {
							b.Fatal(err)
						}
						r.ref.step(b, &r.limit, &r.ipamd, 1)
					}
				} else {
					k := min(max(b.N/(8*w), 3), 100)
					around(b, &r.limit, r.ref.limit, k, func() {
						around(b, &r.ipamd, r.ref.ipamd, k, func() {
							if err := r.ours.Run(func() error { return parallel(w, b.N, alloc) }); err != nil {
								b.Fatal(err)
							}
						})
					})
				}
				r.finish(b, 1)
			})
		}
	}
}

// allocateUpdate is the i-th allocation's Update: it finds a free address among
// the entries (through Tx.All) and records it, for a pod whose old
// allocation it replaces so that the state keeps n entries.
func allocateUpdate(i, n int) func(tx *migrate.Tx[bkey, bval]) error {
	return func(tx *migrate.Tx[bkey, bval]) error {
		k := benchref.KeyOf(i % n)
		tx.Delete(k)
		// The pool is 10.0.0.0/16, as a bitmap: the lowest free address
		// wins.
		var used [1 << 16]bool
		for _, v := range tx.All() {
			for _, ip := range v.IPs {
				if a := ip.As4(); a[0] == 10 && a[1] == 0 {
					used[int(a[2])<<8|int(a[3])] = true
				}
			}
		}
		free := 0
		for used[free] {
			free++
		}
		ip := netip.AddrFrom4([4]byte{10, 0, byte(free >> 8), byte(free)})
		tx.Put(k, bval{IPs: []netip.Addr{ip}, Allocated: time.Unix(int64(i), 0).UTC()})
		return nil
	}
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
