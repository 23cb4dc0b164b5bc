package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/phaseshift/phaseshift/internal/fsys"
)

// The journal of a File on disk: path+".journal" (see journal.go for the
// format and the rules, core_journal.go for when it is used).

func (d *disk) journalName() string { return d.journal }

func (d *disk) readJournal() ([]byte, error) { return d.fs.ReadFile(d.journal) }

// appendJournal appends rec to the journal and fsyncs it; a journal it
// creates has its directory fsynced too, or a power cut could take its
// name, and the acknowledged record, away.
//
// Before anything, the lock is checked to be this File's (as a save
// does), the checkpoint the records follow to still be there (the file
// this File last read or wrote, not one put at its path since), and the
// journal to be as long as this File left it: records appended to a
// journal that lost its file, or to one that was cut or removed, could
// not be replayed, so then errRewrite makes the commit write the whole
// file. A journal longer than this File left it holds records another File
// appended, which a rewrite would lose: then the commit fails
// (errTakenOver).
func (d *disk) appendJournal(rec []byte, at int64, last onDisk) error {
	if err := d.own("save", &last); err != nil {
		return err
	}
	fi, err := d.fs.Lstat(d.path)
	if errors.Is(err, fs.ErrNotExist) {
		return errRewrite
	}
	if err != nil {
		return pathError("commit: journal: stat checkpoint", d.path, err)
	}
	if d.seen == nil || !fsys.SameFile(fi, d.seen) {
		return errRewrite // replaced (a .prev copied back by hand, say): the records would follow another file
	}
	f, err := d.fs.OpenAppend(d.journal, d.mode, at == 0)
	if (at == 0 && errors.Is(err, fs.ErrExist)) || (at > 0 && errors.Is(err, fs.ErrNotExist)) {
		return errRewrite
	}
	if err != nil {
		return pathError("commit: journal open", d.journal, err)
	}
	if at > 0 {
		size, err := f.Size()
		if err != nil {
			_ = f.Close()
			return pathError("commit: journal stat", d.journal, err)
		}
		if size != at {
			_ = f.Close()
			// Cut short (by hand?): what this File holds in memory
			// goes back to disk whole. Grown: records this File did
			// not write, which a rewrite would lose.
			if size > at {
				return fmt.Errorf("%w: the journal holds %d bytes this File did not write", errTakenOver, size-at)
			}
			return errRewrite
		}
	}
	if step, err := writeSync(f, rec); err != nil {
		d.cutBack(f, at)
		return pathError("commit: journal "+step, d.journal, err)
	}
	if err := f.Close(); err != nil {
		return pathError("commit: journal close", d.journal, err)
	}
	if at == 0 {
		if err := d.fs.SyncDir(d.dir); err != nil {
			// The record is written but its name may not last: take it
			// back (best effort) so that a write reported failed is not
			// replayed.
			_ = d.fs.Remove(d.journal)
			return pathError("commit: journal fsync directory", d.dir, err)
		}
	}
	return nil
}

// writeSync writes rec to f and fsyncs it, and names the step that failed.
func writeSync(f fsys.AppendFile, rec []byte) (string, error) {
	n, err := f.Write(rec)
	if err == nil && n < len(rec) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return "write", err
	}
	// The record is acknowledged once it is on stable storage, and not
	// before: an fsync, as etcd's WAL does after every batch of entries.
	if err := f.Sync(); err != nil {
		return "fsync", err
	}
	return "", nil
}

// cutBack takes a record that failed to be written or synced back out of
// the journal and closes it: a commit reported failed must not be
// replayed by a restart. Best effort: after a failed fsync nothing is
// known to be durable, and the core writes the whole file at its next
// commit anyway.
func (d *disk) cutBack(f fsys.AppendFile, at int64) {
	if f.Truncate(at) == nil {
		_ = f.Sync()
	}
	_ = f.Close()
}

func (d *disk) removeJournal() error {
	if err := d.fs.Remove(d.journal); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return pathError("save: remove journal", d.journal, err)
	}
	return nil
}
