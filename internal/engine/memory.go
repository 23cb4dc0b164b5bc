package engine

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"time"

	"github.com/phaseshift/phaseshift/internal/memfile"
)

// Memory is checkpoint.Memory: see its documentation there.
type Memory[K comparable, V any] struct {
	c   *core[K, V]
	mem *memBackend
}

// NewMemory is checkpoint.NewMemory: see its documentation there.
func NewMemory[K comparable, V any]() *Memory[K, V] {
	mem := &memBackend{}
	return &Memory[K, V]{c: newCore[K, V](defaultConfig(), mem, ""), mem: mem}
}

// Reopen is checkpoint.Memory.Reopen: see its documentation there.
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

// Load is checkpoint.Memory.Load: see its documentation there.
func (m *Memory[K, V]) Load(ctx context.Context) (Snapshot[K, V], error) {
	return m.c.load(ctx)
}

// Save is checkpoint.Memory.Save: see its documentation there.
func (m *Memory[K, V]) Save(ctx context.Context, s Snapshot[K, V]) error {
	return m.c.save(ctx, s)
}

// Commit is checkpoint.Memory.Commit: see its documentation there.
func (m *Memory[K, V]) Commit(ctx context.Context, meta Meta, changes []Change[K, V]) error {
	return m.c.commit(ctx, meta, changes)
}

// CommitEncoded is checkpoint.Memory.CommitEncoded: see its documentation there.
func (m *Memory[K, V]) CommitEncoded(ctx context.Context, meta Meta, changes []EncodedChange[K, V]) error {
	return m.c.commitEncoded(ctx, meta, changes)
}

// Quarantine is checkpoint.Memory.Quarantine: see its documentation there.
func (m *Memory[K, V]) Quarantine(ctx context.Context) (string, error) {
	return m.c.quarantine(ctx)
}

// Close is checkpoint.Memory.Close: see its documentation there.
func (m *Memory[K, V]) Close() error { return m.c.close() }

// BootID is checkpoint.Memory.BootID: see its documentation there.
func (m *Memory[K, V]) BootID() string { return m.c.bootID }

// Size is checkpoint.Memory.Size: see its documentation there.
func (m *Memory[K, V]) Size() int64 { return m.c.size.Load() }

// Journal is checkpoint.Memory.Journal: see its documentation there.
func (m *Memory[K, V]) Journal() JournalStatus { return m.c.journal() }

// Bytes is checkpoint.Memory.Bytes: see its documentation there.
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

// MemFileOf is the in-memory file under m, for package checkpointtest to
// inject faults into: its edits hold m's mutex, as a save does.
func MemFileOf[K comparable, V any](m *Memory[K, V]) memfile.File { return memFile[K, V]{m} }

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
