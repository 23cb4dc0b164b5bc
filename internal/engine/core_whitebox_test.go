package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCommitScratchDoesNotKeepABulkCommitsSize attacks the cost of a commit
// after a bulk one (issue 35): a commit's scratch slices (the undo log, the
// journal's ops) grow to the size of the largest commit, and a commit that
// cleared their whole capacity paid that size at every commit from then on
// (83% of a Put's CPU at 100,000 entries). After a commit of 5,000 changes,
// the next commit of one must leave scratch of about its own size, with no
// entry line pinned. It failed before the fix: the undo log kept a capacity
// of 5,000 steps.
func TestCommitScratchDoesNotKeepABulkCommitsSize(t *testing.T) {
	ctx := context.Background()
	for _, journal := range []Option{WithJournal(), WithoutJournal()} {
		m, err := NewMemory[string, string]().Reopen(journal)
		require.NoError(t, err)
		require.NoError(t, m.Save(ctx, Snapshot[string, string]{}))
		bulk := make([]Change[string, string], 5000)
		for i := range bulk {
			bulk[i] = Change[string, string]{Key: fmt.Sprintf("k%d", i), Value: "v"}
		}
		require.NoError(t, m.Commit(ctx, Meta{}, bulk))
		require.NoError(t, m.Commit(ctx, Meta{}, []Change[string, string]{{Key: "k1", Value: "w"}}))
		require.NoError(t, m.Commit(ctx, Meta{}, []Change[string, string]{{Key: "k1", Delete: true}}))
		c := m.c
		assert.LessOrEqual(t, cap(c.undo), 1024, "the undo log keeps the bulk commit's size")
		assert.LessOrEqual(t, cap(c.ops), 1024, "the journal's ops keep the bulk commit's size")
		for _, s := range c.undo[:cap(c.undo)] {
			assert.Nil(t, s.raw, "an undo step pins an entry line")
		}
		for _, op := range c.ops[:cap(c.ops)] {
			assert.Nil(t, op, "an op pins an entry line")
		}
	}
}
