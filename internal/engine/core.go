package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// backend is where a checkpoint's bytes live: a file on disk (File) or a
// byte slice (Memory). Everything else is shared, so that Memory keeps the
// same contract as File by construction.
type backend interface {
	name() string
	// read returns the whole file, or an error matching fs.ErrNotExist.
	read() ([]byte, error)
	// replace makes data the checkpoint, atomically and durably. last is
	// what the caller last read or wrote there; when a file exists, it is
	// first kept as the previous one.
	replace(data []byte, last onDisk) error
	// quarantine moves the current file, and its journal, aside and says
	// where to.
	quarantine() (string, error)
	close() error

	// The journal (see journal.go).
	journalName() string
	// readJournal returns the whole journal, or an error matching
	// fs.ErrNotExist.
	readJournal() ([]byte, error)
	// appendJournal appends rec to the journal and makes it durable. at is
	// the journal's size as the core knows it (0: the journal is created).
	// It returns errRewrite, having changed nothing, when the file or the
	// journal is not as the core left it: then the commit writes the whole
	// file instead.
	appendJournal(rec []byte, at int64, last onDisk) error
	// removeJournal removes the journal, if there is one.
	removeJournal() error
}

// The errors a backend returns for the core to act on.
var (
	// errTakenOver is returned by backend.replace and appendJournal when
	// another File wrote the checkpoint while this one's lock file was
	// gone: the core stops writing until the file is loaded again.
	errTakenOver = errors.New("another File wrote the checkpoint")
	// errRewrite is returned by backend.appendJournal when the file or the
	// journal is not as the core last left it (removed, cut, replaced): the
	// records could not be found again after the base they follow, so the
	// commit writes the whole file instead.
	errRewrite = errors.New("the journal cannot be appended to")
)

// onDisk is what a core knows of the file at its path: whether there is
// one, and which save wrote it.
type onDisk struct {
	exists  bool
	seq     uint64    // Seq of the file; it goes on from here even when there is none
	savedAt time.Time // SavedAt of the file, which tells two saves of the same Seq apart
	// journal is the length of the journal beside the file as the core
	// left it (0: none), or -1 when the core does not know it exactly
	// (after a failed write, or a Load that found a torn record).
	journal int64
}

type fileState int

const (
	stateUnknown fileState = iota // not read yet
	stateGood                     // ents is what is on disk (or nothing is)
	stateBad                      // the last read failed; see core.bad
)

// core is the logic File and Memory share: the state machine that keeps a
// file that could not be read from being overwritten, sequence numbers, and
// the encoded entries that let Commit write only what changed.
type core[K comparable, V any] struct {
	mu     sync.Mutex // guards every field below and serialises file operations
	cfg    config
	be     backend
	bootID string

	closed bool
	state  fileState
	bad    error  // why the last read failed, when state is stateBad
	last   onDisk // the file last read or written
	ents   entries[K]

	keys keyRule[K]
	enc  *encoder
	out  []byte // reused for every file written
	undo []undoStep[K]
	encs []EncodedChange[K, V] // a Commit's changes, encoded

	// The state the core holds and the file under it differ when a journal
	// follows the file (see journal.go).
	head       uint64       // Seq of the state held: the file's, or its last journal record's
	baseFormat int          // format of the file last read or written
	baseSchema int          // schema of the file last read or written
	fileSize   int64        // length of the file last read or written
	jlen       int64        // length of the journal holding only records that follow the file; 0: none
	jstate     journalState // what the core knows of the journal beside the file
	jstat      JournalStatus
	ops        [][]byte // a commit's journal ops, reused
	rec        []byte   // a commit's journal record, reused
	// jbase is the base the next record carries: the file's Seq, or,
	// once a compaction took its snapshot, the snapshot's (see
	// compact.go), until a file is written again.
	jbase   uint64
	cmp     *compaction    // the compaction running in the background, or nil
	running sync.WaitGroup // compaction goroutines, abandoned ones included, not yet done
	cmpErr  error          // why the last background compaction failed; nil once one succeeded
	retryAt int64          // after a failed one, the journal length the next one waits for

	// size is the length of the file last read or written, with its
	// journal (0: none). It is atomic, not under mu, so that Size does not
	// wait for a save's fsync.
	size atomic.Int64
}

func newCore[K comparable, V any](cfg config, be backend, bootID string) *core[K, V] {
	return &core[K, V]{cfg: cfg, be: be, bootID: bootID, keys: newKeyRule[K](), enc: newEncoder(), ents: newEntries[K](0)}
}

func (c *core[K, V]) check(ctx context.Context) error {
	if c.closed {
		return fmt.Errorf("checkpoint %s: %w", c.be.name(), ErrClosed)
	}
	return ctx.Err()
}

func (c *core[K, V]) load(ctx context.Context) (Snapshot[K, V], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(ctx); err != nil {
		return Snapshot[K, V]{}, err
	}
	return c.loadLocked()
}

func (c *core[K, V]) loadLocked() (Snapshot[K, V], error) {
	// What is read now replaces what a compaction would install.
	c.abandon()
	c.jstat, c.cmpErr, c.retryAt = JournalStatus{}, nil, 0
	data, err := c.be.read()
	if errors.Is(err, fs.ErrNotExist) {
		if err := c.journalWithoutFile(); err != nil {
			c.state, c.bad = stateBad, err
			return Snapshot[K, V]{}, pathError("load", c.be.name(), err)
		}
		c.state, c.bad, c.last, c.head, c.jbase = stateGood, nil, onDisk{}, 0, 0
		c.ents = newEntries[K](0)
		c.fileSize = 0
		c.size.Store(0)
		return Snapshot[K, V]{Entries: map[K]V{}}, pathError("load", c.be.name(), ErrNotExist)
	}
	if err != nil {
		c.state, c.bad = stateBad, err
		return Snapshot[K, V]{}, pathError("load", c.be.name(), err)
	}
	c.size.Store(int64(len(data)))
	res, err := decode[K, V](data, &c.cfg, c.enc)
	file := res.snap.Meta
	if err == nil {
		err = c.replayJournal(&res, int64(len(data)))
	} else {
		c.journalMeta(&res.snap.Meta)
	}
	if err == nil {
		// Fields the types lack, in what the journal replays to (history
		// it replaced or deleted is not judged).
		err = res.unknownErr()
	}
	if err != nil {
		c.state, c.bad = stateBad, err
		c.keepSeq(res.snap.Meta.Seq)
		return Snapshot[K, V]{Meta: res.snap.Meta}, pathError("load", c.be.name(), err)
	}
	if len(res.bad) > 0 {
		berr := &BadEntriesError{Path: c.be.name(), Total: len(res.snap.Entries) + len(res.bad), Entries: res.bad}
		c.state, c.bad = stateBad, berr
		c.keepSeq(res.snap.Meta.Seq)
		return res.snap, berr
	}
	c.state, c.bad = stateGood, nil
	c.last = onDisk{exists: true, seq: file.Seq, savedAt: file.SavedAt}
	c.head, c.baseFormat, c.baseSchema, c.fileSize = res.snap.Meta.Seq, file.Format, file.Schema, int64(len(data))
	c.ents = res.ents
	if res.dropped > 0 {
		// The file holds fields that memory does not: the next commit
		// writes the whole file, as it says, rather than append to it.
		c.jstate = c.jstate.rewrite()
		c.cfg.logger.Warn("dropped unknown fields from checkpoint entries, as WithDropUnknownFields allows; the next save writes them without",
			zap.String("path", c.be.name()), zap.Int("entries", res.dropped))
	}
	return res.snap, nil
}

// writable makes sure the file on disk has been read, so that a file nobody
// could read is never replaced (it may hold the only copy of the state).
func (c *core[K, V]) writable() error {
	if c.state == stateUnknown {
		_, _ = c.loadLocked() // sets c.state, and c.bad on failure
	}
	if c.state == stateBad {
		return pathError("save", c.be.name(), fmt.Errorf("%w: %w; move it aside with Quarantine first", ErrUnreadable, c.bad))
	}
	return nil
}

// mayWrite tells whether a save may run now. The caller holds c.mu.
func (c *core[K, V]) mayWrite(ctx context.Context) error {
	if err := c.check(ctx); err != nil {
		return err
	}
	return c.writable()
}

func (c *core[K, V]) save(ctx context.Context, s Snapshot[K, V]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.mayWrite(ctx); err != nil {
		return err
	}
	// Encode every entry into one block, then cut it into lines: one
	// allocation for the lot, and lines that stay valid as the block grows.
	var blob []byte
	ends := make([]int, 0, len(s.Entries))
	keys := make([]K, 0, len(s.Entries))
	for k, v := range s.Entries {
		var err error
		if blob, err = encodeEntry(c.enc, &c.keys, blob, k, v, -1); err != nil {
			return pathError("save", c.be.name(), err)
		}
		keys = append(keys, k)
		ends = append(ends, len(blob))
	}
	ents := newEntries[K](len(keys))
	start := 0
	for i, k := range keys {
		ents.insert(k, int32(i))
		ents.lines = append(ents.lines, blob[start:ends[i]:ends[i]])
		start = ends[i]
	}
	if err := c.write(s.Meta, ents.lines); err != nil {
		return err
	}
	c.ents = ents
	return nil
}

func (c *core[K, V]) commit(ctx context.Context, m Meta, changes []Change[K, V]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.mayWrite(ctx); err != nil {
		return err
	}
	// Encode the new lines before touching anything: an entry that cannot
	// be encoded fails the commit with nothing changed. One block holds
	// them all, cut into lines once it is whole.
	var blob []byte
	ends := make([]int, len(changes))
	for i, ch := range changes {
		if !ch.Delete {
			var err error
			if blob, err = encodeEntry(c.enc, &c.keys, blob, ch.Key, ch.Value, i); err != nil {
				return pathError("commit", c.be.name(), err)
			}
		}
		ends[i] = len(blob)
	}
	encs, start := c.encs[:0], 0
	for i, ch := range changes {
		e := EncodedChange[K, V]{key: ch.Key, del: ch.Delete, made: true}
		if !ch.Delete {
			e.line = blob[start:ends[i]:ends[i]]
		}
		encs = append(encs, e)
		start = ends[i]
	}
	err := c.apply(m, encs)
	c.encs = reuse(encs)
	return err
}

// commitEncoded is commit for changes EncodeChange encoded: their lines
// are written as they are.
func (c *core[K, V]) commitEncoded(ctx context.Context, m Meta, changes []EncodedChange[K, V]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.mayWrite(ctx); err != nil {
		return err
	}
	for i, ch := range changes {
		if !ch.made {
			return pathError("commit", c.be.name(), fmt.Errorf("%w: change %d is the zero EncodedChange, not one EncodeChange made", ErrEncode, i))
		}
	}
	return c.apply(m, changes)
}

// apply applies changes, encoded, to c.ents and makes them durable; if
// that fails, c.ents is as it was. The caller holds c.mu.
func (c *core[K, V]) apply(m Meta, changes []EncodedChange[K, V]) error {
	c.undo, c.ops = c.undo[:0], c.ops[:0]
	for _, ch := range changes {
		if ch.del {
			// A key that cannot be compared (a map in an interface) was
			// never stored, and would panic the index.
			if c.keys.comparable == nil || c.keys.comparable(ch.key) == nil {
				n := len(c.undo)
				// The journal's ops are built only for a checkpoint that
				// may append them: a delete's costs a copy of its line.
				if c.undo = c.ents.del(ch.key, c.undo); len(c.undo) > n && c.cfg.journal {
					c.ops = append(c.ops, deleteOp(c.undo[n].raw))
				}
			}
			continue
		}
		c.undo = c.ents.put(ch.key, ch.line, c.undo)
		if c.cfg.journal {
			c.ops = append(c.ops, ch.line)
		}
	}
	err := c.persist(m)
	if err != nil {
		c.ents.undo(c.undo)
	} else {
		c.ents.compact()
	}
	c.undo, c.ops = reuse(c.undo), reuse(c.ops)
	return err
}

// reuse empties s, a commit's scratch slice, for the next commit: it clears
// the elements the commit used (they refer to entry lines, which must not
// be pinned), and only those, and lets s go when it grew far beyond what
// the commit used. A bulk commit (an Update of every entry) grows the
// scratch to its size once; clearing the whole capacity at every commit
// after it made each one cost as much as that bulk commit (83% of a Put's
// CPU at 100,000 entries, issue 35).
func reuse[T any](s []T) []T {
	clear(s)
	if cap(s) > 1024 && cap(s) > 8*len(s) {
		return nil
	}
	return s[:0]
}

// persist makes the changes the commit applied to c.ents durable: by an
// append to the journal when it may (see journal.go), otherwise, and when
// the journal asks for it, by writing the whole file. WithoutJournal, a
// commit goes straight to write. The caller holds c.mu.
func (c *core[K, V]) persist(m Meta) error {
	if c.cfg.journal && c.appendable() {
		if appended, err := c.appendCommit(m); appended || err != nil {
			return err
		}
	}
	return c.write(m, c.ents.lines)
}

// write writes lines as the whole file, with m's caller fields, and
// records the new sequence number. The caller holds c.mu.
func (c *core[K, V]) write(m Meta, lines [][]byte) error {
	// The file written now holds what a compaction would install.
	c.abandon()
	meta := c.nextMeta(m)
	c.out = appendFile(c.out[:0], meta, lines)
	if err := c.be.replace(c.out, c.onDisk()); err != nil {
		// After a failed save, the file may be the new one (an undone
		// rename that could not be undone): appending to a journal that
		// follows the old one would lose the records.
		if c.cfg.journal || c.jstate.mayExist() {
			c.jstate = c.jstate.rewrite()
		}
		return c.failed(err)
	}
	c.last = onDisk{exists: true, seq: meta.Seq, savedAt: meta.SavedAt}
	c.head, c.baseFormat, c.baseSchema, c.fileSize = meta.Seq, meta.Format, meta.Schema, int64(len(c.out))
	c.jbase, c.cmpErr, c.retryAt = meta.Seq, nil, 0
	c.size.Store(int64(len(c.out)))
	// The file now holds everything a journal held.
	c.jlen = 0
	c.jstat = JournalStatus{FileSize: c.fileSize, Torn: c.jstat.Torn}
	if c.jstate.mayExist() {
		c.dropJournal()
	} else {
		c.jstate = journalAbsent
	}
	// Let a buffer that grew for a much bigger file go, so a checkpoint
	// that shrank does not pin its old size for ever.
	if cap(c.out) > 1<<20 && cap(c.out) > 4*len(c.out) {
		c.out = nil
	}
	return nil
}

// failed returns the error of a write that failed. When another File wrote
// the checkpoint, what this one holds is no longer what is on disk, and
// overwriting it would lose that: the core refuses to write until the file
// is loaded again. The caller holds c.mu.
func (c *core[K, V]) failed(err error) error {
	if errors.Is(err, errTakenOver) {
		c.state, c.bad = stateBad, err
		return pathError("save", c.be.name(), fmt.Errorf("%w: %w; Load it (or Quarantine it) before saving again", ErrUnreadable, err))
	}
	return err
}

// onDisk is c.last with the journal's length as the core knows it, for a
// backend that checks, after its lock was lost and taken again, that
// nobody else wrote the checkpoint meanwhile. The caller holds c.mu.
func (c *core[K, V]) onDisk() onDisk {
	last := c.last
	switch {
	case c.jstate.mustRewrite():
		last.journal = -1
	case c.jstate.mayExist():
		last.journal = c.jlen
	}
	return last
}

// keepSeq makes the next save's Seq follow seq, the Seq of a file this
// core could not use (a newer schema's, say): a quarantine moves that file
// aside, and the file saved in its place must not go back to seq 1, since
// every save increments Seq, and an operator's tools tell by Seq whether
// commits came after a copy they keep (phaseshift restore-kept).
func (c *core[K, V]) keepSeq(seq uint64) {
	if seq < maxSeq {
		c.head = max(c.head, seq)
	}
}

// nextMeta is the Meta of the next commit: m's caller fields, this
// core's format, schema and boot ID, and the next Seq.
func (c *core[K, V]) nextMeta(m Meta) Meta {
	m.Format = 1
	if c.cfg.journal {
		m.Format = formatJournal
	}
	m.Schema = c.cfg.schema
	m.Seq = c.head + 1
	m.SavedAt = time.Now().UTC()
	if m.BootID == "" {
		m.BootID = c.bootID
	}
	return m
}

func (c *core[K, V]) quarantine(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(ctx); err != nil {
		return "", err
	}
	c.abandon()
	dst, err := c.be.quarantine()
	if errors.Is(err, fs.ErrNotExist) {
		return "", pathError("quarantine", c.be.name(), ErrNotExist)
	}
	if err != nil {
		return "", err
	}
	c.cfg.logger.Warn("moved the checkpoint aside for inspection (quarantined)", zap.String("path", c.be.name()), zap.String("to", dst))
	// Nothing is on disk now, so the next save creates the file afresh.
	c.state, c.bad, c.last.exists = stateGood, nil, false
	c.ents = newEntries[K](0)
	c.jlen, c.jstate, c.fileSize = 0, journalAbsent, 0
	c.size.Store(0)
	return dst, nil
}

// close closes the core. A compaction running in the background is
// abandoned, and close waits for its goroutine, and any abandoned earlier
// and not yet done, to remove its temporary file (each is writing at most
// one piece of its file) before the lock is released.
func (c *core[K, V]) close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.abandon()
	c.mu.Unlock()
	c.running.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ents, c.out, c.ops, c.rec, c.encs = entries[K]{}, nil, nil, nil, nil
	return c.be.close()
}
