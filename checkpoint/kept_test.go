package checkpoint_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
)

// Quarantine keeps the checkpoint's 5 newest quarantined copies, each with
// its journal: the sixth removes the oldest, file and journal. Copies a
// repair of the phaseshift command kept (path.before-<verb>-<time>) are
// counted apart, and names that do not read as a kept copy's are never
// removed.
func TestQuarantineKeepsTheNewestFive(t *testing.T) {
	ctx := context.Background()
	f, path := openFile(t, checkpoint.WithJournal())
	repairCopy := path + ".before-delete-20250101T000000.000000000Z"
	others := []string{repairCopy, path + ".corrupt-by-hand", path + ".corrupt-20250101T000000.000000000Z.bak"}
	for _, o := range others {
		require.NoError(t, os.WriteFile(o, []byte("x"), 0o600))
	}
	var moved []string
	for i := range 8 {
		require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(i + 1)}))
		require.NoError(t, f.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{{Key: key("j"), Value: alloc{}}}))
		require.FileExists(t, path+".journal")
		dst, err := f.Quarantine(ctx)
		require.NoError(t, err)
		moved = append(moved, dst)
	}
	got, err := filepath.Glob(path + ".corrupt-2*")
	require.NoError(t, err)
	var files []string
	for _, g := range got {
		if !strings.HasSuffix(g, ".journal") && !strings.HasSuffix(g, ".bak") {
			files = append(files, g)
		}
	}
	sort.Strings(files)
	assert.Equal(t, moved[3:], files, "the 5 newest")
	for _, m := range moved[3:] {
		assert.FileExists(t, m+".journal", "each with its journal")
	}
	for _, m := range moved[:3] {
		assert.NoFileExists(t, m+".journal", "the oldest went with their journals")
	}
	for _, o := range others {
		assert.FileExists(t, o)
	}
}
