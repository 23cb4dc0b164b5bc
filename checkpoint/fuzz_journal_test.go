package checkpoint_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"testing"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// FuzzJournal feeds arbitrary bytes as the journal of an intact file
// (seq 1, {"a":1,"b":2}) to Load. Load must never panic, must either fail
// with a documented sentinel or serve a state that a prefix of the
// journal's valid records justifies (checked against journalModel, written
// from the format's description, not from the code), and must not report a
// torn record when every line is whole and valid. What loads must survive
// a commit and a restart unchanged.
//
// Shown to fail: making replay skip the seq check (replayed.check's "want"
// case) fails on a seed (records swapped) with "Load served map[b:20 c:3]
// (seq 2), which no prefix of the valid records gives"; treating a damaged
// record anywhere as a torn tail fails on a seed (a flipped byte in the
// first record) with "a record before the last one is not valid, yet Load
// served ...".
func FuzzJournal(f *testing.F) {
	ctx := context.Background()
	base, journal := journalSeed(f)
	f.Add(journal)
	f.Add(journal[:len(journal)-7])
	f.Add(append(bytes.Clone(journal), journal...)) // records repeated: out of order
	f.Add([]byte{})
	f.Add([]byte("\n"))
	f.Add([]byte("{}\n"))
	lines := bytes.SplitAfter(journal, []byte("\n"))
	f.Add(append(bytes.Clone(lines[1]), lines[0]...))
	damaged := bytes.Clone(journal)
	damaged[5] ^= 0x01
	f.Add(damaged)

	f.Fuzz(func(t *testing.T, data []byte) {
		m := checkpointtest.NewMemory[string, int](t, checkpoint.WithJournal())
		checkpointtest.SetBytes(m, base)
		checkpointtest.SetJournal(m, data)
		s, err := m.Load(ctx)
		states, allValid, damagedBeforeTail := journalModel(data)
		if err == nil && damagedBeforeTail {
			t.Fatalf("a record before the last one is not valid, yet Load served %v", s.Entries)
		}
		if err != nil {
			for _, sentinel := range []error{checkpoint.ErrCorrupt, checkpoint.ErrNewerSchema, checkpoint.ErrOlderSchema, checkpoint.ErrBadEntry, checkpoint.ErrTypeMismatch} {
				if errors.Is(err, sentinel) {
					return
				}
			}
			t.Fatalf("Load returned an error that matches no sentinel: %v", err)
		}
		ok := false
		for i, st := range states {
			ok = ok || (maps.Equal(st, s.Entries) && s.Meta.Seq == uint64(1+i))
		}
		if !ok {
			t.Fatalf("Load served %v (seq %d), which no prefix of the valid records gives: %v", s.Entries, s.Meta.Seq, states)
		}
		if allValid && m.Journal().Torn != nil {
			t.Fatalf("every record is whole and valid, yet Load reported a torn one: %v", m.Journal().Torn)
		}
		if allValid && !maps.Equal(s.Entries, states[len(states)-1]) {
			t.Fatalf("every record is whole and valid, yet Load served %v, not %v", s.Entries, states[len(states)-1])
		}
		// What loaded goes on: a commit and a restart keep it.
		if err := m.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[string, int]{{Key: "z", Value: 26}}); err != nil {
			t.Fatalf("a loaded checkpoint does not take a commit: %v", err)
		}
		again, err := checkpointtest.Reopen(t, m).Load(ctx)
		if err != nil {
			t.Fatalf("after a commit, Load fails: %v", err)
		}
		want := maps.Clone(s.Entries)
		want["z"] = 26
		if !maps.Equal(again.Entries, want) {
			t.Fatalf("after a commit and a restart: %v, want %v", again.Entries, want)
		}
	})
}

// journalSeed returns a file (seq 1) and a journal of three commits over it.
func journalSeed(f *testing.F) (file, journal []byte) {
	ctx := context.Background()
	m := checkpointtest.NewMemory[string, int](f, checkpoint.WithJournal())
	if err := m.Save(ctx, checkpoint.Snapshot[string, int]{Entries: map[string]int{"a": 1, "b": 2}}); err != nil {
		f.Fatal(err)
	}
	file = m.Bytes()
	for _, ch := range [][]checkpoint.Change[string, int]{
		{{Key: "c", Value: 3}},
		{{Key: "a", Delete: true}, {Key: "b", Value: 20}},
		{{Key: "d", Value: 4}, {Key: "c", Delete: true}},
	} {
		if err := m.Commit(ctx, checkpoint.Meta{Phase: "contract"}, ch); err != nil {
			f.Fatal(err)
		}
	}
	return file, checkpointtest.Journal(m)
}

// journalModel reads a journal that follows the seed file (seq 1, schema
// 1, {"a":1,"b":2}) as the package documentation describes the format:
// one JSON line per commit, a CRC-32C of the bytes before `,"crc32c"`,
// base 1 and seq 2, 3... in order (or, once records are applied, the base
// of the record before or the seq reached: records a compaction appended
// after its snapshot), puts {"key","value"} and deletes
// {"delete":{"key","value"}}. It returns the state after each prefix of
// valid records, stopping at the first line that is not one, and whether
// every line was whole and valid, and whether a line that is not valid has
// another line after it (which no crash leaves: corruption).
func journalModel(data []byte) (states []map[string]int, allValid, damagedBeforeTail bool) {
	cur := map[string]int{"a": 1, "b": 2}
	states = append(states, maps.Clone(cur))
	seq, base := uint64(2), uint64(1)
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	for i, line := range lines {
		last := i == len(lines)-1
		if !bytes.HasSuffix(line, []byte("\n")) {
			return states, false, false
		}
		result, recBase := modelApply(cur, line[:len(line)-1], seq, base)
		switch result {
		case modelInvalid:
			return states, false, !last
		case modelStale:
			if seq > 2 {
				return states, false, !last // stale after applied records
			}
		case modelApplied:
			states = append(states, maps.Clone(cur))
			seq++
			base = recBase
		}
	}
	return states, true, false
}

const (
	modelInvalid = iota
	modelStale   // a record of a file before the seed (base 0): skipped
	modelApplied
)

// modelApply applies one record line to cur if it is valid, has seq and
// follows base (the base of the record before it, 1 for the first) or the
// seq reached, and returns the record's base.
func modelApply(cur map[string]int, line []byte, seq, base uint64) (int, uint64) {
	const trailer = `,"crc32c":"`
	i := bytes.LastIndex(line, []byte(trailer))
	if i < 0 || len(line) != i+len(trailer)+8+2 || !bytes.HasSuffix(line, []byte(`"}`)) {
		return modelInvalid, 0
	}
	if fmt.Sprintf("%08x", crc32.Checksum(line[:i], crc32.MakeTable(crc32.Castagnoli))) != string(line[i+len(trailer):i+len(trailer)+8]) {
		return modelInvalid, 0
	}
	var r struct {
		Journal, Schema int
		Base, Seq       uint64
		Changes         []json.RawMessage
	}
	if json.Unmarshal(line, &r) != nil || r.Journal != 1 || r.Schema != 1 {
		return modelInvalid, 0
	}
	if r.Base == 0 && seq == 2 {
		return modelStale, 0
	}
	if (r.Base != base && (seq == 2 || r.Base != seq-1)) || r.Seq != seq {
		return modelInvalid, 0
	}
	next := maps.Clone(cur)
	for _, op := range r.Changes {
		var o struct {
			Key    *string
			Value  json.RawMessage
			Delete *struct{ Key *string }
		}
		var v int
		if json.Unmarshal(op, &o) != nil || (o.Value != nil && json.Unmarshal(o.Value, &v) != nil) {
			return modelInvalid, 0
		}
		switch {
		case o.Delete != nil && o.Delete.Key != nil && o.Key == nil && o.Value == nil:
			delete(next, *o.Delete.Key)
		case o.Key != nil && o.Value != nil && o.Delete == nil:
			next[*o.Key] = v
		default:
			return modelInvalid, 0
		}
	}
	maps.Copy(cur, next)
	for k := range cur {
		if _, ok := next[k]; !ok {
			delete(cur, k)
		}
	}
	return modelApplied, r.Base
}
