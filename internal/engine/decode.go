package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"

	"github.com/phaseshift/phaseshift/internal/jsonvalue"
)

// decodeResult is what decode learned from a file.
type decodeResult[K comparable, V any] struct {
	snap    Snapshot[K, V]
	ents    entries[K] // the file's entries as lines, for later Commits
	bad     []EntryError
	dropped int // entries whose unknown fields were dropped (WithDropUnknownFields)
	// unknown are the entries with fields the types lack (not dropped), in
	// the file and in the journal's records; judged counts the entries and
	// changes that were looked at. A journal's later change to one's key
	// makes it history (see applier.done); what is left fails the Load
	// (unknownErr).
	unknown    []EntryError
	judged     int
	fileSchema int // the file's schema and this binary's, for unknownErr
	schema     int
	// upgraded maps the JSON of an upgraded entry's key in the file's
	// schema to its key's JSON in the current one, when the file was
	// upgraded: a journal replayed over it names entries by their old
	// keys, and an upgrade may give an entry a key that depends on its
	// value.
	upgraded map[string]json.RawMessage
}

// decode checks data and decodes every entry. Entries that fail to decode,
// upgrade or pass the WithValidate function are collected in bad; the
// others are in snap. The error is nil,
// or wraps ErrCorrupt, ErrNewerSchema or ErrOlderSchema (and then nothing
// but the Meta is valid). Entries with fields the key or value type does
// not have make the error ErrTypeMismatch (unknownErr), unless the config
// drops them.
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
	r.fileSchema, r.schema = p.meta.Schema, cfg.schema
	upgrading := p.meta.Schema < cfg.schema
	if upgrading && cfg.upgrades[p.meta.Schema] == nil {
		return r, fmt.Errorf("%w: the file has schema %d, this binary writes %d and has no upgrade from %d", ErrOlderSchema, p.meta.Schema, cfg.schema, p.meta.Schema)
	}

	n := len(p.lines)
	r.snap.Entries = make(map[K]V, n)
	r.ents = newEntries[K](n)
	r.ents.lines = r.ents.lines[:n]
	if upgrading {
		r.upgraded = make(map[string]json.RawMessage, n) // written by the one worker an upgrade runs on
	}
	// Decoding is nearly all of a restore's time and parallelises well:
	// the lines are independent. Only the inserts share the maps.
	workers := 1
	if n >= parallelDecodeMin && !upgrading {
		workers = min(runtime.GOMAXPROCS(0), maxDecodeWorkers)
	}
	sh := &shared[K, V]{r: &r}
	keys := newKeyRule[K]()
	validate, _ := validatorFor[K, V](cfg) // its type was checked at construction
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for w := 0; w < workers; w++ {
		lo, hi := w*per, min((w+1)*per, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			wk := &worker[K, V]{cfg: cfg, keys: &keys, validate: validate, sh: sh, batch: make([]decoded[K, V], 0, insertBatch)}
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
	slices.SortFunc(sh.unknown, func(a, b EntryError) int { return a.Index - b.Index })
	r.unknown, r.judged = sh.unknown, n
	return r, nil
}

// unknownErr returns the error of the entries with fields the types lack
// that are left once the journal was replayed (a newer binary wrote them
// without bumping the schema), or nil.
func (r *decodeResult[K, V]) unknownErr() error {
	if len(r.unknown) == 0 {
		return nil
	}
	return &unknownFieldsError{first: r.unknown[0], count: len(r.unknown), total: r.judged, fileSchema: r.fileSchema, schema: r.schema}
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
	cfg      *config
	keys     *keyRule[K]
	validate func(K, V) error // WithValidate's, or nil
	enc      *encoder         // for lines re-encoded (upgraded, or fields dropped); made on first use
	sh       *shared[K, V]
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
			w.bad = append(w.bad, badEntry(d.i, d.line, errors.New("the key appears twice")))
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

// keep queues a decoded entry for the maps, unless its key cannot be a map
// key or the WithValidate function rejects it: then it is a bad entry, as
// one that does not decode is.
func (w *worker[K, V]) keep(i int, line []byte, k K, v V) {
	if w.keys.comparable != nil {
		if err := w.keys.comparable(k); err != nil {
			w.bad = append(w.bad, badEntry(i, line, err))
			return
		}
	}
	if w.validate != nil {
		if err := w.validate(k, v); err != nil {
			w.bad = append(w.bad, badEntry(i, line, &rejectedError{err: err}))
			return
		}
	}
	w.batch = append(w.batch, decoded[K, V]{i: i, line: line, key: k, val: v})
	if len(w.batch) == cap(w.batch) {
		w.flush()
	}
}

// failed records line i, which did not decode with err. Unknown fields
// make the entry a type mismatch, unless the config drops them: then the
// line is decoded again without the check and kept, re-encoded without
// them, so that the next save writes it without them too.
func (w *worker[K, V]) failed(i int, line []byte, err error) {
	if _, unknown := jsonvalue.UnknownField(err); !unknown {
		w.bad = append(w.bad, badEntry(i, line, decodeError[K, V](line, err)))
		return
	}
	if !w.cfg.dropUnknown {
		w.unknown = append(w.unknown, badEntry(i, line, decodeError[K, V](line, err)))
		return
	}
	var e kv[K, V]
	if err := json.Unmarshal(line, &e); err != nil {
		w.bad = append(w.bad, badEntry(i, line, decodeError[K, V](line, err)))
		return
	}
	if w.enc == nil {
		w.enc = newEncoder()
	}
	cur, err := encodeEntry(w.enc, w.keys, nil, e.Key, e.Value, -1)
	if err != nil {
		w.bad = append(w.bad, badEntry(i, line, err))
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
				w.bad = append(w.bad, badEntry(i, line, errors.New("not exactly one JSON value")))
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
			w.bad = append(w.bad, badEntry(i, line, err))
			continue
		}
		w.sh.r.upgraded[string(rawKeyJSON(line))] = rawKeyJSON(up)
		var e kv[K, V]
		if err := strictUnmarshal(up, &e); err != nil {
			w.failed(i, up, err)
			continue
		}
		// Keep the current schema's bytes, so a later Commit writes the
		// upgraded form.
		cur, err := encodeEntry(w.enc, w.keys, nil, e.Key, e.Value, -1)
		if err != nil {
			w.bad = append(w.bad, badEntry(i, up, err))
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
