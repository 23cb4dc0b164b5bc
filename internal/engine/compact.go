package engine

import (
	"bytes"
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Compaction in the background. A File folds its journal into the file
// without making any commit wait for the file to be written (issue 35: the
// commit that compacted inline rewrote 20 MB at 100,000 entries while its
// caller waited). The steps (compactionSteps), with commits going on
// between any two:
//
//  1. Under the core's mutex, the commit that grows the journal past its
//     bound appends its record as usual, then takes a snapshot of the
//     state it made, seq H: the list of entry lines (the lines themselves
//     are immutable, so this copies only the slice of them), with H as the
//     new file's Seq. From then on, records carry base H instead of the
//     old file's Seq S, and the core keeps a copy of them.
//  2. Off the mutex, the new file is written to a temporary file in pieces
//     (streamFile), each fsynced, and closed; .prev is linked aside.
//  3. Under the mutex, the file is renamed into place as a save does (the
//     lock checked, the old file kept as .prev).
//  4. Off the mutex, the directory is fsynced, and the records of base H
//     so far are written to a new journal, a temporary file, and fsynced;
//     the old journal is linked aside.
//  5. Under the mutex, the records appended since are added to the new
//     journal and fsynced, and it is renamed over the journal, and the
//     directory fsynced (with no record since H, the journal is removed).
//  6. Off the mutex, what is left is removed: the links to the old .prev
//     and the old journal, whose blocks are freed only now (an unlink of
//     the last link of a 20 MB file takes milliseconds).
//
// A crash before the rename of step 3 is durable leaves the old file S,
// the records of base S up to H, then those of base H: replay takes a
// record whose base is the seq it has reached as continuing the state
// (follows, in journal.go), so nothing acknowledged is lost. After it, the
// new file H makes the records of base S stale (skipped, as after any save)
// and those of base H follow it. The new file holds only acknowledged
// commits, so a rename a crash undoes loses nothing either; the journal is
// replaced only once the new file's name is durable, so that the records
// of base H never stand alone beside the old file. A save, a Load, a
// Quarantine or Close while a compaction runs abandons it: the steps after
// do nothing but remove its temporary files; a step under the mutex never
// renames anything once it was abandoned.
//
// A checkpoint smaller than backgroundFrom compacts inline, in the commit
// that would grow the journal past its bound, as before: writing it costs
// about what the steps under the mutex cost (three renames and up to
// three fsyncs), so a commit would not wait less. Memory always compacts
// inline: its writes cost no I/O, and tests see its journal change at the
// commit that crosses the bound.
const backgroundFrom = 64 << 10

// compactPiece is how much of the new file a background compaction writes
// between two fsyncs. A commit's fsync of the journal has to wait for the
// file system to write out what else is dirty and allocated (ext4's
// ordered mode, for one): fsyncing as it goes, as pebble's and RocksDB's
// bytes_per_sync do, keeps that under a piece, rather than the whole file.
const compactPiece = 256 << 10

// compactor is a backend that can compact in the background: disk. See
// disk.go for each step.
type compactor interface {
	// writeCompaction writes the file of m and lines to a new temporary
	// file, off the core's mutex; it gives up once stop is set.
	writeCompaction(m Meta, lines [][]byte, stop *atomic.Bool) (*compacting, error)
	// installCompaction renames the new file into place (the old one
	// kept as .prev), under the mutex; last is what the core knows of the
	// file and journal it replaces.
	installCompaction(p *compacting, last onDisk) error
	// syncCompaction makes the rename durable, off the mutex.
	syncCompaction() error
	// writeCompactionJournal writes the records since the snapshot so
	// far to the new journal, off the mutex.
	writeCompactionJournal(p *compacting, data []byte) error
	// installCompactionJournal adds the records since, and makes the new
	// journal the journal (or removes the journal, if empty), under the
	// mutex.
	installCompactionJournal(p *compacting, tail []byte, empty bool) (journalAfter, error)
	// discardCompaction removes what is left of p, off the mutex.
	discardCompaction(p *compacting)
}

// journalAfter is what the journal is once a compaction's file is in
// place.
type journalAfter int

const (
	// journalKept: the journal is as it was, the records before the
	// snapshot (stale now) then those since, which can be appended to.
	journalKept journalAfter = iota
	// journalNew: the journal holds only the records since the snapshot
	// (none: it is gone).
	journalNew
	// journalUnsure: the journal was replaced, but its new name may not be
	// durable: the next commit writes the whole file.
	journalUnsure
)

// errAbandoned stops the write of a compaction that was abandoned.
var errAbandoned = errors.New("compaction abandoned")

// compaction is a compaction running in the background.
type compaction struct {
	meta  Meta     // the new file's: its Seq is the snapshot's
	lines [][]byte // the entries at the snapshot
	// since are the records appended after the snapshot (their base is
	// meta.Seq), records how many: the journal of the new file. pre is
	// how many of since's bytes are in the new journal, written off the
	// mutex.
	since   []byte
	records int
	pre     int
	stop    atomic.Bool // abandoned: stop writing
	disk    *compacting // what it has on disk
	ended   bool        // a step ended it: the steps after do nothing
}

// runCompactions runs a compaction's steps, in order, each once. It is a
// test hook (WithCompactions): by default they run in a goroutine of
// their own, one after another.
type runCompactions func(steps []func())

func goCompactions(steps []func()) {
	go func() {
		for _, step := range steps {
			step()
		}
	}()
}

// compactsInBackground tells whether the commit that grows the journal
// past its bound may append and leave the compaction to a goroutine. The
// caller holds c.mu.
func (c *core[K, V]) compactsInBackground() bool {
	_, ok := c.be.(compactor)
	return ok && c.fileSize >= backgroundFrom
}

// compactAt is the journal length past which a commit compacts: the bound,
// or, after a background compaction failed, the length the journal must
// grow to before the next try. The caller holds c.mu.
func (c *core[K, V]) compactAt() int64 {
	return max(journalBound(c.fileSize), c.retryAt)
}

// startCompaction takes the snapshot of the state the last commit made,
// whose Meta is head, and starts its compaction in the background. The
// caller holds c.mu.
func (c *core[K, V]) startCompaction(head Meta) {
	bg := c.be.(compactor)
	m := head
	m.Format, m.Schema, m.SavedAt = formatJournal, c.cfg.schema, time.Now().UTC()
	lines := make([][]byte, 0, len(c.ents.lines)-c.ents.dead)
	for _, l := range c.ents.lines {
		if l != nil {
			lines = append(lines, l)
		}
	}
	job := &compaction{meta: m, lines: lines}
	c.cmp, c.jbase = job, m.Seq
	c.running.Add(1)
	run := c.cfg.compactions
	if run == nil {
		run = goCompactions
	}
	run(c.compactionSteps(job, bg))
}

// compactionSteps are job's steps, in order: off the mutex, the new file
// is written; under it, renamed into place; off it, the rename is made
// durable and the new journal written with the records since the
// snapshot so far; under it, the rest of them added and the new journal
// renamed into place; off it, what is left is removed. Commits go on
// between any two, and a save, a Load, a Quarantine or Close ends the
// compaction at the next step that takes the mutex.
func (c *core[K, V]) compactionSteps(job *compaction, bg compactor) []func() {
	return []func(){
		func() {
			var err error
			job.disk, err = bg.writeCompaction(job.meta, job.lines, &job.stop)
			job.lines = nil
			if err != nil {
				c.locked(job, func() { c.compactionFailed(err) })
			}
		},
		func() { c.locked(job, func() { c.installFile(job, bg) }) },
		func() {
			if !job.ended {
				if err := bg.syncCompaction(); err != nil {
					c.locked(job, func() { c.compactionFailed(err) })
				}
			}
		},
		func() { c.writeJournal(job, bg) },
		func() { c.locked(job, func() { c.installJournal(job, bg) }) },
		func() {
			defer c.running.Done()
			if job.disk != nil {
				bg.discardCompaction(job.disk)
			}
		},
	}
}

// writeJournal writes the records appended since job's snapshot to the
// new journal, off c.mu, in a few rounds, each taking those appended
// during the one before: what is left for installJournal to write and
// fsync under c.mu is what came during the last.
func (c *core[K, V]) writeJournal(job *compaction, bg compactor) {
	for range 4 {
		var more []byte
		c.locked(job, func() { more = bytes.Clone(job.since[job.pre:]) })
		if job.ended || len(more) == 0 {
			return
		}
		if err := bg.writeCompactionJournal(job.disk, more); err != nil {
			c.locked(job, func() { c.compactionFailed(err); c.journalKept() })
			return
		}
		job.pre += len(more)
	}
}

// locked runs fn under c.mu, unless job has ended or was abandoned (it is
// no longer c.cmp): then it ends job and does nothing.
func (c *core[K, V]) locked(job *compaction, fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if job.ended || c.cmp != job {
		job.ended = true
		return
	}
	fn()
}

// appended records a record appended while a compaction runs: it goes to
// the new file's journal too. The caller holds c.mu.
func (c *core[K, V]) appended(rec []byte) {
	if c.cmp != nil {
		c.cmp.since = append(c.cmp.since, rec...)
		c.cmp.records++
	}
}

// abandon stops the compaction running in the background, if any, before
// a save, a Load, a Quarantine or Close changes what it would replace: it
// is not installed (or, if its file was, its journal is not), and its
// goroutine removes its temporary files. The caller holds c.mu.
func (c *core[K, V]) abandon() {
	if c.cmp != nil {
		c.cmp.stop.Store(true)
		c.cmp = nil
	}
}

// installFile renames job's new file into place. From then on the file
// is the snapshot's, and the journal's records before it are stale. The
// caller holds c.mu.
func (c *core[K, V]) installFile(job *compaction, bg compactor) {
	if err := bg.installCompaction(job.disk, c.onDisk()); err != nil {
		c.compactionFailed(err)
		return
	}
	c.last = onDisk{exists: true, seq: job.meta.Seq, savedAt: job.meta.SavedAt}
	c.fileSize, c.retryAt, c.cmpErr = job.disk.size, 0, nil
	c.jstat.Stale += c.jstat.Records - job.records
	c.jstat.Records, c.jstat.FileSize = job.records, c.fileSize
	c.size.Store(c.fileSize + c.jlen)
}

// installJournal makes the records since job's snapshot the journal, and
// ends job. The caller holds c.mu.
func (c *core[K, V]) installJournal(job *compaction, bg compactor) {
	job.ended, c.cmp = true, nil
	var after journalAfter
	var err error
	if job.pre == 0 && len(job.since) > 0 {
		// Every record since the snapshot came after writeJournal: the
		// new journal is written now.
		err = bg.writeCompactionJournal(job.disk, job.since)
		job.pre = len(job.since)
	}
	if err == nil {
		after, err = bg.installCompactionJournal(job.disk, job.since[job.pre:], len(job.since) == 0)
	}
	if err != nil {
		c.cmpErr = err
		c.cfg.logger.Warn("could not replace the checkpoint's journal after a compaction; its records before the compaction are in the checkpoint and will be skipped",
			zap.String("path", c.be.journalName()), zap.Error(err))
	}
	switch after {
	case journalNew:
		c.jlen = int64(len(job.since))
		c.jstate = c.jstate.existing(len(job.since) > 0)
		c.jstat.Stale, c.jstat.Bytes = 0, c.jlen
		c.size.Store(c.fileSize + c.jlen)
	case journalKept:
		c.journalKept()
	case journalUnsure:
		c.jstate = c.jstate.rewrite()
	}
}

// journalKept records that a compaction left the journal with its stale
// records: they cost a Load only their checks, so the next compaction
// waits for another bound, as after a failure. The caller holds c.mu.
func (c *core[K, V]) journalKept() {
	c.retryAt = c.jlen + journalBound(c.fileSize)
}

// compactionFailed records a background compaction that failed, and ends
// it: commits go on appending (their records follow the snapshot it took,
// as the records before them do), and the next compaction starts once the
// journal has grown by another bound. The caller holds c.mu.
func (c *core[K, V]) compactionFailed(err error) {
	c.cmp.ended, c.cmp = true, nil
	c.cmpErr = err
	c.retryAt = c.jlen + journalBound(c.fileSize)
	c.cfg.logger.Warn("could not compact the checkpoint's journal in the background; commits go on appending to it, and the compaction is tried again later",
		zap.String("path", c.be.name()), zap.Int64("journalBytes", c.jlen), zap.Int64("retryAtBytes", c.retryAt), zap.Error(err))
	_ = c.failed(err) // another File wrote the checkpoint: stop writing
}
