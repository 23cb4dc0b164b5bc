package hostlocal_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/source"
	"github.com/phaseshift/phaseshift/source/hostlocal"
)

// FuzzOwner writes arbitrary content into an address file. List either
// reports the file (ErrMalformed, naming it) or lists one key, which
// round-trips through encoding/json, which Put accepts and writes back so
// that List gives the same key, and which host-local's store agrees owns
// the address (for the forms host-local reads).
func FuzzOwner(f *testing.F) {
	for _, seed := range []string{
		"c1\r\neth0", "c1\neth0", "c1", " c1 \n", "", "\r\n", "a\r\nb\r\nc", "c\xff", "c\x00\r\neth0",
		"4f1c\r\nnet1\n", "c1\r\n\r\neth0", "\u2028c\r\neth0", "c<>&\r\n\u00e9th0",
	} {
		f.Add(seed)
	}
	dataDir := filepath.Join(tmpfsDir(f), "data") // fuzzing writes and fsyncs many files
	f.Fuzz(func(t *testing.T, content string) {
		require.NoError(t, os.RemoveAll(dataDir))
		s, err := hostlocal.Open(dataDir, network)
		require.NoError(t, err)
		defer s.Close()
		path := filepath.Join(s.Dir(), "10.0.0.2")
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		ctx := context.Background()
		got, err := s.List(ctx)
		if err != nil {
			require.True(t, source.Partial(err), "%v", err)
			assert.ErrorIs(t, err, hostlocal.ErrMalformed)
			var le *source.ListError
			require.ErrorAs(t, err, &le)
			require.Len(t, le.Errs, 1)
			assert.True(t, errorNames(le.Errs[0], path), "%v", err)
			assert.Empty(t, got)
			return
		}
		require.Len(t, got, 1)
		for k, v := range got {
			assertJSONRoundTrip(t, k)
			assertJSONRoundTrip(t, v)
			assert.Equal(t, alloc("10.0.0.2"), v)

			// host-local agrees, unless this is the PR #203 form, which it
			// never read.
			trimmed := strings.TrimSpace(content)
			if strings.Contains(trimmed, disk.LineBreak) || !strings.Contains(trimmed, "\n") {
				ifname := k.IfName
				if ifname == "" {
					ifname = "any0"
				}
				st, err := disk.New(network, dataDir)
				require.NoError(t, err)
				assert.Len(t, st.GetByID(k.ContainerID, ifname), 1)
				st.Close()
			}

			// Put writes it back the same.
			require.NoError(t, os.Remove(path))
			require.NoError(t, s.Put(ctx, k, v))
			again, err := s.List(ctx)
			require.NoError(t, err)
			assert.Equal(t, got, again)
		}
	})
}
