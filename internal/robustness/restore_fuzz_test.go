package robustness_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/migrate/migratetest"
	"github.com/phaseshift/phaseshift/source"
)

// FuzzRestore restores a Store from arbitrary checkpoint bytes and an
// arbitrary legacy list, in every phase, strict or not, with an implicit or
// an explicit legacy. Restore must never panic. It either fails with an
// error that matches a documented sentinel (migrate.ErrStale,
// migrate.ErrUnsafeRestore, or the checkpoint's ErrCorrupt, ErrNewerSchema,
// ErrOlderSchema, ErrBadEntry under Strict), leaving the checkpoint's
// bytes and legacy untouched and serving nothing; or it serves what the
// rules say, computed here from an independent Load of the same bytes:
//   - a readable checkpoint written by phase 3 makes an explicit legacy
//     stale in phases 0-2: the checkpoint's readable entries are served and
//     legacy is healed to them;
//   - otherwise phases 0 and 1 serve exactly legacy;
//   - phase 2 serves the checkpoint's readable entries (unless a phase-0
//     run superseded it) with legacy's other entries backfilled;
//   - phase 3 serves the checkpoint's readable entries, or nothing when it
//     is unreadable;
//   - a checkpoint that did not load cleanly is quarantined, bytes intact;
//   - in phases 1-3 (and phase 0 when it rewrote the file), a fresh Load of
//     the checkpoint afterwards returns exactly what is served.
//
// How I checked that it has teeth: making migrate's reconcile let legacy
// win on divergence fails the seeds with "phase 2 strict=false ...: serves
// map[k0:1 k1:2 k2:9 k5:5], the rules say map[k0:1 k1:7 k2:9 k5:5]";
// making readCheckpoint return before the quarantine fails the bad-entry
// and corrupt seeds with "the unreadable checkpoint was not quarantined".
func FuzzRestore(f *testing.F) {
	ctx := context.Background()
	save := func(phase string, entries map[string]int) []byte {
		m := checkpoint.NewMemory[string, int]()
		_ = m.Save(ctx, checkpoint.Snapshot[string, int]{Meta: checkpoint.Meta{Phase: phase, Writer: "fuzz"}, Entries: entries})
		return m.Bytes()
	}
	legacyList := []byte{3, 0, 1, 1, 2, 2, 9} // k0=1 k1=2 k2=9
	for _, phase := range []string{"legacy", "expand", "migrate", "contract", ""} {
		file := save(phase, map[string]int{"k0": 1, "k1": 7, "k5": 5})
		for flags := range byte(32) {
			f.Add(append(append([]byte{flags}, legacyList...), file...))
		}
	}
	// Entries that do not decode (the checksum holds).
	raw := checkpoint.NewMemory[string, json.RawMessage]()
	_ = raw.Save(ctx, checkpoint.Snapshot[string, json.RawMessage]{Meta: checkpoint.Meta{Phase: "contract"}, Entries: map[string]json.RawMessage{"k0": json.RawMessage(`1`), "k3": json.RawMessage(`"three"`)}})
	f.Add(append(append([]byte{0x02}, legacyList...), raw.Bytes()...))
	f.Add(append(append([]byte{0x0b}, legacyList...), raw.Bytes()...))
	// A newer schema, a flipped byte, a torn file, no file, garbage.
	newer := checkpoint.NewMemory[string, int]()
	newer.SetBytes(save("contract", map[string]int{"k0": 1}))
	_ = newer.SetSchema(2)
	f.Add(append(append([]byte{0x09}, legacyList...), newer.Bytes()...))
	flipped := save("migrate", map[string]int{"k0": 1, "k1": 2})
	flipped[len(flipped)/2] ^= 1
	f.Add(append(append([]byte{0x03}, legacyList...), flipped...))
	f.Add(append(append([]byte{0x01}, legacyList...), flipped[:len(flipped)/2]...))
	f.Add(append([]byte{0x12}, legacyList...))
	f.Add([]byte{0x07, 0, '{', '}'})

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		flags := data[0]
		phase := migrate.Phase(flags % 4)
		strict, explicit, noFile := flags&4 != 0, flags&8 != 0, flags&16 != 0
		n := int(data[1] % 8)
		legacy := map[string]int{}
		i := 2
		for ; n > 0 && i+1 < len(data); n, i = n-1, i+2 {
			legacy[fmt.Sprintf("k%d", data[i]%8)] = int(data[i+1])
		}
		var file []byte
		if !noFile && i <= len(data) {
			file = bytes.Clone(data[i:])
		}
		checkRestore(t, phase, strict, explicit, legacy, file)
	})
}

// checkRestore restores a Store over file (nil: none) and legacy, and checks
// the outcome against the rules.
func checkRestore(t *testing.T, phase migrate.Phase, strict, explicit bool, legacy map[string]int, file []byte) {
	ctx := context.Background()
	// What a fresh Load of the file says, independently of the Store.
	var snap checkpoint.Snapshot[string, int]
	var lerr error = checkpoint.ErrNotExist
	if file != nil {
		ref := checkpoint.NewMemory[string, int]()
		ref.SetBytes(file)
		snap, lerr = ref.Load(ctx)
	}
	clean := lerr == nil
	readable := clean || errors.Is(lerr, checkpoint.ErrBadEntry)
	meta := snap.Meta

	cp := checkpoint.NewMemory[string, int]()
	if file != nil {
		cp.SetBytes(file)
	}
	var leg source.Reader[string, int]
	exp := &migratetest.Explicit[string, int]{}
	exp.Replace(legacy)
	if explicit {
		leg = exp
	} else {
		leg = &exp.Implicit
	}
	s, err := migrate.New(migrate.Config[string, int]{Phase: phase, Legacy: leg, Checkpoint: cp, Strict: strict})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer s.Close()
	rep, err := s.Restore(ctx)
	where := fmt.Sprintf("phase %d strict=%v explicit=%v (checkpoint: load error %v, phase %q)", phase, strict, explicit, lerr, meta.Phase)
	if err != nil {
		documented := false
		for _, sentinel := range []error{migrate.ErrStale, migrate.ErrUnsafeRestore, checkpoint.ErrCorrupt, checkpoint.ErrNewerSchema, checkpoint.ErrOlderSchema, checkpoint.ErrBadEntry} {
			documented = documented || errors.Is(err, sentinel)
		}
		if !documented {
			t.Fatalf("%s: Restore failed with an error that matches no documented sentinel: %v", where, err)
		}
		if !bytes.Equal(cp.Bytes(), file) {
			t.Fatalf("%s: a failed Restore changed the checkpoint", where)
		}
		if !maps.Equal(exp.Snapshot(), legacy) {
			t.Fatalf("%s: a failed Restore changed legacy", where)
		}
		if s.Len() != 0 {
			t.Fatalf("%s: a failed Restore serves %d entries", where, s.Len())
		}
		return
	}

	ckEntries := map[string]int{}
	if readable {
		ckEntries = snap.Entries
	}
	superseded := readable && meta.Phase == migrate.PhaseLegacy.String()
	legacyStale := readable && explicit && phase != migrate.PhaseContract && meta.Phase == migrate.PhaseContract.String()
	var want map[string]int
	switch {
	case legacyStale:
		want = ckEntries
	case phase == migrate.PhaseLegacy || phase == migrate.PhaseExpand:
		want = legacy
	case phase == migrate.PhaseMigrate:
		want = maps.Clone(legacy)
		if readable && !superseded {
			maps.Copy(want, ckEntries)
		}
	default:
		if superseded {
			t.Fatalf("%s: phase 3 served a checkpoint a phase-0 run superseded (want ErrStale)", where)
		}
		want = ckEntries
	}
	got := collect(s)
	if !maps.Equal(got, want) {
		t.Fatalf("%s: serves %v, the rules say %v", where, got, want)
	}
	if rep.Restored != len(got) {
		t.Fatalf("%s: Report.Restored is %d, %d are served", where, rep.Restored, len(got))
	}
	if legacyStale && !maps.Equal(exp.Snapshot(), got) {
		t.Fatalf("%s: stale legacy was not healed: %v, serving %v", where, exp.Snapshot(), got)
	}
	if !explicit && !maps.Equal(exp.Snapshot(), legacy) {
		t.Fatalf("%s: an implicit legacy was written", where)
	}

	// An unreadable file is moved aside intact, never overwritten.
	if file != nil && !clean {
		q := cp.Quarantined()
		if rep.Quarantined == "" || len(q) == 0 {
			t.Fatalf("%s: the unreadable checkpoint was not quarantined", where)
		}
		if !bytes.Equal(q[len(q)-1], file) {
			t.Fatalf("%s: the quarantined copy differs from the file", where)
		}
	}

	// What is served is what the next process loads.
	if phase.WritesCheckpoint() || rep.CheckpointRewritten {
		after, err := cp.Reopen().Load(ctx)
		if errors.Is(err, checkpoint.ErrNotExist) {
			after.Entries = map[string]int{}
		} else if err != nil {
			t.Fatalf("%s: the checkpoint does not load after Restore: %v", where, err)
		}
		if !maps.Equal(after.Entries, got) {
			t.Fatalf("%s: serves %v, a fresh Load of the checkpoint returns %v", where, got, after.Entries)
		}
	}
}
