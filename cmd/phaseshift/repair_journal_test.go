package main_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repair-journal over a journal damaged before its last record: without
// its flag it changes nothing, says what it would keep and drop, and exits
// 9; with it, the daemon's Load gets the file with every record before
// the damage, the last kept record's phase and writer, a seq above every
// record's (the dropped ones too), and the file and its whole journal are
// kept as PATH.before-repair-journal-<time>.
func TestRepairJournal(t *testing.T) {
	path, fileSeq, recs := commits(t, t.TempDir(), 4)
	j := damage(t, path, recs, 2) // records 0 and 1 replay; 2 is damaged; 3 follows it
	file := readBytes(t, path)
	r0, r1, r2 := len(recs[0]), len(recs[1]), len(recs[2])

	r := run(t, "repair-journal", path)
	assert.Equal(t, 9, r.code, r.stderr)
	assert.Contains(t, r.stderr, "nothing changed")
	assert.Contains(t, r.stderr, "--drop-damaged-records")
	for _, want := range []string{
		fmt.Sprintf("state.json.journal is damaged at byte %d: checksum mismatch", r0+r1),
		fmt.Sprintf("would keep: 2 records (seq %d-%d), bytes 0-%d of state.json.journal", fileSeq+1, fileSeq+2, r0+r1),
		fmt.Sprintf("would drop: the damaged record, bytes %d-%d, and 1 record (seq %d), bytes %d-%d after it", r0+r1, r0+r1+r2, fileSeq+4, r0+r1+r2, len(j)),
	} {
		assert.Contains(t, r.stdout, want)
	}
	assert.NotContains(t, r.stdout+r.stderr, secret)
	assert.Equal(t, file, readBytes(t, path))
	assert.Equal(t, j, readBytes(t, path+".journal"))
	assert.Empty(t, kept(t, path))

	r = run(t, "repair-journal", "--drop-damaged-records", "--json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var out struct {
		repairOut
		Damage struct {
			Offset, Bytes int64
			Before, After struct {
				Records int
				LastSeq uint64
			}
		}
	}
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, "repair-journal", out.Action)
	assert.Equal(t, int64(r0+r1), out.Damage.Offset)
	assert.Equal(t, 2, out.Damage.Before.Records)
	assert.Equal(t, 1, out.Damage.After.Records)

	s := mustLoadJournaled(t, path)
	want := entries(3)
	want[k(10)], want[k(11)] = v(10), v(11)
	assert.Equal(t, want, s.Entries, "the file and the records before the damage")
	assert.Greater(t, s.Meta.Seq, fileSeq+4, "above every record's seq, the dropped ones too")
	assert.Equal(t, "contract", s.Meta.Phase, "the last kept record's phase")
	assert.Equal(t, "ipamd v1.9.0", s.Meta.Writer)
	assert.NoFileExists(t, path+".journal")
	assert.True(t, strings.HasPrefix(out.Kept, path+".before-repair-journal-"), out.Kept)
	assert.Equal(t, file, readBytes(t, out.Kept), "the file it replaced is kept")
	assert.Equal(t, j, readBytes(t, out.Kept+".journal"), "with its whole journal, the dropped records included")

	// The kept copy still shows the damage; a second run has nothing to do.
	r = run(t, "inspect", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, fmt.Sprintf("with its journal (4 records, damaged at byte %d); kept before repair-journal at ", r0+r1))
	r = run(t, "repair-journal", "--drop-damaged-records", path)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "nothing to repair")
	assert.Len(t, kept(t, path), 2, "nothing more kept")
}

// An older file put back by hand under a journal (cp state.json.prev
// state.json): the first record follows another file, so no record can be
// kept, and repair-journal says it drops them all.
func TestRepairJournalOfAFileReplacedByHand(t *testing.T) {
	path := journaled(t, t.TempDir(), entries(2), entries(3)) // .prev seq 1, file seq 2, records seq 3 and 4
	require.NoError(t, os.WriteFile(path, readBytes(t, path+".prev"), 0o600))

	r := run(t, "inspect", "--json", path)
	require.Equal(t, 4, r.code, r.stderr)
	var out struct{ Journal *journalOut }
	decodeJSON(t, r.stdout, &out)
	require.NotNil(t, out.Journal.Damage)
	assert.Zero(t, out.Journal.Damage.Offset)
	assert.Equal(t, uint64(3), out.Journal.Damage.Seq, "the record's header reads: it is out of place, not damaged")
	assert.Contains(t, out.Journal.Damage.Reason, "follows seq 2, but the checkpoint is seq 1")

	r = run(t, "repair-journal", "--drop-damaged-records", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "kept: 0 records, bytes 0-0")
	assert.Contains(t, r.stdout, "dropped: the damaged record, bytes 0-")
	assert.Contains(t, r.stdout, ", seq 3, and 1 record (seq 4)")
	s := mustLoadJournaled(t, path)
	assert.Equal(t, entries(2), s.Entries)
	assert.Greater(t, s.Meta.Seq, uint64(4))
}

// What repair-journal does not repair: an intact checkpoint (a torn last
// record included: every Load discards it), a damaged file (restore-prev
// or reseal), a journal without its file (restore-prev), a locked one.
func TestRepairJournalRefusals(t *testing.T) {
	t.Run("intact, torn tail", func(t *testing.T) {
		path, _, recs := commits(t, t.TempDir(), 2)
		require.NoError(t, os.WriteFile(path+".journal", append(recs[0], recs[1][:20]...), 0o600))
		r := run(t, "repair-journal", "--drop-damaged-records", path)
		assert.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, "nothing to repair; its torn last record (20 bytes")
		assert.Empty(t, kept(t, path))
	})
	t.Run("a damaged file", func(t *testing.T) {
		path := save(t, t.TempDir(), entries(2))
		edit(t, path, "10.0.0.1", "10.0.0.9")
		r := run(t, "repair-journal", "--drop-damaged-records", path)
		assert.Equal(t, 4, r.code)
		assert.Contains(t, r.stderr, "has no journal to repair")
		assert.Contains(t, r.stderr, "reseal")
		assert.Empty(t, kept(t, path))
	})
	t.Run("a journal without its file", func(t *testing.T) {
		path, _, _ := commits(t, t.TempDir(), 2)
		require.NoError(t, os.Remove(path))
		r := run(t, "repair-journal", "--drop-damaged-records", path)
		assert.Equal(t, 4, r.code)
		assert.Contains(t, r.stderr, "phaseshift restore-prev")
		assert.FileExists(t, path+".journal")
	})
	t.Run("locked", func(t *testing.T) {
		path, _, recs := commits(t, t.TempDir(), 3)
		damage(t, path, recs, 0)
		holdLock(t, path)
		r := run(t, "repair-journal", "--lock-wait", "50ms", "--drop-damaged-records", path)
		assert.Equal(t, 7, r.code)
	})
}
