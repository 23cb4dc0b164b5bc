package main_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clear-mark on a file that carries no mark changes nothing, and its
// --json says so rather than that it replaced an intact file (issue 42,
// item 6).
func TestClearMarkOfAnUnmarkedFileChangesNothing(t *testing.T) {
	path := save(t, t.TempDir(), entries(2))
	before := readBytes(t, path)
	for _, flag := range []string{"--accept-loss", "--legacy-current"} {
		r := run(t, "clear-mark", "--json", flag, path)
		require.Equal(t, 0, r.code, r.stderr)
		var out struct {
			Changed  *bool
			Replaced string
			Reason   string
			Kept     string
			Entries  int
		}
		decodeJSON(t, r.stdout, &out)
		require.NotNil(t, out.Changed, "--json says whether it changed the file: %s", r.stdout)
		assert.False(t, *out.Changed)
		assert.Empty(t, out.Replaced, "it replaced nothing")
		assert.Empty(t, out.Kept)
		assert.Contains(t, out.Reason, "carries no mark")
		assert.Equal(t, 2, out.Entries)
		assert.Equal(t, before, readBytes(t, path))
		assert.Empty(t, kept(t, path))
	}
}
