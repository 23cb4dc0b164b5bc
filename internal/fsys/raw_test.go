package fsys_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/internal/fsys"
)

// TestAppendAndPeekWithoutOSFile: the journal's append and the
// checkpoint's Peek work on the checked descriptor itself (issue 35):
// an append goes to the end and is what Size, a Peek and a read then see;
// Truncate cuts; a second Close fails instead of closing a descriptor the
// process has reused; Peek's FileInfo is the same file as an Lstat's, with
// its size and modification time.
func TestAppendAndPeekWithoutOSFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "j")
	require.NoError(t, os.WriteFile(name, []byte("head:"), 0o600))
	var osfs fsys.OS

	f, err := osfs.OpenAppend(name, 0o600, false)
	require.NoError(t, err)
	size, err := f.Size()
	require.NoError(t, err)
	assert.Equal(t, int64(5), size, "the size the open saw")
	n, err := f.Write([]byte("one\n"))
	require.NoError(t, err)
	assert.Equal(t, 4, n)
	require.NoError(t, f.Sync())
	size, err = f.Size()
	require.NoError(t, err)
	assert.Equal(t, int64(9), size, "the size after the write, asked again")
	_, err = f.Write([]byte("two\n"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(9))
	require.NoError(t, f.Close())
	err = f.Close()
	assert.True(t, errors.Is(err, os.ErrClosed), "a second close: %v", err)

	data, err := os.ReadFile(name)
	require.NoError(t, err)
	assert.Equal(t, "head:one\n", string(data))

	first, last, info, err := osfs.Peek(name, 4, 3)
	require.NoError(t, err)
	assert.Equal(t, "head", string(first))
	assert.Equal(t, "ne\n", string(last))
	lst, err := osfs.Lstat(name)
	require.NoError(t, err)
	assert.True(t, fsys.SameFile(info, lst), "Peek's file is the Lstat's")
	assert.Equal(t, lst.Size(), info.Size())
	assert.True(t, lst.ModTime().Equal(info.ModTime()))

	other := filepath.Join(t.TempDir(), "k")
	require.NoError(t, os.WriteFile(other, data, 0o600))
	olst, err := osfs.Lstat(other)
	require.NoError(t, err)
	assert.False(t, fsys.SameFile(info, olst), "another file with the same bytes is not the same file")
}
