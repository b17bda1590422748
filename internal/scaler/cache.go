package scaler

import (
	"hash/maphash"
	"maps"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"

	"github.com/pelwarden/pelwarden/internal/metadata"
)

// ParseFunc turns a trigger into a request. It must be pure: the same
// trigger always gives the same request or the same error, so that its
// result can be kept.
type ParseFunc func(ref *externalscaler.ScaledObjectRef) (metadata.Request, error)

// parseCache keeps the result of parsing each trigger, so that KEDA's
// steady polls, which repeat the same ScaledObjectRef every few seconds,
// parse nothing. It is bounded and evicts the least recently used trigger:
// a caller sending new metadata on every call only churns the cache, it
// cannot grow it.
type parseCache struct {
	parse ParseFunc
	seed  maphash.Seed
	lru   *lru.Cache[triggerKey, *parsed]
}

// triggerKey finds a trigger's slot; the metadata itself is compared on a
// hit, so two triggers whose hashes collide are never confused.
type triggerKey struct {
	namespace, name string
	hash            uint64
}

type parsed struct {
	metadata map[string]string
	req      metadata.Request
	err      error
}

func newParseCache(parse ParseFunc, size int) *parseCache {
	c, err := lru.New[triggerKey, *parsed](max(size, 1))
	if err != nil {
		// lru.New fails only on a size below 1, which max rules out.
		panic(err)
	}
	return &parseCache{parse: parse, seed: maphash.MakeSeed(), lru: c}
}

// get returns the parse of ref, from the cache when the same trigger was
// parsed before. Errors are kept too: a trigger that is wrong stays wrong
// until its metadata changes, and then it is another key.
func (c *parseCache) get(ref *externalscaler.ScaledObjectRef) (metadata.Request, error) {
	md := ref.GetScalerMetadata()
	key := triggerKey{namespace: ref.GetNamespace(), name: ref.GetName(), hash: c.hash(md)}
	if p, ok := c.lru.Get(key); ok && maps.Equal(p.metadata, md) {
		return p.req, p.err
	}
	r, err := c.parse(ref)
	c.lru.Add(key, &parsed{metadata: maps.Clone(md), req: r, err: err})
	return r, err
}

// hash sums one hash per key and value pair, which does not depend on the
// map's iteration order and needs no sorted copy of the keys.
func (c *parseCache) hash(md map[string]string) uint64 {
	var sum uint64
	var h maphash.Hash
	h.SetSeed(c.seed)
	for k, v := range md {
		h.Reset()
		h.WriteString(k)
		h.WriteByte(0)
		h.WriteString(v)
		sum += h.Sum64()
	}
	return sum
}
