package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"time"

	"github.com/phaseshift/phaseshift/checkpoint/internal/memfile"
)

// Memory is a checkpoint held in memory, for tests. It keeps the contract of
// File, because it shares File's code and stores the same bytes File would
// write; only the bytes stay in memory and there is no lock. Reopen and
// Bytes let a test play a restart and look at what was saved; package
// checkpointtest injects faults (failing or slow saves, a corrupt, torn or
// newer-schema file, a file lost to a reboot) and counts saves. It keeps a
// journal as File does, by default (WithoutJournal through Reopen: none),
// which checkpointtest.Journal and SetJournal read and replace.
//
// All methods are safe for concurrent use.
type Memory[K comparable, V any] struct {
	c   *core[K, V]
	mem *memBackend
}

// NewMemory returns an empty in-memory checkpoint with the default options,
// as Open has them: schema 1, no boot ID, no validation, nothing logged,
// and the journal. It cannot fail. To
// configure it as a binary with options would open a File, open it with
// them: NewMemory[K, V]().Reopen(opts...), which reports an invalid option
// as Open does.
func NewMemory[K comparable, V any]() *Memory[K, V] {
	mem := &memBackend{}
	return &Memory[K, V]{c: newCore[K, V](defaultConfig(), mem, ""), mem: mem}
}

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
	if len(opts) == 0 {
		if err := CheckKeyType[K](); err != nil {
			return nil, err
		}
		return &Memory[K, V]{c: newCore[K, V](m.c.cfg, m.mem, m.c.bootID), mem: m.mem}, nil
	}
	cfg, err := configure[K, V](opts)
	if err != nil {
		return nil, err
	}
	var bootID string
	if cfg.bootID != nil {
		if bootID, err = cfg.bootID(); err != nil {
			return nil, fmt.Errorf("checkpoint %s: boot ID: %w", m.mem.name(), err)
		}
	}
	return &Memory[K, V]{c: newCore[K, V](cfg, m.mem, bootID), mem: m.mem}, nil
}

// Load is File.Load.
func (m *Memory[K, V]) Load(ctx context.Context) (Snapshot[K, V], error) {
	return m.c.load(ctx)
}

// Save is File.Save.
func (m *Memory[K, V]) Save(ctx context.Context, s Snapshot[K, V]) error {
	return m.c.save(ctx, s)
}

// Commit is File.Commit.
func (m *Memory[K, V]) Commit(ctx context.Context, meta Meta, changes []Change[K, V]) error {
	return m.c.commit(ctx, meta, changes)
}

// CommitEncoded is File.CommitEncoded.
func (m *Memory[K, V]) CommitEncoded(ctx context.Context, meta Meta, changes []EncodedChange[K, V]) error {
	return m.c.commitEncoded(ctx, meta, changes)
}

// Quarantine is File.Quarantine. The file moves to a list that
// checkpointtest.Quarantined returns; the name returned is
// "memory.corrupt-<n>", n counting from 1.
func (m *Memory[K, V]) Quarantine(ctx context.Context) (string, error) {
	return m.c.quarantine(ctx)
}

// Close is File.Close: idempotent, and other methods fail afterwards.
func (m *Memory[K, V]) Close() error { return m.c.close() }

// BootID returns the boot ID this Memory stamps into saved files, or ""
// when it was opened without WithBootID.
func (m *Memory[K, V]) BootID() string { return m.c.bootID }

// Size is File.Size.
func (m *Memory[K, V]) Size() int64 { return m.c.size.Load() }

// Journal is File.Journal.
func (m *Memory[K, V]) Journal() JournalStatus { return m.c.journal() }

// Bytes returns a copy of the file, or nil if there is none.
func (m *Memory[K, V]) Bytes() []byte {
	m.mem.mu.Lock()
	defer m.mem.mu.Unlock()
	if !m.mem.exists {
		return nil
	}
	return bytes.Clone(m.mem.data)
}

// memBackend is the in-memory "disk" of Memory, shared by the handles
// Reopen makes. When a caller holds both, core.mu comes before mu.
type memBackend struct {
	mu          sync.Mutex // guards every field below
	data        []byte
	exists      bool
	prev        []byte
	quarantined [][]byte
	journal     []byte // path+".journal" of a File
	jexists     bool
	qjournals   [][]byte // journals moved aside with their files
	saves       int
	failN       int // saves still to fail; < 0: every one
	failErr     error
	latency     time.Duration
}

func (b *memBackend) name() string { return "memory" }

func (b *memBackend) read() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.exists {
		return nil, fs.ErrNotExist
	}
	// A copy, as a real read would be: the core keeps slices of it.
	return bytes.Clone(b.data), nil
}

func (b *memBackend) replace(data []byte, last onDisk) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.injected("save: write"); err != nil {
		return err
	}
	if last.exists && b.exists {
		b.prev = b.data
	}
	b.data, b.exists = slices.Clone(data), true
	b.saves++
	return nil
}

// injected fails a save (or an append) as FailSaves asked, or delays it as
// SetSaveLatency did. The caller holds mu.
func (b *memBackend) injected(step string) error {
	if b.failN != 0 {
		if b.failN > 0 {
			b.failN--
		}
		err := b.failErr
		if err == nil {
			err = fmt.Errorf("injected save failure")
		}
		return pathError(step, b.name(), err)
	}
	if b.latency > 0 {
		time.Sleep(b.latency)
	}
	return nil
}

func (b *memBackend) quarantine() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.exists && !b.jexists {
		return "", fs.ErrNotExist
	}
	if b.jexists {
		b.qjournals = append(b.qjournals, b.journal)
		b.journal, b.jexists = nil, false
	}
	if !b.exists {
		return fmt.Sprintf("memory.journal.corrupt-%d", len(b.qjournals)), nil
	}
	b.quarantined = append(b.quarantined, b.data)
	b.data, b.exists = nil, false
	return fmt.Sprintf("memory.corrupt-%d", len(b.quarantined)), nil
}

func (b *memBackend) journalName() string { return "memory.journal" }

func (b *memBackend) readJournal() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.jexists {
		return nil, fs.ErrNotExist
	}
	return bytes.Clone(b.journal), nil
}

// appendJournal keeps File's rules for a missing file and a missing or cut
// journal (no append: the commit writes the whole file); a journal another
// handle grew is written over, where File refuses (Memory takes no lock).
func (b *memBackend) appendJournal(rec []byte, at int64, _ onDisk) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.exists || (at == 0 && b.jexists) || (at > 0 && (!b.jexists || int64(len(b.journal)) != at)) {
		return errRewrite
	}
	if err := b.injected("commit: journal write"); err != nil {
		return err
	}
	b.journal, b.jexists = append(b.journal, rec...), true
	b.saves++
	return nil
}

func (b *memBackend) removeJournal() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.journal, b.jexists = nil, false
	return nil
}

func (b *memBackend) close() error { return nil }

// The hook of package checkpointtest: memfile.Of finds the in-memory file
// under a Memory of any K and V through the unexported method file, which
// only this package can name.
func init() {
	memfile.Of = func(m any) memfile.File {
		if h, ok := m.(interface{ file() memfile.File }); ok {
			return h.file()
		}
		return nil
	}
}

func (m *Memory[K, V]) file() memfile.File { return memFile[K, V]{m} }

// memFile is the memfile.File of a Memory handle. Every change to the bytes
// holds the handle's core.mu, so that it never lands in the middle of a
// save, and makes the handle read the file again before its next save.
type memFile[K comparable, V any] struct{ m *Memory[K, V] }

// locked runs fn with the handle's core.mu and the backend's mu held.
func (f memFile[K, V]) locked(fn func(b *memBackend)) {
	f.m.c.mu.Lock()
	defer f.m.c.mu.Unlock()
	f.m.mem.mu.Lock()
	defer f.m.mem.mu.Unlock()
	fn(f.m.mem)
}

func (f memFile[K, V]) Edit(fn func(data []byte) []byte) {
	f.locked(func(b *memBackend) {
		var in []byte
		if b.exists {
			in = append([]byte{}, b.data...)
		}
		out := fn(in)
		b.data, b.exists = bytes.Clone(out), out != nil
		f.m.c.state = stateUnknown
	})
}

func (f memFile[K, V]) Journal() (j []byte) {
	f.locked(func(b *memBackend) {
		if b.jexists {
			j = append([]byte{}, b.journal...)
		}
	})
	return j
}

func (f memFile[K, V]) EditJournal(fn func(data []byte) []byte) {
	f.locked(func(b *memBackend) {
		var in []byte
		if b.jexists {
			in = append([]byte{}, b.journal...)
		}
		out := fn(in)
		b.journal, b.jexists = bytes.Clone(out), out != nil
		f.m.c.state = stateUnknown
	})
}

func (f memFile[K, V]) SetSchema(schema int) (err error) {
	f.locked(func(b *memBackend) {
		var p parsed
		if !b.exists {
			err = fmt.Errorf("checkpoint %s: %w", b.name(), ErrNotExist)
			return
		}
		if p, err = parse(b.data); err != nil {
			return
		}
		p.meta.Schema = schema
		b.data = appendFile(nil, p.meta, p.lines)
		f.m.c.state = stateUnknown
	})
	return err
}

func (f memFile[K, V]) FailSaves(n int, err error) {
	f.locked(func(b *memBackend) { b.failN, b.failErr = n, err })
}

func (f memFile[K, V]) SetSaveLatency(d time.Duration) {
	f.locked(func(b *memBackend) { b.latency = d })
}

func (f memFile[K, V]) Saves() (n int) {
	f.locked(func(b *memBackend) { n = b.saves })
	return n
}

func (f memFile[K, V]) Prev() (prev []byte) {
	f.locked(func(b *memBackend) { prev = bytes.Clone(b.prev) })
	return prev
}

func (f memFile[K, V]) Quarantined() (out [][]byte) {
	f.locked(func(b *memBackend) {
		out = make([][]byte, len(b.quarantined))
		for i, q := range b.quarantined {
			out[i] = bytes.Clone(q)
		}
	})
	return out
}
