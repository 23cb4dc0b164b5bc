package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// A daemon keeps VM registrations in a checkpoint: save at every change,
// load at start.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "checkpoint-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "proxy", "state.json")

	type vm struct {
		Console string   `json:"console"`
		Tokens  []string `json:"tokens"`
	}
	f, err := checkpoint.Open[string, vm](ctx, path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()

	if _, err := f.Load(ctx); err != nil {
		fmt.Println("first start:", err != nil)
	}
	_ = f.Save(ctx, checkpoint.Snapshot[string, vm]{
		Meta:    checkpoint.Meta{Phase: "contract", Writer: "proxy v2.0.0"},
		Entries: map[string]vm{"vm-1": {Console: "/run/vm-1/console.sock", Tokens: []string{"t-1"}}},
	})
	_ = f.Commit(ctx, checkpoint.Meta{Phase: "contract", Writer: "proxy v2.0.0"}, []checkpoint.Change[string, vm]{
		{Key: "vm-2", Value: vm{Console: "/run/vm-2/console.sock"}},
	})

	s, err := f.Load(ctx)
	fmt.Println(len(s.Entries), s.Meta.Seq, s.Meta.Phase, s.Entries["vm-1"].Tokens, err)
	// Output:
	// first start: true
	// 2 2 contract [t-1] <nil>
}

// A file that fails its checksum is moved aside before anything replaces it.
func ExampleFile_Quarantine() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "checkpoint-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state.json")
	_ = os.WriteFile(path, []byte("{\"half\": \"a torn wri"), 0o600)

	f, _ := checkpoint.Open[string, int](ctx, path)
	defer f.Close()
	_, err := f.Load(ctx)
	fmt.Println(err != nil && err.Error() != "")
	fmt.Println(f.Save(ctx, checkpoint.Snapshot[string, int]{}) != nil)
	moved, _ := f.Quarantine(ctx)
	fmt.Println(filepath.Base(moved)[:len("state.json.corrupt-")])
	fmt.Println(f.Save(ctx, checkpoint.Snapshot[string, int]{}))
	// Output:
	// true
	// true
	// state.json.corrupt-
	// <nil>
}

// A key that would not read back from JSON as itself is refused before
// anything is written: here a time from time.Now(), whose monotonic clock
// reading JSON does not keep. The same time with t.Round(0).UTC() is fine.
func ExampleEncodeError() {
	ctx := context.Background()
	type session struct {
		VM    string    `json:"vm"`
		Start time.Time `json:"start"`
	}
	m := checkpoint.NewMemory[session, string]()
	now := time.Now()
	err := m.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[session, string]{{Key: session{"vm-1", now}, Value: "attached"}})
	var ee *checkpoint.EncodeError
	fmt.Println(errors.Is(err, checkpoint.ErrEncode), errors.As(err, &ee) && ee.InKey)
	err = m.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[session, string]{{Key: session{"vm-1", now.Round(0).UTC()}, Value: "attached"}})
	fmt.Println(err)
	// Output:
	// true true
	// <nil>
}
