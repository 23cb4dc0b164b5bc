package checkpoint_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/benchref"
)

// Save, Commit and Load alone, on a real file, with ratios to the limit
// (one durable atomic replace of the same bytes, encoded beforehand) and,
// for Load, to a bare json.Unmarshal of the file into a slice. Run:
//
//	go test -run '^$' -bench . -count 6 ./checkpoint | benchstat -

type (
	bkey = benchref.Key
	bval = benchref.Alloc
)

func benchFile(b *testing.B, n int) (*checkpoint.File[bkey, bval], string, []byte) {
	b.Helper()
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "ipam.json")
	f, err := checkpoint.Open[bkey, bval](ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	if err := f.Save(ctx, checkpoint.Snapshot[bkey, bval]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: benchref.Entries(n)}); err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return f, path, data
}

// limitOf returns the limit at data's size: one durable atomic replace of
// those bytes.
func limitOf(b *testing.B, data []byte) func() error {
	b.Helper()
	dst := filepath.Join(b.TempDir(), "limit.json")
	return func() error { return benchref.Replace(dst, data) }
}

// interleave runs op (timed) and ref (untimed, on its own clock) in turn,
// b.N times.
func interleave(b *testing.B, op func(i int) error, ref func() error) (ours, refc benchref.Clock) {
	b.Helper()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := ours.Run(func() error { return op(i) }); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := refc.Run(ref); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	return ours, refc
}

func BenchmarkSave(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			ctx := context.Background()
			f, _, data := benchFile(b, n)
			entries := benchref.Entries(n)
			b.SetBytes(int64(len(data)))
			ours, lim := interleave(b, func(int) error {
				return f.Save(ctx, checkpoint.Snapshot[bkey, bval]{Entries: entries})
			}, limitOf(b, data))
			b.ReportMetric(float64(ours.Total)/float64(lim.Total), "x-limit")
		})
	}
}

func BenchmarkCommit(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("entries=%d/changes=1", n), func(b *testing.B) {
			ctx := context.Background()
			f, _, data := benchFile(b, n)
			ours, lim := interleave(b, func(i int) error {
				ch := []checkpoint.Change[bkey, bval]{{Key: benchref.KeyOf(i % n), Value: benchref.ValueOf(i%n, i)}}
				return f.Commit(ctx, checkpoint.Meta{}, ch)
			}, limitOf(b, data))
			b.ReportMetric(float64(ours.Total)/float64(lim.Total), "x-limit")
		})
	}
}

func BenchmarkLoad(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			ctx := context.Background()
			f, _, data := benchFile(b, n)
			b.SetBytes(int64(len(data)))
			ours, ref := interleave(b, func(int) error {
				s, err := f.Load(ctx)
				if err == nil && len(s.Entries) != n {
					err = fmt.Errorf("loaded %d of %d", len(s.Entries), n)
				}
				return err
			}, func() error { return benchref.Unmarshal(data) })
			b.ReportMetric(float64(ours.Total)/float64(ref.Total), "x-unmarshal")
		})
	}
}
