package checkpointtest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// A disk that fills up, then a file that rots: what the code under test
// sees through the checkpoint.
func Example() {
	ctx := context.Background()
	m := checkpoint.NewMemory[string, int]()
	_ = m.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"a": 1}})

	checkpointtest.FailSaves(m, 1, errors.New("disk full"))
	err := m.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"a": 2}})
	fmt.Println("save:", errors.Unwrap(err) != nil)
	snap, _ := m.Load(ctx)
	fmt.Println("after the failed save:", snap.Entries)

	checkpointtest.Corrupt(m)
	_, err = m.Load(ctx)
	fmt.Println("corrupt:", errors.Is(err, checkpoint.ErrCorrupt))
	err = m.Save(ctx, checkpoint.Snapshot[string, int]{})
	fmt.Println("save over it:", errors.Is(err, checkpoint.ErrUnreadable))
	fmt.Println("saves that succeeded:", checkpointtest.Saves(m))
	// Output:
	// save: true
	// after the failed save: map[a:1]
	// corrupt: true
	// save over it: true
	// saves that succeeded: 1
}
