package migrate

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
)

// Tx is the set of changes an Update makes, and its view of the state: the
// committed state, with the changes of the writes committed in the same
// group before it, and its own.
//
// Its methods must only be called from the Update function that received
// it, and only while it runs; they panic afterwards. The function may also
// call the Store's read methods (Get, All, Len, Key, Origin), but those see
// committed state only, which may lag behind what the Tx sees: read through
// the Tx. It must not call the Store's write methods (Put, Delete, Update,
// DeleteFunc, Replace), Restore or Close: they wait for the commit that is running
// the function, which waits for them, until their context is done.
type Tx[K comparable, V any] struct {
	s    *Store[K, V]
	ov   *overlay[K, V]
	ops  []op[K, V]
	at   map[K]int // identity -> index in ops
	over bool      // the function returned: the Tx may no longer be used
	// mark is this Tx's mark in the state's entry list, once All has
	// run: the committed entries the Tx changed carry it, or the batch's
	// (overlay.mark).
	mark uint64
	// loops are the All loops running now, innermost last: set tells each
	// of the entries it changes that the loop has yielded already.
	loops []*allLoop[K]
}

// allLoop is where one running All loop is: in which of its three parts
// (the committed entries, the batch's changes, the Tx's own) and, within
// it, how many it has passed.
type allLoop[K comparable] struct {
	part int
	next int
	// again holds the identities the loop yielded that the Tx changed
	// since: its last part, over the Tx's changes, skips them.
	again map[K]struct{}
}

// The parts of an All loop, in order.
const (
	partCommitted = iota + 1
	partBatch
	partOwn
)

func (tx *Tx[K, V]) check() {
	if tx.over {
		panic("migrate: a Tx was used after its Update function returned")
	}
}

// Get returns key's value as the transaction sees it: the committed value
// with the changes of the writes before it, or the transaction's own
// change.
func (tx *Tx[K, V]) Get(key K) (V, bool) {
	tx.check()
	id := tx.s.id(key)
	if i, ok := tx.at[id]; ok {
		if tx.ops[i].del {
			var zero V
			return zero, false
		}
		return tx.ops[i].val, true
	}
	_, v, ok := tx.ov.lookup(id)
	return v, ok
}

// All returns every entry as the transaction sees it, by stored key: the
// committed state with the changes of the writes before it and the
// transaction's own applied. As with a range over a Go map, it yields each
// key at most once, and the loop body may change the transaction: an entry
// it deletes before the loop reaches it is not yielded, one it replaces
// before the loop reaches it is yielded with its new value (after the
// entries nobody changed), one it replaces after the loop reached it is not
// yielded again, and an entry it adds may be yielded or not.
func (tx *Tx[K, V]) All() iter.Seq2[K, V] {
	tx.check()
	return func(yield func(K, V) bool) {
		tx.check()
		l := &allLoop[K]{}
		tx.loops = append(tx.loops, l)
		defer tx.endLoop(l)
		// The committed entries, less those the batch or the Tx changed:
		// a walk over a slice, skipping the entries that carry the batch's
		// mark or this Tx's, which set puts on an entry the loop has not
		// reached yet.
		list := tx.marked()
		l.part = partCommitted
		for i := 0; i < len(list.keys); i++ {
			if m := list.marks[i]; m == tx.mark || m == tx.ov.mark {
				continue
			}
			l.next = i + 1
			if !yield(list.keys[i], list.vals[i]) {
				return
			}
		}
		// The batch's changes the Tx has not changed again, in the order
		// they were made.
		l.part, l.next = partBatch, 0
		for i := 0; i < len(tx.ov.order); i++ {
			id := tx.ov.order[i]
			sl := tx.ov.changed[id]
			if _, mine := tx.at[id]; mine || !sl.present {
				continue
			}
			l.next = i + 1
			if !yield(sl.key, sl.val) {
				return
			}
		}
		// The Tx's own, but those the loop yielded before the Tx changed them.
		l.part = partOwn
		for i := 0; i < len(tx.ops); i++ {
			o := tx.ops[i]
			if _, yielded := l.again[o.id]; o.del || yielded {
				continue
			}
			if !yield(o.key, o.val) {
				return
			}
		}
	}
}

// endLoop forgets loop l, which has ended.
func (tx *Tx[K, V]) endLoop(l *allLoop[K]) {
	if i := slices.Index(tx.loops, l); i >= 0 {
		tx.loops = slices.Delete(tx.loops, i, i+1)
	}
}

// yielded reports whether loop l has yielded the entry of identity id from
// its first two parts. The caller is about to give id its first change in
// the Tx: until now, the loop skipped it in neither part.
func (tx *Tx[K, V]) yielded(l *allLoop[K], id K) bool {
	if sl, ok := tx.ov.changed[id]; ok {
		// A committed entry the batch changed carries the batch's mark:
		// the first part skipped it, the second yields it.
		return sl.present && (l.part > partBatch || (l.part == partBatch && sl.pos < l.next))
	}
	k, ok := tx.ov.st.lookup(id)
	if !ok {
		return false
	}
	list := tx.ov.st.list
	i := list.at[k]
	return l.part > partCommitted || i < l.next
}

// marked returns the state's entry list with the batch's mark on every
// committed entry the batch has changed (marked once per batch, at its
// first All, then by overlay.put) and this Tx's on those the Tx has
// changed, giving the Tx a mark at its first All.
func (tx *Tx[K, V]) marked() *entryList[K, V] {
	ov := tx.ov
	list := ov.st.entries()
	if ov.mark == 0 {
		ov.mark = list.newMark()
		for id := range ov.changed {
			ov.markEntry(id, ov.mark)
		}
	}
	if tx.mark == 0 {
		tx.mark = list.newMark()
		for id := range tx.at {
			tx.markEntry(id)
		}
	}
	return list
}

// markEntry puts this Tx's mark on the committed entry of identity id, if
// there is one and the batch's mark is not on it already: that one stays
// for the Txs after this one in the batch.
func (tx *Tx[K, V]) markEntry(id K) {
	if k, ok := tx.ov.st.lookup(id); ok {
		tx.ov.st.list.markUnless(k, tx.mark, tx.ov.mark)
	}
}

// Put stores value under key when the transaction commits.
func (tx *Tx[K, V]) Put(key K, value V) { tx.set(op[K, V]{key: key, val: value}) }

// Delete removes key's entry when the transaction commits.
func (tx *Tx[K, V]) Delete(key K) { tx.set(op[K, V]{key: key, del: true}) }

// Origin returns where key's entry came from, as the transaction sees it:
// OriginWrite when the transaction, or a write before it in its group
// commit, has put it (Store.Origin, which sees committed state only,
// would still give its restored origin), and false when it is gone. An
// Update that deletes only what restore left as it was (control's prune of
// orphans) decides by it, in the commit that deletes.
func (tx *Tx[K, V]) Origin(key K) (Origin, bool) {
	tx.check()
	id := tx.s.id(key)
	if i, ok := tx.at[id]; ok {
		if tx.ops[i].del {
			return 0, false
		}
		return OriginWrite, true
	}
	if sl, ok := tx.ov.changed[id]; ok {
		if !sl.present {
			return 0, false
		}
		return OriginWrite, true
	}
	k, ok := tx.ov.st.lookup(id)
	if !ok {
		return 0, false
	}
	if o, ok := tx.ov.st.origin[k]; ok {
		return o, true
	}
	return tx.ov.st.def, true
}

func (tx *Tx[K, V]) set(o op[K, V]) {
	tx.check()
	o.id = tx.s.id(o.key)
	if i, ok := tx.at[o.id]; ok {
		tx.ops[i] = o
		return
	}
	for _, l := range tx.loops {
		if tx.yielded(l, o.id) {
			if l.again == nil {
				l.again = make(map[K]struct{})
			}
			l.again[o.id] = struct{}{}
		}
	}
	if tx.mark != 0 {
		tx.markEntry(o.id) // an All may not have reached it yet
	}
	if tx.at == nil {
		tx.at = make(map[K]int)
	}
	tx.at[o.id] = len(tx.ops)
	tx.ops = append(tx.ops, o)
}

// errPanicked stands for a function that panicked; its caller panics again.
var errPanicked = errors.New("migrate: the Update function panicked")

// runTx runs r's function on a Tx over ov and returns its changes. A
// function that panics is recorded, to panic again in its caller.
func (s *Store[K, V]) runTx(ov *overlay[K, V], r *request[K, V]) (ops []op[K, V], err error) {
	tx := &Tx[K, V]{s: s, ov: ov}
	defer func() {
		tx.over = true
		if p := recover(); p != nil {
			r.panicked = p
			ops, err = nil, errPanicked
		}
	}()
	if err := r.fn(tx); err != nil {
		return nil, err
	}
	return tx.ops, nil
}

// Update runs fn on a transaction and commits its changes as one. If fn
// returns an error, nothing is written and Update returns that error; if
// fn panics, nothing is written and Update panics with the same value in
// the caller's goroutine. Either way the other writes of its group commit.
//
// Updates are group-committed with Put and Delete: fn runs once, in the
// commit that carries it, against the committed state with the changes of
// the writes queued before it (serializable: as if it ran alone after
// them), and its changes share that commit's one save per side. What fn
// reads stays true until its changes are durable. See Tx for what fn may
// call.
//
// Every side sees all of the changes or none: the checkpoint takes them in
// one save, so a crash leaves all of them or none there; a legacy the Store
// writes takes one write per key, so a crash between those writes can
// leave part of the Update in legacy (a failure, unlike a crash, is
// undone), unless it is a source.BatchWriter, which takes the commit in one
// Write. The context is honoured as Put says: once a commit has taken
// the Update, fn runs and the outcome is Update's answer.
func (s *Store[K, V]) Update(ctx context.Context, fn func(tx *Tx[K, V]) error) error {
	if fn == nil {
		return fmt.Errorf("migrate: Update needs a function")
	}
	return s.write(ctx, &request[K, V]{fn: fn})
}

// DeleteFunc removes every entry for which del returns true, from every
// side its phase writes, in one commit (an Update), and returns the stored
// keys it removed. It is garbage collection against live evidence: the
// runtime's list of valid attachments (CNI GC), the pod interfaces that
// still exist. del sees the state as an Update would, and must not call the
// Store (see Tx). When the commit fails, nothing is removed, and the error
// says why.
func (s *Store[K, V]) DeleteFunc(ctx context.Context, del func(K, V) bool) ([]K, error) {
	if del == nil {
		return nil, fmt.Errorf("migrate: DeleteFunc needs a function")
	}
	var removed []K
	err := s.Update(ctx, func(tx *Tx[K, V]) error {
		removed = removed[:0]
		for k, v := range tx.All() {
			if del(k, v) {
				tx.Delete(k)
				removed = append(removed, k)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return removed, nil
}
