package checkpoint

import (
	"context"

	"github.com/phaseshift/phaseshift/internal/engine"
)

// Path returns the checkpoint's path.
func (f *File[K, V]) Path() string {
	return (*engine.File[K, V])(f).Path()
}

// BootID returns the boot ID this File stamps into saved files, or "" when
// it was opened without WithBootID.
func (f *File[K, V]) BootID() string {
	return (*engine.File[K, V])(f).BootID()
}

// Size returns the size in bytes of the checkpoint, its journal included,
// as this File last read it (Load, whether or not it could use what it
// read) or wrote it (Save, Commit); 0 before either, when Load found no
// file, and after Quarantine.
// It does not touch the disk and does not wait for a save in progress.
func (f *File[K, V]) Size() int64 {
	return (*engine.File[K, V])(f).Size()
}

// Journal returns what the checkpoint's journal (see WithJournal) held at
// the last Load, torn record included, and what Commit appended since; a
// save or a compaction that folds the journal into the file resets it
// (Torn stays until the next Load), and it says whether a compaction runs
// in the background and why the last one failed. It does not touch the
// disk; it waits for a save in progress.
func (f *File[K, V]) Journal() JournalStatus {
	return (*engine.File[K, V])(f).Journal()
}

// Load reads and checks the checkpoint and returns it, with its journal,
// if there is one, replayed over it (whether or not this File was opened
// WithJournal; see the package documentation's Journal section).
//
// A missing file gives ErrNotExist (and an empty Snapshot). A file that is
// not intact gives ErrCorrupt, one of a newer schema ErrNewerSchema, one
// whose entries have fields this binary's types lack ErrTypeMismatch, one
// too old to upgrade ErrOlderSchema; an older schema with a registered
// upgrade chain is upgraded entry by entry. When the file is intact but some
// entries cannot be decoded (or upgraded, or are rejected by the
// WithValidate function), Load returns the others together with a
// *BadEntriesError (errors.Is ErrBadEntry; and ErrTypeMismatch too when an
// entry holds a value of another kind than its Go type). With
// ErrNewerSchema or ErrTypeMismatch, the Snapshot's Meta still describes the file (its phase, writer and schema),
// so a caller can tell who wrote it. After any failure other than
// ErrNotExist, Save and Commit refuse to replace the file until Quarantine
// has moved it aside.
func (f *File[K, V]) Load(ctx context.Context) (Snapshot[K, V], error) {
	return (*engine.File[K, V])(f).Load(ctx)
}

// Save replaces the checkpoint with s, durably: it returns nil only once the
// new file and its directory entry are on stable storage. It sets
// s.Meta's Format, Schema, Seq and SavedAt (and BootID, if empty and the
// File has one); Phase and Writer are the caller's.
//
// The write protocol: every entry is encoded (and every key checked) first;
// the lock is checked to still be this File's at its path (see Open); the
// previous file is hard-linked as path+".prev"; the new content goes to a
// temporary file created exclusively in the same directory, which is
// written, fsynced and closed, then renamed over path; then the directory
// is fsynced. A crash at any instant leaves either the previous or the new
// checkpoint at path, never a torn one. Each step that fails is named in
// the error, and path still holds the previous checkpoint. If the file was
// removed since this File last wrote it, Save writes it again (and logs
// that it had disappeared).
//
// Save refuses (ErrUnreadable) to replace a file that could not be read;
// it reads the file first if nothing has yet. A key or value that cannot be
// written fails Save with an *EncodeError (ErrEncode) before anything on
// disk changes.
func (f *File[K, V]) Save(ctx context.Context, s Snapshot[K, V]) error {
	return (*engine.File[K, V])(f).Save(ctx, s)
}

// Commit saves the checkpoint as it was last loaded or saved, with changes
// applied in order. By default it appends the changes to the journal and
// fsyncs it, and writes the whole file only to compact the journal of a
// file under 64 KiB; the commit that grows the journal of a bigger one past
// its bound starts its compaction in the background, and returns (see the
// package documentation's Journal section); WithoutJournal, it writes
// the same file Save would, with the same guarantees, but encodes only the
// changed entries. If the write fails, neither what is on disk (as far as
// the write protocol can undo it) nor what Commit applies to next changes.
// An entry that cannot be written fails Commit with an *EncodeError whose
// Index is the position of its change.
func (f *File[K, V]) Commit(ctx context.Context, m Meta, changes []Change[K, V]) error {
	return (*engine.File[K, V])(f).Commit(ctx, m, changes)
}

// CommitEncoded is Commit for changes EncodeChange encoded beforehand: it
// writes their lines without encoding them again, with Commit's protocol
// and guarantees. A zero EncodedChange, which EncodeChange did not make,
// fails it with ErrEncode, before anything is written.
//
// It is not a capability package migrate looks for behind an interface: a
// Store commits through it only when its Config.Checkpoint is a *File (or
// a *Memory) itself, so that a wrapper that embeds a File and has its own
// Commit (to count, or to change the values) is never bypassed.
func (f *File[K, V]) CommitEncoded(ctx context.Context, m Meta, changes []EncodedChange[K, V]) error {
	return (*engine.File[K, V])(f).CommitEncoded(ctx, m, changes)
}

// Quarantine moves the checkpoint aside to path+".corrupt-<UTC time>" for
// inspection (its journal, if any, to the same name + ".journal") and
// returns the new name. Afterwards there is no checkpoint and Save may
// create one. It returns ErrNotExist if there is no file. The checkpoint
// keeps its 5 newest quarantined copies: Quarantine removes older ones
// (see the package documentation's Kept copies).
func (f *File[K, V]) Quarantine(ctx context.Context) (string, error) {
	return (*engine.File[K, V])(f).Quarantine(ctx)
}

// Close releases the lock. A compaction running in the background is
// abandoned: Close waits for its goroutine to stop writing the new file
// (it stops within one piece, 256 KiB) and remove its temporary files, and
// only then releases the lock. It is idempotent: later calls return nil. After
// Close, the methods that read or write the file (Load, Save, Commit,
// Quarantine) return ErrClosed; Path, BootID, Size and Journal still
// answer.
func (f *File[K, V]) Close() error {
	return (*engine.File[K, V])(f).Close()
}
