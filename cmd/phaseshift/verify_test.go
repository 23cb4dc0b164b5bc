package main_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every verdict and its exit status, in text and in --json.
func TestVerifyExitStatuses(t *testing.T) {
	cases := []struct {
		name    string
		setup   func(t *testing.T, path string) // changes the intact file at path
		flags   []string
		verdict string
		code    int
		why     string // in the reason
	}{
		{"intact", func(*testing.T, string) {}, nil, "intact", 0, ""},
		{"intact, schema the daemon knows", func(*testing.T, string) {}, []string{"--schema", "2"}, "intact", 0, ""},
		{"missing", func(t *testing.T, path string) { require.NoError(t, os.Remove(path)) }, nil, "missing", 3, "no checkpoint"},
		{"checksum mismatch", func(t *testing.T, path string) { edit(t, path, "10.0.0.1", "10.0.0.9") }, nil, "corrupt", 4, "checksum mismatch"},
		{"truncated", func(t *testing.T, path string) {
			data := readBytes(t, path)
			require.NoError(t, os.WriteFile(path, data[:len(data)/2], 0o600))
		}, nil, "corrupt", 4, "checksum"},
		{"empty", func(t *testing.T, path string) { require.NoError(t, os.WriteFile(path, nil, 0o600)) }, nil, "corrupt", 4, "empty"},
		{"a key twice", func(t *testing.T, path string) { editSealed(t, path, `"containerID":"c1"`, `"containerID":"c0"`) }, nil, "corrupt", 4, "twice"},
		{"newer format", func(t *testing.T, path string) { editSealed(t, path, `"format": 1`, `"format": 3`) }, nil, "newer", 5, "format is 3"}, // 2 is a file written WithJournal
		{"newer schema than --schema", func(*testing.T, string) {}, []string{"--schema", "1"}, "newer", 5, "schema 2"},
		{"unreadable: a directory", func(t *testing.T, path string) {
			require.NoError(t, os.Remove(path))
			require.NoError(t, os.Mkdir(path, 0o700))
		}, nil, "unreadable", 6, "regular file"},
		{"unreadable: a symlink", func(t *testing.T, path string) {
			require.NoError(t, os.Rename(path, path+".real"))
			require.NoError(t, os.Symlink(path+".real", path))
		}, nil, "unreadable", 6, "symlink"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := save(t, t.TempDir(), entries(2), entries(3))
			tc.setup(t, path)

			r := run(t, append(append([]string{"verify"}, tc.flags...), path)...)
			assert.Equal(t, tc.code, r.code, "stderr: %s", r.stderr)
			assert.Contains(t, r.stdout, path+": "+tc.verdict)
			if tc.code != 0 {
				assert.Contains(t, r.stderr, tc.why)
				assert.Contains(t, r.stderr, "what to do:")
			}

			r = run(t, append(append([]string{"verify", "--json"}, tc.flags...), path)...)
			assert.Equal(t, tc.code, r.code)
			var out struct {
				Path, Verdict, Reason string
				Exit                  int
				Header                *struct{ Schema, Seq int }
				Entries               int
			}
			decodeJSON(t, r.stdout, &out)
			assert.Equal(t, tc.verdict, out.Verdict)
			assert.Equal(t, tc.code, out.Exit)
			assert.Contains(t, out.Reason, tc.why)
			if tc.code == 0 {
				require.NotNil(t, out.Header)
				assert.Equal(t, 2, out.Header.Seq)
				assert.Equal(t, 3, out.Entries)
			}
		})
	}
}

// A missing file whose .prev exists: verify says how to get it back.
func TestVerifyMissingPointsToPrev(t *testing.T) {
	path := save(t, t.TempDir(), entries(2), entries(3))
	require.NoError(t, os.Remove(path))
	r := run(t, "verify", path)
	assert.Equal(t, 3, r.code)
	assert.Contains(t, r.stderr, "phaseshift restore-prev "+path)

	r = run(t, "verify", filepath.Join(t.TempDir(), "nodir", "state.json"))
	assert.Equal(t, 3, r.code)
	assert.Contains(t, r.stderr, "directory does not exist")
}

// verify reads a file beside a running daemon: it does not take the lock.
func TestVerifyDoesNotTakeTheLock(t *testing.T) {
	path := save(t, t.TempDir(), entries(3))
	holdLock(t, path)
	r := run(t, "verify", path)
	assert.Equal(t, 0, r.code, r.stderr)
}
