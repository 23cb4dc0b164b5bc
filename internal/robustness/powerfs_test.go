package robustness_test

import (
	"io/fs"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/internal/robustness"
)

// TestPowerFSModel pins down the model the power-cut tests rely on: what
// each survival model keeps of unsynced data and directory entries.
func TestPowerFSModel(t *testing.T) {
	p := robustness.NewPowerFS("/r")
	require.NoError(t, p.MkdirAll("/r/d", 0o700))
	require.NoError(t, p.SyncDir("/r"))
	f, err := p.CreateExcl("/r/d/.x.tmp-0123456789abcdef", 0o600)
	require.NoError(t, err)
	_, err = f.Write([]byte("abcd"))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	_, err = f.Write([]byte("efgh"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = p.CreateExcl(f.Name(), 0o600)
	require.ErrorIs(t, err, fs.ErrExist, "CreateExcl never opens what is there")
	require.NoError(t, p.Rename(f.Name(), "/r/d/x"))

	data := func(im *robustness.Image) string {
		if n := im.Find("d/x"); n != nil {
			return string(n.Data)
		}
		return "<none>"
	}
	assert.Equal(t, "<none>", data(p.Image(robustness.Drop, 0)), "an entry in an unsynced directory is lost")
	assert.Equal(t, "abcdefgh", data(p.Image(robustness.Keep, 0)))
	// Reorder: the temporary name took 3 values (none, the file, none)
	// and x 2 (none, the file).
	assert.Equal(t, 6, p.Choices())
	seen := map[string]bool{}
	for c := range p.Choices() {
		seen[data(p.Image(robustness.Reorder, c))] = true
	}
	assert.Equal(t, map[string]bool{"<none>": true, "abcdef": true}, seen, "x absent or torn in half, never more")
	require.NoError(t, p.SyncDir("/r/d"))
	assert.Equal(t, "abcd", data(p.Image(robustness.Drop, 0)), "after the directory fsync the name survives, with the synced bytes only")
	assert.Equal(t, "abcdef", data(p.Image(robustness.Half, 0)), "half of the unsynced bytes")
	assert.Equal(t, 1, p.Choices(), "nothing pending")

	p.CutAt(p.Steps())
	_, err = p.ReadFile("/r/d/x")
	require.ErrorIs(t, err, robustness.ErrPowerOff)
	require.ErrorIs(t, p.Remove("/r/d/x"), robustness.ErrPowerOff, "nothing runs after the cut")
	assert.Equal(t, "abcd", data(p.Image(robustness.Drop, 0)))
}
