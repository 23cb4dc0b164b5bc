package migrate

import (
	"context"
	"fmt"
	"io"
	"iter"
	"reflect"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/phaseshift/phaseshift/checkpoint"
	"github.com/phaseshift/phaseshift/source"
)

// Origin says where a served entry came from.
type Origin int

// The origins.
const (
	OriginCheckpoint Origin = iota + 1 // restored from the checkpoint
	OriginLegacy                       // restored from legacy (phases 0 and 1)
	OriginBackfill                     // phase 2: from legacy, because the checkpoint lacked it
	OriginWrite                        // written through this Store since Restore
)

var originNames = map[Origin]string{OriginCheckpoint: "checkpoint", OriginLegacy: "legacy", OriginBackfill: "backfill", OriginWrite: "write"}

// String returns "checkpoint", "legacy", "backfill" or "write".
func (o Origin) String() string {
	if s, ok := originNames[o]; ok {
		return s
	}
	return fmt.Sprintf("Origin(%d)", int(o))
}

// Store is a daemon's state, restored at start from the side its phase
// trusts and written, on every change, to the sides its phase writes.
//
// All methods are safe for concurrent use. Reads (Get, All, Len, Origin)
// see committed state only and never wait for a write in progress. Writes
// (Put, Delete, Update, Replace) from many goroutines are group-committed: one
// checkpoint save carries the changes that queued while the previous save
// ran (up to 1,024), and each caller returns when its own change is
// durable.
//
// A write returns nil only once every side its phase writes has it
// durably. Legacy is written first, then the checkpoint. If any side fails,
// memory is unchanged, the checkpoint holds the previous commit, an
// explicit legacy write already made is compensated, and the error says
// which side failed (ErrCheckpointWrite, ErrLegacyWrite). When undoing on
// the other side fails too, the error also matches ErrOutcomeUnknown and
// says that legacy may hold the write, or part of it; until the Store has
// written legacy back in line, a later write to that entry fails with
// ErrLegacyWrite rather than build on it.
//
// A legacy writer that panics fails the write it was making, with
// ErrLegacyWrite and ErrOutcomeUnknown, and that write's caller panics with
// the same value, whichever writer led the commit; the rest of the batch
// commits. So does a value whose MarshalJSON panics, which fails only its
// own write. A panic in other code a commit calls (a Checkpoint's own
// Commit or Save) panics in the writer that led it and fails the rest of
// its batch with ErrOutcomeUnknown. Either way the Store stays usable.
//
// A legacy that is a source.BatchWriter takes every change of a group
// commit in one Write, and the undo of a failed checkpoint save in one
// Write too: a legacy that is one file is rewritten once per commit, not
// once per key. Its Write carries the whole commit, so one that fails
// fails every write of the commit (ErrLegacyWrite), and one that panics
// fails them all with ErrOutcomeUnknown too.
//
// Config.Match maps a key to what identifies its entry across sources: an
// entry learned from legacy under placeholder fields (IPAM: network
// "_migrated-from-cri", interface "unknown") is found by Get, Delete and
// Put with the real key (the VPC CNI lost IPs when a DEL never matched a
// migrated key). Store.Origin says where an entry came from and Store.Key
// which key it is stored under.
//
// A key must read back from JSON as itself (==): in the phases that write
// the checkpoint, a write whose key would not (invalid UTF-8, a time.Time
// with a monotonic reading or a *time.Location, a pointer, an unexported
// field; see package checkpoint) fails with checkpoint.ErrEncode and
// changes nothing, as a value JSON cannot encode does.
//
// Values are kept as given, not copied: a value holding a map, a slice or
// a pointer shares what it points to with the Store. Treat what Get, All
// and Tx.Get return as read-only, and change a copy (then Put it): changing
// it in place would change served state that is not on disk.
type Store[K comparable, V any] struct {
	cfg      Config[K, V]
	log      *zap.Logger
	match    func(K) K
	equal    func(a, b V) bool
	same     func(a, b V) bool // whether Replace leaves a value as it is
	merge    func(K, V, V) V
	explicit source.Writer[K, V]        // the legacy writer, or nil if legacy takes no explicit writes
	batched  source.BatchWriter[K, V]   // the legacy writer again when it takes a commit at once, or nil
	commit   checkpoint.Committer[K, V] // the checkpoint's Commit, or nil
	// encoded is the checkpoint's CommitEncoded, or nil: a batch's values,
	// encoded once to check them, are committed as they were encoded.
	encoded func(ctx context.Context, m checkpoint.Meta, changes []checkpoint.EncodedChange[K, V]) error
	bootID  string
	meta    checkpoint.Meta // what every save records

	// token is the right to change state: held by the goroutine leading a
	// group commit, by Restore and by Close. A channel rather than a mutex,
	// so a writer can wait for it and for its context at once.
	token chan struct{}

	// Guarded by token.
	// strays holds, by identity, the keys an explicit legacy may hold
	// against memory's word: writes whose undo failed. The next commit
	// writes legacy back in line for them first.
	strays map[K][]K
	batch  batchScratch[K, V]
	// marked is, in phase 0, the identities this run's keyed mark names
	// (marks.go), or nil where phase 0 marks the whole checkpoint.
	marked map[K]bool

	qmu   sync.Mutex       // guards queue and closing
	queue []*request[K, V] // writes waiting for a leader, oldest first

	stats counters // atomic: readable without a lock

	mu       sync.RWMutex // guards the fields below; writers also hold token
	state    state[K, V]
	restored bool
	closed   bool
}

// state is what a Store serves. Entries are kept by the key they were
// stored under; when Match is set, ids finds that key from any matching
// key.
type state[K comparable, V any] struct {
	vals   map[K]V      // stored key -> value
	ids    map[K]K      // Match(key) -> stored key; nil without Match
	origin map[K]Origin // stored key -> origin, for entries whose origin is not def
	def    Origin       // origin of entries not in origin
	// list is vals as a slice, for Tx.All (see tx.go): built by the first
	// Tx.All over this state, kept in step by apply. Guarded by token.
	list *entryList[K, V]
}

// New checks cfg and returns a Store that serves nothing until Restore.
// Configuration mistakes are reported here, with the fix in the message.
func New[K comparable, V any](cfg Config[K, V]) (*Store[K, V], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store[K, V]{
		cfg:   cfg,
		log:   cfg.logger(),
		match: cfg.Match,
		equal: cfg.Equal,
		merge: cfg.Merge,
		token: make(chan struct{}, 1),
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.log = s.log.With(zap.Stringer("phase", cfg.Phase))
	s.same = sameValue[V]()
	if s.equal == nil {
		s.equal = func(a, b V) bool { return reflect.DeepEqual(a, b) }
	}
	if w, ok := cfg.Legacy.(source.Writer[K, V]); ok {
		cw := countingWriter[K, V]{w: w, c: &s.stats}
		if b, ok := w.(source.BatchWriter[K, V]); ok {
			cw.b = b
			s.batched = cw
		}
		s.explicit = cw
	}
	if s.merge == nil {
		s.merge = PreferLegacy[K, V] // see Config.Merge
	}
	if cfg.Checkpoint != nil {
		if c, ok := cfg.Checkpoint.(checkpoint.Committer[K, V]); ok {
			s.commit = c
		}
		// A checkpoint that is a File or a Memory itself, not a wrapper,
		// commits the encoding a write's check made; a wrapper's own
		// Commit is never bypassed, even when it embeds one of them.
		switch c := cfg.Checkpoint.(type) {
		case *checkpoint.File[K, V]:
			s.encoded = c.CommitEncoded
		case *checkpoint.Memory[K, V]:
			s.encoded = c.CommitEncoded
		}
	}
	if cfg.Checkpoint != nil {
		s.bootID = cfg.Checkpoint.BootID()
	}
	s.meta = checkpoint.Meta{Phase: cfg.Phase.String(), Writer: cfg.Version, BootID: s.bootID}
	s.state = state[K, V]{vals: map[K]V{}}
	return s, nil
}

// Phase returns the phase the Store runs in.
func (s *Store[K, V]) Phase() Phase { return s.cfg.Phase }

// id returns the identity of key.
func (s *Store[K, V]) id(key K) K {
	if s.match == nil {
		return key
	}
	return s.match(key)
}

// lookup finds the stored key of key's entry. The caller holds mu or token.
func (st *state[K, V]) lookup(id K) (K, bool) {
	if st.ids == nil {
		_, ok := st.vals[id]
		return id, ok
	}
	k, ok := st.ids[id]
	return k, ok
}

// Get returns the committed value of key's entry: the entry stored under
// key, or, with Match, under any key that matches it.
func (s *Store[K, V]) Get(key K) (V, bool) {
	id := s.id(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	k, ok := s.state.lookup(id)
	if !ok {
		var zero V
		return zero, false
	}
	return s.state.vals[k], true
}

// Key returns the key key's entry is stored under, which differs from key
// when the entry was learned from legacy with placeholder fields.
func (s *Store[K, V]) Key(key K) (K, bool) {
	id := s.id(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.state.lookup(id)
}

// Origin returns where key's entry came from.
func (s *Store[K, V]) Origin(key K) (Origin, bool) {
	id := s.id(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	k, ok := s.state.lookup(id)
	if !ok {
		return 0, false
	}
	if o, ok := s.state.origin[k]; ok {
		return o, true
	}
	return s.state.def, true
}

// All returns the committed entries, by stored key, as of the call: a
// consistent snapshot, so the loop body may write to the Store.
func (s *Store[K, V]) All() iter.Seq2[K, V] {
	s.mu.RLock()
	keys := make([]K, 0, len(s.state.vals))
	vals := make([]V, 0, len(s.state.vals))
	for k, v := range s.state.vals {
		keys = append(keys, k)
		vals = append(vals, v)
	}
	s.mu.RUnlock()
	return func(yield func(K, V) bool) {
		for i := range keys {
			if !yield(keys[i], vals[i]) {
				return
			}
		}
	}
}

// Len returns the number of committed entries.
func (s *Store[K, V]) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.state.vals)
}

// acquire takes the token, or gives up when ctx is done.
func (s *Store[K, V]) acquire(ctx context.Context) error {
	// select picks at random among ready cases: a context that is already
	// done must win over a free token.
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case s.token <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store[K, V]) release() { <-s.token }

// Close waits for the write in progress, fails the writes still queued with
// ErrClosed, and closes Config.Checkpoint if it has a Close method (for a
// checkpoint.File that releases its lock, so the next owner can start). It
// does not close Config.Legacy, which the caller may still use. Close is
// idempotent: later calls return nil. Afterwards Restore and every write
// fail with ErrClosed, reads (Get, All, Len) return nothing, and Stats and
// Phase still answer.
func (s *Store[K, V]) Close() error {
	s.token <- struct{}{}
	defer s.release()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.state = state[K, V]{vals: map[K]V{}}
	s.mu.Unlock()

	s.qmu.Lock()
	queued := s.queue
	s.queue = nil
	s.qmu.Unlock()
	for _, r := range queued {
		r.finish(fmt.Errorf("migrate: %w", ErrClosed))
	}
	if c, ok := s.cfg.Checkpoint.(io.Closer); ok {
		if err := c.Close(); err != nil {
			return fmt.Errorf("migrate: closing the checkpoint: %w", err)
		}
	}
	return nil
}

// countingWriter counts the writes a Store makes to legacy, for Stats: each
// call of Put, Delete or Write is one.
type countingWriter[K comparable, V any] struct {
	w source.Writer[K, V]
	b source.BatchWriter[K, V] // w, when it is one; nil otherwise
	c *counters
}

func (cw countingWriter[K, V]) Write(ctx context.Context, changes []source.Change[K, V]) error {
	return cw.count(cw.b.Write(ctx, changes))
}

func (cw countingWriter[K, V]) Put(ctx context.Context, key K, value V) error {
	return cw.count(cw.w.Put(ctx, key, value))
}

func (cw countingWriter[K, V]) Delete(ctx context.Context, key K) error {
	return cw.count(cw.w.Delete(ctx, key))
}

func (cw countingWriter[K, V]) count(err error) error {
	if err != nil {
		cw.c.legacyWriteFailures.Add(1)
	} else {
		cw.c.legacyWrites.Add(1)
	}
	return err
}

// timed runs a checkpoint save and counts it, for Stats.
func (s *Store[K, V]) timed(save func() error) error {
	start := time.Now()
	err := save()
	s.stats.saveNanos.Add(int64(time.Since(start)))
	if err != nil {
		s.stats.saveFailures.Add(1)
	} else {
		s.stats.saves.Add(1)
	}
	return err
}
