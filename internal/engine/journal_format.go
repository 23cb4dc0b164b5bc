package engine

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/phaseshift/phaseshift/internal/jsonvalue"
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
