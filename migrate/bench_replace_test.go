package migrate_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/benchref"
	"github.com/phaseshift/phaseshift/migrate"
)

// snapEntry is an allocation as the AWS VPC CNI's datastore checkpoints
// it (datastore.CheckpointEntry less its key): strings and numbers, which
// == compares.
type snapEntry struct {
	IPv4      string `json:"ipv4"`
	Timestamp int64  `json:"allocationTimestamp"`
	Namespace string `json:"k8sPodNamespace"`
	Name      string `json:"k8sPodName"`
}

func snapEntryOf(i int) snapEntry {
	return snapEntry{IPv4: fmt.Sprintf("10.%d.%d.%d", byte(i>>16), byte(i>>8), byte(i)), Timestamp: int64(i), Namespace: "default", Name: fmt.Sprintf("pod-%d", i)}
}

// diffUpdate is what a daemon that hands its store a whole snapshot at
// every change writes without Replace (the VPC CNI's maintainer did): one
// Update that puts every entry the snapshot holds differently and deletes
// every entry it lacks.
func diffUpdate(ctx context.Context, s *migrate.Store[string, snapEntry], snap map[string]snapEntry) error {
	return s.Update(ctx, func(tx *migrate.Tx[string, snapEntry]) error {
		for k, v := range snap {
			if old, ok := tx.Get(k); !ok || old != v {
				tx.Put(k, v)
			}
		}
		for k := range tx.All() {
			if _, ok := snap[k]; !ok {
				tx.Delete(k)
			}
		}
		return nil
	})
}

// BenchmarkReplace makes the write of a daemon that keeps a whole
// snapshot of n entries (phase 3, a checkpoint.File on disk, one writer):
// each write adds one entry or removes the one it added, and hands the
// Store the whole state. Replace and the per-key diff (diffUpdate) run in
// turn, on files of their own in one directory. x-diff is Replace's wall
// time over the diff's; cpu-us/write and diff-cpu-us/write are the
// process's CPU time per write of each, x-diff-cpu their ratio.
//
//	go test -run '^$' -bench Replace -count 5 ./migrate
func BenchmarkReplace(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			open := func(name string) *migrate.Store[string, snapEntry] {
				f, err := checkpoint.Open[string, snapEntry](ctx, filepath.Join(dir, name))
				if err != nil {
					b.Fatal(err)
				}
				s, err := migrate.New(migrate.Config[string, snapEntry]{Phase: migrate.PhaseContract, Checkpoint: f})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { s.Close() })
				if _, err := s.Restore(ctx); err != nil {
					b.Fatal(err)
				}
				return s
			}
			ours, ref := open("replace.json"), open("diff.json")
			snap := make(map[string]snapEntry, n+1)
			for i := range n {
				snap[fmt.Sprint(i)] = snapEntryOf(i)
			}
			if err := ours.Replace(ctx, snap); err != nil {
				b.Fatal(err)
			}
			if err := diffUpdate(ctx, ref, snap); err != nil {
				b.Fatal(err)
			}
			step := func(i int) {
				if k := fmt.Sprint(n + i/2); i%2 == 0 {
					snap[k] = snapEntryOf(n + i/2)
				} else {
					delete(snap, k)
				}
			}
			var oc, rc benchref.Clock
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step(i)
				if err := oc.Run(func() error { return ours.Replace(ctx, snap) }); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := rc.Run(func() error { return diffUpdate(ctx, ref, snap) }); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			if ours.Len() != len(snap) || ref.Len() != len(snap) {
				b.Fatalf("served %d and %d of %d", ours.Len(), ref.Len(), len(snap))
			}
			b.ReportMetric(float64(oc.Total)/float64(rc.Total), "x-diff")
			b.ReportMetric(float64(oc.CPUPerCall().Microseconds()), "cpu-us/write")
			b.ReportMetric(float64(rc.CPUPerCall().Microseconds()), "diff-cpu-us/write")
			b.ReportMetric(float64(oc.CPU)/float64(rc.CPU), "x-diff-cpu")
		})
	}
}
