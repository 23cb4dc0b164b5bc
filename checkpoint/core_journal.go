package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"

	"go.uber.org/zap"
)

// errRewrite is returned by backend.appendJournal when the file or the
// journal is not as the core last left it (removed, cut, replaced): the
// records could not be found again after the base they follow, so the
// commit writes the whole file instead.
var errRewrite = errors.New("the journal cannot be appended to")

// journalWithoutFile checks, when there is no file, that there is no
// journal either: records without the file they follow cannot be replayed,
// and a journal is never written before its file, so one found alone is
// corruption (a file removed by hand, or a quarantine cut short), not an
// empty checkpoint.
func (c *core[K, V]) journalWithoutFile() error {
	data, err := c.be.readJournal()
	if errors.Is(err, fs.ErrNotExist) {
		c.jlen, c.jmay, c.jdirty = 0, false, false
		return nil
	}
	if err != nil {
		return fmt.Errorf("journal %s: %w", c.be.journalName(), err)
	}
	c.jlen, c.jmay, c.jdirty = 0, true, true
	if len(data) == 0 {
		return nil // nothing in it: the next save removes it
	}
	return corrupt("journal %s holds %d bytes of records, but the checkpoint they follow is missing: move the journal aside (Quarantine) to start without it", c.be.journalName(), len(data))
}

// replayJournal applies the journal, if there is one, to res, the decoded
// file of fileSize bytes, and records what it found.
func (c *core[K, V]) replayJournal(res *decodeResult[K, V], fileSize int64) error {
	c.jstat = JournalStatus{FileSize: fileSize} // Enabled is set by journal()
	data, err := c.be.readJournal()
	if errors.Is(err, fs.ErrNotExist) {
		c.jlen, c.jmay, c.jdirty = 0, false, false
		return nil
	}
	if err != nil {
		return fmt.Errorf("journal %s: %w", c.be.journalName(), err)
	}
	c.jmay = true
	rp, err := replay(data, c.be.journalName(), res, &c.cfg, c.enc, len(res.ents.lines))
	if err != nil {
		return err
	}
	if rp.last != nil {
		m := rp.last.meta
		m.Format, m.Schema, m.Seq = res.snap.Meta.Format, res.snap.Meta.Schema, rp.last.seq
		res.snap.Meta = m
	}
	res.ents.compact()
	// A journal with anything but records that follow the file is not
	// appended to: the next commit folds it into the file.
	c.jlen, c.jdirty = rp.valid, rp.torn != nil || rp.stale > 0
	c.jstat.Bytes, c.jstat.Records, c.jstat.Stale, c.jstat.Torn = int64(len(data)), rp.records, rp.stale, rp.torn
	c.size.Store(fileSize + int64(len(data)))
	if rp.torn != nil {
		c.cfg.logger.Warn("discarded the torn last record of the checkpoint's journal: a commit cut short by a crash, never acknowledged; the next save rewrites the checkpoint without it",
			zap.String("path", c.be.journalName()), zap.Int64("offset", rp.torn.Offset), zap.Int64("bytes", rp.torn.Bytes))
	}
	return nil
}

// journalMeta brings m, the Meta of a file whose entries Load could not
// use (a newer schema, say), to what the last record of its journal says:
// a caller that judges the checkpoint by its Meta (package migrate: was it
// written by phase 3, in this boot?) must see the last commit, not the
// last compaction. Only the records' headers are read, and only whole
// records that follow the file, in order; anything else stops it.
func (c *core[K, V]) journalMeta(m *Meta) {
	data, err := c.be.readJournal()
	if err != nil || m.Seq == 0 {
		return
	}
	file := m.Seq
	next := file + 1
	for len(data) > 0 {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			return
		}
		rec, err := parseRecord(data[:nl])
		data = data[nl+1:]
		switch {
		case err != nil:
			return
		case rec.base < file && next == file+1:
			continue // stale
		case rec.base != file || rec.seq != next:
			return
		}
		m.Phase, m.Writer, m.BootID, m.Behind, m.SavedAt, m.Seq = rec.meta.Phase, rec.meta.Writer, rec.meta.BootID, rec.meta.Behind, rec.meta.SavedAt, rec.seq
		next++
	}
}

// persist makes the changes the commit applied to c.ents durable: by an
// append to the journal when it can, otherwise by writing the whole file.
// The caller holds c.mu.
func (c *core[K, V]) persist(m Meta) error {
	if !c.appendable() {
		return c.write(m, c.ents.lines)
	}
	meta := c.nextMeta(m)
	c.rec = appendRecord(c.rec[:0], c.last.seq, meta, c.ops)
	if c.jlen+int64(len(c.rec)) > journalBound(c.fileSize) {
		return c.write(m, c.ents.lines) // compaction
	}
	err := c.be.appendJournal(c.rec, c.jlen, c.onDisk())
	if errors.Is(err, errRewrite) {
		c.cfg.logger.Warn("the checkpoint or its journal is not as this File left it (removed?); this commit writes the whole checkpoint",
			zap.String("path", c.be.name()))
		c.jdirty, c.jmay = true, true
		return c.write(m, c.ents.lines)
	}
	if err != nil {
		// The journal may now hold part of the record, or all of it
		// unacknowledged: it is not appended to again.
		c.jdirty, c.jmay = true, true
		if errors.Is(err, errTakenOver) {
			c.state, c.bad = stateBad, err
			return pathError("save", c.be.name(), fmt.Errorf("%w: %w; Load it (or Quarantine it) before saving again", ErrUnreadable, err))
		}
		return err
	}
	c.head, c.jmay = meta.Seq, true
	c.jlen += int64(len(c.rec))
	c.jstat.Records++
	c.jstat.Bytes = c.jlen
	c.size.Store(c.fileSize + c.jlen)
	if cap(c.rec) > 1<<20 {
		c.rec = nil
	}
	return nil
}

// onDisk is c.last with the journal's length as the core knows it, for a
// backend that checks, after its lock was lost and taken again, that
// nobody else wrote the checkpoint meanwhile. The caller holds c.mu.
func (c *core[K, V]) onDisk() onDisk {
	last := c.last
	switch {
	case c.jdirty:
		last.journal = -1
	case c.jmay:
		last.journal = c.jlen
	}
	return last
}

// appendable tells whether a commit may go to the journal: the option is
// on, and the journal holds nothing but records that follow a file this
// core read or wrote with its own schema and the journal's format.
func (c *core[K, V]) appendable() bool {
	return c.cfg.journal && c.last.exists && !c.jdirty &&
		c.baseFormat == formatJournal && c.baseSchema == c.cfg.schema
}

// dropJournal removes the journal after a save made the file hold all of
// it. The removal need not be durable: a journal that comes back after a
// crash holds records whose base is below the file's Seq, which replay
// skips. The caller holds c.mu.
func (c *core[K, V]) dropJournal() {
	c.jlen = 0
	c.jstat = JournalStatus{FileSize: c.fileSize, Torn: c.jstat.Torn}
	if !c.jmay {
		c.jdirty = false
		return
	}
	if err := c.be.removeJournal(); err != nil {
		// The file holds everything; the journal's records are stale.
		// Appending after them would be safe, but the next commit writes
		// the file again and retries the removal.
		c.jdirty = true
		c.cfg.logger.Warn("could not remove the checkpoint's journal after saving the checkpoint; its records are in the checkpoint and will be skipped",
			zap.String("path", c.be.journalName()), zap.Error(err))
		return
	}
	c.jmay, c.jdirty = false, false
}

// journal returns what the journal held at the last Load and since.
func (c *core[K, V]) journal() JournalStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.jstat
	st.Enabled = c.cfg.journal
	return st
}
