package migratetest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/phaseshift/phaseshift/migrate"
)

// Node is what a node knows about its own state, independent of any restore
// rule: which holders exist (the pods, the VMs), what each holds, which
// writes were acknowledged to it, and which ones a crash left unsettled.
// Check judges what a Store serves against it, so that a wrong rule cannot
// be wrong in the oracle too.
//
// Tell the Node what happened on the node as it happens: Acknowledge when a
// write returned nil to its caller (a Store's, or the old binary's own),
// Unsettled when a write's outcome is not known (a crash cut it short, or
// it failed with migrate.ErrOutcomeUnknown), Gone when a holder ends
// without a write (a reboot kills every pod). A failed write whose outcome
// is known changes nothing.
//
// Keys are compared as they are: a Store with a Match must be judged on
// keys the Node names the same way.
//
// A Node is not safe for concurrent use.
type Node[K comparable, V any] struct {
	// Equal tells whether two values are the same; nil means
	// reflect.DeepEqual.
	Equal func(a, b V) bool
	// Unique returns the parts of a value no two live holders may share
	// (an allocator's addresses), as migrate.Config.Unique does; nil turns
	// the uniqueness checks off.
	Unique func(V) []string

	holders   map[K]V    // holders that exist, with the value acknowledged to them
	unsettled map[K][]V  // keys whose last write's outcome is unknown: the values it may have left (absent is always possible)
	records   map[K][]V  // every value an acknowledged write or a legacy record produced, per key
	lost      map[K]bool // holders a Report named lost (migrate.LostError), until their next write
}

// Invariant names one of the three things Check asserts, or the one it
// counts.
type Invariant string

// The invariants.
const (
	// Missing: an acknowledged entry whose holder exists is not served,
	// or is served with another value, and Restore did not refuse.
	Missing Invariant = "missing"
	// Twice: (Unique) one part is served to two entries whose holders
	// both exist.
	Twice Invariant = "served twice"
	// Free: (Unique) a part a live holder uses is served to no entry, so
	// an allocator hands it out again.
	Free Invariant = "free while held"
	// Invented: an entry is served with a value no acknowledged write and
	// no legacy record produced for it (a torn record, a mix of two
	// generations).
	Invented Invariant = "invented"
	// SilentLeak: an entry whose holder is gone is served, and the Report
	// names it nowhere (Orphaned, Dropped, Errors). A reported leak is
	// allowed: it is the safe side of not knowing.
	SilentLeak Invariant = "silent leak"
)

// NodeViolation is one breach of an invariant. It names keys, never values
// (they may hold secrets).
type NodeViolation struct {
	Invariant Invariant
	Keys      []string // the keys involved, as fmt.Sprint shows them
	Detail    string
}

// String shows the invariant, the keys and what is wrong.
func (v NodeViolation) String() string {
	return fmt.Sprintf("%s: %s: %s", v.Invariant, strings.Join(v.Keys, ", "), v.Detail)
}

// NewNode returns an empty Node: no holder exists.
func NewNode[K comparable, V any](equal func(a, b V) bool, unique func(V) []string) *Node[K, V] {
	return &Node[K, V]{Equal: equal, Unique: unique, holders: map[K]V{}, unsettled: map[K][]V{}, records: map[K][]V{}}
}

// Acknowledge records a put of v to key that returned nil: the holder
// exists and holds v.
func (n *Node[K, V]) Acknowledge(key K, v V) {
	n.holders[key] = v
	delete(n.unsettled, key)
	delete(n.lost, key)
	n.record(key, v)
}

// AcknowledgeDelete records a delete of key that returned nil: the holder
// is gone.
func (n *Node[K, V]) AcknowledgeDelete(key K) {
	delete(n.holders, key)
	delete(n.unsettled, key)
	delete(n.lost, key)
}

// Unsettled records a write to key whose outcome is not known: a put of v,
// or a delete when deleted is set. Until a later acknowledged write to
// key, the entry may be served in any state it had before or after, or
// not at all; the holder is taken not to exist (a runtime tears down a
// sandbox whose ADD failed, and retries a DEL until it returns).
func (n *Node[K, V]) Unsettled(key K, v V, deleted bool) {
	states := n.unsettled[key]
	if old, ok := n.holders[key]; ok {
		states = append(states, old)
	}
	if !deleted {
		states = append(states, v)
		n.record(key, v)
	}
	delete(n.holders, key)
	n.unsettled[key] = states
}

// Gone records that every holder ended without a write: a reboot.
func (n *Node[K, V]) Gone() {
	clear(n.holders)
	clear(n.unsettled)
}

// Holds returns the value key's holder holds, and whether it exists.
func (n *Node[K, V]) Holds(key K) (V, bool) {
	v, ok := n.holders[key]
	return v, ok
}

// Holders returns the keys of the holders that exist, in no order.
func (n *Node[K, V]) Holders() []K {
	keys := make([]K, 0, len(n.holders))
	for k := range n.holders {
		keys = append(keys, k)
	}
	return keys
}

func (n *Node[K, V]) record(key K, v V) {
	if !slices.ContainsFunc(n.records[key], func(r V) bool { return n.equal(r, v) }) {
		n.records[key] = append(n.records[key], v)
	}
}

func (n *Node[K, V]) equal(a, b V) bool {
	if n.Equal != nil {
		return n.Equal(a, b)
	}
	return reflect.DeepEqual(a, b)
}

// Check judges served, what a Store serves (Store.All collected into a
// map), against the node, after a Restore that returned rep (refused: it
// returned an error, so nothing is served) or after an acknowledged write
// (pass the last Restore's Report). It returns every violation, and the
// number of leaks the Report names (entries served whose holder is gone),
// which are allowed.
//
// A refusal must also leave both sides as they were; Check cannot see the
// sides, so the caller checks that.
func (n *Node[K, V]) Check(served map[K]V, rep migrate.Report[K], refused bool) (vs []NodeViolation, leaks int) {
	if refused {
		return nil, 0
	}
	if n.lost == nil {
		n.lost = map[K]bool{}
	}
	for k := range lostIn(rep) {
		n.lost[k] = true // named once, lost until its next write
	}
	lost := n.lost
	vs = n.checkMissing(served, lost)
	vs = append(vs, n.checkServed(served, rep, &leaks)...)
	if n.Unique != nil {
		vs = append(vs, n.checkUnique(served, lost)...)
	}
	return vs, leaks
}

// lostIn returns the keys rep names as lost (migrate.LostError): entries
// whose last acknowledged write the Store knows it cannot serve (phase 0
// wrote it to a registry that died with it), reported, not guessed.
func lostIn[K comparable](rep migrate.Report[K]) map[K]bool {
	lost := map[K]bool{}
	for _, err := range rep.Errors {
		var le *migrate.LostError[K]
		if errors.As(err, &le) {
			lost[le.Key] = true
		}
	}
	return lost
}

// checkMissing: every live holder is served, with the value acknowledged
// to it.
func (n *Node[K, V]) checkMissing(served map[K]V, lost map[K]bool) []NodeViolation {
	var vs []NodeViolation
	for _, k := range sortedKeys(n.holders) {
		got, ok := served[k]
		switch {
		case !ok && lost[k]:
			// Reported lost: the one loss the promise names (phase 0's
			// writes to a volatile legacy).
		case !ok:
			vs = append(vs, NodeViolation{Missing, []string{fmt.Sprint(k)}, "its holder exists and its write was acknowledged, but it is not served"})
		case !n.equal(got, n.holders[k]):
			vs = append(vs, NodeViolation{Missing, []string{fmt.Sprint(k)}, "served with another value than the one acknowledged to its holder"})
		}
	}
	return vs
}

// checkServed: everything served was produced by a write or a record, and
// what is served for a holder that is gone is reported.
func (n *Node[K, V]) checkServed(served map[K]V, rep migrate.Report[K], leaks *int) []NodeViolation {
	var vs []NodeViolation
	for _, k := range sortedKeys(served) {
		v := served[k]
		if !slices.ContainsFunc(n.records[k], func(r V) bool { return n.equal(r, v) }) {
			vs = append(vs, NodeViolation{Invented, []string{fmt.Sprint(k)}, "served with a value no acknowledged write or legacy record produced"})
			continue
		}
		if _, live := n.holders[k]; live {
			continue
		}
		if _, open := n.unsettled[k]; open {
			continue // an unacknowledged write may be served in its after state
		}
		if reported(rep, k) {
			*leaks++
			continue
		}
		vs = append(vs, NodeViolation{SilentLeak, []string{fmt.Sprint(k)}, "served though its holder is gone, and the report does not name it"})
	}
	return vs
}

// reported says whether rep names k as kept on doubt or as a problem.
func reported[K comparable](rep migrate.Report[K], k K) bool {
	if slices.Contains(rep.Orphaned, k) || slices.Contains(rep.Dropped, k) {
		return true
	}
	name := fmt.Sprint(k)
	return slices.ContainsFunc(rep.Errors, func(err error) bool { return strings.Contains(err.Error(), name) })
}

// checkUnique: no part served to two live holders, and none free while a
// live holder uses it.
func (n *Node[K, V]) checkUnique(served map[K]V, lost map[K]bool) []NodeViolation {
	var vs []NodeViolation
	owner := map[string]K{} // part -> the first live served key holding it
	used := map[string]bool{}
	for _, k := range sortedKeys(served) {
		for _, p := range n.Unique(served[k]) {
			used[p] = true
			if _, live := n.holders[k]; !live {
				continue
			}
			if o, dup := owner[p]; dup && o != k {
				vs = append(vs, NodeViolation{Twice, []string{fmt.Sprint(o), fmt.Sprint(k)}, "one part of their values is served to both, and both holders exist"})
				continue
			}
			owner[p] = k
		}
	}
	for _, k := range sortedKeys(n.holders) {
		if lost[k] {
			continue
		}
		for _, p := range n.Unique(n.holders[k]) {
			if !used[p] {
				vs = append(vs, NodeViolation{Free, []string{fmt.Sprint(k)}, "a part of the value its holder uses is served to no entry, so it can be handed out again"})
				break
			}
		}
	}
	return vs
}
