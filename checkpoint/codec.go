package checkpoint

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
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

// header is the JSON form of Meta. Pointers tell a missing field from a zero.
type header struct {
	Format  *int      `json:"format"`
	Schema  *int      `json:"schema"`
	Phase   string    `json:"phase"`
	Writer  string    `json:"writer"`
	BootID  string    `json:"bootID"`
	Seq     *uint64   `json:"seq"`
	SavedAt time.Time `json:"savedAt"`
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
// entry's line, and where each key is. Commit changes it in place and undoes
// the change if the write fails, so the bytes of unchanged entries are never
// encoded twice.
type entries[K comparable] struct {
	keys  []K
	raws  [][]byte
	index map[K]int
}

func newEntries[K comparable](n int) entries[K] {
	return entries[K]{keys: make([]K, 0, n), raws: make([][]byte, 0, n), index: make(map[K]int, n)}
}

func (e *entries[K]) add(k K, raw []byte) {
	e.index[k] = len(e.keys)
	e.keys = append(e.keys, k)
	e.raws = append(e.raws, raw)
}

// undoStep reverses one applied change.
type undoStep[K comparable] struct {
	kind int // undoPop, undoRestore, undoUnswap
	i    int
	key  K
	raw  []byte
}

const (
	undoPop     = iota // a new key was appended: pop it
	undoRestore        // raws[i] was replaced: put raw back
	undoUnswap         // key at i was deleted and the last entry moved into i
)

// put stores raw under k and records how to undo it.
func (e *entries[K]) put(k K, raw []byte, log []undoStep[K]) []undoStep[K] {
	if i, ok := e.index[k]; ok {
		log = append(log, undoStep[K]{kind: undoRestore, i: i, raw: e.raws[i]})
		e.raws[i] = raw
		return log
	}
	e.add(k, raw)
	return append(log, undoStep[K]{kind: undoPop})
}

// del removes k by moving the last entry into its place (O(1); the file's
// entry order is not meaningful) and records how to undo it.
func (e *entries[K]) del(k K, log []undoStep[K]) []undoStep[K] {
	i, ok := e.index[k]
	if !ok {
		return log
	}
	log = append(log, undoStep[K]{kind: undoUnswap, i: i, key: k, raw: e.raws[i]})
	last := len(e.keys) - 1
	if i != last {
		e.keys[i], e.raws[i] = e.keys[last], e.raws[last]
		e.index[e.keys[i]] = i
	}
	var zero K
	e.keys[last], e.raws[last] = zero, nil
	e.keys, e.raws = e.keys[:last], e.raws[:last]
	delete(e.index, k)
	return log
}

// undo reverses log, newest first.
func (e *entries[K]) undo(log []undoStep[K]) {
	for j := len(log) - 1; j >= 0; j-- {
		s := log[j]
		switch s.kind {
		case undoPop:
			last := len(e.keys) - 1
			delete(e.index, e.keys[last])
			var zero K
			e.keys[last], e.raws[last] = zero, nil
			e.keys, e.raws = e.keys[:last], e.raws[:last]
		case undoRestore:
			e.raws[s.i] = s.raw
		case undoUnswap:
			if s.i == len(e.keys) {
				e.add(s.key, s.raw)
				continue
			}
			moved, movedRaw := e.keys[s.i], e.raws[s.i]
			e.keys[s.i], e.raws[s.i] = s.key, s.raw
			e.index[s.key] = s.i
			e.add(moved, movedRaw)
		}
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

// appendEntry appends the line for k and v (without indent or comma) to dst.
func (e *encoder) appendEntry(dst []byte, k, v any) ([]byte, error) {
	dst = append(dst, entryPrefix...)
	e.scratch.Reset()
	if err := e.enc.Encode(k); err != nil {
		return dst, fmt.Errorf("%w: key %v: %v", ErrEncode, k, err)
	}
	dst = append(dst, bytes.TrimSuffix(e.scratch.Bytes(), []byte{'\n'})...)
	dst = append(dst, entryMiddle...)
	e.scratch.Reset()
	if err := e.enc.Encode(v); err != nil {
		// The value itself is not printed: it may be a secret.
		return dst, fmt.Errorf("%w: value of key %v: %v", ErrEncode, k, err)
	}
	dst = append(dst, bytes.TrimSuffix(e.scratch.Bytes(), []byte{'\n'})...)
	return append(dst, '}'), nil
}

// appendFile appends a whole file: the header for m, every line in raws,
// and the checksum trailer.
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
	for i, raw := range raws {
		dst = append(dst, entryIndent...)
		dst = append(dst, raw...)
		if i < len(raws)-1 {
			dst = append(dst, ',')
		}
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
	if len(data) == 0 {
		return p, corrupt("the file is empty")
	}
	if len(data) < len(fileStart)+len(entriesStart)+len(entriesEnd)+trailerLen {
		return p, corrupt("the file is truncated: %d bytes is too short to be a checkpoint", len(data))
	}
	body, trailer := data[:len(data)-trailerLen], data[len(data)-trailerLen:]
	if !bytes.HasPrefix(trailer, []byte(checksumStart)) || !bytes.HasSuffix(trailer, []byte(checksumEnd)) {
		return p, corrupt("the checksum line is missing or malformed: the file is truncated or was edited")
	}
	hexSum := trailer[len(checksumStart) : len(checksumStart)+8]
	var want [4]byte
	if _, err := hex.Decode(want[:], hexSum); err != nil || !bytes.Equal(bytes.ToLower(hexSum), hexSum) {
		return p, corrupt("the checksum %q is not 8 lowercase hex digits", hexSum)
	}
	got := crc32.Checksum(body, castagnoli)
	if got != uint32(want[0])<<24|uint32(want[1])<<16|uint32(want[2])<<8|uint32(want[3]) {
		return p, corrupt("checksum mismatch: the file says crc32c:%s, its content hashes to crc32c:%08x (torn write, bit rot or a hand edit)", hexSum, got)
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
	head := body[:i]
	if !bytes.HasSuffix(head, []byte(",")) {
		return p, corrupt("the header does not end before the entries list")
	}
	var h header
	hdec := json.NewDecoder(bytes.NewReader(append(head[:len(head)-1:len(head)-1], "\n}"...)))
	hdec.DisallowUnknownFields()
	if err := hdec.Decode(&h); err != nil {
		return p, corrupt("the header is not valid: %v", err)
	}
	if h.Format == nil || h.Schema == nil || h.Seq == nil {
		return p, corrupt("the header lacks format, schema or seq")
	}
	p.meta = Meta{Format: *h.Format, Schema: *h.Schema, Phase: h.Phase, Writer: h.Writer, BootID: h.BootID, Seq: *h.Seq, SavedAt: h.SavedAt}
	if p.meta.Format > formatVersion {
		return p, fmt.Errorf("%w: the file format is %d and this library reads up to %d: it was written by a newer phaseshift; upgrade the binary or quarantine the file", ErrNewerSchema, p.meta.Format, formatVersion)
	}
	if p.meta.Format < 1 {
		return p, corrupt("format %d is not a checkpoint format", p.meta.Format)
	}

	list := body[i+1+len(entriesStart) : len(body)-len(entriesEnd)]
	if len(list) == 0 {
		return p, nil
	}
	if list[len(list)-1] != '\n' {
		return p, corrupt("the entries list does not end with a newline")
	}
	list = list[:len(list)-1]
	p.lines = make([][]byte, 0, bytes.Count(list, []byte{'\n'})+1)
	for len(list) > 0 {
		line := list
		rest := []byte(nil)
		if j := bytes.IndexByte(list, '\n'); j >= 0 {
			line, rest = list[:j], list[j+1:]
		}
		last := rest == nil
		if !bytes.HasPrefix(line, []byte(entryIndent)) {
			return p, corrupt("entry %d is not indented as the writer does", len(p.lines))
		}
		line = line[len(entryIndent):]
		if !last {
			if !bytes.HasSuffix(line, []byte(",")) {
				return p, corrupt("entry %d is not followed by a comma", len(p.lines))
			}
			line = line[:len(line)-1]
		}
		if !bytes.HasPrefix(line, []byte(entryPrefix)) || !bytes.HasSuffix(line, []byte("}")) || !bytes.Contains(line, []byte(entryMiddle)) {
			return p, corrupt("entry %d is not a {\"key\":...,\"value\":...} object", len(p.lines))
		}
		p.lines = append(p.lines, line)
		list = rest
	}
	return p, nil
}

// decodeResult is what decode learned from a file.
type decodeResult[K comparable, V any] struct {
	snap Snapshot[K, V]
	ents entries[K] // the file's entries as lines, for later Commits
	bad  []EntryError
}

// decode checks data and decodes every entry. Entries that fail to decode or
// upgrade are collected in bad; the others are in snap. The error is nil,
// or wraps ErrCorrupt, ErrNewerSchema or ErrOlderSchema (and then nothing
// else is valid).
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

	r.snap = Snapshot[K, V]{Meta: p.meta, Entries: make(map[K]V, len(p.lines))}
	r.ents = newEntries[K](len(p.lines))
	var e kv[K, V]
	for i, line := range p.lines {
		if upgrading {
			line, err = upgradeLine(line, p.meta.Schema, cfg)
			if err != nil {
				r.bad = append(r.bad, EntryError{Index: i, Key: rawKey(p.lines[i]), Err: err})
				continue
			}
		}
		e = kv[K, V]{} // decoding into a used value would merge maps and slices
		if err := json.Unmarshal(line, &e); err != nil {
			r.bad = append(r.bad, EntryError{Index: i, Key: rawKey(line), Err: err})
			continue
		}
		if _, dup := r.snap.Entries[e.Key]; dup {
			r.bad = append(r.bad, EntryError{Index: i, Key: rawKey(line), Err: errors.New("the key appears twice")})
			continue
		}
		r.snap.Entries[e.Key] = e.Value
		if upgrading {
			// Keep the current schema's bytes, so a later Commit writes
			// the upgraded form.
			if line, err = enc.appendEntry(nil, e.Key, e.Value); err != nil {
				r.bad = append(r.bad, EntryError{Index: i, Key: rawKey(line), Err: err})
				delete(r.snap.Entries, e.Key)
				continue
			}
		}
		r.ents.add(e.Key, line)
	}
	return r, nil
}

// upgradeLine runs the upgrade chain from schema from to the current one.
func upgradeLine(line []byte, from int, cfg *config) ([]byte, error) {
	var raw rawKV
	if err := json.Unmarshal(line, &raw); err != nil {
		return nil, err
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
		return nil, err
	}
	b.WriteString(entryMiddle)
	if err := json.Compact(&b, raw.Value); err != nil {
		return nil, err
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// rawKey returns the key of an entry line as text, for error messages. It
// never returns the value.
func rawKey(line []byte) string {
	var k struct {
		Key json.RawMessage `json:"key"`
	}
	if json.Unmarshal(line, &k) != nil || len(k.Key) == 0 {
		return ""
	}
	const max = 200
	if len(k.Key) > max {
		return string(k.Key[:max]) + "..."
	}
	return string(k.Key)
}
