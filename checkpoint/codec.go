package checkpoint

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/maphash"
	"io"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The file format, version 1. It is JSON that jq reads, laid out so that a
// reader can check it before parsing it and so that one entry is one line:
//
//	{
//	  "format": 1,
//	  "schema": 1,
//	  "phase": "expand",
//	  "writer": "ipamd v1.7.0",
//	  "bootID": "",
//	  "seq": 3,
//	  "savedAt": "2026-11-30T08:00:00.000000001Z",
//	  "entries": [
//	    {"key":{"network":"aws-cni","containerID":"c1","ifName":"eth0"},"value":{"ip":"10.0.0.2"}},
//	    {"key":...,"value":...}
//	  ],
//	  "checksum": "crc32c:1a2b3c4d"
//	}
//
// The checksum is CRC-32C over the exact bytes of everything before the
// checksum line. It is computed over bytes, not over Go values: kubelet's
// checkpoint manager hashed its Go types, so renaming a type changed every
// checksum and broke upgrades. CRC-32C detects every single-byte change and
// every burst error up to 32 bits, and runs at memory speed (SSE4.2), so it
// costs nothing next to the fsync; it is not a defence against someone who
// edits the file on purpose, which needs a signature, not a checksum.
//
// Entries are compact JSON, one per line. encoding/json never emits a raw
// newline inside a value (it escapes them in strings and compacts the output
// of MarshalJSON), so a line is an entry; that lets Load decode entries one
// at a time, name the one that is bad, and keep each entry's bytes to reuse
// when a later Commit leaves it unchanged.
const (
	formatVersion = 1

	fileStart     = "{\n"
	entriesStart  = "  \"entries\": [\n"
	entriesEnd    = "  ],\n"
	entryIndent   = "    "
	entryPrefix   = `{"key":`
	entryMiddle   = `,"value":`
	checksumStart = "  \"checksum\": \"crc32c:"
	checksumEnd   = "\"\n}\n"
	trailerLen    = len(checksumStart) + 8 + len(checksumEnd)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Meta describes a checkpoint file. Save fills Format, Seq and SavedAt, and
// Schema and BootID from the options; the caller sets Phase and Writer.
type Meta struct {
	Format  int       // file format version; 1
	Schema  int       // value schema version the entries were written with
	Phase   string    // rollout phase of the writer, e.g. "expand"
	Writer  string    // version of the program that wrote the file
	BootID  string    // boot in which the file was written, if recorded
	Seq     uint64    // incremented by every save; 1 for the first
	SavedAt time.Time // when the file was written
}

// Snapshot is a whole checkpoint: its Meta and every entry.
type Snapshot[K comparable, V any] struct {
	Meta    Meta
	Entries map[K]V
}

// Change is one change to a checkpoint's entries, for Commit: store Value
// under Key, or remove Key when Delete is set.
type Change[K comparable, V any] struct {
	Key    K
	Value  V
	Delete bool
}

// header is the JSON form of Meta. Pointers tell a missing field from a
// zero. SavedAt is decoded on its own, so that a bad time is reported by
// its field name rather than by time.Parse's text, which quotes it.
type header struct {
	Format  *int            `json:"format"`
	Schema  *int            `json:"schema"`
	Phase   string          `json:"phase"`
	Writer  string          `json:"writer"`
	BootID  string          `json:"bootID"`
	Seq     *uint64         `json:"seq"`
	SavedAt json.RawMessage `json:"savedAt"`
}

// kv is the typed form of one entry line.
type kv[K comparable, V any] struct {
	Key   K `json:"key"`
	Value V `json:"value"`
}

// rawKV is the untyped form of one entry line, for upgrades.
type rawKV struct {
	Key   json.RawMessage `json:"key"`
	Value json.RawMessage `json:"value"`
}

// entries is the encoded form of what a checkpoint holds on disk: each
// entry's line, and where each key's line is. Commit changes it in place
// and undoes the change if the write fails, so the bytes of unchanged
// entries are never encoded twice. A deleted line leaves a nil tombstone
// until compact.
//
// The index is keyed by a hash of the key, not by the key: at 16 bytes a
// slot, it costs a third of an index of the keys themselves, which matters
// when a restore must fit in a few times the file's size. A hit is
// verified against the key in the line (a decode of a few hundred bytes,
// per changed entry of a Commit); the astronomically rare key whose hash
// another key already has goes to exact instead.
type entries[K comparable] struct {
	lines [][]byte         // nil: deleted
	index map[uint64]int32 // hash(key) -> position in lines
	exact map[K]int32      // keys whose hash is another key's; nil until then
	dead  int              // nil lines
	hash  func(K) uint64
	key   func(line []byte) (K, bool) // the key in a line
}

func newEntries[K comparable](n int) entries[K] {
	seed := maphash.MakeSeed()
	return entries[K]{
		lines: make([][]byte, 0, n),
		index: make(map[uint64]int32, n),
		hash:  func(k K) uint64 { return maphash.Comparable(seed, k) },
		key:   lineKey[K],
	}
}

// lineKey decodes the key of an entry line.
func lineKey[K comparable](line []byte) (K, bool) {
	var e struct {
		Key K `json:"key"`
	}
	err := json.Unmarshal(line, &e)
	return e.Key, err == nil
}

// find returns where k's line is.
func (e *entries[K]) find(k K) (i int32, inExact, ok bool) {
	if e.exact != nil {
		if i, ok := e.exact[k]; ok {
			return i, true, true
		}
	}
	i, ok = e.index[e.hash(k)]
	if !ok {
		return 0, false, false
	}
	if lk, ok := e.key(e.lines[i]); !ok || lk != k {
		return 0, false, false // another key with the same hash
	}
	return i, false, true
}

// insert records that k's line is at i.
func (e *entries[K]) insert(k K, i int32) (inExact bool) {
	h := e.hash(k)
	if _, taken := e.index[h]; taken {
		if e.exact == nil {
			e.exact = make(map[K]int32)
		}
		e.exact[k] = i
		return true
	}
	e.index[h] = i
	return false
}

func (e *entries[K]) forget(k K, inExact bool) {
	if inExact {
		delete(e.exact, k)
	} else {
		delete(e.index, e.hash(k))
	}
}

// undoStep reverses one applied change.
type undoStep[K comparable] struct {
	kind    int // undoPop, undoRestore, undoRevive
	i       int32
	key     K
	raw     []byte
	inExact bool
}

const (
	undoPop     = iota // key was appended: remove it
	undoRestore        // lines[i] was replaced: put raw back
	undoRevive         // key at i was deleted: bring it back
)

// put stores raw under k and records how to undo it.
func (e *entries[K]) put(k K, raw []byte, log []undoStep[K]) []undoStep[K] {
	if i, _, ok := e.find(k); ok {
		log = append(log, undoStep[K]{kind: undoRestore, i: i, raw: e.lines[i]})
		e.lines[i] = raw
		return log
	}
	i := int32(len(e.lines))
	e.lines = append(e.lines, raw)
	return append(log, undoStep[K]{kind: undoPop, key: k, inExact: e.insert(k, i)})
}

// del removes k and records how to undo it.
func (e *entries[K]) del(k K, log []undoStep[K]) []undoStep[K] {
	i, inExact, ok := e.find(k)
	if !ok {
		return log
	}
	log = append(log, undoStep[K]{kind: undoRevive, i: i, key: k, raw: e.lines[i], inExact: inExact})
	e.lines[i] = nil
	e.forget(k, inExact)
	e.dead++
	return log
}

// undo reverses log, newest first.
func (e *entries[K]) undo(log []undoStep[K]) {
	for j := len(log) - 1; j >= 0; j-- {
		s := log[j]
		switch s.kind {
		case undoPop:
			e.forget(s.key, s.inExact)
			e.lines[len(e.lines)-1] = nil
			e.lines = e.lines[:len(e.lines)-1]
		case undoRestore:
			e.lines[s.i] = s.raw
		case undoRevive:
			e.lines[s.i] = s.raw
			if s.inExact {
				e.exact[s.key] = s.i
			} else {
				e.index[e.hash(s.key)] = s.i
			}
			e.dead--
		}
	}
}

// compact drops the tombstones once they are a quarter of the lines, so
// that deletes cost O(1) amortised and the lines do not grow without bound.
func (e *entries[K]) compact() {
	if e.dead < 64 || e.dead*4 < len(e.lines) {
		return
	}
	moved := make([]int32, len(e.lines))
	live := e.lines[:0]
	for i, l := range e.lines {
		if l != nil {
			moved[i] = int32(len(live))
			live = append(live, l)
		}
	}
	clear(e.lines[len(live):])
	e.lines, e.dead = live, 0
	for h, i := range e.index {
		e.index[h] = moved[i]
	}
	for k, i := range e.exact {
		e.exact[k] = moved[i]
	}
}

// encoder turns keys and values into entry lines. It reuses one buffer and
// one json.Encoder, so encoding allocates only the line it returns.
type encoder struct {
	scratch bytes.Buffer
	enc     *json.Encoder
}

func newEncoder() *encoder {
	e := &encoder{}
	e.enc = json.NewEncoder(&e.scratch)
	// Values are data, not HTML; escaping <, > and & only makes the file
	// harder to read.
	e.enc.SetEscapeHTML(false)
	return e
}

// appendJSON appends v's compact JSON to dst.
func (e *encoder) appendJSON(dst []byte, v any) ([]byte, error) {
	e.scratch.Reset()
	if err := e.enc.Encode(v); err != nil {
		return dst, err
	}
	return append(dst, bytes.TrimSuffix(e.scratch.Bytes(), []byte{'\n'})...), nil
}

// encodeEntry appends the line for k and v (without indent or comma) to
// dst, after checking that k reads back as itself. On error dst is
// returned as it was, and the error is an *EncodeError for the entry at
// index (-1 for Save).
func encodeEntry[K comparable, V any](e *encoder, keys *keyRule[K], dst []byte, k K, v V, index int) ([]byte, error) {
	start := len(dst)
	dst = append(dst, entryPrefix...)
	keyAt := len(dst)
	dst, err := e.appendJSON(dst, k)
	if err != nil {
		return dst[:start], &EncodeError{Key: k, Index: index, InKey: true, Reason: "cannot be encoded: " + encodeFailure(err), Err: err, typ: keys.typ}
	}
	if why, err := keys.check(k, dst[keyAt:]); why != "" {
		return dst[:start], &EncodeError{Key: k, Index: index, InKey: true, Reason: why, Err: err, typ: keys.typ}
	}
	keyEnd := len(dst)
	dst = append(dst, entryMiddle...)
	if dst, err = e.appendJSON(dst, v); err != nil {
		return dst[:start], &EncodeError{Key: k, Index: index, Reason: encodeFailure(err), Err: err, typ: reflect.TypeFor[V]().String(), keyJSON: shorten(dst[keyAt:keyEnd])}
	}
	return append(dst, '}'), nil
}

// shorten returns a key's JSON for a message, cut at 200 bytes.
func shorten(js []byte) string {
	const max = 200
	if len(js) > max {
		return string(js[:max]) + "..."
	}
	return string(js)
}

// appendFile appends a whole file: the header for m, every line in raws
// (nil lines are deleted ones, skipped), and the checksum trailer.
func appendFile(dst []byte, m Meta, raws [][]byte) []byte {
	start := len(dst)
	dst = append(dst, fileStart...)
	dst = append(dst, `  "format": `...)
	dst = strconv.AppendInt(dst, int64(m.Format), 10)
	dst = append(dst, ",\n  \"schema\": "...)
	dst = strconv.AppendInt(dst, int64(m.Schema), 10)
	dst = append(dst, ",\n  \"phase\": "...)
	dst = appendString(dst, m.Phase)
	dst = append(dst, ",\n  \"writer\": "...)
	dst = appendString(dst, m.Writer)
	dst = append(dst, ",\n  \"bootID\": "...)
	dst = appendString(dst, m.BootID)
	dst = append(dst, ",\n  \"seq\": "...)
	dst = strconv.AppendUint(dst, m.Seq, 10)
	dst = append(dst, ",\n  \"savedAt\": \""...)
	dst = m.SavedAt.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, "\",\n"...)
	dst = append(dst, entriesStart...)
	first := true
	for _, raw := range raws {
		if raw == nil {
			continue // deleted
		}
		if !first {
			dst = append(dst, ",\n"...)
		}
		first = false
		dst = append(dst, entryIndent...)
		dst = append(dst, raw...)
	}
	if !first {
		dst = append(dst, '\n')
	}
	dst = append(dst, entriesEnd...)
	sum := crc32.Checksum(dst[start:], castagnoli)
	dst = append(dst, checksumStart...)
	dst = hex.AppendEncode(dst, []byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
	return append(dst, checksumEnd...)
}

func appendString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return append(dst, b...)
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// parsed is a checked file: its meta and the lines of its entries (sub-slices
// of the file's bytes).
type parsed struct {
	meta  Meta
	lines [][]byte
}

// parse checks the checksum and the layout of data and splits it into meta
// and entry lines. It never decodes an entry.
func parse(data []byte) (parsed, error) {
	var p parsed
	body, err := checkSum(data)
	if err != nil {
		return p, err
	}
	// From here on the bytes are what a writer produced; a layout error
	// means a writer bug, and is still reported, never trusted.
	if !bytes.HasPrefix(body, []byte(fileStart)) {
		return p, corrupt("the file does not start with %q", fileStart)
	}
	// A raw newline cannot occur inside a JSON string, so the first
	// "\n" + entriesStart is the entry list.
	i := bytes.Index(body, []byte("\n"+entriesStart))
	if i < 0 || !bytes.HasSuffix(body, []byte(entriesEnd)) {
		return p, corrupt("the entries list is missing")
	}
	if p.meta, err = parseHeader(body[:i]); err != nil {
		return p, err
	}
	p.lines, err = splitEntries(body[i+1+len(entriesStart) : len(body)-len(entriesEnd)])
	return p, err
}

// checkSum checks the checksum trailer of data and returns what it covers.
func checkSum(data []byte) ([]byte, error) {
	if len(data) == 0 {
		return nil, corrupt("the file is empty")
	}
	if len(data) < len(fileStart)+len(entriesStart)+len(entriesEnd)+trailerLen {
		return nil, corrupt("the file is truncated: %d bytes is too short to be a checkpoint", len(data))
	}
	body, trailer := data[:len(data)-trailerLen], data[len(data)-trailerLen:]
	if !bytes.HasPrefix(trailer, []byte(checksumStart)) || !bytes.HasSuffix(trailer, []byte(checksumEnd)) {
		return nil, corrupt("the checksum line is missing or malformed: the file is truncated or was edited")
	}
	hexSum := trailer[len(checksumStart) : len(checksumStart)+8]
	var want [4]byte
	if _, err := hex.Decode(want[:], hexSum); err != nil || !bytes.Equal(bytes.ToLower(hexSum), hexSum) {
		return nil, corrupt("the checksum %q is not 8 lowercase hex digits", hexSum)
	}
	got := crc32.Checksum(body, castagnoli)
	if got != uint32(want[0])<<24|uint32(want[1])<<16|uint32(want[2])<<8|uint32(want[3]) {
		return nil, corrupt("checksum mismatch: the file says crc32c:%s, its content hashes to crc32c:%08x (torn write, bit rot or a hand edit)", hexSum, got)
	}
	return body, nil
}

// parseHeader decodes the header, head being the file up to the entries
// list. Its errors never quote the header's content.
func parseHeader(head []byte) (Meta, error) {
	if !bytes.HasSuffix(head, []byte(",")) {
		return Meta{}, corrupt("the header does not end before the entries list")
	}
	var h header
	hdec := json.NewDecoder(bytes.NewReader(append(head[:len(head)-1:len(head)-1], "\n}"...)))
	hdec.DisallowUnknownFields()
	if err := hdec.Decode(&h); err != nil {
		return Meta{}, corrupt("the header is not valid: %s", decodeFailure(err))
	}
	if h.Format == nil || h.Schema == nil || h.Seq == nil {
		return Meta{}, corrupt("the header lacks format, schema or seq")
	}
	var savedAt time.Time
	if len(h.SavedAt) > 0 && savedAt.UnmarshalJSON(h.SavedAt) != nil {
		return Meta{}, corrupt("the header is not valid: savedAt is not an RFC 3339 time")
	}
	m := Meta{Format: *h.Format, Schema: *h.Schema, Phase: h.Phase, Writer: h.Writer, BootID: h.BootID, Seq: *h.Seq, SavedAt: savedAt}
	if m.Format > formatVersion {
		return m, fmt.Errorf("%w: the file format is %d and this library reads up to %d: it was written by a newer phaseshift; upgrade the binary or quarantine the file", ErrNewerSchema, m.Format, formatVersion)
	}
	if m.Format < 1 {
		return m, corrupt("format %d is not a checkpoint format", m.Format)
	}
	return m, nil
}

// splitEntries cuts the entries list into entry lines, checking the
// layout the writer uses; it decodes nothing.
func splitEntries(list []byte) ([][]byte, error) {
	if len(list) == 0 {
		return nil, nil
	}
	if list[len(list)-1] != '\n' {
		return nil, corrupt("the entries list does not end with a newline")
	}
	list = list[:len(list)-1]
	lines := make([][]byte, 0, bytes.Count(list, []byte{'\n'})+1)
	for len(list) > 0 {
		line := list
		rest := []byte(nil)
		if j := bytes.IndexByte(list, '\n'); j >= 0 {
			line, rest = list[:j], list[j+1:]
		}
		last := rest == nil
		if !bytes.HasPrefix(line, []byte(entryIndent)) {
			return nil, corrupt("entry %d is not indented as the writer does", len(lines))
		}
		line = line[len(entryIndent):]
		if !last {
			if !bytes.HasSuffix(line, []byte(",")) {
				return nil, corrupt("entry %d is not followed by a comma", len(lines))
			}
			line = line[:len(line)-1]
		}
		if !bytes.HasPrefix(line, []byte(entryPrefix)) || !bytes.HasSuffix(line, []byte("}")) || !bytes.Contains(line, []byte(entryMiddle)) {
			return nil, corrupt("entry %d is not a {\"key\":...,\"value\":...} object", len(lines))
		}
		lines = append(lines, line)
		list = rest
	}
	return lines, nil
}

// decodeResult is what decode learned from a file.
type decodeResult[K comparable, V any] struct {
	snap    Snapshot[K, V]
	ents    entries[K] // the file's entries as lines, for later Commits
	bad     []EntryError
	dropped int // entries whose unknown fields were dropped (WithDropUnknownFields)
}

// decode checks data and decodes every entry. Entries that fail to decode or
// upgrade are collected in bad; the others are in snap. The error is nil,
// or wraps ErrCorrupt, ErrNewerSchema or ErrOlderSchema (and then nothing
// but the Meta is valid). Entries with fields the key or value type does
// not have make the error ErrNewerSchema, unless the config drops them.
func decode[K comparable, V any](data []byte, cfg *config, enc *encoder) (decodeResult[K, V], error) {
	var r decodeResult[K, V]
	p, err := parse(data)
	// The header is worth returning even when the entries are not: a
	// reader that meets a newer file still learns who wrote it.
	r.snap.Meta = p.meta
	if err != nil {
		return r, err
	}
	if p.meta.Schema > cfg.schema {
		return r, fmt.Errorf("%w: the file has schema %d and this binary knows up to %d: it was written by a newer version; upgrade, or quarantine the file to start over", ErrNewerSchema, p.meta.Schema, cfg.schema)
	}
	if p.meta.Schema < 1 {
		return r, corrupt("schema %d is not a valid schema version", p.meta.Schema)
	}
	upgrading := p.meta.Schema < cfg.schema
	if upgrading && cfg.upgrades[p.meta.Schema] == nil {
		return r, fmt.Errorf("%w: the file has schema %d, this binary writes %d and has no upgrade from %d", ErrOlderSchema, p.meta.Schema, cfg.schema, p.meta.Schema)
	}

	n := len(p.lines)
	r.snap.Entries = make(map[K]V, n)
	r.ents = newEntries[K](n)
	r.ents.lines = r.ents.lines[:n]
	// Decoding is nearly all of a restore's time and parallelises well:
	// the lines are independent. Only the inserts share the maps.
	workers := 1
	if n >= parallelDecodeMin && !upgrading {
		workers = min(runtime.GOMAXPROCS(0), maxDecodeWorkers)
	}
	sh := &shared[K, V]{r: &r}
	keys := newKeyRule[K]()
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for w := 0; w < workers; w++ {
		lo, hi := w*per, min((w+1)*per, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			wk := &worker[K, V]{cfg: cfg, keys: &keys, sh: sh, batch: make([]decoded[K, V], 0, insertBatch)}
			if upgrading {
				wk.enc = enc
				wk.decodeUpgrading(p.lines, p.meta.Schema)
			} else {
				wk.decodeRange(p.lines, lo, hi)
			}
			wk.done()
		}()
	}
	wg.Wait()
	r.ents.dead = len(r.bad) + len(sh.unknown)
	slices.SortFunc(r.bad, func(a, b EntryError) int { return a.Index - b.Index })
	if len(sh.unknown) > 0 {
		slices.SortFunc(sh.unknown, func(a, b EntryError) int { return a.Index - b.Index })
		return decodeResult[K, V]{snap: Snapshot[K, V]{Meta: p.meta}}, &unknownFieldsError{first: sh.unknown[0], count: len(sh.unknown), total: n}
	}
	return r, nil
}

// shared is what decode's workers add to.
type shared[K comparable, V any] struct {
	mu      sync.Mutex // guards r.snap.Entries, r.ents.index, r.bad, r.dropped and unknown
	r       *decodeResult[K, V]
	unknown []EntryError // entries with unknown fields, when they are not dropped
}

// worker decodes a share of a file's lines; each goroutine of decode has
// its own.
type worker[K comparable, V any] struct {
	cfg  *config
	keys *keyRule[K]
	enc  *encoder // for lines re-encoded (upgraded, or fields dropped); made on first use
	sh   *shared[K, V]
	// Inserts go to the shared maps in batches: one lock per batch, not
	// per entry, keeps the workers out of each other's way.
	batch        []decoded[K, V]
	bad, unknown []EntryError
	dropped      int
}

func (w *worker[K, V]) flush() {
	r := w.sh.r
	w.sh.mu.Lock()
	for _, d := range w.batch {
		if _, dup := r.snap.Entries[d.key]; dup {
			w.bad = append(w.bad, EntryError{Index: d.i, Key: rawKey(d.line), Err: errors.New("the key appears twice")})
			continue
		}
		r.snap.Entries[d.key] = d.val
		r.ents.insert(d.key, int32(d.i))
		r.ents.lines[d.i] = d.line
	}
	w.sh.mu.Unlock()
	clear(w.batch) // drop the references the maps now hold
	w.batch = w.batch[:0]
}

// done hands what the worker found to the shared result.
func (w *worker[K, V]) done() {
	w.flush()
	w.sh.mu.Lock()
	defer w.sh.mu.Unlock()
	w.sh.r.bad = append(w.sh.r.bad, w.bad...)
	w.sh.r.dropped += w.dropped
	w.sh.unknown = append(w.sh.unknown, w.unknown...)
}

// keep queues a decoded entry for the maps.
func (w *worker[K, V]) keep(i int, line []byte, k K, v V) {
	if w.keys.comparable != nil {
		if err := w.keys.comparable(k); err != nil {
			w.bad = append(w.bad, EntryError{Index: i, Key: rawKey(line), Err: err})
			return
		}
	}
	w.batch = append(w.batch, decoded[K, V]{i: i, line: line, key: k, val: v})
	if len(w.batch) == cap(w.batch) {
		w.flush()
	}
}

// failed records line i, which did not decode with err. Unknown fields
// make the entry a newer binary's, unless the config drops them: then the
// line is decoded again without the check and kept, re-encoded without
// them, so that the next save writes it without them too.
func (w *worker[K, V]) failed(i int, line []byte, err error) {
	if _, unknown := unknownField(err); !unknown {
		w.bad = append(w.bad, EntryError{Index: i, Key: rawKey(line), Err: decodeError[K](line, err)})
		return
	}
	if !w.cfg.dropUnknown {
		w.unknown = append(w.unknown, EntryError{Index: i, Key: rawKey(line), Err: decodeError[K](line, err)})
		return
	}
	var e kv[K, V]
	if err := json.Unmarshal(line, &e); err != nil {
		w.bad = append(w.bad, EntryError{Index: i, Key: rawKey(line), Err: decodeError[K](line, err)})
		return
	}
	if w.enc == nil {
		w.enc = newEncoder()
	}
	cur, err := encodeEntry(w.enc, w.keys, nil, e.Key, e.Value, -1)
	if err != nil {
		w.bad = append(w.bad, EntryError{Index: i, Key: rawKey(line), Err: err})
		return
	}
	w.dropped++
	w.keep(i, cur, e.Key, e.Value)
}

// decodeRange decodes lines[lo:hi] with one json.Decoder: unlike
// json.Unmarshal per line, it reuses its decoding state, so the only
// allocations are the decoded values themselves. The stream it reads is the
// lines separated by newlines; a line that does not hold exactly one value
// is an error for that line, and decoding goes on from the next one.
//
// The decoder refuses fields the types do not have (DisallowUnknownFields),
// which costs nothing for the fields they do have.
func (w *worker[K, V]) decodeRange(lines [][]byte, lo, hi int) {
	for lo < hi {
		dec := json.NewDecoder(&lineReader{lines: lines[lo:hi]})
		dec.DisallowUnknownFields()
		var end int64
		var e kv[K, V]
		i := lo
		for ; i < hi; i++ {
			line := lines[i]
			end += int64(len(line))
			e = kv[K, V]{} // decoding into a used value would merge maps and slices
			err := dec.Decode(&e)
			if err == nil && dec.InputOffset() != end {
				w.bad = append(w.bad, EntryError{Index: i, Key: rawKey(line), Err: errors.New("not exactly one JSON value")})
				break // out of step: a new decoder from the next line
			}
			if err != nil {
				w.failed(i, line, err)
				// A decoder that read the whole value before failing (a
				// type error, an unknown field, a failing UnmarshalJSON)
				// is in step; one that met bad JSON is not, and keeps
				// failing.
				var se *json.SyntaxError
				if errors.As(err, &se) || dec.InputOffset() != end {
					break
				}
				end++
				continue
			}
			end++ // the newline
			w.keep(i, line, e.Key, e.Value)
		}
		lo = i + 1
	}
}

// decodeUpgrading decodes every line after running the upgrade chain on it.
func (w *worker[K, V]) decodeUpgrading(lines [][]byte, from int) {
	for i, line := range lines {
		up, err := upgradeLine(line, from, w.cfg)
		if err != nil {
			w.bad = append(w.bad, EntryError{Index: i, Key: rawKey(line), Err: err})
			continue
		}
		var e kv[K, V]
		if err := strictUnmarshal(up, &e); err != nil {
			w.failed(i, up, err)
			continue
		}
		// Keep the current schema's bytes, so a later Commit writes the
		// upgraded form.
		cur, err := encodeEntry(w.enc, w.keys, nil, e.Key, e.Value, -1)
		if err != nil {
			w.bad = append(w.bad, EntryError{Index: i, Key: rawKey(up), Err: err})
			continue
		}
		w.keep(i, cur, e.Key, e.Value)
	}
}

// strictUnmarshal is json.Unmarshal that refuses fields v does not have.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("not exactly one JSON value")
	}
	return nil
}

// lineReader streams lines, each followed by a newline.
type lineReader struct {
	lines [][]byte
	i     int // current line
	off   int // bytes of it already read; len(line) means its newline is next
}

func (r *lineReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && r.i < len(r.lines) {
		l := r.lines[r.i]
		if r.off < len(l) {
			c := copy(p[n:], l[r.off:])
			n += c
			r.off += c
			continue
		}
		p[n] = '\n'
		n++
		r.i, r.off = r.i+1, 0
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// Decoding runs in parallel from this many entries on, with at most this
// many goroutines, which insert what they decoded this many at a time.
const (
	parallelDecodeMin = 2048
	maxDecodeWorkers  = 8
	insertBatch       = 512
)

// hashableCheck returns, for a key type that holds an interface, a check
// that a decoded key can be a map key: JSON decodes an object into a map,
// and a map inside an interface key would panic the insert. For other key
// types it returns nil: every value of them is hashable.
func hashableCheck[K comparable]() func(K) error {
	if !holdsInterface(reflect.TypeFor[K](), 0) {
		return nil
	}
	return func(k K) error {
		if !reflect.ValueOf(&k).Elem().Comparable() {
			return errors.New("the key holds a value that cannot be a map key (an object or a list where the key type has an interface)")
		}
		return nil
	}
}

func holdsInterface(t reflect.Type, depth int) bool {
	if depth > 32 {
		return true
	}
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.Array:
		return holdsInterface(t.Elem(), depth+1)
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if holdsInterface(t.Field(i).Type, depth+1) {
				return true
			}
		}
	}
	return false
}

// decoded is an entry on its way into the maps.
type decoded[K comparable, V any] struct {
	i    int
	line []byte
	key  K
	val  V
}

// upgradeLine runs the upgrade chain from schema from to the current one.
func upgradeLine(line []byte, from int, cfg *config) ([]byte, error) {
	var raw rawKV
	if err := json.Unmarshal(line, &raw); err != nil {
		return nil, &entryDecodeError{part: "entry", err: err}
	}
	for v := from; v < cfg.schema; v++ {
		k, val, err := cfg.upgrades[v](raw.Key, raw.Value)
		if err != nil {
			return nil, fmt.Errorf("upgrade from schema %d to %d: %w", v, v+1, err)
		}
		if !json.Valid(k) || !json.Valid(val) {
			return nil, fmt.Errorf("upgrade from schema %d to %d returned invalid JSON", v, v+1)
		}
		raw.Key, raw.Value = k, val
	}
	var b bytes.Buffer
	b.WriteString(entryPrefix)
	if err := json.Compact(&b, raw.Key); err != nil {
		return nil, &entryDecodeError{part: "upgraded key", err: err}
	}
	b.WriteString(entryMiddle)
	if err := json.Compact(&b, raw.Value); err != nil {
		return nil, &entryDecodeError{part: "upgraded value", err: err}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// rawKeyJSON returns the JSON of an entry line's key, or nil. It reads the
// key alone, so it finds the key of a line whose value is broken.
func rawKeyJSON(line []byte) json.RawMessage {
	if !bytes.HasPrefix(line, []byte(entryPrefix)) {
		return nil
	}
	var k json.RawMessage
	if json.NewDecoder(bytes.NewReader(line[len(entryPrefix):])).Decode(&k) != nil {
		return nil
	}
	return k
}

// rawKey returns the key of an entry line as text, for error messages. It
// never returns the value.
func rawKey(line []byte) string { return shorten(rawKeyJSON(line)) }
