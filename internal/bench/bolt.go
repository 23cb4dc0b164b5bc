// Package bench measures phaseshift's writes against what a node daemon's
// author would use instead, in the same run, on the same disk: the AWS VPC
// CNI's ipamd checkpoint as it is (benchref.JSONFile), the same with the
// directory fsync it lacks (benchref.NewDurableJSONFile), and bbolt
// (Bolt), etcd's embedded B+tree store, which containerd keeps its
// metadata in.
//
// It is a module of its own so that the library's module, and so every
// importer of phaseshift, never requires bbolt. It holds no library code:
// the references here, and the benchmarks in bench_test.go. Run, from the
// repository's root (go.work puts this module in the workspace):
//
//	go test -run '^$' -bench . -count 5 ./internal/bench | tee bench.txt; benchstat bench.txt
//
// # Caveats
//
// The ratios are same-run ratios on one machine and disk; absolute times
// on a shared virtual machine vary by a factor of two from run to run.
package bench

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/phaseshift/phaseshift/internal/benchref"
)

// bucket holds the entries of a Bolt.
var bucket = []byte("allocations")

// Bolt is the bbolt reference: a database opened with bbolt's default
// options (bolt.Open(path, 0600, nil)), holding each entry as its JSON key
// and JSON value in one bucket. Put commits one read-write transaction per
// write (db.Update, which writes the changed pages and fdatasyncs, then
// the meta page and fdatasyncs again); BatchPut goes through db.Batch,
// which runs concurrent callers' functions in one transaction (up to
// MaxBatchSize, 1,000, calls, waiting at most MaxBatchDelay, 10 ms, for
// company). For an allocation, Bolt also keeps the entries in memory, as a
// daemon would, so that finding a free address does not decode the
// database.
//
// All methods are safe for concurrent use.
type Bolt struct {
	db *bolt.DB

	mu  sync.Mutex // guards mem: allocations reserve their address under it
	mem map[benchref.Key]benchref.Alloc
}

// OpenBolt creates a database at path holding entries, put in the order of
// their keys' JSON (bbolt's own order): in map order, one transaction of
// 100,000 entries took 22 s on the development VM, and of 1,000,000, far
// longer; in order, bbolt appends to its pages.
func OpenBolt(path string, entries map[benchref.Key]benchref.Alloc) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return nil, err
	}
	type kv struct{ k, v []byte }
	sorted := make([]kv, 0, len(entries))
	for k, v := range entries {
		kj, err := json.Marshal(k)
		if err != nil {
			db.Close()
			return nil, err
		}
		vj, err := json.Marshal(v)
		if err != nil {
			db.Close()
			return nil, err
		}
		sorted = append(sorted, kv{kj, vj})
	}
	slices.SortFunc(sorted, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		for _, e := range sorted {
			if err := b.Put(e.k, e.v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Bolt{db: db, mem: maps.Clone(entries)}, nil
}

func put(b *bolt.Bucket, k benchref.Key, v benchref.Alloc) error {
	kj, err := json.Marshal(k)
	if err != nil {
		return err
	}
	vj, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(kj, vj)
}

// write stores v under k durably, in a transaction of its own (db.Update)
// or in a batch (db.Batch).
func (r *Bolt) write(k benchref.Key, v benchref.Alloc, batch bool) error {
	fn := func(tx *bolt.Tx) error { return put(tx.Bucket(bucket), k, v) }
	if batch {
		return r.db.Batch(fn)
	}
	return r.db.Update(fn)
}

// Put stores v under k with db.Update.
func (r *Bolt) Put(k benchref.Key, v benchref.Alloc) error { return r.write(k, v, false) }

// BatchPut stores v under k with db.Batch.
func (r *Bolt) BatchPut(k benchref.Key, v benchref.Alloc) error { return r.write(k, v, true) }

// Allocate gives k the lowest free address (benchref.LowestFree), found
// and reserved in memory under the mutex, then written with db.Update or,
// with batch, db.Batch. The reservation is visible before it is durable:
// a cheaper design than a Store's, whose reads see only what is durable.
func (r *Bolt) Allocate(k benchref.Key, at int, batch bool) error {
	r.mu.Lock()
	delete(r.mem, k)
	v := benchref.Alloc{IPs: []netip.Addr{benchref.LowestFree(maps.All(r.mem))}, Allocated: time.Unix(int64(at), 0).UTC()}
	r.mem[k] = v
	r.mu.Unlock()
	return r.write(k, v, batch)
}

// Close closes the database.
func (r *Bolt) Close() error { return r.db.Close() }
