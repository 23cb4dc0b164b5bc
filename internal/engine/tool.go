package engine

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/phaseshift/phaseshift/internal/fsys"
	"github.com/phaseshift/phaseshift/internal/rawfile"
)

// What the phaseshift command (cmd/phaseshift) needs beyond the public
// API: reading a checkpoint of any types and schema without its lock, the
// header and checksum verdict of a file that does not load, and writing a
// repaired file over one that could not be read. The command calls these
// functions (ReadRaw, LockRaw, NamesOf, Kept) directly; package checkpoint
// does not re-export them, so they stay out of the API, and they run on
// the same core, decoder and write protocol as File, so that the command
// sees what a daemon's Load would restore.

type rawCore = core[rawfile.Key, json.RawMessage]

// NamesOf returns the names Open and quarantine give the files beside path.
func NamesOf(path string) rawfile.Names {
	path = filepath.Clean(path)
	return rawfile.Names{Prev: path + ".prev", Lock: path + ".lock"}
}

// primed is a backend whose next read of the file, and of the journal,
// returns bytes already read, so that the header a caller looked at, the
// entries the core decodes and the journal's damage this file finds come
// from one version of each. It is used by one goroutine at a time (the
// command's), like everything in this file but the core's own methods.
type primed struct {
	backend
	data, jdata   []byte
	err, jerr     error
	ready, jready bool
}

func (p *primed) read() ([]byte, error) {
	if p.ready {
		p.ready = false
		return p.data, p.err
	}
	return p.backend.read()
}

func (p *primed) readJournal() ([]byte, error) {
	if p.jready {
		p.jready = false
		return p.jdata, p.jerr
	}
	return p.backend.readJournal()
}

// prime makes the next reads return data and jdata.
func (p *primed) prime(data []byte, err error, jdata []byte, jerr error) {
	p.data, p.err, p.ready = data, err, true
	p.jdata, p.jerr, p.jready = jdata, jerr, true
}

// readOnly is the backend of a checkpoint read without its lock: the file
// and its journal, which Load replays as a daemon's would.
type readOnly struct {
	fs   fsys.FS
	path string
}

var errReadOnly = errors.New("opened for reading only")

func (r *readOnly) name() string                 { return r.path }
func (r *readOnly) read() ([]byte, error)        { return r.fs.ReadFile(r.path) }
func (r *readOnly) replace([]byte, onDisk) error { return pathError("save", r.path, errReadOnly) }
func (r *readOnly) quarantine() (string, error) {
	return "", pathError("quarantine", r.path, errReadOnly)
}
func (r *readOnly) close() error { return nil }

// The journal is read, and replayed by Load, so that the command shows
// what a daemon's Load would restore; it is never written.
func (r *readOnly) journalName() string          { return r.path + ".journal" }
func (r *readOnly) readJournal() ([]byte, error) { return r.fs.ReadFile(r.journalName()) }
func (r *readOnly) appendJournal([]byte, int64, onDisk) error {
	return pathError("commit", r.path, errReadOnly)
}
func (r *readOnly) removeJournal() error { return pathError("save", r.path, errReadOnly) }

func ReadRaw(ctx context.Context, path string, opt rawfile.Options) *rawfile.File {
	cfg, _ := configure[rawfile.Key, json.RawMessage](nil) // no options: cannot fail
	p := &primed{backend: &readOnly{fs: fsys.OS{}, path: filepath.Clean(path)}}
	c := newCore[rawfile.Key, json.RawMessage](cfg, p, "")
	return loadRaw(ctx, c, p, opt)
}

// loadRaw reads the file once and its journal once, learns the file's
// header and checksum verdict, sets the core's schema to the file's (the
// raw types read every schema as it is), has the core load that same data,
// and, if Load refused the journal, finds where it is damaged.
func loadRaw(ctx context.Context, c *rawCore, p *primed, opt rawfile.Options) *rawfile.File {
	out := &rawfile.File{Path: p.name(), Size: -1}
	data, err := p.backend.read()
	jdata, jerr := p.backend.readJournal()
	if err == nil {
		out.Size = int64(len(data))
		var m Meta
		m, out.HeaderErr = headerOf(data)
		out.Header = rawfile.Header(m)
		_, out.ChecksumErr = checkSum(data)
		if opt.IgnoreChecksum && out.ChecksumErr != nil {
			if fixed, ok := withFreshChecksum(data); ok {
				data = fixed
			}
		}
		c.mu.Lock()
		c.cfg.schema = max(m.Schema, 1) // a schema below 1 is reported by decode
		c.mu.Unlock()
	}
	loadPrimed(ctx, c, p, out, data, err, jdata, jerr)
	if out.Err != nil && jerr == nil {
		out.Journal.Damage = journalDamage(c, data, err, jdata, p.journalName(), out.Err)
	}
	if d := out.Journal.Damage; d != nil && !d.FileMissing {
		// The state up to the damage: what a repair keeps, and what the
		// file holds at least.
		part := &rawfile.File{Path: out.Path, Size: out.Size}
		loadPrimed(ctx, c, p, part, data, err, jdata[:d.Offset], nil)
		switch {
		case opt.JournalUpToDamage:
			out.Err, out.Entries, out.Meta = part.Err, part.Entries, part.Meta
		case part.Err == nil:
			out.UpToDamage = &rawfile.Partial{Entries: part.Entries, Meta: part.Meta, Journal: true, Line: -1}
		}
	} else if err == nil && out.HeaderErr == nil && (errors.Is(out.Err, ErrCorrupt) || errors.Is(out.Err, ErrBadEntry)) {
		out.UpToDamage = upToDamage(data, out.Header)
	}
	return out
}

// upToDamage reads the entries of data, a file Load refused as corrupt
// whose header reads, up to the first entry line that does not read as
// the writer writes it (one entry a line, {"key":...,"value":...}) or
// repeats a key: what the file holds at least. It never trusts the
// checksum, and decodes no value beyond checking that it is JSON.
func upToDamage(data []byte, h rawfile.Header) *rawfile.Partial {
	i := bytes.Index(data, []byte("\n"+entriesStart))
	if i < 0 {
		return nil
	}
	off := i + 1 + len(entriesStart)
	p := &rawfile.Partial{Meta: h, Line: -1}
	seen := make(map[rawfile.Key]bool)
	for rest := data[off:]; ; {
		nl := bytes.IndexByte(rest, '\n')
		if nl >= 0 && string(rest[:nl+1]) == entriesEnd {
			return p // every entry line read
		}
		var e rawfile.Entry
		ok := nl >= 0
		if ok {
			e, ok = entryOf(rest[:nl])
		}
		if !ok || seen[e.Key] {
			p.Line, p.Offset = len(p.Entries), int64(off)
			return p
		}
		seen[e.Key] = true
		p.Entries = append(p.Entries, e)
		off += nl + 1
		rest = rest[nl+1:]
	}
}

// entryOf reads one entry line of the file, as the writer lays it out.
func entryOf(line []byte) (rawfile.Entry, bool) {
	line, ok := bytes.CutPrefix(line, []byte(entryIndent))
	line = bytes.TrimSuffix(line, []byte(","))
	if !ok || !bytes.HasPrefix(line, []byte(entryPrefix)) {
		return rawfile.Entry{}, false
	}
	var e struct {
		Key   json.RawMessage `json:"key"`
		Value json.RawMessage `json:"value"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if dec.Decode(&e) != nil || dec.More() || e.Key == nil || e.Value == nil {
		return rawfile.Entry{}, false
	}
	k, err := rawfile.ParseKey(string(e.Key))
	if err != nil {
		return rawfile.Entry{}, false
	}
	return rawfile.Entry{Key: k, Value: e.Value}, true
}

// loadPrimed has the core load data and jdata, and fills in what Load
// returned.
func loadPrimed(ctx context.Context, c *rawCore, p *primed, out *rawfile.File, data []byte, err error, jdata []byte, jerr error) {
	p.prime(data, err, jdata, jerr)
	snap, lerr := c.load(ctx)
	p.ready, p.jready = false, false
	out.Err = lerr
	out.Entries = rawEntries(c, snap, lerr == nil)
	out.Meta = rawfile.Header(snap.Meta)
	if snap.Meta.Format == 0 {
		out.Meta = out.Header // Load failed before it read a header
	}
	out.Journal = rawJournal(c, p.journalName(), jdata, jerr, snap.Meta.Seq)
}

// rawJournal says what the journal beside the file held at the load: seq
// is the Seq of the state Load returned (the last record's, when records
// were replayed).
func rawJournal(c *rawCore, name string, jdata []byte, jerr error, seq uint64) rawfile.Journal {
	st := c.journal()
	j := rawfile.Journal{Path: name, Exists: jerr == nil, Bytes: int64(len(jdata)), Records: st.Records, Stale: st.Stale, Seq: seq}
	if st.Torn != nil {
		j.TornBytes = st.Torn.Bytes
	}
	j.All = journalRun(jdata, 0)
	return j
}

// journalDamage says where the journal jdata is damaged, when lerr, the
// error of the Load of data (read with err) and jdata, came from it: a
// record that is not whole or out of sequence before the last, or a
// journal whose file is missing. It replays the journal as Load did, with
// the same rules (replay), so that the damage it reports is where Load
// stopped; it is nil when the file itself is what Load refused.
func journalDamage(c *rawCore, data []byte, err error, jdata []byte, name string, lerr error) *rawfile.Damage {
	if errors.Is(err, fs.ErrNotExist) {
		if len(jdata) == 0 {
			return nil
		}
		return &rawfile.Damage{FileMissing: true, Reason: "the checkpoint the records follow is missing", After: journalRun(jdata, 0)}
	}
	if err != nil || !errors.Is(lerr, ErrCorrupt) {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	res, derr := decode[rawfile.Key, json.RawMessage](data, &c.cfg, c.enc)
	if derr != nil {
		return nil
	}
	_, rerr := replay(jdata, name, &res, &c.cfg, c.enc, len(res.ents.lines))
	var re *ReplayError
	if !errors.As(rerr, &re) {
		return nil
	}
	off, end := re.Offset, re.Offset+re.Bytes
	d := &rawfile.Damage{Offset: off, Bytes: re.Bytes, Seq: re.Seq, Before: journalRun(jdata[:off], 0), After: journalRun(jdata[end:], end), Reason: re.Reason}
	if re.Damaged != nil {
		d.Reason = re.Damaged.Error() + ", and it is not the last record: not what a crash leaves"
	}
	return d
}

// journalRun describes the records of data, which starts at byte offset of
// its journal: how many, and the seqs of the first and last that read.
func journalRun(data []byte, offset int64) rawfile.Run {
	r := rawfile.Run{Offset: offset, Bytes: int64(len(data))}
	for len(data) > 0 {
		line := data
		if nl := bytes.IndexByte(data, '\n'); nl >= 0 {
			line, data = data[:nl], data[nl+1:]
		} else {
			data = nil
		}
		r.Records++
		if rec, err := parseRecord(line); err == nil {
			if r.FirstSeq == 0 {
				r.FirstSeq = rec.seq
			}
			r.LastSeq = rec.seq
		}
	}
	return r
}

// rawEntries lists snap's entries in the file's order when the core holds
// them (a clean load), and sorted by key otherwise.
func rawEntries(c *rawCore, snap Snapshot[rawfile.Key, json.RawMessage], clean bool) []rawfile.Entry {
	ents := make([]rawfile.Entry, 0, len(snap.Entries))
	if clean {
		c.mu.Lock()
		for _, line := range c.ents.lines {
			if line == nil {
				continue // a deleted entry
			}
			if k, ok := lineKey[rawfile.Key](line); ok {
				ents = append(ents, rawfile.Entry{Key: k, Value: snap.Entries[k]})
			}
		}
		c.mu.Unlock()
		if len(ents) == len(snap.Entries) {
			return ents
		}
		ents = ents[:0]
	}
	for k, v := range snap.Entries {
		ents = append(ents, rawfile.Entry{Key: k, Value: v})
	}
	slices.SortFunc(ents, func(a, b rawfile.Entry) int { return strings.Compare(string(a.Key), string(b.Key)) })
	return ents
}

// headerOf reads the header of data whether or not its checksum holds:
// the header of a hand-edited or bit-flipped file still says who wrote it.
// A header of a newer format is returned with a nil error.
func headerOf(data []byte) (Meta, error) {
	if !bytes.HasPrefix(data, []byte(fileStart)) {
		return Meta{}, corrupt("the file does not start with %q", fileStart)
	}
	i := bytes.Index(data, []byte("\n"+entriesStart))
	if i < 0 {
		return Meta{}, corrupt("the entries list is missing")
	}
	m, err := parseHeader(data[:i])
	if errors.Is(err, ErrNewerSchema) {
		err = nil
	}
	return m, err
}

// withFreshChecksum returns data with the checksum its content hashes to,
// if its checksum line has the writer's shape.
func withFreshChecksum(data []byte) ([]byte, bool) {
	if len(data) < trailerLen {
		return nil, false
	}
	body, trailer := data[:len(data)-trailerLen], data[len(data)-trailerLen:]
	if !bytes.HasPrefix(trailer, []byte(checksumStart)) || !bytes.HasSuffix(trailer, []byte(checksumEnd)) {
		return nil, false
	}
	sum := crc32.Checksum(body, castagnoli)
	out := append(slices.Clip(body), checksumStart...)
	out = hex.AppendEncode(out, []byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
	return append(out, checksumEnd...), true
}
