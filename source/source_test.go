package source_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/phaseshift/phaseshift/source"
)

func TestMapZeroValueIsUsable(t *testing.T) {
	var m source.Map[string, int]
	got, err := m.List(context.Background())
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.Equal(t, 0, m.Len())
	_, ok := m.Get("a")
	assert.False(t, ok)
	require.NoError(t, m.Delete(context.Background(), "absent"), "deleting an absent key is not an error")
}

func TestMapPutGetDelete(t *testing.T) {
	ctx := context.Background()
	var m source.Map[string, int]
	require.NoError(t, m.Put(ctx, "a", 1))
	require.NoError(t, m.Put(ctx, "b", 2))
	require.NoError(t, m.Put(ctx, "a", 3))
	v, ok := m.Get("a")
	assert.True(t, ok)
	assert.Equal(t, 3, v)
	require.NoError(t, m.Delete(ctx, "b"))
	got, err := m.List(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"a": 3}, got)
}

func TestMapListReturnsACopy(t *testing.T) {
	ctx := context.Background()
	var m source.Map[string, int]
	m.Set("a", 1)
	got, err := m.List(ctx)
	require.NoError(t, err)
	got["a"] = 100
	got["b"] = 2
	delete(got, "a")
	again, err := m.List(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"a": 1}, again, "changing what List returned must not change the Map")

	snap := m.Snapshot()
	snap["c"] = 3
	assert.Equal(t, 1, m.Len())
}

func TestMapReplaceCopies(t *testing.T) {
	var m source.Map[string, int]
	in := map[string]int{"a": 1, "b": 2}
	m.Replace(in)
	in["c"] = 3
	assert.Equal(t, 2, m.Len(), "Replace must copy its argument")
	m.Replace(nil)
	assert.Equal(t, 0, m.Len())
	m.Set("d", 4) // a Map emptied by Replace(nil) still takes writes
	assert.Equal(t, 1, m.Len())
}

// TestMapConcurrent is meant for -race: readers list and get while writers
// put and delete disjoint keys; at the end every writer's last write is there.
func TestMapConcurrent(t *testing.T) {
	ctx := context.Background()
	var m source.Map[string, int]
	const writers, perWriter = 4, 100
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := m.List(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				for k := range l {
					l[k]++ // must not touch the Map
				}
				m.Get("w0-0")
				m.Len()
			}
		}()
	}
	var ww sync.WaitGroup
	for w := 0; w < writers; w++ {
		ww.Add(1)
		go func() {
			defer ww.Done()
			for i := 0; i < perWriter; i++ {
				k := fmt.Sprintf("w%d-%d", w, i)
				if err := m.Put(ctx, k, i); err != nil {
					t.Error(err)
				}
				if i%2 == 1 {
					if err := m.Delete(ctx, k); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	ww.Wait()
	close(stop)
	wg.Wait()
	require.Equal(t, writers*perWriter/2, m.Len())
	for w := 0; w < writers; w++ {
		for i := 0; i < perWriter; i += 2 {
			v, ok := m.Get(fmt.Sprintf("w%d-%d", w, i))
			require.True(t, ok)
			require.Equal(t, i, v, "a reader's change to a List result leaked into the Map")
		}
	}
}

func TestFunc(t *testing.T) {
	ctx := context.Background()
	var nilFunc source.Func[string, int]
	got, err := nilFunc.List(ctx)
	require.NoError(t, err)
	assert.Empty(t, got)

	boom := errors.New("runtime down")
	f := source.Func[string, int](func(context.Context) (map[string]int, error) { return nil, boom })
	_, err = f.List(ctx)
	assert.ErrorIs(t, err, boom)

	var r source.Reader[string, int] = f
	_, isWriter := r.(source.Writer[string, int])
	assert.False(t, isWriter, "a Func takes no explicit writes")
}

func TestListError(t *testing.T) {
	one := &source.ListError{Errs: []error{fmt.Errorf("sandbox abc: %w", fs.ErrPermission)}}
	assert.Equal(t, "1 entry could not be read: sandbox abc: permission denied", one.Error())
	assert.ErrorIs(t, one, fs.ErrPermission, "errors.Is must see through to the entry errors")

	two := fmt.Errorf("listing: %w", &source.ListError{Errs: []error{errors.New("a: bad"), errors.New("b: bad")}})
	assert.Equal(t, "listing: 2 entries could not be read: a: bad; b: bad", two.Error())
	assert.True(t, source.Partial(two))
	assert.False(t, source.Partial(errors.New("whole side down")))
	assert.False(t, source.Partial(nil))
}
