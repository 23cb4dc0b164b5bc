// Package memfile is the interface through which package checkpointtest
// reaches the in-memory file under a checkpoint.Memory: its bytes, its
// injected save failures and its counters. Package internal/engine's
// MemFileOf returns it; only this module can import this package, so none
// of it is part of checkpoint's API.
//
// # Caveats
//
// The interface is as narrow as checkpointtest needs: the fault logic itself
// (corrupting, tearing) lives in checkpointtest, and only what needs the
// file format or the Memory's lock (SetSchema, the save path's failures)
// lives in package internal/engine.
package memfile

import "time"

// File is the in-memory file under a checkpoint.Memory, shared by every
// handle Reopen made from it, as seen from one handle: a change made
// through it makes that handle read the file again before its next save,
// as File does after a failed Load.
type File interface {
	// Edit replaces the file with what fn returns, given a copy of the
	// current file (nil when there is none, non-nil when there is one,
	// even empty). A nil result removes the file.
	Edit(fn func(data []byte) []byte)
	// Journal returns a copy of the journal, or nil if there is none.
	Journal() []byte
	// EditJournal is Edit for the journal beside the file (WithJournal).
	EditJournal(fn func(data []byte) []byte)
	// SetSchema rewrites the file's schema number with a valid checksum.
	// It fails if there is no intact file.
	SetSchema(schema int) error
	// FailSaves makes the next n saves fail with err (n < 0: every save
	// from now on; 0: none).
	FailSaves(n int, err error)
	// SetSaveLatency makes every save take at least d (0: no delay).
	SetSaveLatency(d time.Duration)
	// Saves returns how many saves have succeeded.
	Saves() int
	// Prev returns a copy of the previous file kept by the last save.
	Prev() []byte
	// Quarantined returns copies of the files moved aside, oldest first.
	Quarantined() [][]byte
}
