package migrate

import (
	"context"
	"fmt"
	"reflect"
)

// Replace makes entries the Store's whole state, in one commit: it puts
// every entry of entries that is not served as it is, and deletes every
// served entry whose key (with Config.Match, whose identity) entries lacks.
// It is the write of a daemon that keeps its state itself and hands the
// whole of it to its store at every change, as the AWS VPC CNI's datastore
// hands its Checkpointer every allocation.
//
// The commit carries only what changed, so the checkpoint save and the
// legacy writes cost what changed; the rest costs one comparison per entry,
// made in the commit against the state as it then is (the writes queued
// before it included, as for Update):
//
//   - An entry is unchanged when it is stored under the same key with an
//     equal value: equal by == when V is a type == compares without
//     looking through an interface, map, slice or func (a struct of
//     strings and numbers: a few nanoseconds and no allocation), and by
//     reflect.DeepEqual otherwise (a pointer is then equal by what it
//     points to, so change a copy, as Store says). Config.Equal is not
//     used: for an implicit legacy it compares only what legacy records.
//   - Finding the served entries that entries lacks costs nothing when each
//     served entry matched one of entries, and one map lookup per served
//     entry otherwise. With Match, Replace also indexes entries by identity.
//
// A Replace with what is served writes nothing and returns nil. Two keys of
// entries that Match calls one entry fail it before anything is written.
// Replace reads entries while its commit runs: the caller must not change
// it until Replace returns, and Replace does not keep it. Nil or empty
// entries deletes every entry. Errors and the context are as for Put, and
// Stats counts a Replace as an Update. A Replace that fails changes nothing
// in memory nor in the checkpoint; an explicit legacy is undone as for any
// write, and where the undo fails too the error matches ErrOutcomeUnknown
// and legacy may hold part of it.
func (s *Store[K, V]) Replace(ctx context.Context, entries map[K]V) error {
	return s.write(ctx, &request[K, V]{snapshot: true, entries: entries})
}

// replaceOps returns the ops that make the overlay's state entries: a Put
// of every entry that is not served as it is, and a Delete of every served
// entry that entries lacks.
func (s *Store[K, V]) replaceOps(ov *overlay[K, V], entries map[K]V) ([]op[K, V], error) {
	var ops []op[K, V]
	var ids map[K]K // identity -> key of entries; only with Match
	if s.match != nil {
		ids = make(map[K]K, len(entries))
	}
	matched := 0
	for k, v := range entries {
		id := s.id(k)
		if ids != nil {
			if other, dup := ids[id]; dup {
				return nil, fmt.Errorf("migrate: Replace: keys %v and %v match the same entry (Config.Match); give each entry once", other, k)
			}
			ids[id] = k
		}
		sk, sv, ok := ov.lookup(id)
		if ok {
			matched++ // each served entry once: the identities of entries are distinct
			if sk == k && s.same(sv, v) {
				continue
			}
		}
		ops = append(ops, op[K, V]{key: k, val: v, id: id})
	}
	if matched == ov.len() {
		return ops, nil // every served entry is in entries
	}
	s.eachServed(ov, func(k, id K) {
		var keep bool
		if ids != nil {
			_, keep = ids[id]
		} else {
			_, keep = entries[k]
		}
		if !keep {
			ops = append(ops, op[K, V]{key: k, del: true, id: id})
		}
	})
	return ops, nil
}

// len returns the number of entries the overlay serves.
func (ov *overlay[K, V]) len() int {
	n := len(ov.st.vals)
	for id, sl := range ov.changed {
		_, had := ov.st.lookup(id)
		switch {
		case had && !sl.present:
			n--
		case !had && sl.present:
			n++
		}
	}
	return n
}

// eachServed calls fn with the stored key and identity of every entry the
// overlay serves.
func (s *Store[K, V]) eachServed(ov *overlay[K, V], fn func(k, id K)) {
	for k := range ov.st.vals {
		id := s.id(k)
		if len(ov.changed) > 0 {
			if _, changed := ov.changed[id]; changed {
				continue
			}
		}
		fn(k, id)
	}
	for _, id := range ov.order {
		if sl := ov.changed[id]; sl.present {
			fn(sl.key, id)
		}
	}
}

// sameValue returns how Replace tells an unchanged value: == where V's
// type allows it without a panic and a look through an interface, a map, a
// slice or a func, reflect.DeepEqual otherwise.
func sameValue[V any]() func(a, b V) bool {
	if plainComparable(reflect.TypeFor[V]()) {
		return func(a, b V) bool { return any(a) == any(b) }
	}
	return func(a, b V) bool { return reflect.DeepEqual(a, b) }
}

// plainComparable reports whether == on values of t compares what they
// hold without panicking: no interface (whose dynamic value may not be
// comparable), map, slice or func anywhere in it.
func plainComparable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Interface, reflect.Map, reflect.Slice, reflect.Func:
		return false
	case reflect.Array:
		return plainComparable(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !plainComparable(t.Field(i).Type) {
				return false
			}
		}
		return true
	default:
		return t.Comparable()
	}
}
