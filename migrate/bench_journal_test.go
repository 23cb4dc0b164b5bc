package migrate_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/benchref"
	"github.com/phaseshift/phaseshift/migrate"
)

// The benchmarks of a Store whose checkpoint is opened WithJournal, with
// their references in the same run, on the same disk:
//
//   - x-append: time per Put over the time of one fsync'd append of a
//     small record to an open file (benchref.Appender), the floor of any
//     durable mutation;
//   - x-vs-ipamd: as in bench_test.go;
//   - x-compacted: a restore from a file and a journal at its compaction
//     bound over a restore of the same state compacted into the file.
//
// Run (the 100,000-entry Put needs enough commits to include the
// compactions it pays for, one every few thousand):
//
//	go test -run '^$' -bench 'Journal' -benchtime 20000x -count 3 ./migrate | benchstat -

// journalRecord is the size of the floor's record: about a journal record
// of one Put of these entries (its JSON line and checksum).
const journalRecord = 400

func BenchmarkJournalPut(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("entries=%d/writers=1", n), func(b *testing.B) {
			ctx := context.Background()
			app, err := benchref.NewAppender(filepath.Join(b.TempDir(), "floor.log"), journalRecord)
			if err != nil {
				b.Fatal(err)
			}
			defer app.Close()
			s, path := benchStore(b, n, checkpoint.WithJournal())
			warm(b, s, n)
			last := stat(b, path)
			rewrites := 0
			var ours, floor benchref.Clock
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := ours.Run(func() error { return s.Put(ctx, benchref.KeyOf(i%n), benchref.ValueOf(i%n, i)) }); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := floor.Run(app.Append); err != nil {
					b.Fatal(err)
				}
				// A compaction replaces the file (by rename: a new inode).
				if now := stat(b, path); !os.SameFile(now, last) {
					rewrites++
					last = now
				}
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(ours.Total)/float64(floor.Total), "x-append")
			b.ReportMetric(float64(b.N)/ours.Total.Seconds(), "ops/s")
			b.ReportMetric(float64(rewrites)/float64(b.N), "rewrites/op")
		})
	}
}

func stat(b *testing.B, path string) os.FileInfo {
	b.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return fi
}

// BenchmarkJournalPutParallel is BenchmarkPut's many-writer case with the
// checkpoint opened WithJournal: each group commit is one append.
func BenchmarkJournalPutParallel(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		const w = 64
		b.Run(fmt.Sprintf("entries=%d/writers=%d", n, w), func(b *testing.B) {
			ctx := context.Background()
			r := start(b, n, checkpoint.WithJournal())
			put := func(i int) error { return r.s.Put(ctx, benchref.KeyOf(i%n), benchref.ValueOf(i%n, i)) }
			k := min(max(b.N/(8*w), 3), 100)
			around(b, &r.limit, r.ref.limit, k, func() {
				around(b, &r.ipamd, r.ref.ipamd, k, func() {
					if err := r.ours.Run(func() error { return parallel(w, b.N, put) }); err != nil {
						b.Fatal(err)
					}
				})
			})
			// Not r.finish: under the journal the file's seq moves only
			// when the journal is compacted, so it does not count saves.
			b.StopTimer()
			per := float64(r.ours.Total) / float64(b.N)
			b.ReportMetric(float64(b.N)/r.ours.Total.Seconds(), "ops/s")
			b.ReportMetric(float64(r.ipamd.PerCall())/per, "x-vs-ipamd")
		})
	}
}

// BenchmarkJournalAllocate is BenchmarkAllocate with the checkpoint opened
// WithJournal: its 64-writer case is held to at least 20x the ipamd pattern.
func BenchmarkJournalAllocate(b *testing.B) { benchmarkAllocate(b, checkpoint.WithJournal()) }

// BenchmarkJournalRestore restores n entries, in phase 3, from a file
// whose journal is at its compaction bound (the most a restore can meet),
// and, in turn, the same state from one compacted file.
func BenchmarkJournalRestore(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			ctx := context.Background()
			journaled, compacted, ratio := journalAtBound(b, n)
			restore := func(path string) func() error {
				return func() error {
					f, err := checkpoint.Open[bkey, bval](ctx, path)
					if err != nil {
						return err
					}
					s, err := migrate.New(migrate.Config[bkey, bval]{Phase: migrate.PhaseContract, Checkpoint: f})
					if err != nil {
						return err
					}
					defer s.Close()
					if _, err := s.Restore(ctx); err != nil {
						return err
					}
					if s.Len() != n {
						return fmt.Errorf("restored %d of %d", s.Len(), n)
					}
					return nil
				}
			}
			var ours, ref benchref.Clock
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := ours.Run(restore(journaled)); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := ref.Run(restore(compacted)); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(ours.Total)/float64(ref.Total), "x-compacted")
			b.ReportMetric(ratio, "journal/file")
		})
	}
}

// journalAtBound writes a checkpoint of n entries and commits one Put at a
// time until the journal is within one record of the size at which the
// next commit would compact it. It returns that checkpoint's path, the
// path of the same state saved as one file, and the journal's size over
// the file's.
func journalAtBound(b *testing.B, n int) (journaled, compacted string, ratio float64) {
	b.Helper()
	ctx := context.Background()
	journaled = writeFile(b, n)
	f, err := checkpoint.Open[bkey, bval](ctx, journaled, checkpoint.WithJournal())
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s, err := f.Load(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// The first commit rewrites the file in the journal's format.
	if err := f.Save(ctx, s); err != nil {
		b.Fatal(err)
	}
	for i := 0; ; i++ {
		st := f.Journal()
		bound := max(st.FileSize/5, 32<<10) // checkpoint's journalBound
		if st.Records > 0 && st.Bytes+2*st.Bytes/int64(st.Records) > bound {
			ratio = float64(st.Bytes) / float64(st.FileSize)
			break
		}
		k, v := benchref.KeyOf(i%n), benchref.ValueOf(i%n, i+1)
		if err := f.Commit(ctx, checkpoint.Meta{Phase: "contract"}, []checkpoint.Change[bkey, bval]{{Key: k, Value: v}}); err != nil {
			b.Fatal(err)
		}
		s.Entries[k] = v
		if f.Journal().Records == 0 {
			b.Fatal("the journal was compacted before it reached its bound")
		}
	}
	compacted = filepath.Join(b.TempDir(), "compacted.json")
	c, err := checkpoint.Open[bkey, bval](ctx, compacted)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.Save(ctx, s); err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(journaled + ".journal"); err != nil {
		b.Fatal(err)
	}
	return journaled, compacted, ratio
}
