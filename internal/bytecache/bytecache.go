// Package bytecache is a least-recently-used cache bounded by the bytes its
// values hold as well as by their number. Callers that keep what a caller
// sent (a trigger's parse, a compiled pattern) use it: a bound on the
// number alone lets a few large values take gigabytes.
package bytecache

import (
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Cache maps keys to values, each with the size in bytes its caller
// counted for it. Adding past either bound evicts the least recently used
// values first. It is safe for concurrent use.
type Cache[K comparable, V any] struct {
	maxBytes int64

	mu    sync.Mutex
	lru   *simplelru.LRU[K, sized[V]]
	bytes int64
}

type sized[V any] struct {
	v    V
	size int64
}

// New returns a cache of at most maxEntries values (at least 1) holding at
// most maxBytes bytes (at least 1).
func New[K comparable, V any](maxEntries int, maxBytes int64) *Cache[K, V] {
	c := &Cache[K, V]{maxBytes: max(maxBytes, 1)}
	l, err := simplelru.NewLRU(max(maxEntries, 1), func(_ K, s sized[V]) { c.bytes -= s.size })
	if err != nil {
		// NewLRU fails only on a size below 1, which max rules out.
		panic(err)
	}
	c.lru = l
	return c
}

// Get returns the value of key and marks it recently used.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.lru.Get(key)
	return s.v, ok
}

// Add stores v under key as size bytes, in place of any value the key had.
// A value larger than the whole cache is not stored: Add reports false,
// and keeps every other value.
func (c *Cache[K, V]) Add(key K, v V, size int64) bool {
	size = max(size, 0)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(key)
	if size > c.maxBytes {
		return false
	}
	for c.bytes+size > c.maxBytes {
		c.lru.RemoveOldest()
	}
	c.bytes += size
	c.lru.Add(key, sized[V]{v: v, size: size})
	return true
}

// Len is the number of values held.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Bytes is the sum of the sizes of the values held.
func (c *Cache[K, V]) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
