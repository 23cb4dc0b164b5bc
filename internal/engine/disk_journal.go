package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/phaseshift/phaseshift/internal/fsys"
)

// The journal's disk I/O (its format is in journal_format.go, its replay
// in journal_replay.go): appending a record durably, checking that the
// file it follows is still the one at the path, and the steps of a
// compaction in the background (compact.go) on disk.

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
	if err := d.stillFollowed(); err != nil {
		return err
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

// stillFollowed returns nil if the checkpoint at the path is the file this
// File last read or wrote, which the journal's records follow, and
// errRewrite if it is not: removed, replaced by another file (a rename of
// a copy over it), or written over in place (cp of .prev onto it, which
// keeps the inode; a truncation; an editor that writes in place). Records
// appended after any of these would follow a file that is no longer
// there, and the next Load would refuse the journal as corrupt, with every
// commit since: the whole file is written from memory instead, as
// WithoutJournal does at every commit. The check reads the file's two ends
// through one open (its header holds the save's Seq and SavedAt, its
// trailer the checksum of everything), not the whole file.
func (d *disk) stillFollowed() error {
	if d.seen == nil {
		return errRewrite
	}
	head, tail, fi, err := d.fs.Peek(d.path, len(d.ends.head), len(d.ends.tail))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ELOOP) {
		return errRewrite
	}
	if err != nil {
		return pathError("commit: journal: read checkpoint", d.path, err)
	}
	if !fsys.SameFile(fi, d.seen) || fi.Size() != d.seen.Size() || !fi.ModTime().Equal(d.seen.ModTime()) ||
		!bytes.Equal(head, d.ends.head) || !bytes.Equal(tail, d.ends.tail) {
		return errRewrite
	}
	return nil
}

// writeSync writes rec to f and fsyncs it, and names the step that failed.
func writeSync(f fsys.File, rec []byte) (string, error) {
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

// The compaction of the journal in the background (see compact.go).

var _ compactor = (*disk)(nil)

// compacting is what a compaction in the background has on disk besides
// the checkpoint: its new file, until it is renamed into place, its new
// journal, until that is, and a link that keeps the old .prev's blocks
// until the compaction frees them off the core's mutex. Every name is a
// temporary name of this checkpoint (fsys.TempName), which the next Open
// removes if a crash leaves it.
type compacting struct {
	file        string // the new file; "" once renamed
	ends        fileEnds
	size        int64
	prevLink    string    // a link to the old .prev; "" if none
	journal     fsys.File // the new journal, being written; nil if none
	journalLink string    // a link to the old journal; "" if none
}

// writeCompaction writes the file of m and lines to a new temporary file
// beside the checkpoint, a piece (compactPiece) at a time, each fsynced
// (see compactPiece), and closes it; then it links the current .prev
// aside, so that installing the new file, which replaces .prev, does not
// free the old one's blocks while commits wait (an unlink of the last
// link of a 20 MB file takes milliseconds). It runs off the core's mutex,
// and touches nothing but its own temporary files.
func (d *disk) writeCompaction(m Meta, lines [][]byte, stop *atomic.Bool) (*compacting, error) {
	f, err := d.createTemp()
	if err != nil {
		return nil, pathError("compact: create temporary file", d.path, err)
	}
	p := &compacting{file: f.Name()}
	step := "write"
	p.ends, err = streamFile(m, lines, compactPiece, func(piece []byte) error {
		if stop.Load() {
			return errAbandoned
		}
		n, err := f.Write(piece)
		p.size += int64(n)
		if err == nil && n < len(piece) {
			err = io.ErrShortWrite
		}
		if err != nil {
			return err
		}
		// fsync before rename, as a save does; piece by piece, so that a
		// commit's fsync of the journal never waits for more of it.
		step = "fsync"
		err = f.Sync()
		step = "write"
		// And let a commit that is ready run before the next piece: on a
		// fast disk a piece is CPU (encoding, checksum, copy), and with
		// as many busy goroutines as cores a commit waiting for one
		// would otherwise wait for the scheduler's preemption (a Put at
		// 100,000 entries on tmpfs took 3-4 ms while a compaction ran).
		runtime.Gosched()
		return err
	})
	if err == nil {
		step = "close"
		err = f.Close()
	} else {
		_ = f.Close()
	}
	if err != nil {
		_ = d.fs.Remove(p.file)
		return nil, pathError("compact: "+step, d.path, err)
	}
	p.prevLink = d.linkAsTemp(d.prev)
	return p, nil
}

// linkAsTemp links name to a new temporary name of this checkpoint and
// returns it, or "" if name is missing or cannot be linked (then its
// blocks are freed where it is replaced): a compaction that replaces a
// file (.prev, the journal) under the core's mutex keeps its blocks this
// way until discardCompaction frees them off it.
func (d *disk) linkAsTemp(name string) string {
	for tries := 0; tries < 8; tries++ {
		tmp := fsys.TempName(d.path)
		err := d.fs.Link(name, tmp)
		if err == nil {
			return tmp
		}
		if !errors.Is(err, fs.ErrExist) {
			return ""
		}
	}
	return ""
}

// installCompaction makes p's file the checkpoint, as replace makes a
// save's temporary file the checkpoint: the lock checked, the file kept as
// .prev, rename. The directory's fsync is the caller's next step, off the
// core's mutex: the new file holds nothing a commit was told failed, and
// the journal's records follow the old file and the new one alike, so a
// rename a crash undoes loses nothing (see compact.go). The caller holds
// the core's mutex.
func (d *disk) installCompaction(p *compacting, last onDisk) error {
	fail := func(step string, err error) error { return pathError("compact: "+step, d.path, err) }
	if err := d.own("save", &last); err != nil {
		return err
	}
	if _, err := d.keepPrev(); err != nil {
		return fail("keep previous", err)
	}
	seen := d.seen
	d.seen = nil
	if err := d.fs.Rename(p.file, d.path); err != nil {
		d.seen = seen
		return fail("rename", err)
	}
	p.file = ""
	d.seen, _ = d.fs.Lstat(d.path) // nil on failure: the next commit writes the whole file
	d.ends = p.ends
	return nil
}

// syncCompaction makes the new file's name durable: the fsync of the
// directory, off the core's mutex.
func (d *disk) syncCompaction() error {
	if err := d.fs.SyncDir(d.dir); err != nil {
		return pathError("compact: fsync directory", d.dir, err)
	}
	return nil
}

// writeCompactionJournal appends data, records appended since the
// compaction's snapshot, to the new journal and fsyncs it, off the core's
// mutex: a new temporary file the first time, which stays open for the
// rest; the old journal is then linked aside (see linkAsTemp).
func (d *disk) writeCompactionJournal(p *compacting, data []byte) error {
	if p.journal == nil {
		f, err := d.createTemp()
		if err != nil {
			return pathError("compact: create temporary journal", d.journal, err)
		}
		p.journal = f
		p.journalLink = d.linkAsTemp(d.journal)
	}
	if step, err := writeSync(p.journal, data); err != nil {
		return pathError("compact: temporary journal "+step, d.journal, err)
	}
	return nil
}

// installCompactionJournal makes the new journal the journal: it appends
// tail, the records appended since writeCompactionJournal, fsyncs and
// closes it, renames it over the journal and fsyncs the directory; with no
// record since the snapshot, it removes the journal instead (a removal
// need not be durable: what comes back after a crash is stale). It runs
// once the new file's name is durable, and under the core's mutex, which
// keeps appends out. On failure the journal is as it was (journalKept),
// or, renamed over but perhaps not durably, unknown (journalUnsure);
// either way a Load replays it over the new file.
func (d *disk) installCompactionJournal(p *compacting, tail []byte, empty bool) (journalAfter, error) {
	fail := func(step string, err error) error { return pathError("compact: "+step, d.journal, err) }
	if empty {
		if err := d.removeJournal(); err != nil {
			return journalKept, err
		}
		return journalNew, nil
	}
	f := p.journal
	p.journal = nil
	step, err := "", error(nil)
	if len(tail) > 0 {
		step, err = writeSync(f, tail)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		step, err = "close", cerr
	}
	if err == nil {
		step, err = "rename", d.fs.Rename(f.Name(), d.journal)
	}
	if err != nil {
		_ = d.fs.Remove(f.Name())
		return journalKept, fail("temporary journal "+step, err)
	}
	if err := d.fs.SyncDir(d.dir); err != nil {
		return journalUnsure, fail("fsync directory", err)
	}
	return journalNew, nil
}

// discardCompaction removes what p has left on disk: a new file or journal
// that was not renamed into place, and the links to the old .prev and the
// old journal, whose blocks are freed now, off the core's mutex.
func (d *disk) discardCompaction(p *compacting) {
	if p.journal != nil {
		_ = p.journal.Close()
		_ = d.fs.Remove(p.journal.Name())
	}
	for _, name := range []string{p.file, p.prevLink, p.journalLink} {
		if name != "" {
			d.freeInSteps(name)
		}
	}
}

// freeStep is how much of a discarded file freeInSteps frees at a time.
const freeStep = 1 << 20

// freeInSteps removes the file at name, a compaction's leftover, freeing a
// big one's blocks a step at a time first: cut by freeStep bytes, fsync,
// again. A file system with a journal of its own (ext4's jbd2) makes a
// concurrent commit's fsync of the checkpoint's journal wait for the
// transaction that frees the blocks: the .prev of 100,000 entries, 20 MB,
// removed at once made one Put wait 9 ms (its fsync costs 0.1 ms); in
// steps, an fsync waits for at most one step's. A failure leaves the rest
// to the removal.
//
// A cut cuts the file, not the name: a leftover that is a link to a file
// still in use (the journal, when the new one could not be renamed over
// it; .prev, when the compaction ended before it was replaced; the
// checkpoint itself, where a failed save left .prev one file with it) is
// only unlinked. So the steps run only on a name that is its file's last
// link, as the file system's own count says; where it cannot say (a
// simulated file system), the file is only removed.
func (d *disk) freeInSteps(name string) {
	if fi, err := d.fs.Lstat(name); err == nil && fsys.LastLink(fi) {
		d.cutInSteps(name)
	}
	_ = d.fs.Remove(name)
}

// cutInSteps cuts the file at name down to freeStep bytes or fewer, a step
// at a time, each made durable before the next.
func (d *disk) cutInSteps(name string) {
	if f, err := d.fs.OpenAppend(name, d.mode, false); err == nil {
		size, err := f.Size()
		for err == nil && size > freeStep {
			size -= freeStep
			if err = f.Truncate(size); err == nil {
				err = f.Sync()
			}
		}
		_ = f.Close()
	}
}

func (d *disk) removeJournal() error {
	if err := d.fs.Remove(d.journal); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return pathError("save: remove journal", d.journal, err)
	}
	return nil
}
