package bytecache_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/bytecache"
)

func TestCacheEvictsTheLeastRecentlyUsedPastItsBytes(t *testing.T) {
	t.Parallel()
	c := bytecache.New[string, int](100, 10)
	require.True(t, c.Add("a", 1, 4))
	require.True(t, c.Add("b", 2, 4))
	_, ok := c.Get("a") // a is now the most recently used
	require.True(t, ok)
	require.True(t, c.Add("c", 3, 4), "12 bytes > 10: b, the least recently used, goes")
	_, ok = c.Get("b")
	require.False(t, ok)
	for k, want := range map[string]int{"a": 1, "c": 3} {
		v, ok := c.Get(k)
		require.True(t, ok, k)
		require.Equal(t, want, v)
	}
	require.Equal(t, int64(8), c.Bytes())
}

func TestCacheEvictsPastItsCount(t *testing.T) {
	t.Parallel()
	c := bytecache.New[int, int](3, 1<<20)
	for i := range 10 {
		c.Add(i, i, 1)
	}
	require.Equal(t, 3, c.Len())
	require.Equal(t, int64(3), c.Bytes(), "an entry evicted by count gives its bytes back")
}

func TestCacheRefusesAValueLargerThanItself(t *testing.T) {
	t.Parallel()
	c := bytecache.New[string, string](10, 100)
	require.True(t, c.Add("small", "x", 10))
	require.False(t, c.Add("huge", "y", 101))
	_, ok := c.Get("huge")
	require.False(t, ok)
	_, ok = c.Get("small")
	require.True(t, ok, "a refused value evicts nothing")
}

func TestCacheReplacingAKeyCountsOnlyItsNewSize(t *testing.T) {
	t.Parallel()
	c := bytecache.New[string, string](10, 100)
	c.Add("k", "old", 60)
	c.Add("k", "new", 30)
	require.Equal(t, int64(30), c.Bytes())
	require.Equal(t, 1, c.Len())
	v, _ := c.Get("k")
	require.Equal(t, "new", v)
}

// FuzzCacheStaysWithinItsBounds adds values of arbitrary sizes: the bytes
// held never pass the bound and always equal the sizes of what is held.
func FuzzCacheStaysWithinItsBounds(f *testing.F) {
	f.Add([]byte{1, 2, 3, 200, 5}, uint16(100), uint8(3))
	f.Add([]byte{255, 255, 0, 0}, uint16(1), uint8(1))
	f.Fuzz(func(t *testing.T, sizes []byte, maxBytes uint16, maxEntries uint8) {
		c := bytecache.New[string, int](int(maxEntries), int64(maxBytes))
		held := map[string]int64{}
		for i, s := range sizes {
			key := fmt.Sprint(i % 7)
			if c.Add(key, i, int64(s)) {
				held[key] = int64(s)
			} else {
				delete(held, key)
			}
			require.LessOrEqual(t, c.Bytes(), max(int64(maxBytes), 1))
			require.LessOrEqual(t, c.Len(), max(int(maxEntries), 1))
		}
		var sum int64
		for k, size := range held {
			if _, ok := c.Get(k); ok {
				sum += size
			}
		}
		require.Equal(t, sum, c.Bytes())
	})
}
