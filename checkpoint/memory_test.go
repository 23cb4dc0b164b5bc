package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/checkpoint/checkpointtest"
)

// sealFor returns the checksum trailer that makes body a checkpoint file
// again, as a writer would (used to build files a writer of another version
// would produce).
func sealFor(body string) string {
	sum := crc32.Checksum([]byte(body), crc32.MakeTable(crc32.Castagnoli))
	return fmt.Sprintf("  \"checksum\": \"crc32c:%08x\"\n}\n", sum)
}

func TestMemoryKeepsTheFileContract(t *testing.T) {
	ctx := context.Background()
	// WithoutJournal, so that the commit replaces the file and keeps the
	// previous one (TestJournalMemory covers the journal).
	m, err := checkpoint.NewMemory[podKey, alloc]().Reopen(checkpoint.WithoutJournal())
	require.NoError(t, err)
	_, err = m.Load(ctx)
	require.ErrorIs(t, err, checkpoint.ErrNotExist)
	require.NoError(t, m.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Meta: checkpoint.Meta{Phase: "migrate"}, Entries: entriesN(3)}))
	require.NoError(t, m.Commit(ctx, checkpoint.Meta{Phase: "migrate"}, []checkpoint.Change[podKey, alloc]{{Key: key("c000"), Delete: true}}))
	s, err := m.Load(ctx)
	require.NoError(t, err)
	want := entriesN(3)
	delete(want, key("c000"))
	assert.Equal(t, want, s.Entries)
	assert.Equal(t, uint64(2), s.Meta.Seq)
	assert.Equal(t, 2, checkpointtest.Saves(m))
	assert.NotEmpty(t, checkpointtest.Prev(m), "the previous file is kept")

	// Memory stores the bytes File would write.
	f, _ := openFile(t)
	require.NoError(t, f.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(1)}))
	assert.Contains(t, string(m.Bytes()), `"checksum": "crc32c:`)
}

func TestMemoryFaults(t *testing.T) {
	ctx := context.Background()
	fresh := func(t *testing.T) *checkpoint.Memory[podKey, alloc] {
		m := checkpoint.NewMemory[podKey, alloc]()
		require.NoError(t, m.Save(ctx, checkpoint.Snapshot[podKey, alloc]{Entries: entriesN(2)}))
		return m
	}

	t.Run("fail saves", func(t *testing.T) {
		m := fresh(t)
		boom := errors.New("disk full")
		checkpointtest.FailSaves(m, 2, boom)
		require.ErrorIs(t, m.Save(ctx, checkpoint.Snapshot[podKey, alloc]{}), boom)
		require.ErrorIs(t, m.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{{Key: key("x")}}), boom)
		s, err := m.Load(ctx)
		require.NoError(t, err)
		assert.Equal(t, entriesN(2), s.Entries, "failed saves leave the file as it was")
		require.NoError(t, m.Commit(ctx, checkpoint.Meta{}, []checkpoint.Change[podKey, alloc]{{Key: key("x")}}))
		assert.Equal(t, 2, checkpointtest.Saves(m))
	})

	for name, damage := range map[string]func(*checkpoint.Memory[podKey, alloc]){
		"corrupt": checkpointtest.Corrupt[podKey, alloc],
		"tear":    checkpointtest.Tear[podKey, alloc],
	} {
		t.Run(name, func(t *testing.T) {
			m := fresh(t)
			damage(m)
			_, err := m.Load(ctx)
			require.ErrorIs(t, err, checkpoint.ErrCorrupt)
			require.ErrorIs(t, m.Save(ctx, checkpoint.Snapshot[podKey, alloc]{}), checkpoint.ErrUnreadable)
			where, err := m.Quarantine(ctx)
			require.NoError(t, err)
			assert.Equal(t, "memory.corrupt-1", where)
			assert.Len(t, checkpointtest.Quarantined(m), 1)
			_, err = m.Load(ctx)
			require.ErrorIs(t, err, checkpoint.ErrNotExist)
			require.NoError(t, m.Save(ctx, checkpoint.Snapshot[podKey, alloc]{}))
		})
	}

	t.Run("corrupt without a file", func(t *testing.T) {
		m := checkpoint.NewMemory[podKey, alloc]()
		checkpointtest.Corrupt(m)
		_, err := m.Load(ctx)
		require.ErrorIs(t, err, checkpoint.ErrCorrupt)
	})

	t.Run("newer schema", func(t *testing.T) {
		m := fresh(t)
		require.NoError(t, checkpointtest.SetSchema(m, 7))
		_, err := m.Load(ctx)
		require.ErrorIs(t, err, checkpoint.ErrNewerSchema)
		assert.Contains(t, err.Error(), "schema 7")
		checkpointtest.Remove(m)
		require.ErrorIs(t, checkpointtest.SetSchema(m, 7), checkpoint.ErrNotExist, "nothing to rewrite")
	})

	t.Run("removed by a reboot", func(t *testing.T) {
		m := fresh(t)
		checkpointtest.Remove(m)
		_, err := m.Load(ctx)
		require.ErrorIs(t, err, checkpoint.ErrNotExist)
		assert.Nil(t, m.Bytes())
	})

	t.Run("set bytes", func(t *testing.T) {
		m := fresh(t)
		data := m.Bytes()
		other := checkpoint.NewMemory[podKey, alloc]()
		checkpointtest.SetBytes(other, data)
		data[0] = 'x' // SetBytes copied
		s, err := other.Load(ctx)
		require.NoError(t, err)
		assert.Equal(t, entriesN(2), s.Entries)
	})

	t.Run("close", func(t *testing.T) {
		m := fresh(t)
		require.NoError(t, m.Close())
		require.NoError(t, m.Close())
		_, err := m.Load(ctx)
		require.ErrorIs(t, err, checkpoint.ErrClosed)
	})
}
