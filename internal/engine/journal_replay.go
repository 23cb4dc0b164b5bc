package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/phaseshift/phaseshift/internal/jsonvalue"
)

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
			return rp, &ReplayError{Path: name, Offset: int64(off), Bytes: int64(next - off), Damaged: err,
				Reason: fmt.Sprintf("is damaged (%v) and records follow it: not what a crash leaves", err)}
		}
		apply, why := rp.check(rec, file)
		if why != "" {
			return rp, &ReplayError{Path: name, Offset: int64(off), Bytes: int64(next - off), Seq: rec.seq, Reason: why}
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
// before it (see journal_format.go): it reports whether rec is applied
// (false: it is stale), or why the journal is corrupt, in the words of a
// ReplayError's Reason.
func (rp *replayed) check(rec record, file Meta) (apply bool, why string) {
	reached := file.Seq + uint64(rp.records)
	switch {
	case follows(rec.base, rp.base, reached, rp.records > 0) && rec.seq != reached+1:
		return false, fmt.Sprintf("has seq %d, want %d", rec.seq, reached+1)
	case follows(rec.base, rp.base, reached, rp.records > 0) && rec.schema != file.Schema:
		return false, fmt.Sprintf("has schema %d, the checkpoint %d", rec.schema, file.Schema)
	case follows(rec.base, rp.base, reached, rp.records > 0):
		return true, ""
	case rp.records > 0:
		return false, fmt.Sprintf("follows seq %d, after records that follow seq %d up to seq %d", rec.base, rp.base, reached)
	case rec.base > file.Seq:
		return false, fmt.Sprintf("follows seq %d, but the checkpoint is seq %d: the checkpoint was replaced by an older file (a .prev put back?); move the journal aside to use the file alone", rec.base, file.Seq)
	}
	return false, "" // stale: folded into the file by a save the crash cut short of removing the journal
}

// ReplayError is why a replay refused a journal: the record at Offset,
// Bytes long (its end of line included), is damaged before the last
// record, or does not follow the file or the records before it. Seq is the
// record's seq when its header reads (0 when Damaged is set). Reason says
// why, naming seqs and never a key or a value; the phaseshift command's
// inspect shows it. It matches ErrCorrupt.
type ReplayError struct {
	Path          string // the journal
	Offset, Bytes int64
	Seq           uint64
	Reason        string
	Damaged       error // why the record does not parse, when it does not
}

func (e *ReplayError) Error() string {
	return fmt.Sprintf("%v: journal %s: the record at byte %d %s", ErrCorrupt, e.Path, e.Offset, e.Reason)
}

// Is makes a ReplayError match ErrCorrupt.
func (e *ReplayError) Is(target error) bool { return target == ErrCorrupt }

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
			a.failed(i, src, keyDecodeError[K](raw, err))
			return
		}
		k = *new(K)
		if err := json.Unmarshal(raw, &k); err != nil {
			a.failed(i, src, keyDecodeError[K](raw, err))
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
// with ErrTypeMismatch.
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
			return k, v, nil, decodeError[K, V](src, err)
		}
		e = kv[K, V]{}
		if err = json.Unmarshal(src, &e); err != nil {
			return k, v, nil, decodeError[K, V](src, err)
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
// fields the types lack, a type mismatch (unknownErr). The key it wrote no longer has
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
