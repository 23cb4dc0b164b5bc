package main_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reseal makes a hand edit load: the daemon sees the edited value, the
// hand-edited bytes are kept, .prev stays as it was.
func TestReseal(t *testing.T) {
	path := save(t, t.TempDir(), entries(2), entries(3))
	prevBefore := readBytes(t, path+".prev")
	edit(t, path, `"ip":"10.0.0.1"`, `"ip":"10.0.0.42"`)
	edited := readBytes(t, path)

	r := run(t, "reseal", path)
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "--i-edited-this-file-by-hand")
	assert.Contains(t, r.stderr, "phaseshift diff --ignore-checksum")
	assert.Equal(t, edited, readBytes(t, path))

	r = run(t, "reseal", "--json", "--i-edited-this-file-by-hand", path)
	require.Equal(t, 0, r.code, r.stderr)
	var out repairOut
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, "reseal", out.Action)

	got := mustLoad(t, path)
	want := entries(3)
	want[k(1)] = value{IP: "10.0.0.42", Token: v(1).Token}
	assert.Equal(t, want, got.Entries)
	assert.Equal(t, uint64(3), got.Meta.Seq)
	assert.Equal(t, "migrate", got.Meta.Phase)
	assert.Equal(t, prevBefore, readBytes(t, path+".prev"))
	require.Equal(t, []string{out.Kept}, kept(t, path))
	assert.Equal(t, edited, readBytes(t, out.Kept))

	r = run(t, "reseal", "--i-edited-this-file-by-hand", path)
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "nothing to reseal")
	assert.Len(t, kept(t, path), 1)
}

// An edit that breaks the file is not resealed, and nothing changes.
func TestResealRefusesABrokenEdit(t *testing.T) {
	cases := map[string][2]string{
		"a key twice":           {`"containerID":"c1"`, `"containerID":"c0"`},
		"bad JSON in a value":   {`"ip":"10.0.0.1"`, `"ip":10.0.0.1`},
		"an entry on two lines": {`"ifName":"eth0"},"value":{"ip":"10.0.0.1"`, "\"ifName\":\"eth0\"},\n\"value\":{\"ip\":\"10.0.0.1\""},
		"a header field added":  {`"seq": 2,`, `"seq": 2, "x": 1,`},
	}
	for name, ed := range cases {
		t.Run(name, func(t *testing.T) {
			path := save(t, t.TempDir(), entries(2), entries(3))
			edit(t, path, ed[0], ed[1])
			before := readBytes(t, path)
			r := run(t, "reseal", "--i-edited-this-file-by-hand", path)
			assert.Equal(t, 4, r.code, r.stdout)
			assert.Contains(t, r.stderr, "cannot reseal")
			assert.Equal(t, before, readBytes(t, path))
			assert.Empty(t, kept(t, path))
		})
	}
}

// Spacing an editor adds inside an entry's line is the writer's layout
// still; reseal writes the entry back compact.
func TestResealCompactsAnEditedLine(t *testing.T) {
	path := save(t, t.TempDir(), entries(2))
	edit(t, path, `"value":{"ip":"10.0.0.1"`, `"value": { "ip": "10.0.0.77"`)
	r := run(t, "reseal", "--i-edited-this-file-by-hand", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, string(readBytes(t, path)), `"value":{"ip":"10.0.0.77","token":"`+secret+`1"}}`)
	assert.Equal(t, "10.0.0.77", mustLoad(t, path).Entries[k(1)].IP)
}

func TestResealFoldsTheJournal(t *testing.T) {
	path := journaled(t, t.TempDir())
	edit(t, path, `"ip":"10.0.0.2"`, `"ip":"10.0.0.99"`)
	r := run(t, "verify", path)
	require.Equal(t, 4, r.code, "the edit broke the checksum")

	r = run(t, "reseal", "--i-edited-this-file-by-hand", path)
	require.Equal(t, 0, r.code, r.stderr)
	s := mustLoad(t, path)
	want := journalState()
	want[k(2)] = value{IP: "10.0.0.99", Token: v(2).Token}
	assert.Equal(t, want, s.Entries, "the edit, with the journal's commits over it")
	assert.Equal(t, "contract", s.Meta.Phase, "the phase of the last commit, not of the file's last compaction")
	assert.NoFileExists(t, path+".journal")
}

// TestResealSeqAboveTheJournal attacks "a seq above both PATH's and
// PATH.prev's" (and the README's "above every seq they saw") for reseal
// over a journal: the resealed file's seq must be above the journal's
// last record, or a daemon would see its seq go back.
func TestResealSeqAboveTheJournal(t *testing.T) {
	path := journaled(t, t.TempDir())
	before := mustLoadJournaled(t, path).Meta.Seq
	edit(t, path, `"ip":"10.0.0.2"`, `"ip":"10.0.0.99"`)
	r := run(t, "reseal", "--i-edited-this-file-by-hand", path)
	require.Equal(t, 0, r.code, r.stderr)
	s := mustLoadJournaled(t, path)
	assert.Greater(t, s.Meta.Seq, before, "the resealed seq is above the journal's last")
	assert.Equal(t, "ipamd v1.9.0", s.Meta.Writer, "the last record's writer")
}
