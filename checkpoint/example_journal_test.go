package checkpoint_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// A checkpoint with a journal: commits append one line each to
// path+".journal"; a restart, with or without the option, replays them.
func ExampleWithJournal() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state.json")

	f, _ := checkpoint.Open[string, string](ctx, path, checkpoint.WithJournal())
	_ = f.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"vm1": "running"}})
	_ = f.Commit(ctx, checkpoint.Meta{Phase: "contract"}, []checkpoint.Change[string, string]{{Key: "vm2", Value: "running"}})
	_ = f.Commit(ctx, checkpoint.Meta{Phase: "contract"}, []checkpoint.Change[string, string]{{Key: "vm1", Delete: true}})
	_ = f.Close()

	j, _ := os.Open(path + ".journal")
	lines := 0
	for sc := bufio.NewScanner(j); sc.Scan(); {
		lines++
	}
	j.Close()
	fmt.Println("journal lines:", lines)

	g, _ := checkpoint.Open[string, string](ctx, path)
	defer g.Close()
	s, _ := g.Load(ctx)
	fmt.Println(s.Entries, "seq", s.Meta.Seq, s.Meta.Phase)
	// Output:
	// journal lines: 2
	// map[vm2:running] seq 3 contract
}
