package checkpoint

import (
	"context"

	"github.com/phaseshift/phaseshift/internal/engine"
)

// Reopen returns a new handle on the same in-memory file, as a restarted
// process would open it again: the bytes, the injected faults and the
// counters are shared, but nothing the old handle learned by reading is.
// Model a crash by dropping the old handle without Close, a clean restart
// by closing it first. Memory takes no lock, so it does not stop two
// handles from writing.
//
// Without options the new handle keeps this one's configuration, and the
// error is nil unless the key type is one Open refuses (CheckKeyType). With
// options it is configured by them alone, as another
// binary opening the file with its own options would be (a build with
// another schema: WithSchema, WithUpgrade; a new boot: WithBootID), and
// Reopen checks them as Open does: a nil or invalid option is an error
// matching ErrInvalidOption, and a WithBootID source that fails is an
// error too. Options that concern only the disk (WithFileMode,
// WithLockWait) are checked and have no effect.
func (m *Memory[K, V]) Reopen(opts ...Option) (*Memory[K, V], error) {
	r, err := (*engine.Memory[K, V])(m).Reopen(opts...)
	return (*Memory[K, V])(r), err
}

// Load is File.Load.
func (m *Memory[K, V]) Load(ctx context.Context) (Snapshot[K, V], error) {
	return (*engine.Memory[K, V])(m).Load(ctx)
}

// Save is File.Save.
func (m *Memory[K, V]) Save(ctx context.Context, s Snapshot[K, V]) error {
	return (*engine.Memory[K, V])(m).Save(ctx, s)
}

// Commit is File.Commit.
func (m *Memory[K, V]) Commit(ctx context.Context, meta Meta, changes []Change[K, V]) error {
	return (*engine.Memory[K, V])(m).Commit(ctx, meta, changes)
}

// CommitEncoded is File.CommitEncoded.
func (m *Memory[K, V]) CommitEncoded(ctx context.Context, meta Meta, changes []EncodedChange[K, V]) error {
	return (*engine.Memory[K, V])(m).CommitEncoded(ctx, meta, changes)
}

// Quarantine is File.Quarantine. The file moves to a list that
// checkpointtest.Quarantined returns; the name returned is
// "memory.corrupt-<n>", n counting from 1.
func (m *Memory[K, V]) Quarantine(ctx context.Context) (string, error) {
	return (*engine.Memory[K, V])(m).Quarantine(ctx)
}

// Close is File.Close: idempotent, and other methods fail afterwards.
func (m *Memory[K, V]) Close() error {
	return (*engine.Memory[K, V])(m).Close()
}

// BootID returns the boot ID this Memory stamps into saved files, or ""
// when it was opened without WithBootID.
func (m *Memory[K, V]) BootID() string {
	return (*engine.Memory[K, V])(m).BootID()
}

// Size is File.Size.
func (m *Memory[K, V]) Size() int64 {
	return (*engine.Memory[K, V])(m).Size()
}

// Journal is File.Journal.
func (m *Memory[K, V]) Journal() JournalStatus {
	return (*engine.Memory[K, V])(m).Journal()
}

// Bytes returns a copy of the file, or nil if there is none.
func (m *Memory[K, V]) Bytes() []byte {
	return (*engine.Memory[K, V])(m).Bytes()
}
