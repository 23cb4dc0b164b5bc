package metrics_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/metrics"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// A daemon in phase 2 whose checkpoint holds a pod the runtime no longer
// lists: the restore keeps it as an orphan, which blocks phase 3 until the
// runtime's DEL for it comes.
func ExampleNew() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "phaseshift-metrics-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state.json")

	// An earlier run in phase 1 checkpointed two pods.
	runtime := map[string]string{"pod-a": "10.0.0.2", "pod-b": "10.0.0.3"}
	listing := source.Func[string, string](func(context.Context) (map[string]string, error) { return runtime, nil })
	restoreIn := func(phase migrate.Phase) (*migrate.Store[string, string], *checkpoint.File[string, string], migrate.Report[string]) {
		file, err := checkpoint.Open[string, string](ctx, path)
		if err != nil {
			log.Fatal(err)
		}
		store, err := migrate.New(migrate.Config[string, string]{
			Phase: phase, Legacy: listing, Checkpoint: file,
			Equal: func(a, b string) bool { return a == b }, // the runtime records the whole value here
		})
		if err != nil {
			log.Fatal(err)
		}
		report, err := store.Restore(ctx)
		if err != nil {
			log.Fatal(err)
		}
		return store, file, report
	}
	store, _, _ := restoreIn(migrate.PhaseExpand)
	store.Close()

	// pod-b went away while the daemon was down.
	delete(runtime, "pod-b")
	store, file, report := restoreIn(migrate.PhaseMigrate)
	defer store.Close()

	c, err := metrics.New(store, report, metrics.WithCheckpoint(file))
	if err != nil {
		log.Fatal(err)
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(c) // and serve it with promhttp.HandlerFor(registry, ...)

	gate := `# HELP phaseshift_phase The rollout phase the Store runs in: 0 legacy, 1 expand, 2 migrate, 3 contract.
# TYPE phaseshift_phase gauge
phaseshift_phase 2
`
	fmt.Println(testutil.GatherAndCompare(registry, strings.NewReader(gate), "phaseshift_phase"))
	orphaned := func() float64 {
		families, err := registry.Gather()
		if err != nil {
			log.Fatal(err)
		}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				if f.GetName() == "phaseshift_restore_entries" && m.GetLabel()[0].GetValue() == "orphaned" {
					return m.GetGauge().GetValue()
				}
			}
		}
		return -1
	}
	fmt.Println("orphaned after restore:", orphaned())

	// The runtime's DEL for pod-b comes: the orphan is settled.
	if err := store.Delete(ctx, "pod-b"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("orphaned after its DEL:", orphaned())
	// Output:
	// <nil>
	// orphaned after restore: 1
	// orphaned after its DEL: 0
}
