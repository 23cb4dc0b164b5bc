package engine

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/phaseshift/phaseshift/internal/jsonvalue"
	"go.uber.org/zap"
)

// The journal (the default; WithoutJournal turns it off). A commit appends
// one line to path+".journal" and fsyncs it, instead of writing the whole
// file; Load replays the lines over the file; a save rewrites the file and
// removes the journal. One line is one commit:
//
//	{"journal":1,"base":7,"seq":9,"schema":1,"phase":"contract","writer":"ipamd v2","bootID":"","savedAt":"2026-11-30T08:00:00Z","changes":[{"key":K,"value":V},{"delete":{"key":K,"value":V}}],"crc32c":"1a2b3c4d"}
//
// base is the Seq of the file the record applies to, seq the Seq of the
// state it makes: the records of a journal that follows its file have
// base equal to the file's Seq and seq counting on from it by one. A put
// is the entry line the file would hold; a delete holds the whole line it
// deletes, so that a binary with a newer schema can run its upgrades on it
// and find the key they lead to. The checksum is CRC-32C over the exact
// bytes of the line before `,"crc32c"`, as in the file.
//
// Why each rule of replay holds (see replay):
//   - A commit is acknowledged only after its line is written and fsynced,
//     and commits run one at a time, so a crash can leave at most one line
//     that is not whole: the last one (a prefix of it, or, when the file
//     system wrote its blocks out of order, its length with some blocks
//     missing). The last line is discarded if it fails its check, and
//     reported; a damaged line before it cannot come from a crash, and is
//     corruption.
//   - A save (or a compaction inline) makes the new file durable (rename,
//     fsync of the directory) before it removes the journal, and the new
//     file's Seq is above every record's base. A crash between the two
//     leaves records whose base is below the file's Seq: they are in the
//     file already, and are skipped. The removal need not be durable for
//     the same reason.
//   - A compaction in the background (compact.go) writes the state at seq
//     H as a file of Seq H while commits append records of base H after
//     the records of base S (the old file's Seq) up to H. A crash before
//     its rename is durable leaves the old file S under them: a record
//     whose base is the seq the replay has reached (H) continues it, and
//     so do the records of that base after it (follows). After the rename,
//     the records of base S are stale and those of base H follow the new
//     file. The journal is replaced by the records of base H only once the
//     rename is durable, so that they never stand over the old file alone,
//     where their base is above its Seq: corruption, as below.
//   - Records are appended only over a file this File read or wrote with
//     its current schema and with the journal format (2), so every record
//     has the file's schema; an older phaseshift, which would ignore the
//     journal, refuses a format-2 file (ErrNewerSchema) instead of serving
//     it without its records.
//   - A first record whose base is above the file's Seq follows a file
//     that is no longer there (an older one was put back, say .prev by
//     hand): replaying it over another base would invent state, so it is
//     corruption, and so is a record that follows neither the file, nor
//     the records before it, nor the seq they reached.
const (
	journalVersion = 1
	// formatJournal is the file format written with the journal (the
	// default): the layout of format 1, with a number older readers
	// refuse.
	formatJournal = 2

	recordStart   = `{"journal":1,"base":`
	recordChanges = `,"changes":[`
	recordSumHead = `],"crc32c":"`
	recordSumTail = "\"}\n"
	deleteStart   = `{"delete":`
)

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
	return c.cfg.journal && c.last.exists && !c.jdirty &&
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
		c.jdirty, c.jmay = true, true
		return false, nil
	}
	if err != nil {
		// The journal may now hold part of the record, or all of it
		// unacknowledged: it is not appended to again.
		c.jdirty, c.jmay = true, true
		return true, c.failed(err)
	}
	c.head, c.jmay = meta.Seq, true
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
	c.jbase = res.snap.Meta.Seq
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

// record is a parsed journal line.
type record struct {
	base, seq uint64
	schema    int
	meta      Meta     // Phase, Writer, BootID, Behind, SavedAt
	ops       [][]byte // sub-slices of the line
}

// recordHeader is the JSON form of a record's fields before its changes;
// pointers tell missing fields.
type recordHeader struct {
	Journal *int            `json:"journal"`
	Base    *uint64         `json:"base"`
	Seq     *uint64         `json:"seq"`
	Schema  *int            `json:"schema"`
	Phase   string          `json:"phase"`
	Writer  string          `json:"writer"`
	BootID  string          `json:"bootID"`
	Behind  string          `json:"behind"`
	SavedAt json.RawMessage `json:"savedAt"`
}

// appendRecord appends the line of a commit: base is the file's Seq, m the
// new state's Meta (Seq, Schema and the caller's fields), ops the put
// lines and delete ops in order.
func appendRecord(dst []byte, base uint64, m Meta, ops [][]byte) []byte {
	start := len(dst)
	dst = append(dst, recordStart...)
	dst = strconv.AppendUint(dst, base, 10)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, m.Seq, 10)
	dst = append(dst, `,"schema":`...)
	dst = strconv.AppendInt(dst, int64(m.Schema), 10)
	dst = append(dst, `,"phase":`...)
	dst = appendString(dst, m.Phase)
	dst = append(dst, `,"writer":`...)
	dst = appendString(dst, m.Writer)
	dst = append(dst, `,"bootID":`...)
	dst = appendString(dst, m.BootID)
	if m.Behind != "" {
		dst = append(dst, `,"behind":`...)
		dst = appendString(dst, m.Behind)
	}
	dst = append(dst, `,"savedAt":"`...)
	dst = m.SavedAt.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, '"')
	dst = append(dst, recordChanges...)
	for i, op := range ops {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, op...)
	}
	dst = append(dst, ']')
	sum := crc32.Checksum(dst[start:], castagnoli)
	dst = append(dst, recordSumHead[1:]...)
	dst = hex.AppendEncode(dst, []byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
	return append(dst, recordSumTail...)
}

// deleteOp returns the op that deletes the entry whose line is line.
func deleteOp(line []byte) []byte {
	op := make([]byte, 0, len(deleteStart)+len(line)+1)
	op = append(op, deleteStart...)
	op = append(op, line...)
	return append(op, '}')
}

// parseRecord checks one journal line (without its newline) and decodes
// its header; the ops stay raw. Its errors never quote the line.
func parseRecord(line []byte) (record, error) {
	var r record
	const trailer = len(recordSumHead) - 1 + 8 + len(recordSumTail) - 1 // `,"crc32c":"` hex `"}`
	if len(line) < len(recordStart)+trailer || !bytes.HasPrefix(line, []byte(recordStart)) {
		return r, errors.New("not a journal record")
	}
	body, tail := line[:len(line)-trailer], line[len(line)-trailer:]
	if !bytes.HasPrefix(tail, []byte(recordSumHead[1:])) || !bytes.HasSuffix(tail, []byte(`"}`)) {
		return r, errors.New("its checksum is missing")
	}
	hexSum := tail[len(recordSumHead)-1 : len(recordSumHead)-1+8]
	var want [4]byte
	if _, err := hex.Decode(want[:], hexSum); err != nil || !bytes.Equal(bytes.ToLower(hexSum), hexSum) {
		return r, errors.New("its checksum is not 8 lowercase hex digits")
	}
	if crc32.Checksum(body, castagnoli) != uint32(want[0])<<24|uint32(want[1])<<16|uint32(want[2])<<8|uint32(want[3]) {
		return r, errors.New("checksum mismatch")
	}
	// A raw `,"changes":[` cannot occur inside a JSON string (its quotes
	// would be escaped), so the first one ends the header: the header is
	// decoded alone, and the changes are cut apart without decoding them
	// (each is decoded once, by the applier).
	at := bytes.Index(body, []byte(recordChanges))
	if at < 0 || body[len(body)-1] != ']' {
		return r, errors.New("it has no list of changes")
	}
	var j recordHeader
	dec := json.NewDecoder(io.MultiReader(bytes.NewReader(body[:at]), strings.NewReader("}")))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return r, fmt.Errorf("its header is not valid: %s", jsonvalue.DecodeFailure(err))
	}
	ops, err := splitOps(body[at+len(recordChanges) : len(body)-1])
	if err != nil {
		return r, err
	}
	if j.Journal == nil || j.Base == nil || j.Seq == nil || j.Schema == nil {
		return r, errors.New("it lacks journal, base, seq or schema")
	}
	if *j.Journal != journalVersion {
		return r, fmt.Errorf("journal version %d is not %d", *j.Journal, journalVersion)
	}
	r = record{base: *j.Base, seq: *j.Seq, schema: *j.Schema, ops: ops,
		meta: Meta{Phase: j.Phase, Writer: j.Writer, BootID: j.BootID, Behind: j.Behind}}
	if len(j.SavedAt) > 0 && r.meta.SavedAt.UnmarshalJSON(j.SavedAt) != nil {
		return r, errors.New("its savedAt is not an RFC 3339 time")
	}
	if max(r.seq, r.base) >= maxSeq {
		return r, errors.New("its seq is at or above 2^63, which no writer reaches by counting saves (see maxSeq)")
	}
	return r, nil
}

// splitOps cuts a record's list of changes at its top-level commas. It
// only tracks strings and nesting; each change is checked when it is
// decoded.
func splitOps(list []byte) ([][]byte, error) {
	if len(list) == 0 {
		return nil, nil
	}
	ops := make([][]byte, 0, 1)
	depth, start, inString, escaped := 0, 0, false, false
	for i, c := range list {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth--; depth < 0 {
				return nil, errors.New("its list of changes is not balanced")
			}
		case c == ',' && depth == 0:
			ops = append(ops, list[start:i])
			start = i + 1
		}
	}
	if inString || depth != 0 {
		return nil, errors.New("its list of changes is not balanced")
	}
	return append(ops, list[start:]), nil
}

// replayed is what replay found in a journal.
type replayed struct {
	valid   int64 // bytes up to the end of the last whole record
	records int   // records applied
	stale   int   // records skipped: the file holds them
	torn    *TornJournalError
	last    *record // the last record applied
	// base is the base of the records being applied: the file's Seq, or
	// the Seq of a compaction's snapshot that records continue from (see
	// follows).
	base uint64
}

// replay applies the journal data to r, the decoded file, in order. The
// error is nil, or wraps ErrCorrupt or ErrNewerSchema: then r is not to be
// used. Entries the journal writes that cannot be read join r.bad.
func replay[K comparable, V any](data []byte, name string, r *decodeResult[K, V], cfg *config, enc *encoder, fileEntries int) (replayed, error) {
	file := r.snap.Meta
	rp := replayed{base: file.Seq}
	ap := newApplier(r, cfg, enc, file.Schema, fileEntries)
	for off := 0; off < len(data); {
		line, next := data[off:], len(data)
		if nl := bytes.IndexByte(line, '\n'); nl >= 0 {
			line, next = line[:nl], off+nl+1
		}
		rec, err := parseRecord(line)
		if next == len(data) && (err != nil || data[len(data)-1] != '\n') {
			// The last line: a crash during its append can leave it
			// partial or damaged, and it was never acknowledged.
			reason := "it has no end of line"
			if err != nil {
				reason = err.Error()
			}
			rp.torn = &TornJournalError{Path: name, Offset: int64(off), Bytes: int64(len(data) - off), Reason: reason}
			break
		}
		if err != nil {
			return rp, corrupt("journal %s: the record at byte %d is damaged (%v) and records follow it: not what a crash leaves", name, off, err)
		}
		apply, err := rp.check(rec, file, name, off)
		if err != nil {
			return rp, err
		}
		if apply {
			ap.apply(rec)
			rp.records++
			rp.last = &rec
			rp.base = rec.base
		} else {
			rp.stale++
		}
		off = next
		rp.valid = int64(off)
	}
	return rp, ap.done()
}

// check applies the rules that tie a record to the file and to the records
// before it (see the comment at the top of this file): it reports whether
// rec is applied (false: it is stale), or why the journal is corrupt.
func (rp *replayed) check(rec record, file Meta, name string, off int) (bool, error) {
	reached := file.Seq + uint64(rp.records)
	switch {
	case follows(rec.base, rp.base, reached, rp.records > 0) && rec.seq != reached+1:
		return false, corrupt("journal %s: the record at byte %d has seq %d, want %d", name, off, rec.seq, reached+1)
	case follows(rec.base, rp.base, reached, rp.records > 0) && rec.schema != file.Schema:
		return false, corrupt("journal %s: the record at byte %d has schema %d, the checkpoint %d", name, off, rec.schema, file.Schema)
	case follows(rec.base, rp.base, reached, rp.records > 0):
		return true, nil
	case rp.records > 0:
		return false, corrupt("journal %s: the record at byte %d follows seq %d, after records that follow seq %d up to seq %d", name, off, rec.base, rp.base, reached)
	case rec.base > file.Seq:
		return false, corrupt("journal %s: the record at byte %d follows seq %d, but the checkpoint is seq %d: the checkpoint was replaced by an older file (a .prev put back?); move the journal aside to use the file alone", name, off, rec.base, file.Seq)
	}
	return false, nil // stale: folded into the file by a save the crash cut short of removing the journal
}

// follows reports whether a record of base base comes next in a replay
// whose records so far (if applied) had base prev and reached seq
// reached: its base is the file's Seq or its predecessors' (prev), or the
// seq the replay has reached, where a compaction took its snapshot and the
// records appended while it ran begin (see compact.go). A crash before
// that compaction's file was renamed into place leaves those records after
// the ones they follow, over the older file.
func follows(base, prev, reached uint64, applied bool) bool {
	return base == prev || (applied && base == reached)
}

// applier applies journal ops to a decoded file.
type applier[K comparable, V any] struct {
	r        *decodeResult[K, V]
	cfg      *config
	keys     keyRule[K]
	validate func(K, V) error
	enc      *encoder
	from     int // the file's schema
	index    int // the next op's EntryError.Index
	log      []undoStep[K]
	unknown  []EntryError
	// settled maps the JSON of a key to the index of the last change that
	// put or deleted it: an entry that could not be read (in the file, or
	// put by an earlier change) and was settled by a later change is not
	// part of the state the journal replays to.
	settled map[string]int
}

func newApplier[K comparable, V any](r *decodeResult[K, V], cfg *config, enc *encoder, from, fileEntries int) *applier[K, V] {
	validate, _ := validatorFor[K, V](cfg) // its type was checked at construction
	// The file's entries with unknown fields are judged with the journal's:
	// a later change to one's key makes it history.
	return &applier[K, V]{r: r, cfg: cfg, keys: newKeyRule[K](), validate: validate, enc: enc, from: from, index: fileEntries, unknown: r.unknown}
}

// apply applies one record's ops, in order.
func (a *applier[K, V]) apply(rec record) {
	for _, op := range rec.ops {
		i := a.index
		a.index++
		switch {
		case bytes.HasPrefix(op, []byte(deleteStart)):
			var d struct {
				Delete json.RawMessage `json:"delete"`
			}
			if err := strictUnmarshal(op, &d); err != nil || !bytes.HasPrefix(d.Delete, []byte(entryPrefix)) {
				a.r.bad = append(a.r.bad, EntryError{Index: i, Err: errors.New("a delete that is not {\"delete\":{\"key\":...,\"value\":...}}")})
				continue
			}
			a.del(i, d.Delete)
		case bytes.HasPrefix(op, []byte(entryPrefix)) && bytes.Contains(op, []byte(entryMiddle)):
			a.put(i, op)
		default:
			a.r.bad = append(a.r.bad, EntryError{Index: i, Err: errors.New("a change that is neither {\"key\":...,\"value\":...} nor {\"delete\":...}")})
		}
	}
}

// put stores the entry of line, as the file's decode would have read it.
func (a *applier[K, V]) put(i int, line []byte) {
	a.replaced(line)
	k, v, cur, err := a.decodeLine(line)
	if err == nil && a.keys.comparable != nil {
		err = a.keys.comparable(k)
	}
	if err == nil && a.validate != nil {
		if verr := a.validate(k, v); verr != nil {
			err = &rejectedError{err: verr}
		}
	}
	if err != nil {
		a.failed(i, line, err)
		return
	}
	_, stored := a.r.snap.Entries[k]
	a.r.snap.Entries[k] = v
	a.log = a.r.ents.putKnown(k, cur, stored, a.log[:0])
	a.settle(i, line)
	if a.r.upgraded != nil {
		a.r.upgraded[string(rawKeyJSON(line))] = rawKeyJSON(cur)
	}
}

// replaced removes, when the file was upgraded, the entry that the old
// key of line (an op's entry, in the file's schema) has in the current
// schema: an upgrade may derive the key from the value, so the entry a
// put replaces or a delete removes can have another key than the op's
// own upgraded one.
func (a *applier[K, V]) replaced(line []byte) {
	if a.r.upgraded == nil {
		return
	}
	old := string(rawKeyJSON(line))
	raw, ok := a.r.upgraded[old]
	if !ok {
		return
	}
	delete(a.r.upgraded, old)
	var k K
	if json.Unmarshal(raw, &k) != nil || (a.keys.comparable != nil && a.keys.comparable(k) != nil) {
		return
	}
	if _, stored := a.r.snap.Entries[k]; stored {
		delete(a.r.snap.Entries, k)
		a.log = a.r.ents.del(k, a.log[:0])
	}
}

// del removes the key of line, the entry the commit deleted.
func (a *applier[K, V]) del(i int, line []byte) {
	a.replaced(line)
	src := line
	if a.from < a.cfg.schema {
		up, err := upgradeLine(line, a.from, a.cfg)
		if err != nil {
			// The entry the delete removes is gone all the same: replaced
			// removed it if its upgrade succeeded, and if it failed, the
			// entry is history that settle keeps out of the bad entries.
			a.settle(i, line)
			return
		}
		src = up
	}
	raw := rawKeyJSON(src)
	var k K
	if err := strictUnmarshal(raw, &k); err != nil {
		_, unknown := jsonvalue.UnknownField(err)
		if unknown && !a.cfg.dropUnknown {
			// A key with a field the key type lacks was never in the
			// state as such (what put it had the field too, and is judged
			// as unknown): the delete settles it, and removes nothing
			// else (the same key without the field is another entry).
			a.settle(i, line)
			return
		}
		if !unknown {
			a.failed(i, src, &entryDecodeError{part: "key", err: err})
			return
		}
		k = *new(K)
		if err := json.Unmarshal(raw, &k); err != nil {
			a.failed(i, src, &entryDecodeError{part: "key", err: err})
			return
		}
	}
	if a.keys.comparable != nil && a.keys.comparable(k) != nil {
		return // never stored
	}
	delete(a.r.snap.Entries, k)
	a.log = a.r.ents.del(k, a.log[:0])
	a.settle(i, line)
}

// settle records that the change at index i, whose line is line, put or
// deleted its key.
func (a *applier[K, V]) settle(i int, line []byte) {
	if a.settled == nil {
		a.settled = make(map[string]int)
	}
	a.settled[string(rawKeyJSON(line))] = i
}

// done drops from the bad entries, and from those with fields the types
// lack, the ones a later change settled: only the state the journal
// replays to is held to the file's rules (a record that put a value
// WithValidate rejects, or one with a field a newer build added, which a
// later record replaced or deleted, is history, as a value the file once
// held is). An entry of that state with unknown fields fails the replay
// with ErrNewerSchema.
func (a *applier[K, V]) done() error {
	history := func(e EntryError) bool {
		last, ok := a.settled[e.raw]
		return ok && last > e.Index
	}
	if len(a.settled) > 0 {
		a.r.bad = slices.DeleteFunc(a.r.bad, history)
		a.unknown = slices.DeleteFunc(a.unknown, history)
	}
	a.r.unknown, a.r.judged = a.unknown, a.index
	return nil
}

// decodeLine decodes an entry line as the file's decode does: upgraded
// from the file's schema, unknown fields refused or (WithDropUnknownFields)
// dropped. cur is the line to keep, in the current schema. Its errors
// never quote the line.
func (a *applier[K, V]) decodeLine(line []byte) (k K, v V, cur []byte, err error) {
	src, recode := line, false
	if a.from < a.cfg.schema {
		if src, err = upgradeLine(line, a.from, a.cfg); err != nil {
			return k, v, nil, err
		}
		recode = true
	}
	var e kv[K, V]
	if err = strictUnmarshal(src, &e); err != nil {
		if _, unknown := jsonvalue.UnknownField(err); !unknown || !a.cfg.dropUnknown {
			return k, v, nil, decodeError[K](src, err)
		}
		e = kv[K, V]{}
		if err = json.Unmarshal(src, &e); err != nil {
			return k, v, nil, decodeError[K](src, err)
		}
		a.r.dropped++
		recode = true
	}
	cur = line
	if recode {
		if cur, err = encodeEntry(a.enc, &a.keys, nil, e.Key, e.Value, -1); err != nil {
			return k, v, nil, err
		}
	}
	return e.Key, e.Value, cur, nil
}

// failed records an op that cannot be read: a bad entry, or, when it has
// fields the types lack, a newer binary's. The key it wrote no longer has
// the value the file gave it, so that value is not served either.
func (a *applier[K, V]) failed(i int, line []byte, err error) {
	ee := badEntry(i, line, err)
	if cause := errors.Unwrap(err); cause != nil && isUnknownField(cause) {
		a.unknown = append(a.unknown, ee)
		return
	}
	a.r.bad = append(a.r.bad, ee)
	var k K
	if raw := rawKeyJSON(line); raw != nil && json.Unmarshal(raw, &k) == nil && (a.keys.comparable == nil || a.keys.comparable(k) == nil) {
		delete(a.r.snap.Entries, k)
		a.log = a.r.ents.del(k, a.log[:0])
	}
}

func isUnknownField(err error) bool {
	_, unknown := jsonvalue.UnknownField(err)
	return unknown
}

// putKnown is entries.put for a caller that knows whether k is stored:
// replay holds the decoded map, which is exact, so a hit in the index needs
// no decode of the line to confirm it (put's find decodes one key per
// change, which would be a third of a replay's time).
func (e *entries[K]) putKnown(k K, raw []byte, stored bool, log []undoStep[K]) []undoStep[K] {
	if !stored {
		i := int32(len(e.lines))
		e.lines = append(e.lines, raw)
		return append(log, undoStep[K]{kind: undoPop, key: k, inExact: e.insert(k, i)})
	}
	i, ok := e.exact[k] // a nil map holds nothing
	if !ok {
		// Stored and not in exact: inserted under its own hash.
		i = e.index[e.hash(k)]
	}
	log = append(log, undoStep[K]{kind: undoRestore, i: i, raw: e.lines[i]})
	e.lines[i] = raw
	return log
}
