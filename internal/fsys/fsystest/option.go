package fsystest

import (
	"github.com/phaseshift/phaseshift/internal/engine"
	"github.com/phaseshift/phaseshift/internal/fsys"
)

// WithFS returns the option that makes checkpoint.Open use f, a Faulty or
// any other fsys.FS (internal/robustness's PowerFS), instead of the
// operating system's file system. It is the only way to put another file
// system under a checkpoint.File, and only this module's tests can reach
// it: it is package internal/engine's WithFS, which package checkpoint
// does not re-export. A nil f makes Open fail with
// checkpoint.ErrInvalidOption. The option is a checkpoint.Option (an
// alias of engine.Option).
func WithFS(f fsys.FS) engine.Option { return engine.WithFS(f) }

// WithCompactions returns the option that makes a checkpoint.File run its
// background compactions through run instead of in a goroutine: run gets
// each compaction's steps (the new file written, off the File's mutex;
// renamed into place, under it; its name made durable and the new journal
// written, off it; the journal renamed into place, under it; what is left
// removed, off it), and must call every one, in order, once each, when the
// test chooses (Close waits for the last). Only this module's tests can
// reach it, as WithFS.
func WithCompactions(run func(steps []func())) engine.Option {
	return engine.WithCompactions(run)
}
