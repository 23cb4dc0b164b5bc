package robustness_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

type (
	pcRun    = func(e *pcEnv) error
	pcChange = checkpoint.Change[string, string]
)

// journalScenarios are the power-cut scenarios of a checkpoint opened
// WithJournal (package checkpoint's journal.go): the power is cut before
// every call of every append (the lock check, the stat of the checkpoint,
// the open or creation of the journal, its size, the write, the fsync, the
// close, the directory fsync of a new journal), of every compaction inline
// (the whole save protocol, then the journal's removal) and in the
// background (each of its steps, with commits between them, and a save
// that abandons it), and of a quarantine that moves a file and its journal
// aside; the checker loads each disk image without the option (a File
// replays a journal it finds either way).
//
// How I checked that they have teeth (each breakage made locally, seen to
// fail, reverted):
//   - Not fsyncing the directory after creating the journal
//     (disk.appendJournal): "journal: appends, compaction, save" fails under
//     drop and reorder with "cut before call 21 of 69, during "commit
//     appends", drop: the checkpoint holds seq 1 map[a:1], want seq 2
//     map[a:1 b:<12000 bytes>]" (an acknowledged append lost with the
//     journal's name).
//   - Not fsyncing the journal after the write (writeSync): the same
//     message under drop and half.
//   - Removing the journal before a compaction's save (core.write calling
//     dropJournal before replace): fails under keep and half with "during
//     "commit compacts", keep: the checkpoint holds seq 1 map[a:1], want
//     seq 4 ... or seq 5 ...".
//   - Replaying records whose base is below the file's seq: fails after a
//     cut between a compaction's rename and the journal's removal with
//     "the checkpoint holds seq 4 map[b:... c:... d:...], want seq 4
//     map[b c] or seq 5 map[c d]" (b, deleted by the compaction, back).
//   - The background compaction's scenarios (a file of 64 KiB or more),
//     which run each step of the compaction (compact.go) as a step of
//     their own, with commits between them, each breakage failing "a
//     compaction in the background while commits go on": records made
//     while the compaction runs keeping the old file's base (54 to 281
//     violations, "the checkpoint holds seq 4 ..., want seq 6": the
//     records since the snapshot skipped as stale once the new file is in
//     place); replay without the rule that continues at the seq reached
//     ("the record at byte 48583 follows seq 4, after records that follow
//     seq 1 up to seq 4"); the journal replaced before the new file's
//     rename is durable (reorder: "the record at byte 0 follows seq 4, but
//     the checkpoint is seq 1"); the new file's pieces not fsynced (half,
//     reorder: "the checksum line is missing or malformed"); the new
//     journal not fsynced, or its rename not followed by the directory's
//     fsync (half, reorder, drop: "the checkpoint holds seq 6 ..., want
//     seq 8 ...", the commits appended to the new journal lost).
//   - Removing the journal before the file in Quarantine (disk.quarantine):
//     fails under keep, half and reorder with "during "quarantine", keep:
//     the checkpoint holds seq 2 map[g:1 h:2], want the original
//     unreadable file or no file or a journal without its file" (the file
//     served without its journal).
func journalScenarios(
	open func(wantLoad error) pcRun,
	save func(kv ...string) pcRun,
	commit func(changes ...pcChange) pcRun,
	put func(k, v string) pcChange,
	del func(k string) pcChange,
	rm func(names ...string) pcRun,
) []powerScenario {
	// Big values, so that a few records pass the journal's bound (a
	// fifth of the file, at least 32 KiB) and a commit compacts.
	b1, b2, b3 := strings.Repeat("b", 12000), strings.Repeat("c", 12000), strings.Repeat("d", 12000)
	journal := []checkpoint.Option{checkpoint.WithJournal()}
	absent := pcState{}

	// An intact file with a journal damaged before its tail.
	base := checkpoint.NewMemory[string, string]()
	ctx := context.Background()
	if err := base.Save(ctx, checkpoint.Snapshot[string, string]{Entries: map[string]string{"g": "1"}}); err != nil {
		panic(err)
	}
	jm, err := base.Reopen(checkpoint.WithJournal())
	if err != nil {
		panic(err)
	}
	if _, err := jm.Load(ctx); err != nil {
		panic(err)
	}
	if err := jm.Commit(ctx, checkpoint.Meta{}, []pcChange{{Key: "h", Value: "2"}}); err != nil {
		panic(err)
	}
	if err := jm.Commit(ctx, checkpoint.Meta{}, []pcChange{{Key: "i", Value: "3"}}); err != nil {
		panic(err)
	}
	if err := jm.Commit(ctx, checkpoint.Meta{}, []pcChange{{Key: "j", Value: "4"}}); err != nil {
		panic(err)
	}
	// The first commit rewrote the file (format 1 to 2); the others are in
	// the journal, the first of them damaged.
	damaged := checkpointtest.Journal(jm)
	damaged[10] ^= 0x01

	// A state of at least 64 KiB, whose compactions run in the
	// background: the commit that crosses the bound appends, and the
	// compaction's two parts run as steps of their own, with commits
	// before, between and after them.
	big := strings.Repeat("x", 12000)
	var bg []string
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		bg = append(bg, k, big)
	}
	bgSnap := func(seq uint64, kv ...string) pcState {
		s := snap(seq, append(append([]string{}, bg...), kv...)...)
		for k, v := range s.entries {
			if v == "" {
				delete(s.entries, k)
			}
		}
		return s
	}
	// compaction runs the next n steps of the one compaction started (see
	// fsystest.WithCompactions): write the new file; rename it into place;
	// make the rename durable; write the new journal; rename it into
	// place; remove what is left.
	compaction := func(n int) pcRun {
		return func(e *pcEnv) error {
			if len(e.comp.jobs) != 1 {
				return fmt.Errorf("%d compactions started, want 1", len(e.comp.jobs))
			}
			e.comp.jobs[0].step(n)
			return nil
		}
	}

	return []powerScenario{
		{
			name: "journal: a compaction in the background while commits go on",
			rel:  "d/state.json",
			opts: journal,
			steps: []pcStep{
				{"open", open(checkpoint.ErrNotExist), absent},
				{"save", save(bg...), bgSnap(1)},
				{"commit creates the journal", commit(put("g", b1)), bgSnap(2, "g", b1)},
				{"commit appends", commit(put("h", b2)), bgSnap(3, "g", b1, "h", b2)},
				{"commit crosses the bound and starts a compaction", commit(put("i", b3), del("a")), bgSnap(4, "a", "", "g", b1, "h", b2, "i", b3)},
				{"commit while the compaction waits", commit(put("j", "1")), bgSnap(5, "a", "", "g", b1, "h", b2, "i", b3, "j", "1")},
				{"compaction writes the new file", compaction(1), bgSnap(5, "a", "", "g", b1, "h", b2, "i", b3, "j", "1")},
				{"commit while the new file waits", commit(del("b")), bgSnap(6, "a", "", "b", "", "g", b1, "h", b2, "i", b3, "j", "1")},
				{"compaction renames the new file into place", compaction(1), bgSnap(6, "a", "", "b", "", "g", b1, "h", b2, "i", b3, "j", "1")},
				{"commit before the rename is durable", commit(put("k", "2")), bgSnap(7, "a", "", "b", "", "g", b1, "h", b2, "i", b3, "j", "1", "k", "2")},
				{"compaction makes the rename durable, writes the new journal", compaction(2), bgSnap(7, "a", "", "b", "", "g", b1, "h", b2, "i", b3, "j", "1", "k", "2")},
				{"commit while the new journal waits", commit(del("c")), bgSnap(8, "a", "", "b", "", "c", "", "g", b1, "h", b2, "i", b3, "j", "1", "k", "2")},
				{"compaction renames the new journal into place", compaction(2), bgSnap(8, "a", "", "b", "", "c", "", "g", b1, "h", b2, "i", b3, "j", "1", "k", "2")},
				{"commit after the compaction", commit(put("l", "3")), bgSnap(9, "a", "", "b", "", "c", "", "g", b1, "h", b2, "i", b3, "j", "1", "k", "2", "l", "3")},
			},
		},
		{
			name: "journal: a save abandons a compaction in the background",
			rel:  "state.json",
			opts: journal,
			steps: []pcStep{
				{"open", open(checkpoint.ErrNotExist), absent},
				{"save", save(bg...), bgSnap(1)},
				{"commit creates the journal", commit(put("g", b1)), bgSnap(2, "g", b1)},
				{"commit appends", commit(put("h", b2)), bgSnap(3, "g", b1, "h", b2)},
				{"commit crosses the bound and starts a compaction", commit(put("i", b3)), bgSnap(4, "g", b1, "h", b2, "i", b3)},
				{"compaction writes the new file", compaction(1), bgSnap(4, "g", b1, "h", b2, "i", b3)},
				{"save abandons it", save("z", "1"), snap(5, "z", "1")},
				{"the abandoned compaction ends", compaction(5), snap(5, "z", "1")},
				{"commit", commit(put("y", "2")), snap(6, "z", "1", "y", "2")},
			},
		},
		{
			name: "journal: a save abandons a compaction in the background once its file is in place",
			rel:  "state.json",
			opts: journal,
			steps: []pcStep{
				{"open", open(checkpoint.ErrNotExist), absent},
				{"save", save(bg...), bgSnap(1)},
				{"commit creates the journal", commit(put("g", b1)), bgSnap(2, "g", b1)},
				{"commit appends", commit(put("h", b2)), bgSnap(3, "g", b1, "h", b2)},
				{"commit crosses the bound and starts a compaction", commit(put("i", b3)), bgSnap(4, "g", b1, "h", b2, "i", b3)},
				{"compaction writes and renames the new file", compaction(3), bgSnap(4, "g", b1, "h", b2, "i", b3)},
				{"commit before the new journal", commit(put("x", "0")), bgSnap(5, "g", b1, "h", b2, "i", b3, "x", "0")},
				{"save abandons it", save("z", "1"), snap(6, "z", "1")},
				{"the abandoned compaction ends", compaction(3), snap(6, "z", "1")},
				{"commit", commit(put("y", "2")), snap(7, "z", "1", "y", "2")},
			},
		},
		{
			name: "journal: appends, compaction, save",
			rel:  "d/state.json",
			opts: journal,
			steps: []pcStep{
				{"open", open(checkpoint.ErrNotExist), absent},
				{"save", save("a", "1"), snap(1, "a", "1")},
				{"commit creates the journal", commit(put("b", b1)), snap(2, "a", "1", "b", b1)},
				{"commit appends", commit(put("c", b2)), snap(3, "a", "1", "b", b1, "c", b2)},
				{"commit appends a delete", commit(del("a")), snap(4, "b", b1, "c", b2)},
				{"commit compacts", commit(put("d", b3), del("b")), snap(5, "c", b2, "d", b3)},
				{"commit creates the journal again", commit(put("e", "5")), snap(6, "c", b2, "d", b3, "e", "5")},
				{"save folds the journal", save("f", "6"), snap(7, "f", "6")},
				{"commit", commit(put("g", "7")), snap(8, "f", "6", "g", "7")},
			},
		},
		{
			// Reopened after every commit: a Load finds the journal and
			// its next commit must append after exactly what it replayed.
			name: "journal: restarts between appends",
			rel:  "state.json",
			opts: journal,
			steps: []pcStep{
				{"open", open(checkpoint.ErrNotExist), absent},
				{"save", save("a", "1"), snap(1, "a", "1")},
				{"commit", commit(put("b", "2")), snap(2, "a", "1", "b", "2")},
				{"restart", restart(open(nil)), snap(2, "a", "1", "b", "2")},
				{"commit", commit(del("a"), put("c", "3")), snap(3, "b", "2", "c", "3")},
				{"restart", restart(open(nil)), snap(3, "b", "2", "c", "3")},
				{"commit", commit(put("a", "4")), snap(4, "a", "4", "b", "2", "c", "3")},
			},
		},
		{
			// The checkpoint removed under an open File that journals: the
			// next commit cannot append to records that lost their base,
			// and writes the whole state.
			name: "journal: checkpoint removed while open",
			rel:  "d/state.json",
			opts: journal,
			steps: []pcStep{
				{"open", open(checkpoint.ErrNotExist), absent},
				{"save", save("a", "1"), snap(1, "a", "1")},
				{"commit", commit(put("b", "2")), snap(2, "a", "1", "b", "2")},
				{"rm checkpoint", rm("state.json"), pcState{orphan: true}},
				{"commit rewrites", commit(put("c", "3")), snap(3, "a", "1", "b", "2", "c", "3")},
				{"commit", commit(del("a")), snap(4, "b", "2", "c", "3")},
			},
		},
		{
			name: "journal: directory removed while open",
			rel:  "var/d/state.json",
			opts: journal,
			steps: []pcStep{
				{"open", open(checkpoint.ErrNotExist), absent},
				{"save", save("a", "1"), snap(1, "a", "1")},
				{"commit", commit(put("b", "2")), snap(2, "a", "1", "b", "2")},
				{"rm -rf directory", rm("state.json", "state.json.journal", "state.json.lock", "."), absent},
				{"commit rewrites", commit(put("c", "3")), snap(3, "a", "1", "b", "2", "c", "3")},
				{"commit", commit(del("a")), snap(4, "b", "2", "c", "3")},
			},
		},
		{
			name:           "journal: quarantine of a damaged journal",
			rel:            "state.json",
			opts:           journal,
			base:           base.Bytes(),
			garbageJournal: damaged,
			steps: []pcStep{
				{"open", open(checkpoint.ErrCorrupt), pcState{garbage: true}},
				{"quarantine", func(e *pcEnv) error { _, err := e.f.Quarantine(e.ctx); return err }, absent},
				// A save after a Quarantine continues the quarantined
				// file's Seq (1: the base's save; the damaged journal
				// replays nothing), so that a kept copy restored later
				// reads as older than what followed it (issue 41, 3).
				{"save", save("x", "1"), snap(2, "x", "1")},
				{"commit", commit(put("y", "2")), snap(3, "x", "1", "y", "2")},
			},
		},
	}
}

// restart closes the scenario's File, as a clean stop would, and runs
// open.
func restart(open pcRun) pcRun {
	return func(e *pcEnv) error {
		if err := e.f.Close(); err != nil {
			return err
		}
		e.f = nil
		return open(e)
	}
}
