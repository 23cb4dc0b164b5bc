package migrate

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEntryListFollowsTheMap puts and removes random keys in a state's map
// and, as apply does, in its entry list, and requires the list to hold
// exactly the map's entries, each index right, and no entry to carry a
// mark once it was put again.
func TestEntryListFollowsTheMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	st := state[int, int]{vals: map[int]int{}}
	for i := range 20 {
		st.vals[i] = i
	}
	l := st.entries()
	for step := range 5000 {
		k := rng.IntN(40)
		m := l.newMark()
		l.mark(k, m)
		if rng.IntN(3) == 0 {
			delete(st.vals, k)
			l.remove(k)
		} else {
			st.vals[k] = step
			l.put(k, step)
		}
		require.Len(t, l.keys, len(st.vals))
		require.Len(t, l.at, len(st.vals))
		for i, key := range l.keys {
			assert.Equal(t, i, l.at[key])
			assert.Equal(t, st.vals[key], l.vals[i])
			if key == k {
				assert.NotEqual(t, m, l.marks[i], "a put clears the entry's mark")
			}
		}
	}
	var nilList *entryList[int, int]
	nilList.put(1, 1) // a state whose list nobody asked for
	nilList.remove(1)
}
