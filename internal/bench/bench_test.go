package bench_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"runtime/pprof"
	"sync"
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
// absolute times are not). The metrics:
//
//   - x-vs-ipamd: phaseshift's operations per second over those of the
//     AWS VPC CNI's ipamd checkpoint, as it is (benchref.JSONFile: the
//     whole state encoded, temporary file, fsync, rename, no fsync of the
//     directory), higher is better;
//   - x-vs-ipamd-dirsync: the same with the directory fsync, the floor of a
//     durable whole-file replace (benchref.NewDurableJSONFile);
//   - x-vs-bbolt: the same over bbolt with its default options
//     (bench.Bolt): db.Update per write with one writer, db.Batch with
//     many;
//   - x-append (one writer): phaseshift's time per write over one fsync'd
//     append of a record of the same size to an open file
//     (benchref.Appender), the floor of any durable mutation, lower is
//     better;
//   - writes/save: how many writes one checkpoint save (an append to the
//     journal, or a file replaced) carried.
//
// Reproduce (the figures of the README):
//
//	go test -run '^$' -bench . -count 5 ./internal/bench | tee bench.txt; benchstat bench.txt
//
// Profile phaseshift's side alone (its goroutines carry the label
// side=phaseshift, the references' their own names):
//
//	go test -run '^$' -bench 'Allocate/entries=1000/writers=64$' -cpuprofile cpu.prof ./internal/bench
//	go tool pprof -tagfocus side=phaseshift -top cpu.prof

type (
	bkey = benchref.Key
	bval = benchref.Alloc
)

// side is one way to make the benchmark's writes, and its clock.
type side struct {
	name  string
	op    func(i int) error // the i-th write
	after func()            // run untimed after each slice, or nil
	total time.Duration
	ops   int
}

// run times n writes, from the from-th on, spread over w goroutines, which
// carry the profiler label side=<name>: go tool pprof -tagfocus
// side=phaseshift shows where phaseshift's own time goes.
func (s *side) run(w, n, from int) error {
	start := time.Now()
	var err error
	pprof.Do(context.Background(), pprof.Labels("side", s.name), func(context.Context) {
		err = parallel(w, n, func(i int) error { return s.op(from + i) })
	})
	s.total += time.Since(start)
	s.ops += n
	if s.after != nil {
		s.after()
	}
	return err
}

func (s *side) perOp() float64 { return float64(s.total) / float64(max(s.ops, 1)) }

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

// compare runs b.N writes of ours over w writers, in slices, and after each
// slice each reference (in turning order) for about as long as ours has
// run so far in all, and reports the ratios.
func compare(b *testing.B, w int, ours *side, refs []*side) {
	b.Helper()
	slice := 1
	if w > 1 {
		// Slices long enough for the writers to reach their steady state.
		slice = max(b.N/10, 8*w)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done, round := 0, 0; done < b.N; round++ {
		n := min(slice, b.N-done)
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
			if err := r.run(w, m, r.ops); err != nil {
				b.Fatalf("%s: %v", r.name, err)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	for _, r := range refs {
		if r.name == "append" {
			b.ReportMetric(ours.perOp()/r.perOp(), "x-append")
			continue
		}
		b.ReportMetric(r.perOp()/ours.perOp(), "x-vs-"+r.name)
	}
}

// fixture is a benchmark's Store and references over n entries.
type fixture struct {
	s     *migrate.Store[bkey, bval]
	ipamd *benchref.JSONFile[bkey, bval]
	dur   *benchref.JSONFile[bkey, bval]
	bolt  *bench.Bolt
	n     int
}

// newFixture restores a Store in phase 3 from a checkpoint of n entries,
// opened with opts, and sets the references up with the same entries.
func newFixture(b *testing.B, n int, opts ...checkpoint.Option) *fixture {
	b.Helper()
	ctx := context.Background()
	entries := benchref.Entries(n)
	path := filepath.Join(b.TempDir(), "ipam.json")
	f, err := checkpoint.Open[bkey, bval](ctx, path, opts...)
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Save(ctx, checkpoint.Snapshot[bkey, bval]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: entries}); err != nil {
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
		ipamd: benchref.NewJSONFile(filepath.Join(b.TempDir(), "ipamd.json"), entries),
		dur:   benchref.NewDurableJSONFile(filepath.Join(b.TempDir(), "ipamd.json"), entries),
		bolt:  bo,
		n:     n,
	}
	b.Cleanup(fx.ipamd.CloseLeaked)
	b.Cleanup(fx.dur.CloseLeaked)
	return fx
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

func benchmarkPut(b *testing.B, entries []int, writers []int, opts ...checkpoint.Option) {
	for _, n := range entries {
		for _, w := range writers {
			b.Run(fmt.Sprintf("entries=%d/writers=%d", n, w), func(b *testing.B) {
				ctx := context.Background()
				fx := newFixture(b, n, opts...)
				ours := &side{name: "phaseshift", op: func(i int) error {
					return fx.s.Put(ctx, benchref.KeyOf(i%n), benchref.ValueOf(i%n, i))
				}}
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
}

// BenchmarkPut is Store.Put with default options: one writer at 1,000,
// 10,000 and 100,000 entries, and 8 and 64 writers at once.
//
// With one writer, the 100,000-entry case needs tens of thousands of
// writes to include the journal compactions it pays for (one every ~12,000
// commits): -benchtime 20000x.
func BenchmarkPut(b *testing.B) {
	benchmarkPut(b, []int{1000, 10000, 100000}, []int{1})
	benchmarkPut(b, []int{1000, 10000}, []int{8, 64})
}

// BenchmarkPutWithoutJournal is BenchmarkPut with
// checkpoint.WithoutJournal(): every commit replaces the whole file.
func BenchmarkPutWithoutJournal(b *testing.B) {
	benchmarkPut(b, []int{1000, 10000}, []int{1, 64}, checkpoint.WithoutJournal())
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
		b.Run(fmt.Sprintf("entries=%d/writers=%d", n, w), func(b *testing.B) {
			ctx := context.Background()
			fx := newFixture(b, n, opts...)
			ours := &side{name: "phaseshift", op: func(i int) error { return fx.s.Update(ctx, allocate(i, n)) }}
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
