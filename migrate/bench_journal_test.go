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

// The benchmark of a restore from a checkpoint whose journal is at its
// compaction bound (the most a restore can meet), with its reference, a
// restore of the same state compacted into the file, run in turn with it:
// x-compacted is the first over the second.
//
// Run: go test -run '^$' -bench 'JournalRestore' -benchtime 30x -count 3 ./migrate | benchstat -

// BenchmarkJournalRestore restores n entries, in phase 3, from a file
// whose journal is at its compaction bound (the most a restore can meet),
// and, in turn, the same state from one compacted file.
func BenchmarkJournalRestore(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
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
