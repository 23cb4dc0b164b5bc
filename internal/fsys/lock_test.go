package fsys_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/internal/fsys"
)

// FlockHolder reads the kernel's lines for the file's device and inode
// only, and only an flock that is held, not one waited for.
func TestFlockHolder(t *testing.T) {
	const locks = `1: POSIX  ADVISORY  WRITE 100 fe:00:42 0 EOF
2: FLOCK  ADVISORY  WRITE 200 fe:01:42 0 EOF
3: FLOCK  ADVISORY  WRITE 300 08:00:42 0 EOF
4: FLOCK  ADVISORY  WRITE 400 fe:00:4242 0 EOF
5: OFDLCK ADVISORY  READ  -1 fe:00:42 0 EOF
6: FLOCK  ADVISORY  WRITE 600 fe:00:42 0 EOF
6: -> FLOCK  ADVISORY  WRITE 700 fe:00:42 0 EOF
garbage
`
	held, pid, byInode, err := fsys.FlockHolder(strings.NewReader(locks), 0xfe, 0, 42, true)
	require.NoError(t, err)
	assert.True(t, held)
	assert.False(t, byInode)
	assert.Equal(t, 600, pid)

	held, _, _, err = fsys.FlockHolder(strings.NewReader(locks), 0xfe, 0, 43, true)
	require.NoError(t, err)
	assert.False(t, held)

	held, _, _, _ = fsys.FlockHolder(strings.NewReader("6: -> FLOCK  ADVISORY  WRITE 700 fe:00:42 0 EOF\n"), 0xfe, 0, 42, true)
	assert.False(t, held, "a waiter does not hold the lock")

	// A holder in another PID namespace is shown as 0.
	held, pid, _, _ = fsys.FlockHolder(strings.NewReader("1: FLOCK  ADVISORY  WRITE 0 fe:00:42 0 EOF\n"), 0xfe, 0, 42, true)
	assert.True(t, held)
	assert.Equal(t, 0, pid)

	// Another device, the same inode (btrfs, overlayfs): held if it is the
	// only such flock, unknown-as-not-held if several could be it.
	held, pid, byInode, _ = fsys.FlockHolder(strings.NewReader("1: FLOCK  ADVISORY  WRITE 55 00:2a:42 0 EOF\n"), 0xfe, 0, 42, true)
	assert.True(t, held)
	assert.True(t, byInode)
	assert.Equal(t, 55, pid)
	held, _, _, _ = fsys.FlockHolder(strings.NewReader("1: FLOCK  ADVISORY  WRITE 55 00:2a:42 0 EOF\n"), 0xfe, 0, 42, false)
	assert.False(t, held, "by inode alone only where the file system needs it")
	held, _, _, _ = fsys.FlockHolder(strings.NewReader("1: FLOCK  ADVISORY  WRITE 55 00:2a:42 0 EOF\n2: FLOCK  ADVISORY  WRITE 56 00:2b:42 0 EOF\n"), 0xfe, 0, 42, true)
	assert.False(t, held)
}
