package scaler

import (
	"maps"
	"slices"
	"strings"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"

	"github.com/pelwarden/pelwarden/internal/bytecache"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/trigger"
)

// ParseFunc turns a trigger into a request. It must be pure: the same
// trigger always gives the same request or the same error, so that its
// result can be kept.
type ParseFunc func(ref *externalscaler.ScaledObjectRef) (metadata.Request, error)

// DefaultParseCacheBytes bounds the memory of the parses kept, by the
// estimate parsedSize makes. A real trigger's entry is about 2 KB, so
// 10,000 triggers (scaler.maxTargets) fit; a caller sending triggers at
// the metadata bounds fills it with about 1,000 and only churns it after.
const DefaultParseCacheBytes = 32 << 20

// parseCache keeps the result of parsing each trigger, so that KEDA's
// steady polls, which repeat the same ScaledObjectRef every few seconds,
// parse nothing. It is bounded by count and by bytes and evicts the least
// recently used trigger: a caller sending new or large metadata on every
// call only churns the cache, it cannot grow it. A trigger's slot is its
// trigger.ID; the metadata itself is compared on a hit, so two triggers
// whose hashes collide are never confused.
type parseCache struct {
	parse ParseFunc
	lru   *bytecache.Cache[trigger.ID, *parsed]
}

// parsed is one trigger's entry. Its request is an allocation of its own:
// the trigger registry keeps the request for as long as the trigger is
// remembered, and a pointer into the entry would keep the metadata's copy
// alive after the cache let it go. The request is parsed from the
// metadata's copy (flatMetadata.asMap), so the strings it keeps are
// that copy's, not the call's beside it.
type parsed struct {
	metadata flatMetadata
	req      *metadata.Request
	err      error
}

// flatMetadata is a copy of a trigger's metadata to compare a hit with, in
// one string: its keys in order, each followed by its value; ends[i] is
// where the i-th key or value ends. One string and a few offsets cost
// a third of a map's copy, and hold none of the request's own strings,
// with one entry per trigger kept. A secret key (metadata.IsSecret: a
// credential, or a value KEDA resolved from the workload's environment)
// is kept by name only, with an empty value, and compared by presence:
// the parse reads only its presence, and metadata.CheckConnection holds
// the connection keys among them to the connection on every call.
type flatMetadata struct {
	text string
	ends []uint32
}

func flatten(md map[string]string) flatMetadata {
	keys := slices.Sorted(maps.Keys(md))
	var b strings.Builder
	n := 0
	for k, v := range md {
		n += len(k) + len(kept(k, v))
	}
	b.Grow(n) // the text's exact size, not the builder's doublings
	f := flatMetadata{ends: make([]uint32, 0, 2*len(keys))}
	for _, k := range keys {
		b.WriteString(k)
		f.ends = append(f.ends, uint32(b.Len()))
		b.WriteString(kept(k, md[k]))
		f.ends = append(f.ends, uint32(b.Len()))
	}
	f.text = b.String()
	return f
}

// asMap is the metadata f was made from, each key and value a part of
// f's text.
func (f flatMetadata) asMap() map[string]string {
	m := make(map[string]string, len(f.ends)/2)
	start := uint32(0)
	for i := 0; i < len(f.ends); i += 2 {
		m[f.text[start:f.ends[i]]] = f.text[f.ends[i]:f.ends[i+1]]
		start = f.ends[i+1]
	}
	return m
}

// equal reports whether md is the metadata f was made from.
func (f flatMetadata) equal(md map[string]string) bool {
	if len(f.ends) != 2*len(md) {
		return false
	}
	start := uint32(0)
	for i := 0; i < len(f.ends); i += 2 {
		k, v := f.text[start:f.ends[i]], f.text[f.ends[i]:f.ends[i+1]]
		if got, ok := md[k]; !ok || kept(k, got) != v {
			return false
		}
		start = f.ends[i+1]
	}
	return true
}

// kept is the value of key the cache keeps: none for a secret key.
func kept(key, value string) string {
	if metadata.IsSecret(key) {
		return ""
	}
	return value
}

func newParseCache(parse ParseFunc, size int, bytes int64) *parseCache {
	return &parseCache{parse: parse, lru: bytecache.New[trigger.ID, *parsed](size, bytes)}
}

// parsedSize estimates the memory an entry holds: the metadata's flat
// copy, the strings the request makes of its own (metric names and the
// like; counted as another copy, a margin), the ID's strings, an error's
// text, and a fixed part for the structs.
func parsedSize(id trigger.ID, p *parsed) int64 {
	n := 2*len(p.metadata.text) + 4*len(p.metadata.ends) + len(id.Namespace) + len(id.Name) + 1024
	if p.err != nil {
		n += len(p.err.Error())
	}
	return int64(n)
}

// get returns the parse of ref, from the cache when the same trigger was
// parsed before, and the trigger's ID. The request is shared with
// whoever else keeps it (the trigger registry) and is never written to. Errors are kept too: a trigger that
// is wrong stays wrong until its metadata changes, and then it is another
// key.
func (c *parseCache) get(ref *externalscaler.ScaledObjectRef) (*metadata.Request, trigger.ID, error) {
	md := ref.GetScalerMetadata()
	id := trigger.IDOf(ref.GetNamespace(), ref.GetName(), md)
	if p, ok := c.lru.Get(id); ok && p.metadata.equal(md) {
		return p.req, id, p.err
	}
	f := flatten(md)
	r, err := c.parse(&externalscaler.ScaledObjectRef{Name: ref.GetName(), Namespace: ref.GetNamespace(), ScalerMetadata: f.asMap()})
	p := &parsed{metadata: f, req: &r, err: err}
	c.lru.Add(id, p, parsedSize(id, p))
	return p.req, id, err
}
