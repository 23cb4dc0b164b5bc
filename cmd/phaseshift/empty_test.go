package main_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
	"github.com/phaseshift/phaseshift/migrate"
	"github.com/phaseshift/phaseshift/source"
)

// An empty checkpoint file (what `: > file` leaves, or a crash between
// create and write on some file systems) holds nothing. A daemon over a
// volatile registry refuses it, and so does phase 3; the command names
// the verb that gets it going again with nothing the sides hold lost
// (issue 42, item 2): discard-empty, which moves it aside, or, where .prev
// is there, restore-prev, which puts .prev back marked behind.

// restoreVolatile restores a Store in phase 3 over a volatile registry,
// as a VM proxy does, and returns what it serves.
func restoreVolatile(t *testing.T, path string) (map[key]value, error) {
	t.Helper()
	cp, err := checkpoint.Open[key, value](context.Background(), path, checkpointtest.Schema(schema)...)
	require.NoError(t, err)
	s, err := migrate.New(migrate.Config[key, value]{Phase: migrate.PhaseContract, Legacy: &source.Map[key, value]{}, Checkpoint: cp})
	require.NoError(t, err)
	defer s.Close()
	if _, err := s.Restore(context.Background()); err != nil {
		return nil, err
	}
	return served(s), nil
}

func TestEmptyFileWithoutPrev(t *testing.T) {
	path := save(t, t.TempDir(), entries(2))
	require.NoError(t, os.Remove(path))
	require.NoError(t, os.WriteFile(path, nil, 0o600)) // : > path
	_, err := restoreVolatile(t, path)
	require.Error(t, err, "a daemon refuses it")

	say := "empty file (0 bytes): it holds nothing; run phaseshift discard-empty " + path
	for _, verb := range []string{"verify", "inspect"} {
		r := run(t, verb, path)
		assert.Equal(t, 4, r.code, verb)
		assert.Contains(t, r.stdout+r.stderr, say, verb)
	}
	r := run(t, "inspect", path)
	assert.Contains(t, r.stdout, "entries:   0 (an empty file holds nothing)")

	r = run(t, "discard-empty", "--json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var out struct{ Path, Action, Kept string }
	decodeJSON(t, r.stdout, &out)
	assert.Equal(t, "discard-empty", out.Action)
	assert.NoFileExists(t, path)
	require.Equal(t, []string{out.Kept}, kept(t, path))
	assert.True(t, strings.HasPrefix(out.Kept, path+".before-discard-empty-"))
	assert.Empty(t, readBytes(t, out.Kept), "the empty file is kept as it was")

	got, err := restoreVolatile(t, path)
	require.NoError(t, err, "the daemon starts")
	assert.Empty(t, got)
}

func TestEmptyFileWithPrev(t *testing.T) {
	path := save(t, t.TempDir(), entries(2), entries(3))
	require.NoError(t, os.WriteFile(path, nil, 0o600))

	say := "empty file (0 bytes): it holds nothing; run phaseshift restore-prev " + path
	for _, verb := range []string{"verify", "inspect"} {
		r := run(t, verb, path)
		assert.Equal(t, 4, r.code, verb)
		assert.Contains(t, r.stdout+r.stderr, say, verb)
	}
	// discard-empty would lose what .prev holds: it points to restore-prev.
	r := run(t, "discard-empty", path)
	assert.Equal(t, 9, r.code, r.stderr)
	assert.Contains(t, r.stderr, "phaseshift restore-prev "+path)
	assert.Empty(t, readBytes(t, path), "nothing changed")

	r = run(t, "restore-prev", path)
	require.Equal(t, 0, r.code, r.stderr)
	s := mustLoad(t, path)
	assert.Equal(t, entries(2), s.Entries)
	assert.NotEmpty(t, s.Meta.Behind, "marked: .prev lacks the last save")
}

// discard-empty moves aside only an empty file: one that holds bytes is
// refused (exit 9, nothing changed); a missing one is reported missing.
func TestDiscardEmptyRefusesAFileThatHoldsBytes(t *testing.T) {
	path := save(t, t.TempDir(), entries(2))
	before := readBytes(t, path)
	r := run(t, "discard-empty", path)
	assert.Equal(t, 9, r.code, r.stderr)
	assert.Contains(t, r.stderr, "is not empty")
	assert.Equal(t, before, readBytes(t, path))
	assert.Empty(t, kept(t, path))

	edit(t, path, "10.0.0.1", "10.0.0.9")
	r = run(t, "discard-empty", path)
	assert.Equal(t, 9, r.code, r.stderr)
	assert.Empty(t, kept(t, path))

	require.NoError(t, os.Remove(path))
	r = run(t, "discard-empty", path)
	assert.Equal(t, 3, r.code, r.stderr)
}

// An empty file whose journal holds records: they follow the file's lost
// content and go with it, so discard-empty asks for --accept-loss, and
// keeps both.
func TestDiscardEmptyWithAJournal(t *testing.T) {
	path := journaled(t, t.TempDir(), entries(3))
	require.NoFileExists(t, path+".prev")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	journal := readBytes(t, path+".journal")

	r := run(t, "discard-empty", path)
	assert.Equal(t, 9, r.code, r.stderr)
	assert.Contains(t, r.stderr, "holds 2 records")
	assert.Contains(t, r.stderr, "--accept-loss")
	assert.Equal(t, journal, readBytes(t, path+".journal"), "nothing changed")

	r = run(t, "discard-empty", "--accept-loss", "--json", path)
	require.Equal(t, 0, r.code, r.stderr)
	var out struct{ Kept string }
	decodeJSON(t, r.stdout, &out)
	assert.NoFileExists(t, path)
	assert.NoFileExists(t, path+".journal")
	assert.Equal(t, journal, readBytes(t, out.Kept+".journal"), "the journal is kept with the file")
}
