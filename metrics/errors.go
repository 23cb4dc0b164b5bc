package metrics

import "errors"

// Errors returned by New.
var (
	// ErrNotRestored is returned by New when the Store has no successful
	// Restore, or the Report is not one (a failed Restore returns a Report
	// with no ReadFrom): there is nothing yet to export, and a gate must
	// not read an empty report as a clean one.
	ErrNotRestored = errors.New("store not restored")

	// ErrInvalidArgument is returned by New for a nil Store, a Report of
	// another phase than the Store's, or an option that is nil or holds
	// nil. The message names what was wrong.
	ErrInvalidArgument = errors.New("invalid argument")
)
