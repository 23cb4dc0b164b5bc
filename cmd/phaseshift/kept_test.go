package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// A delete made by mistake on a journaled checkpoint is undone with
// restore-kept: .prev lacks the journal's commits, the copy delete kept
// (with its journal) has them all. The copy restored is read with its
// journal replayed, written with a seq above every seq seen, and the file
// it replaced is kept in turn.
func TestRestoreKeptUndoesADelete(t *testing.T) {
	path := journaled(t, t.TempDir())
	before := mustLoadJournaled(t, path)

	r := run(t, "delete", "--json", path, keyJSON(t, k(3))) // put by the journal only
	require.Equal(t, 0, r.code, r.stderr)
	var del repairOut
	decodeJSON(t, r.stdout, &del)
	require.True(t, strings.HasPrefix(del.Kept, path+".before-delete-"), del.Kept)
	require.FileExists(t, del.Kept+".journal")
	require.NotContains(t, mustLoadJournaled(t, path).Entries, k(3))

	// The file is intact: restore-kept refuses without --replace-intact,
	// and says how the two differ.
	r = run(t, "restore-kept", path, del.Kept)
	assert.Equal(t, 9, r.code, r.stderr)
	assert.Contains(t, r.stderr, "0 entries only in state.json, 1 only in the copy and 0 with other values")
	assert.Contains(t, r.stderr, "--replace-intact")

	r = run(t, "restore-kept", "--replace-intact", "--json", path, filepath.Base(del.Kept)) // a name beside PATH will do
	require.Equal(t, 0, r.code, r.stderr)
	var out repairOut
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, "restore-kept", out.Action)
	assert.Equal(t, del.Kept, out.From)
	assert.True(t, strings.HasPrefix(out.Kept, path+".before-restore-kept-"), out.Kept)

	s := mustLoadJournaled(t, path)
	assert.Equal(t, before.Entries, s.Entries, "the state before the delete, the journal's commits included")
	assert.Equal(t, before.Meta.Phase, s.Meta.Phase)
	assert.Greater(t, s.Meta.Seq, del.Header.Seq, "above the seq the delete wrote")
	assert.NoFileExists(t, path+".journal")

	// The kept copy named by its journal, and the text output.
	r = run(t, "restore-kept", "--accept-loss", "--replace-intact", path, out.Kept)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "restored "+path+" from "+out.Kept)
	assert.NotContains(t, mustLoadJournaled(t, path).Entries, k(3), "the delete again")

	// The undo it prints works as printed.
	m := regexp.MustCompile(`\(undo with: phaseshift (restore-kept [^)]*)\)`).FindStringSubmatch(r.stdout)
	require.Len(t, m, 2, r.stdout)
	r = run(t, strings.Fields(m[1])...)
	require.Equal(t, 0, r.code, "%s: %s", m[1], r.stderr)
	assert.Equal(t, before.Entries, mustLoadJournaled(t, path).Entries, "undone")
}

// A quarantined copy (the daemon's restore moved an unreadable file
// aside), and a .corrupt-<time> copy an older phaseshift kept before a
// repair, are listed and restored like any kept copy.
func TestRestoreKeptOfAQuarantinedCopy(t *testing.T) {
	dir := t.TempDir()
	path := save(t, dir, entries(2), entries(4))
	edit(t, path, "10.0.0.1", "10.0.0.9") // the daemon cannot load it
	ctx := context.Background()
	f, err := checkpoint.Open[key, value](ctx, path, checkpointtest.Schema(schema)...)
	require.NoError(t, err)
	moved, err := f.Quarantine(ctx)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	// An older command's copy of an intact file it replaced.
	legacy := path + ".corrupt-20250101T000000.000000000Z"
	require.NoError(t, os.WriteFile(legacy, readBytes(t, path+".prev"), 0o600))

	r := run(t, "inspect", path)
	assert.Equal(t, 3, r.code)
	assert.Contains(t, r.stdout, "kept copies: 2")
	assert.Contains(t, r.stdout, "state.json.corrupt-20250101T000000.000000000Z: intact, seq 1, ")
	assert.Contains(t, r.stdout, filepath.Base(moved)+": corrupt, seq 2")

	r = run(t, "restore-kept", path, moved)
	assert.Equal(t, 4, r.code, "a corrupt copy is not restored")
	assert.Contains(t, r.stderr, "cannot restore "+moved)
	r = run(t, "restore-kept", path, legacy)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, entries(2), mustLoad(t, path).Entries)
	assert.NotContains(t, r.stdout, "is kept as", "nothing was at the path to keep")

	r = run(t, "restore-kept", path, path+".prev")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "is not a copy kept beside")
}

// Copies kept by repairs are bounded: after more repairs than the bound,
// the newest 5 are left, the oldest removed with their journals, and the
// repair says which it removed. The daemon's quarantined copies are
// counted apart, and a name that does not read as a kept copy is never
// removed.
func TestKeptCopiesAreBounded(t *testing.T) {
	path := journaled(t, t.TempDir(), entries(9))
	ctx := context.Background()
	f, err := checkpoint.Open[key, value](ctx, path, append(checkpointtest.Schema(schema), checkpoint.WithJournal())...)
	require.NoError(t, err)
	// A quarantined copy, then the state back.
	s, err := f.Load(ctx)
	require.NoError(t, err)
	quarantined, err := f.Quarantine(ctx)
	require.NoError(t, err)
	require.NoError(t, f.Save(ctx, s))
	require.NoError(t, f.Commit(ctx, s.Meta, []checkpoint.Change[key, value]{{Key: k(20), Value: v(20)}}))
	require.NoError(t, f.Close())
	mine := path + ".before-delete-by-hand"
	require.NoError(t, os.WriteFile(mine, []byte("an operator's own file"), 0o600))

	var copies []string
	var pruned []string
	for i := 1; i <= 7; i++ {
		r := run(t, "delete", "--json", path, keyJSON(t, k(i)))
		require.Equal(t, 0, r.code, r.stderr)
		var out struct {
			Kept   string
			Pruned []string
		}
		decodeJSON(t, r.stdout, &out)
		copies = append(copies, out.Kept)
		pruned = append(pruned, out.Pruned...)
	}
	assert.Equal(t, copies[:2], pruned, "the two oldest, each by the repair that made one too many")
	for _, c := range copies[:2] {
		assert.NoFileExists(t, c)
	}
	assert.NoFileExists(t, copies[0]+".journal", "with its journal")
	for _, c := range copies[2:] {
		assert.FileExists(t, c)
	}
	assert.FileExists(t, quarantined, "the daemon's quarantined copies are counted apart")
	assert.FileExists(t, mine, "not a kept copy's name: never removed")

	r := run(t, "delete", path, keyJSON(t, k(8)))
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, fmt.Sprintf("removed the oldest copy kept by a repair, %s: a checkpoint keeps its 5 newest", copies[2]))
}
