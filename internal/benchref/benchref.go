// Package benchref holds the references phaseshift's benchmarks are
// measured against, in the same run, on the same disk: the floor of a
// whole-file save (one durable atomic replace of bytes already encoded),
// the floor of a durable mutation (one small fsync'd append, Appender), and
// the pattern phaseshift replaces (ipamd's datastore checkpoint: one mutex,
// every entry re-encoded and the file replaced at every mutation).
//
// # Caveats
//
// Both references make the replace as durable as phaseshift does (fsync of
// the file, rename, fsync of the directory). ipamd itself skips the
// directory fsync, which makes it a little faster and not durable across a
// power cut; comparing against that would flatter the pattern.
package benchref

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
)

// Replace atomically and durably makes data the content of path: a
// temporary file in the same directory, written, fsynced, closed, renamed
// over path, then the directory fsynced. Nothing durable and atomic can
// write the same bytes with less.
func Replace(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Ipamd is the checkpoint pattern of ipamd's datastore: state in a map
// under one mutex, and at every mutation the whole state encoded as one
// JSON document and the file atomically replaced, while the mutex is held.
// Its cost grows with the number of entries and does not shrink with
// concurrency.
type Ipamd[K comparable, V any] struct {
	path string

	mu      sync.Mutex // guards entries and serialises every checkpoint
	entries map[K]V
}

type ipamdEntry[K comparable, V any] struct {
	Key   K `json:"key"`
	Value V `json:"value"`
}

type ipamdFile[K comparable, V any] struct {
	Version     string             `json:"version"`
	Allocations []ipamdEntry[K, V] `json:"allocations"`
}

// NewIpamd returns the pattern over path, holding entries (copied).
func NewIpamd[K comparable, V any](path string, entries map[K]V) *Ipamd[K, V] {
	m := make(map[K]V, len(entries))
	for k, v := range entries {
		m[k] = v
	}
	return &Ipamd[K, V]{path: path, entries: m}
}

// Put stores v under k and checkpoints everything.
func (p *Ipamd[K, V]) Put(k K, v V) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.entries[k] = v
	return p.checkpoint()
}

// Delete removes k and checkpoints everything.
func (p *Ipamd[K, V]) Delete(k K) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.entries, k)
	return p.checkpoint()
}

func (p *Ipamd[K, V]) checkpoint() error {
	doc := ipamdFile[K, V]{Version: "vpc-cni-ipam/1", Allocations: make([]ipamdEntry[K, V], 0, len(p.entries))}
	for k, v := range p.entries {
		doc.Allocations = append(doc.Allocations, ipamdEntry[K, V]{k, v})
	}
	data, err := json.Marshal(&doc)
	if err != nil {
		return err
	}
	return Replace(p.path, data)
}

// Unmarshal decodes a checkpoint file's entries with a bare json.Unmarshal
// into a slice: the reference a restore is compared with.
func Unmarshal(data []byte) error {
	var doc struct {
		Entries []struct {
			Key   Key   `json:"key"`
			Value Alloc `json:"value"`
		} `json:"entries"`
	}
	return json.Unmarshal(data, &doc)
}

// Appender is the floor of a durable mutation: one small record appended
// to a file that is already open, and fsynced, what a write-ahead log
// pays per commit. Nothing durable can record a change with less.
type Appender struct {
	f   *os.File
	rec []byte
}

// NewAppender creates path and returns an Appender of records of size
// bytes (a newline included).
func NewAppender(path string, size int) (*Appender, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	rec := make([]byte, size)
	for i := range rec {
		rec[i] = 'x'
	}
	rec[size-1] = '\n'
	return &Appender{f: f, rec: rec}, nil
}

// Append appends one record and fsyncs the file.
func (a *Appender) Append() error {
	if _, err := a.f.Write(a.rec); err != nil {
		return err
	}
	return a.f.Sync()
}

// Close closes the file.
func (a *Appender) Close() error { return a.f.Close() }
