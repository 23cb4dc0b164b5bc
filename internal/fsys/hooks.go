package fsys

// CompactionsOption is the test hook that makes a checkpoint.File run the
// steps of its background compactions through a test's function rather
// than in a goroutine, so that a power-cut test can cut the power before
// each of their calls in a known order, with commits between them: package
// checkpoint sets it, in an init, to a function returning its unexported
// option withCompactions(run), as CheckpointOption does for withFS.
var CompactionsOption func(run func(steps []func())) any
