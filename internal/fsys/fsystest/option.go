package fsystest

import (
	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/internal/fsys"
)

// WithFS returns the option that makes checkpoint.Open use f, a Faulty or
// any other fsys.FS (internal/robustness's PowerFS), instead of the
// operating system's file system. It is the only way to put another file
// system under a checkpoint.File, and only this module's tests can reach
// it: the option is package checkpoint's unexported withFS, handed out
// through fsys.CheckpointOption. A nil f makes Open fail with
// checkpoint.ErrInvalidOption.
func WithFS(f fsys.FS) checkpoint.Option {
	return fsys.CheckpointOption(f).(checkpoint.Option)
}
