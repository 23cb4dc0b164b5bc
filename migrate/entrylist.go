package migrate

// entryList is the committed entries of a state as two slices, for Tx.All:
// an allocator's Update scans every entry through Tx.All, and walking a
// slice costs a fraction of ranging over the map and hashing every key to
// learn whether the batch changed it. An entry the batch or a Tx changed
// carries that Tx's mark instead. All methods run under the Store's token;
// the methods that change the list are no-ops on a nil list (a state whose
// list nobody has asked for yet).
type entryList[K comparable, V any] struct {
	keys  []K
	vals  []V
	marks []uint64
	at    map[K]int // stored key -> index
	last  uint64    // the last mark handed out; 64 bits never wrap
}

// entries returns the state's entry list, building it on first use.
func (st *state[K, V]) entries() *entryList[K, V] {
	if st.list != nil {
		return st.list
	}
	n := len(st.vals)
	l := &entryList[K, V]{keys: make([]K, 0, n), vals: make([]V, 0, n), marks: make([]uint64, n), at: make(map[K]int, n)}
	for k, v := range st.vals {
		l.at[k] = len(l.keys)
		l.keys = append(l.keys, k)
		l.vals = append(l.vals, v)
	}
	st.list = l
	return l
}

// newMark returns a mark no entry carries.
func (l *entryList[K, V]) newMark() uint64 {
	l.last++
	return l.last
}

// mark puts m on k's entry.
func (l *entryList[K, V]) mark(k K, m uint64) {
	if i, ok := l.at[k]; ok {
		l.marks[i] = m
	}
}

// markUnless puts m on k's entry unless it carries keep.
func (l *entryList[K, V]) markUnless(k K, m, keep uint64) {
	if i, ok := l.at[k]; ok && l.marks[i] != keep {
		l.marks[i] = m
	}
}

// put stores v under k.
func (l *entryList[K, V]) put(k K, v V) {
	if l == nil {
		return
	}
	if i, ok := l.at[k]; ok {
		l.vals[i], l.marks[i] = v, 0
		return
	}
	l.at[k] = len(l.keys)
	l.keys = append(l.keys, k)
	l.vals = append(l.vals, v)
	l.marks = append(l.marks, 0)
}

// remove removes k's entry, moving the last entry into its place.
func (l *entryList[K, V]) remove(k K) {
	if l == nil {
		return
	}
	i, ok := l.at[k]
	if !ok {
		return
	}
	delete(l.at, k)
	last := len(l.keys) - 1
	if i != last {
		l.keys[i], l.vals[i], l.marks[i] = l.keys[last], l.vals[last], l.marks[last]
		l.at[l.keys[i]] = i
	}
	var zk K
	var zv V
	l.keys[last], l.vals[last] = zk, zv // let what they point to go
	l.keys, l.vals, l.marks = l.keys[:last], l.vals[:last], l.marks[:last]
}
