package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/control"
)

// A daemon serves its Store on the control socket beside its checkpoint;
// the phaseshift command (here, its Client) lists and deletes entries
// through it while the daemon runs.
func ExampleListen() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "phaseshift")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state.json")

	// The daemon: its Store, then the socket (the checkpoint's lock is held).
	file, err := checkpoint.Open[string, string](ctx, path)
	if err != nil {
		fmt.Println(err)
		return
	}
	store, err := migrate.New(migrate.Config[string, string]{Phase: migrate.PhaseContract, Checkpoint: file})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	if _, err := store.Restore(ctx); err != nil {
		fmt.Println(err)
		return
	}
	_ = store.Put(ctx, "vm-1", "/run/vm-1.sock")
	_ = store.Put(ctx, "vm-2", "/run/vm-2.sock")
	srv, err := control.Listen(control.SocketPath(path), store)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close() // before the Store

	// The operator.
	c := control.NewClient(control.SocketPath(path))
	if err := c.Delete(ctx, json.RawMessage(`"vm-1"`)); err != nil {
		fmt.Println(err)
	}
	_, err = c.Get(ctx, json.RawMessage(`"vm-1"`))
	fmt.Println(errors.Is(err, control.ErrNoSuchKey))
	_, _ = c.List(ctx, func(line []byte) error {
		fmt.Print(string(line))
		return nil
	})
	fmt.Println(filepath.Base(srv.Path()))
	// Output:
	// true
	// {"key":"vm-2","value":"/run/vm-2.sock"}
	// state.json.control.sock
}
