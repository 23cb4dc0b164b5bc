package checkpoint

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

// Committer is a checkpoint that can save its last loaded or saved content
// with a few changes applied, encoding only those: what File.Commit does.
type Committer[K comparable, V any] interface {
	Commit(ctx context.Context, m Meta, changes []Change[K, V]) error
}

// BootIDer is a checkpoint that knows the boot it runs in (WithBootID) and
// stamps it into what it saves. BootID returns "" when it records none.
type BootIDer interface {
	BootID() string
}

// Sizer is a checkpoint that can tell the size in bytes of the file and
// its journal as it last read or wrote them (see File.Size).
type Sizer interface {
	Size() int64
}

// JournalReporter is a checkpoint that can say what its journal held at
// the last Load (see the package documentation's Journal section):
// package migrate reports a torn record Load discarded in Report.Errors.
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
