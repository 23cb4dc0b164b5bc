package source_test

import (
	"context"
	"fmt"

	"github.com/phaseshift/phaseshift/source"
)

// A proxy keeps its registry in a Map; migrate.Store writes it explicitly in
// the phases that write legacy, because Map implements source.Writer.
func ExampleMap() {
	ctx := context.Background()
	var registry source.Map[string, string] // VM ID -> console socket

	_ = registry.Put(ctx, "vm-1", "/run/vc/vm-1/console.sock")
	_ = registry.Put(ctx, "vm-2", "/run/vc/vm-2/console.sock")
	_ = registry.Delete(ctx, "vm-1")

	var legacy source.Reader[string, string] = &registry
	_, explicit := legacy.(source.Writer[string, string])
	all, _ := legacy.List(ctx)
	fmt.Println(len(all), all["vm-2"], explicit)
	// Output: 1 /run/vc/vm-2/console.sock true
}

// A Func reads a source that somebody else keeps current, such as a file the
// previous version wrote.
func ExampleFunc() {
	old := source.Func[string, int](func(context.Context) (map[string]int, error) {
		return map[string]int{"10.0.0.2": 1, "10.0.0.3": 1}, nil
	})
	got, err := old.List(context.Background())
	fmt.Println(len(got), err)
	// Output: 2 <nil>
}
