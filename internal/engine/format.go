package engine

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strconv"
	"sync"
	"time"

	"github.com/phaseshift/phaseshift/internal/jsonvalue"
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
	// formatVersion is the newest file format this library reads: 1, and
	// 2, which is 1 written with the journal (see journal.go).
	formatVersion = 2

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

// Meta is checkpoint.Meta: see its documentation there.
type Meta struct {
	Format int    // file format version: 2 when written with the journal (the default), 1 WithoutJournal
	Schema int    // value schema version the entries were written with
	Phase  string // rollout phase of the writer, e.g. "expand"
	Writer string // version of the program that wrote the file
	BootID string // boot in which the file was written, if recorded
	// Behind says why the writer knows the file may lack entries its
	// legacy source holds ("" when it does not): package migrate records a
	// phase-0 run, or a run that could not read legacy in full. It is
	// written only when set, so files without it are unchanged. Like the
	// journal, it shipped with the first release, so no released
	// phaseshift meets it unknown (a build from before it would take a
	// header that has it for corruption).
	Behind  string
	Seq     uint64    // incremented by every save; 1 for the first
	SavedAt time.Time // when the file was written
}

// Snapshot is checkpoint.Snapshot: see its documentation there.
type Snapshot[K comparable, V any] struct {
	Meta    Meta
	Entries map[K]V
}

// Change is checkpoint.Change: see its documentation there.
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
	Behind  string          `json:"behind"`
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

// appendFile appends a whole file: the header for m, every line in raws
// (nil lines are deleted ones, skipped), and the checksum trailer.
func appendFile(dst []byte, m Meta, raws [][]byte) []byte {
	start := len(dst)
	dst = appendHeader(dst, m)
	dst = appendEntries(dst, raws, true, true)
	return appendTrailer(dst, crc32.Checksum(dst[start:], castagnoli))
}

// appendHeader appends the file's header for m, up to and including the
// line that opens the entries list.
func appendHeader(dst []byte, m Meta) []byte {
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
	if m.Behind != "" {
		dst = append(dst, ",\n  \"behind\": "...)
		dst = appendString(dst, m.Behind)
	}
	dst = append(dst, ",\n  \"seq\": "...)
	dst = strconv.AppendUint(dst, m.Seq, 10)
	dst = append(dst, ",\n  \"savedAt\": \""...)
	dst = m.SavedAt.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, "\",\n"...)
	return append(dst, entriesStart...)
}

// appendEntries appends raws (nil lines are deleted ones, skipped) as
// lines of the entries list: first tells whether they begin the list
// (streamFile appends it in parts), last whether they end it, when the
// end of the list is appended too.
func appendEntries(dst []byte, raws [][]byte, first, last bool) []byte {
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
	if !last {
		return dst
	}
	if !first {
		dst = append(dst, '\n')
	}
	return append(dst, entriesEnd...)
}

// appendTrailer appends the checksum trailer for sum, the CRC-32C of
// everything before it.
func appendTrailer(dst []byte, sum uint32) []byte {
	dst = append(dst, checksumStart...)
	dst = hex.AppendEncode(dst, []byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
	return append(dst, checksumEnd...)
}

// streamFile writes the file appendFile(nil, m, raws) would make through
// write, in pieces of about chunk bytes, so that a compaction never holds
// the whole file in memory (see compact.go), and returns its ends (see
// endsOf). It stops at the first error write returns.
func streamFile(m Meta, raws [][]byte, chunk int, write func(piece []byte) error) (fileEnds, error) {
	pooled := pieces.Get().(*[]byte)
	defer func() {
		if cap(*pooled) <= 2*chunk+64<<10 {
			pieces.Put(pooled) // not one an enormous line grew
		}
	}()
	buf := appendHeader((*pooled)[:0], m)
	defer func() { *pooled = buf[:0] }()
	ends := fileEnds{head: bytes.Clone(buf[:len(buf)-len(entriesStart)])}
	if len(ends.head) > 4<<10 {
		ends.head = ends.head[:4<<10] // as endsOf cuts it
	}
	var sum uint32
	flush := func() error {
		sum = crc32.Update(sum, castagnoli, buf)
		err := write(buf)
		buf = buf[:0]
		return err
	}
	first := true
	for len(raws) > 0 {
		n := 0
		for size := len(buf); n < len(raws) && size < chunk; n++ {
			size += len(raws[n]) + len(entryIndent) + 2
		}
		n = max(n, 1)
		buf = appendEntries(buf, raws[:n], first, false)
		first = first && !hasLine(raws[:n])
		raws = raws[n:]
		if len(buf) >= chunk {
			if err := flush(); err != nil {
				return fileEnds{}, err
			}
		}
	}
	buf = appendEntries(buf, nil, first, true)
	sum = crc32.Update(sum, castagnoli, buf)
	at := len(buf)
	buf = appendTrailer(buf, sum)
	ends.tail = bytes.Clone(buf[at:])
	return ends, write(buf)
}

// pieces are streamFile's buffers, reused: a compaction every few hundred
// commits that allocated its own would add to every commit's share of
// the garbage collector's work.
var pieces = sync.Pool{New: func() any { b := make([]byte, 0, compactPiece+4<<10); return &b }}

// hasLine reports whether raws holds a line that is not deleted.
func hasLine(raws [][]byte) bool {
	for _, r := range raws {
		if r != nil {
			return true
		}
	}
	return false
}

// appendString appends s as a JSON string, as json.Marshal writes it. A
// string of printable ASCII that needs no escape (phases, versions, boot
// IDs) is copied as it is: a journal record holds three of them, and a
// json.Marshal each was a tenth of a commit's allocations.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
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
		return nil, corrupt("the file is empty (0 bytes: a crash between its create and its write, or a truncation); it holds nothing: `phaseshift discard-empty PATH` sets it aside, or `phaseshift restore-prev PATH` puts back .prev where there is one")
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
	if _, err := hex.Decode(want[:], hexSum); err != nil {
		return nil, corruptBecause(err, "the checksum %q is not 8 lowercase hex digits", hexSum)
	}
	if !bytes.Equal(bytes.ToLower(hexSum), hexSum) {
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
		// A newer format may have header fields this one lacks: it is
		// newer, not corrupt.
		var f struct{ Format int }
		if json.Unmarshal(append(head[:len(head)-1:len(head)-1], "\n}"...), &f) == nil && f.Format > formatVersion {
			return Meta{Format: f.Format}, newerFormat(f.Format)
		}
		return Meta{}, corruptBecause(err, "the header is not valid: %s", jsonvalue.DecodeFailure(err))
	}
	if h.Format == nil || h.Schema == nil || h.Seq == nil {
		return Meta{}, corrupt("the header lacks format, schema or seq")
	}
	var savedAt time.Time
	if len(h.SavedAt) > 0 {
		if err := savedAt.UnmarshalJSON(h.SavedAt); err != nil {
			return Meta{}, corruptBecause(err, "the header is not valid: savedAt is not an RFC 3339 time")
		}
	}
	m := Meta{Format: *h.Format, Schema: *h.Schema, Phase: h.Phase, Writer: h.Writer, BootID: h.BootID, Behind: h.Behind, Seq: *h.Seq, SavedAt: savedAt}
	if m.Format > formatVersion {
		return m, newerFormat(m.Format)
	}
	if m.Format < 1 {
		return m, corrupt("format %d is not a checkpoint format", m.Format)
	}
	if m.Seq >= maxSeq {
		return Meta{}, seqTooHigh(m.Seq)
	}
	return m, nil
}

// maxSeq bounds the seq a file or a journal record may have. Every save
// counts one up; no writer gets to 2^63 (292,000 years at a million saves
// a second), and a seq near 2^64 would wrap to 0 within a few saves,
// making the next file look older than the last. So a higher seq is not
// a count of saves: the file was crafted or damaged, and Load refuses it
// (ErrCorrupt), which also keeps every save from wrapping.
const maxSeq = 1 << 63

func seqTooHigh(seq uint64) error {
	return corrupt("seq %d is at or above 2^63, which no writer reaches by counting saves (and a save after 2^64-1 would wrap to 0): the file was crafted or damaged; quarantine it (package migrate's Restore does) and restore the state from legacy or from a kept copy (phaseshift restore-prev, restore-kept)", seq)
}

func newerFormat(format int) error {
	return fmt.Errorf("%w: the file format is %d and this library reads up to %d: it was written by a newer phaseshift; upgrade the binary or quarantine the file", ErrNewerSchema, format, formatVersion)
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

// shorten returns a key's JSON for a message, cut at 200 bytes.
func shorten(js []byte) string {
	const max = 200
	if len(js) > max {
		return string(js[:max]) + "..."
	}
	return string(js)
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
