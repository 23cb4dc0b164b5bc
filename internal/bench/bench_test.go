package bench_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/bench"
	"github.com/phaseshift/phaseshift/internal/benchref"
	"github.com/phaseshift/phaseshift/migrate"
)

// Each benchmark runs phaseshift's write (a migrate.Store in phase 3 over a
// checkpoint.File, default options unless its name says otherwise) and,
// in the same run, on the same disk, in turn with it, what a user would
// use instead. Every reference makes the same writes with the same number
// of writers, and is given about as much time as phaseshift's own run, in
// slices between phaseshift's, so that each sees the same machine (these
// machines are shared, and their disks noisy: ratios are stable where
// absolute times are not).
//
// The state is loaded as a daemon loads it (load=bulk: a Restore of an
// empty checkpoint, then one Update of every entry, as a restore that
// reconciles against another source, or a GC, makes) or from a checkpoint
// file written beforehand (load=seeded: a Save of every entry, then a
// Restore of it). The metrics:
//
//   - ns/op: phaseshift's mean wall time per write; us-p50, us-p99.9 and
//     us-max its median, 99.9th percentile and slowest write, in µs, each
//     write timed from its call to its return;
//   - cpu-us/op: the CPU time (user and system, of the whole process, from
//     getrusage) per write while phaseshift's writes ran, what a fast
//     disk would leave of a write's cost, with any compaction a write set
//     off in the background (each slice waits for it, its CPU counted);
//     every side's slice starts with the garbage of the sides before it
//     collected, so that it pays for its own collections only;
//   - x-vs-ipamd: phaseshift's operations per second over those of the
//     AWS VPC CNI's ipamd checkpoint, as it is (benchref.JSONFile: the
//     whole state encoded, temporary file, fsync, rename, no fsync of the
//     directory), higher is better;
//   - x-vs-ipamd-dirsync: the same with the directory fsync, the floor of a
//     durable whole-file replace (benchref.NewDurableJSONFile);
//   - x-vs-bbolt: the same over bbolt with its default options
//     (bench.Bolt): db.Update per write with one writer, db.Batch with
//     many; bbolt-us-p50, bbolt-us-p99.9, bbolt-us-max and
//     bbolt-cpu-us/op are bbolt's own figures, and x-vs-bbolt-p50 and
//     x-vs-bbolt-max bbolt's median and slowest write over phaseshift's
//     (higher is better);
//   - x-append (one writer): phaseshift's mean time per write over one
//     fsync'd append of a record of the same size to an open file
//     (benchref.Appender), the floor of any durable mutation, lower is
//     better; append-us is that append's own mean time, the disk's cost of
//     an fsync'd append in this run;
//   - writes/save: how many writes one checkpoint save (an append to the
//     journal, or a file replaced) carried.
//
// Reproduce (the figures of docs/performance.md), on the disk under TMPDIR
// (TMPDIR=/dev/shm for tmpfs, where an fsync costs next to nothing):
//
//	go test -run '^$' -bench . -count 5 ./internal/bench | tee bench.txt; benchstat bench.txt
//
// The lone writer at 100,000 entries needs tens of thousands of writes to
// include the journal compactions it sets off (one every ~12,000 writes):
// -bench 'Put/load=.*/entries=100000/writers=1$' -benchtime 26000x. The
// 1,000,000-entry row (BenchmarkMillion) runs only with
// PHASESHIFT_BENCH_MILLION=1, since its setup alone takes tens of seconds.
//
// Profile phaseshift's side alone (its goroutines carry the label
// side=phaseshift, the references' their own names):
//
//	go test -run '^$' -bench 'Allocate/load=bulk/entries=1000/writers=64$' -cpuprofile cpu.prof ./internal/bench
//	go tool pprof -tagfocus side=phaseshift -top cpu.prof

type (
	bkey = benchref.Key
	bval = benchref.Alloc
)

// side is one way to make the benchmark's writes, and its clocks.
type side struct {
	name  string
	op    func(i int) error // the i-th write
	after func()            // run untimed after each slice, or nil
	// settle, if not nil, runs after each of the side's slices, outside
	// its wall time but inside its CPU time: it waits for the background
	// work the slice's writes set off.
	settle func()
	total  time.Duration   // wall time of the writes
	cpu    time.Duration   // process CPU time while they ran, settle included
	lat    []time.Duration // each write's time, from its call to its return
	ops    int
}

// cpuTime returns the CPU time, user and system, the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// run times n writes, from the from-th on, spread over w goroutines, which
// carry the profiler label side=<name>: go tool pprof -tagfocus
// side=phaseshift shows where phaseshift's own time goes.
func (s *side) run(w, n, from int) error {
	at := len(s.lat)
	s.lat = slices.Grow(s.lat, n)[:at+n]
	lat := s.lat[at:]
	cpu := cpuTime()
	start := time.Now()
	var err error
	pprof.Do(context.Background(), pprof.Labels("side", s.name), func(context.Context) {
		err = parallel(w, n, func(i int) error {
			t := time.Now()
			err := s.op(from + i)
			lat[i] = time.Since(t)
			return err
		})
	})
	s.total += time.Since(start)
	if s.settle != nil {
		s.settle()
	}
	s.cpu += cpuTime() - cpu
	s.ops += n
	if s.after != nil {
		s.after()
	}
	return err
}

func (s *side) perOp() float64 { return float64(s.total) / float64(max(s.ops, 1)) }

// quantile returns the q-quantile of the side's write times (q = 1: the
// slowest), in µs.
func (s *side) quantile(q float64) float64 {
	if len(s.lat) == 0 {
		return 0
	}
	sorted := slices.Clone(s.lat)
	slices.Sort(sorted)
	i := min(len(sorted)-1, int(q*float64(len(sorted))))
	return float64(sorted[i]) / float64(time.Microsecond)
}

// report reports the side's median, 99.9th percentile and slowest write
// and its CPU per write, under units prefixed with prefix.
func (s *side) report(b *testing.B, prefix string) {
	b.ReportMetric(s.quantile(0.5), prefix+"us-p50")
	b.ReportMetric(s.quantile(0.999), prefix+"us-p99.9")
	b.ReportMetric(s.quantile(1), prefix+"us-max")
	b.ReportMetric(float64(s.cpu)/float64(max(s.ops, 1))/float64(time.Microsecond), prefix+"cpu-us/op")
}

// parallel runs n operations over w goroutines; goroutine g does
// operations g, g+w, g+2w...
func parallel(w, n int, op func(i int) error) error {
	if w == 1 {
		for i := 0; i < n; i++ {
			if err := op(i); err != nil {
				return err
			}
		}
		return nil
	}
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

// compare runs b.N writes of ours over w writers, in about ten slices,
// and after each slice each reference (in turning order) for about as long
// as ours has run so far in all, and reports the figures.
func compare(b *testing.B, w int, ours *side, refs []*side) {
	b.Helper()
	// Slices long enough for the writers to reach their steady state, and
	// for a compaction a slice sets off to run among its writes.
	slice := max(b.N/10, 1)
	if w > 1 {
		slice = max(slice, 8*w)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; round++ {
		n := min(slice, b.N-done)
		// Each side's slice starts with the garbage of the one before it
		// collected, outside both clocks: a collection set off by
		// another side's garbage (ipamd's encodes 20 MB per write at
		// 100,000 entries) would otherwise run into this side's writes.
		b.StopTimer()
		runtime.GC()
		b.StartTimer()
		if err := ours.run(w, n, done); err != nil {
			b.Fatal(err)
		}
		done += n
		b.StopTimer()
		for j := range refs {
			r := refs[(round+j)%len(refs)]
			if r.ops > 0 && r.total >= ours.total {
				continue
			}
			m := w
			if r.ops > 0 {
				m = max(w, int(float64(ours.total-r.total)/r.perOp()))
			}
			runtime.GC()
			if err := r.run(w, m, r.ops); err != nil {
				b.Fatalf("%s: %v", r.name, err)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	ours.report(b, "")
	for _, r := range refs {
		switch r.name {
		case "append":
			b.ReportMetric(ours.perOp()/r.perOp(), "x-append")
			b.ReportMetric(r.perOp()/float64(time.Microsecond), "append-us")
			continue
		case "bbolt":
			r.report(b, "bbolt-")
			b.ReportMetric(r.quantile(0.5)/ours.quantile(0.5), "x-vs-bbolt-p50")
			b.ReportMetric(r.quantile(1)/ours.quantile(1), "x-vs-bbolt-max")
		}
		b.ReportMetric(r.perOp()/ours.perOp(), "x-vs-"+r.name)
	}
}

// How a fixture loads its state.
const (
	loadBulk   = "bulk"   // a Restore of an empty checkpoint, then one Update of every entry
	loadSeeded = "seeded" // a Save of every entry, then a Restore of the file
)

// fixture is a benchmark's Store and references over n entries.
type fixture struct {
	s     *migrate.Store[bkey, bval]
	f     *checkpoint.File[bkey, bval]
	ipamd *benchref.JSONFile[bkey, bval]
	dur   *benchref.JSONFile[bkey, bval]
	bolt  *bench.Bolt
	n     int
}

// restoreStore opens the checkpoint at path with opts and restores a Store
// in phase 3 from it.
func restoreStore(b *testing.B, path string, opts ...checkpoint.Option) (*migrate.Store[bkey, bval], *checkpoint.File[bkey, bval]) {
	b.Helper()
	ctx := context.Background()
	f, err := checkpoint.Open[bkey, bval](ctx, path, opts...)
	if err != nil {
		b.Fatal(err)
	}
	s, err := migrate.New(migrate.Config[bkey, bval]{Phase: migrate.PhaseContract, Checkpoint: f})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, err := s.Restore(ctx); err != nil {
		b.Fatal(err)
	}
	return s, f
}

// seed saves entries as the checkpoint at path, opened with opts.
func seed(b *testing.B, path string, entries map[bkey]bval, opts ...checkpoint.Option) {
	b.Helper()
	ctx := context.Background()
	f, err := checkpoint.Open[bkey, bval](ctx, path, opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Save(ctx, checkpoint.Snapshot[bkey, bval]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: entries}); err != nil {
		b.Fatal(err)
	}
}

// newFixture makes a Store in phase 3 over a checkpoint of n entries,
// opened with opts and loaded as load says, and sets the references up
// with the same entries.
func newFixture(b *testing.B, n int, load string, opts ...checkpoint.Option) *fixture {
	b.Helper()
	ctx := context.Background()
	entries := benchref.Entries(n)
	path := filepath.Join(b.TempDir(), "ipam.json")
	if load == loadSeeded {
		seed(b, path, entries, opts...)
	}
	s, f := restoreStore(b, path, opts...)
	if load == loadBulk {
		err := s.Update(ctx, func(tx *migrate.Tx[bkey, bval]) error {
			for k, v := range entries {
				tx.Put(k, v)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if s.Len() != n {
		b.Fatalf("the Store holds %d entries, want %d", s.Len(), n)
	}
	// A few writes first, so that the run measures the steady state.
	for i := 0; i < 3; i++ {
		if err := s.Put(ctx, benchref.KeyOf(i), benchref.ValueOf(i, -1)); err != nil {
			b.Fatal(err)
		}
	}
	bo, err := bench.OpenBolt(filepath.Join(b.TempDir(), "bolt.db"), entries)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bo.Close() })
	fx := &fixture{
		s:     s,
		f:     f,
		ipamd: benchref.NewJSONFile(filepath.Join(b.TempDir(), "ipamd.json"), entries),
		dur:   benchref.NewDurableJSONFile(filepath.Join(b.TempDir(), "ipamd.json"), entries),
		bolt:  bo,
		n:     n,
	}
	b.Cleanup(fx.ipamd.CloseLeaked)
	b.Cleanup(fx.dur.CloseLeaked)
	return fx
}

// ours is phaseshift's side of a benchmark: op on the fixture's Store.
// Each of its slices waits, outside its wall time and inside its CPU time,
// for a compaction it set off to finish, so that the compaction's CPU is
// its own and not the next reference's.
func (fx *fixture) ours(op func(i int) error) *side {
	return &side{name: "phaseshift", op: op, settle: func() {
		for fx.f.Journal().Compacting {
			time.Sleep(100 * time.Microsecond)
		}
	}}
}

// putRefs are the references of w writers' Puts.
func (fx *fixture) putRefs(w int) []*side {
	n := fx.n
	boltPut := fx.bolt.Put
	if w > 1 {
		boltPut = fx.bolt.BatchPut
	}
	return []*side{
		{name: "ipamd", op: func(i int) error { return fx.ipamd.Put(benchref.KeyOf(i%n), benchref.ValueOf(i%n, i)) }, after: fx.ipamd.CloseLeaked},
		{name: "ipamd-dirsync", op: func(i int) error { return fx.dur.Put(benchref.KeyOf(i%n), benchref.ValueOf(i%n, i)) }, after: fx.dur.CloseLeaked},
		{name: "bbolt", op: func(i int) error { return boltPut(benchref.KeyOf(i%n), benchref.ValueOf(i%n, i)) }},
	}
}

// appendRef is the floor of a durable mutation: one fsync'd append of a
// record about the size of a journal record of one Put of these entries.
func appendRef(b *testing.B) *side {
	b.Helper()
	app, err := benchref.NewAppender(filepath.Join(b.TempDir(), "floor.log"), 400)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { app.Close() })
	return &side{name: "append", op: func(int) error { return app.Append() }}
}

// savesOf returns the Store's writes and checkpoint saves so far.
func savesOf(s *migrate.Store[bkey, bval]) (writes, saves uint64) {
	st := s.Stats()
	return st.Puts + st.Updates + st.Deletes, st.CheckpointSaves
}

// reportSaves reports how many writes a save carried since w0, s0.
func reportSaves(b *testing.B, s *migrate.Store[bkey, bval], w0, s0 uint64) {
	b.Helper()
	w1, s1 := savesOf(s)
	b.ReportMetric(float64(w1-w0)/float64(max(s1-s0, 1)), "writes/save")
}

// putCase is one row of BenchmarkPut: entries, writers and how the state
// was loaded.
type putCase struct {
	n, w int
	load string
}

func benchmarkPut(b *testing.B, cases []putCase, opts ...checkpoint.Option) {
	for _, c := range cases {
		n, w := c.n, c.w
		b.Run(fmt.Sprintf("load=%s/entries=%d/writers=%d", c.load, n, w), func(b *testing.B) {
			ctx := context.Background()
			fx := newFixture(b, n, c.load, opts...)
			ours := fx.ours(func(i int) error {
				return fx.s.Put(ctx, benchref.KeyOf(i%n), benchref.ValueOf(i%n, i))
			})
			refs := fx.putRefs(w)
			if w == 1 {
				refs = append(refs, appendRef(b))
			}
			w0, s0 := savesOf(fx.s)
			compare(b, w, ours, refs)
			reportSaves(b, fx.s, w0, s0)
		})
	}
}

// BenchmarkPut is Store.Put with default options: one writer at 1,000,
// 10,000 and 100,000 entries, loaded both ways, and 8 and 64 writers at
// once over a bulk load.
//
// With one writer, the 100,000-entry case needs tens of thousands of
// writes to include the journal compactions it sets off (one every
// ~12,000 commits): -benchtime 26000x.
func BenchmarkPut(b *testing.B) {
	var cases []putCase
	for _, n := range []int{1000, 10000, 100000} {
		for _, load := range []string{loadBulk, loadSeeded} {
			cases = append(cases, putCase{n: n, w: 1, load: load})
		}
	}
	for _, n := range []int{1000, 10000} {
		for _, w := range []int{8, 64} {
			cases = append(cases, putCase{n: n, w: w, load: loadBulk})
		}
	}
	benchmarkPut(b, cases)
}

// BenchmarkPutWithoutJournal is BenchmarkPut with
// checkpoint.WithoutJournal(): every commit replaces the whole file.
func BenchmarkPutWithoutJournal(b *testing.B) {
	var cases []putCase
	for _, n := range []int{1000, 10000} {
		for _, w := range []int{1, 64} {
			cases = append(cases, putCase{n: n, w: w, load: loadBulk})
		}
	}
	benchmarkPut(b, cases, checkpoint.WithoutJournal())
}

// allocate is the at-th allocation's Update: it gives the pod of key
// at%n the lowest free address (benchref.LowestFree over Tx.All), in place
// of its old one, so that the state keeps n entries.
func allocate(at, n int) func(tx *migrate.Tx[bkey, bval]) error {
	return func(tx *migrate.Tx[bkey, bval]) error {
		k := benchref.KeyOf(at % n)
		tx.Delete(k)
		ip := benchref.LowestFree(tx.All())
		tx.Put(k, bval{IPs: []netip.Addr{ip}, Allocated: time.Unix(int64(at), 0).UTC()})
		return nil
	}
}

// jsonAllocate is the same allocation under a JSONFile's mutex.
func jsonAllocate(p *benchref.JSONFile[bkey, bval], at, n int) error {
	return p.Update(func(m map[bkey]bval) error {
		k := benchref.KeyOf(at % n)
		delete(m, k)
		ip := benchref.LowestFree(maps.All(m))
		m[k] = bval{IPs: []netip.Addr{ip}, Allocated: time.Unix(int64(at), 0).UTC()}
		return nil
	})
}

func benchmarkAllocate(b *testing.B, opts ...checkpoint.Option) {
	const n = 1000
	for _, w := range []int{1, 64} {
		b.Run(fmt.Sprintf("load=%s/entries=%d/writers=%d", loadBulk, n, w), func(b *testing.B) {
			ctx := context.Background()
			fx := newFixture(b, n, loadBulk, opts...)
			ours := fx.ours(func(i int) error { return fx.s.Update(ctx, allocate(i, n)) })
			refs := []*side{
				{name: "ipamd", op: func(i int) error { return jsonAllocate(fx.ipamd, i, n) }, after: fx.ipamd.CloseLeaked},
				{name: "ipamd-dirsync", op: func(i int) error { return jsonAllocate(fx.dur, i, n) }, after: fx.dur.CloseLeaked},
				{name: "bbolt", op: func(i int) error { return fx.bolt.Allocate(benchref.KeyOf(i%n), i, w > 1) }},
			}
			w0, s0 := savesOf(fx.s)
			compare(b, w, ours, refs)
			reportSaves(b, fx.s, w0, s0)
		})
	}
}

// BenchmarkAllocate is what an allocator does on every CNI ADD, with
// default options: an Update that scans the state through Tx.All for the
// lowest free address in a /16 and records it. Every reference does the
// same scan over the entries it keeps in memory, then its own durable
// write.
func BenchmarkAllocate(b *testing.B) { benchmarkAllocate(b) }

// BenchmarkAllocateWithoutJournal is BenchmarkAllocate with
// checkpoint.WithoutJournal().
func BenchmarkAllocateWithoutJournal(b *testing.B) { benchmarkAllocate(b, checkpoint.WithoutJournal()) }

// millionEnv turns BenchmarkMillion on.
const millionEnv = "PHASESHIFT_BENCH_MILLION"

// BenchmarkMillion is the 1,000,000-entry row (a checkpoint of about 200
// MB): the Restore of a file written beforehand, timed once (restore-s)
// with the growth of the heap it needed at its peak (peak-heap-MB) and what
// the restored Store keeps (live-heap-MB), then lone Puts against bbolt
// and the fsync'd append as BenchmarkPut runs them. Its setup takes tens
// of seconds and a few GB of memory, so it runs only with
// PHASESHIFT_BENCH_MILLION=1:
//
//	PHASESHIFT_BENCH_MILLION=1 go test -run '^$' -bench Million -benchtime 26000x ./internal/bench
func BenchmarkMillion(b *testing.B) {
	if os.Getenv(millionEnv) == "" {
		b.Skipf("set %s=1 to run the 1,000,000-entry row", millionEnv)
	}
	const n = 1000000
	b.Run(fmt.Sprintf("load=%s/entries=%d/writers=1", loadSeeded, n), func(b *testing.B) {
		ctx := context.Background()
		entries := benchref.Entries(n)
		path := filepath.Join(b.TempDir(), "ipam.json")
		seed(b, path, entries)
		var s *migrate.Store[bkey, bval]
		var f *checkpoint.File[bkey, bval]
		start := time.Now()
		peak, live := peakHeap(func() { s, f = restoreStore(b, path) })
		restore := time.Since(start)
		if s.Len() != n {
			b.Fatalf("restored %d of %d", s.Len(), n)
		}
		bo, err := bench.OpenBolt(filepath.Join(b.TempDir(), "bolt.db"), entries)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { bo.Close() })
		fx := &fixture{s: s, f: f, bolt: bo, n: n}
		ours := fx.ours(func(i int) error {
			return s.Put(ctx, benchref.KeyOf(i%n), benchref.ValueOf(i%n, i))
		})
		refs := []*side{
			{name: "bbolt", op: func(i int) error { return bo.Put(benchref.KeyOf(i%n), benchref.ValueOf(i%n, i)) }},
			appendRef(b),
		}
		compare(b, 1, ours, refs)
		b.ReportMetric(restore.Seconds(), "restore-s")
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
		b.ReportMetric(float64(live)/(1<<20), "live-heap-MB")
	})
}
