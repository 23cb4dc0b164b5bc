package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"time"
)

// Memory is a checkpoint held in memory, for tests. It keeps the contract of
// File, because it shares File's code and stores the same bytes File would
// write; only the bytes stay in memory and there is no lock. It adds fault
// injection: failing saves, a corrupt, torn or newer-schema file, a file
// lost to a reboot.
//
// All methods are safe for concurrent use.
type Memory[K comparable, V any] struct {
	c   *core[K, V]
	mem *memBackend
	err error // from the options; returned by every method
}

// NewMemory returns an empty in-memory checkpoint. It takes the options of
// Open that concern the content (WithSchema, WithUpgrade, WithBootID,
// WithDropUnknownFields) and WithLogger; an invalid option makes every
// method return the error.
func NewMemory[K comparable, V any](opts ...Option) *Memory[K, V] {
	cfg, err := buildConfig(opts)
	var bootID string
	if err == nil && cfg.bootID != nil {
		bootID, err = cfg.bootID()
	}
	mem := &memBackend{}
	return &Memory[K, V]{c: newCore[K, V](cfg, mem, bootID), mem: mem, err: err}
}

// Reopen returns a new handle on the same in-memory file, as a restarted
// process would open it again: the bytes, the injected faults and the
// counters are shared, but nothing the old handle learned by reading is.
// Without options the new handle keeps this one's; with options it is
// configured by them alone, as another binary opening the file with its own
// options would be (a build with another schema: WithSchema, WithUpgrade;
// a new boot: WithBootID). Model a crash by dropping the old handle without
// Close, a clean restart by closing it first. Memory takes no lock, so it
// does not stop two handles from writing.
func (m *Memory[K, V]) Reopen(opts ...Option) *Memory[K, V] {
	if len(opts) == 0 {
		return &Memory[K, V]{c: newCore[K, V](m.c.cfg, m.mem, m.c.bootID), mem: m.mem, err: m.err}
	}
	cfg, err := buildConfig(opts)
	var bootID string
	if err == nil && cfg.bootID != nil {
		bootID, err = cfg.bootID()
	}
	return &Memory[K, V]{c: newCore[K, V](cfg, m.mem, bootID), mem: m.mem, err: err}
}

// ReopenWithBootID is Reopen after a reboot: the new handle stamps saves
// with bootID.
func (m *Memory[K, V]) ReopenWithBootID(bootID string) *Memory[K, V] {
	return &Memory[K, V]{c: newCore[K, V](m.c.cfg, m.mem, bootID), mem: m.mem, err: m.err}
}

// Load is File.Load.
func (m *Memory[K, V]) Load(ctx context.Context) (Snapshot[K, V], error) {
	if m.err != nil {
		return Snapshot[K, V]{}, m.err
	}
	return m.c.load(ctx)
}

// Save is File.Save, failing with the injected error if FailSaves asked.
func (m *Memory[K, V]) Save(ctx context.Context, s Snapshot[K, V]) error {
	if m.err != nil {
		return m.err
	}
	return m.c.save(ctx, s)
}

// Commit is File.Commit, failing with the injected error if FailSaves asked.
func (m *Memory[K, V]) Commit(ctx context.Context, meta Meta, changes []Change[K, V]) error {
	if m.err != nil {
		return m.err
	}
	return m.c.commit(ctx, meta, changes)
}

// Quarantine is File.Quarantine; the file moves to Quarantined.
func (m *Memory[K, V]) Quarantine(ctx context.Context) (string, error) {
	if m.err != nil {
		return "", m.err
	}
	return m.c.quarantine(ctx)
}

// Close is File.Close: idempotent, and other methods fail afterwards.
func (m *Memory[K, V]) Close() error { return m.c.close() }

// BootID returns the boot ID this Memory stamps into saved files.
func (m *Memory[K, V]) BootID() string { return m.c.bootID }

// FailSaves makes the next n saves (Save or Commit) fail with err, leaving
// the file as it was.
func (m *Memory[K, V]) FailSaves(n int, err error) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.mem.mu.Lock()
	defer m.mem.mu.Unlock()
	m.mem.failN, m.mem.failErr = n, err
}

// SetSaveLatency makes every save take at least d, as fsync makes a real
// one; with it, concurrent writers queue behind a save as they do on a
// disk. Zero turns it off.
func (m *Memory[K, V]) SetSaveLatency(d time.Duration) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.mem.mu.Lock()
	defer m.mem.mu.Unlock()
	m.mem.latency = d
}

// Saves returns how many saves have succeeded.
func (m *Memory[K, V]) Saves() int {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.mem.mu.Lock()
	defer m.mem.mu.Unlock()
	return m.mem.saves
}

// Bytes returns a copy of the file, or nil if there is none.
func (m *Memory[K, V]) Bytes() []byte {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.mem.mu.Lock()
	defer m.mem.mu.Unlock()
	return bytes.Clone(m.mem.data)
}

// SetBytes replaces the file with data (nil removes it), as if another
// program had written it. The next Load reads it.
func (m *Memory[K, V]) SetBytes(data []byte) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.mem.mu.Lock()
	defer m.mem.mu.Unlock()
	m.mem.data = bytes.Clone(data)
	m.mem.exists = data != nil
	m.c.state = stateUnknown
}

// Remove deletes the file, as a reboot does to a file on tmpfs.
func (m *Memory[K, V]) Remove() { m.SetBytes(nil) }

// Corrupt flips one byte in the middle of the file, as bit rot would.
func (m *Memory[K, V]) Corrupt() {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.mem.mu.Lock()
	defer m.mem.mu.Unlock()
	if len(m.mem.data) == 0 {
		m.mem.data, m.mem.exists = []byte("not a checkpoint\n"), true
	} else {
		m.mem.data[len(m.mem.data)/2] ^= 0x20
	}
	m.c.state = stateUnknown
}

// Tear cuts the file in half, as a non-atomic write interrupted by a crash
// would leave it (File never does; this is for testing readers).
func (m *Memory[K, V]) Tear() {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.mem.mu.Lock()
	defer m.mem.mu.Unlock()
	m.mem.data = m.mem.data[:len(m.mem.data)/2]
	m.mem.exists = true
	m.c.state = stateUnknown
}

// SetSchema rewrites the file's schema number (with a valid checksum), as
// if a binary with that schema had written it; a schema above the one this
// Memory was made with makes Load fail with ErrNewerSchema. It returns an
// error if there is no intact file to rewrite.
func (m *Memory[K, V]) SetSchema(schema int) error {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.mem.mu.Lock()
	defer m.mem.mu.Unlock()
	p, err := parse(m.mem.data)
	if err != nil {
		return err
	}
	p.meta.Schema = schema
	m.mem.data = appendFile(nil, p.meta, p.lines)
	m.c.state = stateUnknown
	return nil
}

// Quarantined returns copies of the files Quarantine moved aside, oldest
// first.
func (m *Memory[K, V]) Quarantined() [][]byte {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.mem.mu.Lock()
	defer m.mem.mu.Unlock()
	out := make([][]byte, len(m.mem.quarantined))
	for i, q := range m.mem.quarantined {
		out[i] = bytes.Clone(q)
	}
	return out
}

// Prev returns a copy of the previous file kept by the last save, or nil.
func (m *Memory[K, V]) Prev() []byte {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	m.mem.mu.Lock()
	defer m.mem.mu.Unlock()
	return bytes.Clone(m.mem.prev)
}

// memBackend is the in-memory "disk" of Memory, shared by the handles
// Reopen makes. When a caller holds both, core.mu comes before mu.
type memBackend struct {
	mu          sync.Mutex // guards every field below
	data        []byte
	exists      bool
	prev        []byte
	quarantined [][]byte
	saves       int
	failN       int
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
	if b.failN > 0 {
		b.failN--
		err := b.failErr
		if err == nil {
			err = fmt.Errorf("injected save failure")
		}
		return pathError("save: write", b.name(), err)
	}
	if b.latency > 0 {
		time.Sleep(b.latency)
	}
	if last.exists && b.exists {
		b.prev = b.data
	}
	b.data, b.exists = slices.Clone(data), true
	b.saves++
	return nil
}

func (b *memBackend) quarantine() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.exists {
		return "", fs.ErrNotExist
	}
	b.quarantined = append(b.quarantined, b.data)
	b.data, b.exists = nil, false
	return fmt.Sprintf("memory.corrupt-%d", len(b.quarantined)), nil
}

func (b *memBackend) close() error { return nil }
