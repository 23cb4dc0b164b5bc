// Package benchref holds the references phaseshift's benchmarks are
// measured against, in the same run, on the same disk: the code
// phaseshift replaces (JSONFile: the AWS VPC CNI's ipamd checkpoint, as
// it is, and with the directory fsync it lacks), the floor of a whole-file
// save (Replace: one durable atomic replace of bytes already encoded), and
// the floor of a durable mutation (Appender: one small fsync'd append).
// The third reference a user would pick instead, bbolt, lives in module
// internal/bench, so that the library's own module does not require it.
//
// # Caveats
//
// JSONFile does what ipamd does and nothing more; in particular it does
// not fsync the directory, so its replace is atomic but not durable
// across a power cut. NewDurableJSONFile adds that step, which every
// durable whole-file replace (phaseshift's included) pays.
package benchref

import (
	"encoding/json"
	"maps"
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

// JSONFile is the AWS VPC CNI's checkpoint as ipamd keeps it, reimplemented
// from its source: amazon-vpc-cni-k8s v1.23.2, pkg/ipamd/datastore,
// JSONFile.Checkpoint (checkpoint.go), called by
// DataStore.writeBackingStoreUnsafe (data_store.go) after every mutation,
// under the datastore's one lock. (Read at b52188387, the release commit of
// v1.23.1, the newest snapshot at hand, where checkpoint.go is unchanged
// since a1ac235, 2023-09; v1.23.2 was cut from master after it.) At every
// mutation, with the mutex held:
// every entry copied into a slice, the whole document encoded with
// json.NewEncoder(f).Encode into a new temporary file in the same
// directory (os.CreateTemp, base+".tmp*"), the file fsynced, and renamed
// over path. Nothing more: the directory is not fsynced (so the rename may
// not survive a power cut), and the temporary file is never closed (its
// descriptor is left to the garbage collector's finalizer).
//
// NewDurableJSONFile adds the one step JSONFile lacks to make the replace
// durable, the fsync of the directory after the rename: the floor of any
// checkpoint that rewrites the whole state at every mutation.
//
// Its cost grows with the number of entries and does not shrink with
// concurrency. All methods are safe for concurrent use.
type JSONFile[K comparable, V any] struct {
	path    string
	syncDir bool

	mu      sync.Mutex // guards entries and leaked and serialises every checkpoint
	entries map[K]V
	leaked  []*os.File // the temporary files ipamd leaves open; see CloseLeaked
}

// jsonFileEntry and jsonFileDoc are ipamd's CheckpointEntry and
// CheckpointData with the benchmarks' keys and values.
type jsonFileEntry[K comparable, V any] struct {
	Key   K `json:"key"`
	Value V `json:"value"`
}

type jsonFileDoc[K comparable, V any] struct {
	Version     string                `json:"version"`
	Allocations []jsonFileEntry[K, V] `json:"allocations"`
}

// NewJSONFile returns ipamd's checkpoint over path, holding entries
// (copied). Nothing is written until the first mutation.
func NewJSONFile[K comparable, V any](path string, entries map[K]V) *JSONFile[K, V] {
	return &JSONFile[K, V]{path: path, entries: maps.Clone(entries)}
}

// NewDurableJSONFile is NewJSONFile plus an fsync of the directory after
// every rename.
func NewDurableJSONFile[K comparable, V any](path string, entries map[K]V) *JSONFile[K, V] {
	f := NewJSONFile(path, entries)
	f.syncDir = true
	return f
}

// Put stores v under k and checkpoints everything.
func (p *JSONFile[K, V]) Put(k K, v V) error {
	return p.Update(func(m map[K]V) error { m[k] = v; return nil })
}

// Delete removes k and checkpoints everything.
func (p *JSONFile[K, V]) Delete(k K) error {
	return p.Update(func(m map[K]V) error { delete(m, k); return nil })
}

// Update runs fn on the entries and checkpoints everything, with the mutex
// held throughout, as ipamd's datastore does for an allocation.
func (p *JSONFile[K, V]) Update(fn func(map[K]V) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := fn(p.entries); err != nil {
		return err
	}
	return p.checkpoint()
}

// CloseLeaked closes the temporary files the checkpoints left open, for a
// benchmark to call outside its timing: ipamd never closes them, and a
// long benchmark would run out of descriptors before a finalizer ran.
func (p *JSONFile[K, V]) CloseLeaked() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.leaked {
		f.Close()
	}
	p.leaked = p.leaked[:0]
}

func (p *JSONFile[K, V]) checkpoint() error {
	doc := jsonFileDoc[K, V]{Version: "vpc-cni-ipam/1", Allocations: make([]jsonFileEntry[K, V], 0, len(p.entries))}
	for k, v := range p.entries {
		doc.Allocations = append(doc.Allocations, jsonFileEntry[K, V]{k, v})
	}
	f, err := os.CreateTemp(filepath.Dir(p.path), filepath.Base(p.path)+".tmp*")
	if err != nil {
		return err
	}
	p.leaked = append(p.leaked, f)
	if err := json.NewEncoder(f).Encode(&doc); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := f.Sync(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), p.path); err != nil {
		os.Remove(f.Name())
		return err
	}
	if !p.syncDir {
		return nil
	}
	d, err := os.Open(filepath.Dir(p.path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
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
