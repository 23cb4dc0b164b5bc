package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"

	"go.uber.org/zap"
)

// journalState is what a core knows of the journal beside its file, in
// one field: whether a journal may exist, and whether the next commit must
// rewrite the file rather than append.
type journalState uint8

const (
	// journalAbsent: no journal exists; a commit may start one.
	journalAbsent journalState = iota
	// journalFollowing: a journal may exist (found, or appended to), and all
	// it holds follows the file: the next commit appends to it.
	journalFollowing
	// journalRewriteFile: no journal exists, but the next commit rewrites the
	// file: it holds what memory does not (fields Load dropped), or a save
	// of it failed and the file may be the new one.
	journalRewriteFile
	// journalInDoubt: a journal may exist and may hold what cannot be
	// appended to (a torn or stale record, an append or a removal that
	// failed, a file not as this core left it): the next commit rewrites
	// the file and removes the journal.
	journalInDoubt
)

// mayExist reports whether a journal may be beside the file.
func (s journalState) mayExist() bool { return s == journalFollowing || s == journalInDoubt }

// mustRewrite reports whether the next commit rewrites the file.
func (s journalState) mustRewrite() bool { return s == journalRewriteFile || s == journalInDoubt }

// rewrite is s with the next commit made to rewrite the file.
func (s journalState) rewrite() journalState {
	if s.mayExist() {
		return journalInDoubt
	}
	return journalRewriteFile
}

// existing is s with a journal that may exist (may) or does not.
func (s journalState) existing(may bool) journalState {
	switch {
	case may && s.mustRewrite():
		return journalInDoubt
	case may:
		return journalFollowing
	case s.mustRewrite():
		return journalRewriteFile
	}
	return journalAbsent
}

// journalBound is the size past which the next commit compacts the
// journal into the file (in the background, or inline: see compact.go): a
// fifth of the file, and at least 32 KiB. Replaying a
// record costs more than decoding an entry of the file (a record has a
// header and a checksum of its own, and Load decodes the file on every core
// but replays the journal in order), so a fifth keeps a Load at the bound
// within about 1.3 times one of the compacted file (BenchmarkJournalRestore
// in package migrate); and a compaction every fifth of a file of records
// costs each commit a few percent of one save.
func journalBound(fileSize int64) int64 {
	return max(fileSize/5, 32<<10)
}

// WithJournal is checkpoint.WithJournal: see its documentation there.
func WithJournal() Option { return journalOption("checkpoint.WithJournal()", true) }

// WithoutJournal is checkpoint.WithoutJournal: see its documentation there.
func WithoutJournal() Option { return journalOption("checkpoint.WithoutJournal()", false) }

func journalOption(name string, on bool) Option {
	return optionFunc(func(c *config) error {
		if c.journalOpt != "" && c.journal != on {
			return invalidOption(name, "%s was given too: give one", c.journalOpt)
		}
		c.journal, c.journalOpt = on, name
		return nil
	})
}

// ErrTornJournal is checkpoint.ErrTornJournal: see its documentation there.
var ErrTornJournal = errors.New("checkpoint journal ends with a torn record")

// TornJournalError is checkpoint.TornJournalError: see its documentation there.
type TornJournalError struct {
	Path   string // the journal
	Offset int64  // where the discarded bytes start
	Bytes  int64  // how many were discarded
	Reason string // what was wrong with them
}

// Error says which journal, where, how much was discarded and why; never
// the bytes.
func (e *TornJournalError) Error() string {
	return fmt.Sprintf("%v: %s: discarded %d bytes at offset %d (%s): a commit cut short by a crash, never acknowledged",
		ErrTornJournal, e.Path, e.Bytes, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrTornJournal) true.
func (e *TornJournalError) Is(target error) bool { return target == ErrTornJournal }

// JournalStatus is checkpoint.JournalStatus: see its documentation there.
type JournalStatus struct {
	Enabled  bool              // commits append to the journal: opened without WithoutJournal
	Bytes    int64             // the journal's size as this File last read or wrote it; 0: none
	Records  int               // records Load replayed plus those Commit appended since; 0 once a save folded them into the file
	Stale    int               // records Load skipped because the file already held them
	Torn     *TornJournalError // the torn last record Load discarded, or nil
	FileSize int64             // the size of the file the records apply to
	// Compacting says that a compaction is rewriting the file in the
	// background (see WithJournal); CompactionError why the last one
	// failed, nil once one succeeded (commits go on appending, and it is
	// tried again later).
	Compacting      bool
	CompactionError error
}

// What the core does with the journal: a commit appends to it
// (appendCommit) when it may (appendable), a save removes it
// (dropJournal), and Load replays it (replayJournal) or, without a file,
// checks that there is none (journalWithoutFile).

// appendable tells whether a commit may go to the journal: the option is
// on, and the journal holds nothing but records that follow a file this
// core read or wrote with its own schema and the journal's format.
func (c *core[K, V]) appendable() bool {
	return c.cfg.journal && c.last.exists && !c.jstate.mustRewrite() &&
		c.baseFormat == formatJournal && c.baseSchema == c.cfg.schema
}

// appendCommit appends the commit's record (c.ops) to the journal and
// makes it durable, and, past the journal's bound, starts a compaction in
// the background (see compact.go). It reports false, having changed
// nothing on disk, when the commit must write the whole file instead: to
// compact the journal inline, past its bound, or because the file or the
// journal is not as this core left it. The caller holds c.mu.
func (c *core[K, V]) appendCommit(m Meta) (bool, error) {
	meta := c.nextMeta(m)
	c.rec = appendRecord(c.rec[:0], c.jbase, meta, c.ops)
	past := c.cmp == nil && c.jlen+int64(len(c.rec)) > c.compactAt()
	if past && !c.compactsInBackground() {
		return false, nil // compaction, inline
	}
	err := c.be.appendJournal(c.rec, c.jlen, c.onDisk())
	if errors.Is(err, errRewrite) {
		c.cfg.logger.Warn("the checkpoint or its journal is not as this File left it (removed, replaced, or written over in place?); this commit writes the whole checkpoint",
			zap.String("path", c.be.name()))
		c.jstate = journalInDoubt
		return false, nil
	}
	if err != nil {
		// The journal may now hold part of the record, or all of it
		// unacknowledged: it is not appended to again.
		c.jstate = journalInDoubt
		return true, c.failed(err)
	}
	c.head, c.jstate = meta.Seq, c.jstate.existing(true)
	c.jlen += int64(len(c.rec))
	c.jstat.Records++
	c.jstat.Bytes = c.jlen
	c.size.Store(c.fileSize + c.jlen)
	c.appended(c.rec)
	if past {
		c.startCompaction(meta)
	}
	if cap(c.rec) > 1<<20 {
		c.rec = nil
	}
	return true, nil
}

// dropJournal removes the journal after a save made the file hold all of
// it. The removal need not be durable: a journal that comes back after a
// crash holds records whose base is below the file's Seq, which replay
// skips. The caller holds c.mu.
func (c *core[K, V]) dropJournal() {
	if err := c.be.removeJournal(); err != nil {
		// The file holds everything; the journal's records are stale.
		// Appending after them would be safe, but the next commit writes
		// the file again and retries the removal.
		c.jstate = c.jstate.rewrite()
		c.cfg.logger.Warn("could not remove the checkpoint's journal after saving the checkpoint; its records are in the checkpoint and will be skipped",
			zap.String("path", c.be.journalName()), zap.Error(err))
		return
	}
	c.jstate = journalAbsent
}

// journal returns what the journal held at the last Load and since.
func (c *core[K, V]) journal() JournalStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.jstat
	st.Enabled = c.cfg.journal
	st.Compacting, st.CompactionError = c.cmp != nil, c.cmpErr
	return st
}

// journalWithoutFile checks, when there is no file, that there is no
// journal either: records without the file they follow cannot be replayed,
// and a journal is never written before its file, so one found alone is
// corruption (a file removed by hand, or a quarantine cut short), not an
// empty checkpoint.
func (c *core[K, V]) journalWithoutFile() error {
	data, err := c.be.readJournal()
	if errors.Is(err, fs.ErrNotExist) {
		c.jlen, c.jstate = 0, journalAbsent
		return nil
	}
	if err != nil {
		return fmt.Errorf("journal %s: %w", c.be.journalName(), err)
	}
	c.jlen, c.jstate = 0, journalInDoubt
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
	c.jbase = res.snap.Meta.Seq
	if errors.Is(err, fs.ErrNotExist) {
		c.jlen, c.jstate = 0, journalAbsent
		return nil
	}
	if err != nil {
		return fmt.Errorf("journal %s: %w", c.be.journalName(), err)
	}
	c.jstate = c.jstate.existing(true)
	rp, err := replay(data, c.be.journalName(), res, &c.cfg, c.enc, len(res.ents.lines))
	if err != nil {
		return err
	}
	// The next record follows the last one: records a compaction
	// appended after its snapshot have the snapshot's base.
	c.jbase = rp.base
	if rp.last != nil {
		m := rp.last.meta
		m.Format, m.Schema, m.Seq = res.snap.Meta.Format, res.snap.Meta.Schema, rp.last.seq
		res.snap.Meta = m
	}
	res.ents.compact()
	// A journal with anything but records that follow the file is not
	// appended to: the next commit folds it into the file.
	c.jlen, c.jstate = rp.valid, journalFollowing
	if rp.torn != nil || rp.stale > 0 {
		c.jstate = journalInDoubt
	}
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
	base, next := file, file+1
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
		case !follows(rec.base, base, next-1, next > file+1) || rec.seq != next:
			return
		}
		m.Phase, m.Writer, m.BootID, m.Behind, m.SavedAt, m.Seq = rec.meta.Phase, rec.meta.Writer, rec.meta.BootID, rec.meta.Behind, rec.meta.SavedAt, rec.seq
		base = rec.base
		next++
	}
}
