package engine

import (
	"context"
	"io"
)

// The optional capabilities of a checkpoint, beyond Load, Save and
// Quarantine. Package migrate looks for them on its Config.Checkpoint and
// uses each one it finds; a checkpoint of the user's own (a wrapper, a
// fake) may offer any of them. File and Memory offer all five, and the
// assertions below make a change to one of their signatures fail the build
// here, instead of silently losing the capability (a Commit that no longer
// matches Committer would turn every write into a full Save).

// Committer is checkpoint.Committer: see its documentation there.
type Committer[K comparable, V any] interface {
	Commit(ctx context.Context, m Meta, changes []Change[K, V]) error
}

// BootIDer is checkpoint.BootIDer: see its documentation there.
type BootIDer interface {
	BootID() string
}

// Sizer is checkpoint.Sizer: see its documentation there.
type Sizer interface {
	Size() int64
}

// JournalReporter is checkpoint.JournalReporter: see its documentation there.
type JournalReporter interface {
	Journal() JournalStatus
}

var (
	_ JournalReporter = (*File[string, int])(nil)
	_ JournalReporter = (*Memory[string, int])(nil)

	_ Committer[string, int] = (*File[string, int])(nil)
	_ BootIDer               = (*File[string, int])(nil)
	_ Sizer                  = (*File[string, int])(nil)
	_ io.Closer              = (*File[string, int])(nil)

	_ Committer[string, int] = (*Memory[string, int])(nil)
	_ BootIDer               = (*Memory[string, int])(nil)
	_ Sizer                  = (*Memory[string, int])(nil)
	_ io.Closer              = (*Memory[string, int])(nil)
)
