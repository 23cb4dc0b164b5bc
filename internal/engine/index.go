package engine

import (
	"bytes"
	"encoding/json"
	"hash/maphash"
)

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

// find returns where k's line is. line, if not nil, is a line this
// package encoded for k, whose key's bytes, when the line found holds the
// same, spare the decode of its key.
func (e *entries[K]) find(k K, line []byte) (i int32, inExact, ok bool) {
	if e.exact != nil {
		if i, ok := e.exact[k]; ok {
			return i, true, true
		}
	}
	i, ok = e.index[e.hash(k)]
	if !ok {
		return 0, false, false
	}
	if line != nil && sameKey(e.lines[i], line) {
		return i, false, true
	}
	if lk, ok := e.key(e.lines[i]); !ok || lk != k {
		return 0, false, false // another key with the same hash
	}
	return i, false, true
}

// sameKey reports whether the entry line a holds the key JSON of line b,
// byte for byte. b's key is one encodeEntry checked to read back as
// itself, so the same bytes in a decode to the same key; different bytes
// prove nothing (a line written by another encoder may spell the same key
// otherwise), and the caller decodes instead.
func sameKey(a, b []byte) bool {
	n := keyJSONEnd(b)
	return n > 0 && len(a) > n && bytes.Equal(a[:n], b[:n]) && bytes.HasPrefix(a[n:], []byte(entryMiddle))
}

// keyJSONEnd returns where the key's JSON ends in an entry line (the
// offset of the entryMiddle that follows it), or 0 if the line is not one.
// It tracks strings and nesting, so that a ,"value": inside the key (a
// field of a struct key named value) is not taken for the end.
func keyJSONEnd(line []byte) int {
	if !bytes.HasPrefix(line, []byte(entryPrefix)) {
		return 0
	}
	depth, inString, escaped := 0, false, false
	for i := len(entryPrefix); i < len(line); i++ {
		c := line[i]
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped, inString = c == '\\', c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == ',' && depth == 0:
			return i
		}
	}
	return 0
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
	if i, _, ok := e.find(k, raw); ok {
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
	i, inExact, ok := e.find(k, nil)
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
