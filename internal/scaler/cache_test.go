package scaler

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/trigger"
)

// countingParse parses nothing: it names the request after the stream and
// counts its calls; a stream "bad" is an error.
func countingParse(calls *int) ParseFunc {
	return func(ref *externalscaler.ScaledObjectRef) (metadata.Request, error) {
		*calls++
		md := ref.GetScalerMetadata()
		if md["stream"] == "bad" {
			return metadata.Request{}, errors.New("stream: bad")
		}
		return metadata.Request{MetricName: ref.GetNamespace() + "/" + md["stream"] + "/" + md["consumerGroup"]}, nil
	}
}

func ref(ns string, md map[string]string) *externalscaler.ScaledObjectRef {
	return &externalscaler.ScaledObjectRef{Name: "so", Namespace: ns, ScalerMetadata: md}
}

func TestParseCacheParsesARepeatedTriggerOnce(t *testing.T) {
	t.Parallel()
	calls := 0
	c := newParseCache(countingParse(&calls), 8, 1<<20)
	for range 5 {
		// A new map each time, as gRPC unmarshals one per call.
		r, _, err := c.get(ref("apps", map[string]string{"stream": "jobs", "consumerGroup": "w"}))
		require.NoError(t, err)
		require.Equal(t, "apps/jobs/w", r.MetricName)
	}
	require.Equal(t, 1, calls)
}

func TestParseCacheTellsTriggersApartByNamespaceNameAndEveryValue(t *testing.T) {
	t.Parallel()
	calls := 0
	c := newParseCache(countingParse(&calls), 8, 1<<20)
	base := map[string]string{"stream": "jobs", "consumerGroup": "w"}
	cases := map[string]struct {
		ref  *externalscaler.ScaledObjectRef
		want string
	}{
		"base":            {ref("apps", base), "apps/jobs/w"},
		"other namespace": {ref("other", base), "other/jobs/w"},
		"other value":     {ref("apps", map[string]string{"stream": "jobs", "consumerGroup": "v"}), "apps/jobs/v"},
		"one more key":    {ref("apps", map[string]string{"stream": "jobs", "consumerGroup": "w", "lagCount": "5"}), "apps/jobs/w"},
		"swapped values":  {ref("apps", map[string]string{"stream": "w", "consumerGroup": "jobs"}), "apps/w/jobs"},
	}
	for name, tc := range cases {
		r, _, err := c.get(tc.ref)
		require.NoError(t, err, name)
		require.Equal(t, tc.want, r.MetricName, name)
	}
	require.Equal(t, len(cases), calls, "each trigger is parsed once")
	other := ref("apps", base)
	other.Name = "other-so"
	_, _, err := c.get(other)
	require.NoError(t, err)
	require.Equal(t, len(cases)+1, calls, "another ScaledObject is another trigger")
}

func TestParseCacheKeepsErrorsUntilTheMetadataChanges(t *testing.T) {
	t.Parallel()
	calls := 0
	c := newParseCache(countingParse(&calls), 8, 1<<20)
	for range 3 {
		_, _, err := c.get(ref("apps", map[string]string{"stream": "bad"}))
		require.EqualError(t, err, "stream: bad")
	}
	require.Equal(t, 1, calls)
	_, _, err := c.get(ref("apps", map[string]string{"stream": "good"}))
	require.NoError(t, err)
}

func TestParseCacheComparesTheMetadataOnAHashCollision(t *testing.T) {
	t.Parallel()
	calls := 0
	c := newParseCache(countingParse(&calls), 8, 1<<20)
	md := map[string]string{"stream": "jobs", "consumerGroup": "w"}
	// Plant another trigger's parse under this trigger's key, as a
	// colliding hash would.
	key := trigger.IDOf("apps", "so", md)
	c.lru.Add(key, &parsed{metadata: flatten(map[string]string{"stream": "evil"}), req: &metadata.Request{MetricName: "evil"}}, 1)
	r, _, err := c.get(ref("apps", md))
	require.NoError(t, err)
	require.Equal(t, "apps/jobs/w", r.MetricName)
	require.Equal(t, 1, calls)
}

func TestParseCacheStaysBoundedUnderRandomMetadata(t *testing.T) {
	t.Parallel()
	calls := 0
	c := newParseCache(countingParse(&calls), 16, 1<<20)
	for i := range 1000 {
		_, _, err := c.get(ref("apps", map[string]string{"stream": fmt.Sprint("s", i)}))
		require.NoError(t, err)
	}
	require.Equal(t, 16, c.lru.Len())
	require.Equal(t, 1000, calls)
}

func TestParseCacheLookupAllocatesNothing(t *testing.T) {
	calls := 0
	c := newParseCache(countingParse(&calls), 8, 1<<20)
	r := ref("apps", map[string]string{"stream": "jobs", "consumerGroup": "w", "pendingEntriesCount": "5"})
	_, _, err := c.get(r)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(100, func() { _, _, _ = c.get(r) })
	require.Zero(t, allocs)
	require.Equal(t, 1, calls)
}

func TestFlatMetadataEqualsOnlyTheMetadataItWasMadeFrom(t *testing.T) {
	t.Parallel()
	kept := flatten(map[string]string{"stream": "jobs", "consumerGroup": "w", "lagCount": ""})
	cases := map[string]struct {
		md   map[string]string
		want bool
	}{
		"the same":                    {map[string]string{"lagCount": "", "consumerGroup": "w", "stream": "jobs"}, true},
		"a value changed":             {map[string]string{"stream": "jobs", "consumerGroup": "x", "lagCount": ""}, false},
		"a key missing":               {map[string]string{"stream": "jobs", "consumerGroup": "w"}, false},
		"a key more":                  {map[string]string{"stream": "jobs", "consumerGroup": "w", "lagCount": "", "x": ""}, false},
		"a key renamed, same count":   {map[string]string{"stream": "jobs", "consumerGroup": "w", "lagCounts": ""}, false},
		"the text moved across a key": {map[string]string{"streamj": "obs", "consumerGroup": "w", "lagCount": ""}, false},
		"empty":                       {map[string]string{}, false},
	}
	for name, tc := range cases {
		require.Equal(t, tc.want, kept.equal(tc.md), name)
	}
	require.True(t, flatten(nil).equal(map[string]string{}), "no metadata equals no metadata")
}

// TestParseCacheStaysWithinItsBytesUnderLargeMetadata: triggers at the
// metadata bounds fill the cache by bytes long before its count.
func TestParseCacheStaysWithinItsBytesUnderLargeMetadata(t *testing.T) {
	t.Parallel()
	calls := 0
	const budget = 1 << 20
	c := newParseCache(countingParse(&calls), 10000, budget)
	for i := range 500 {
		md := map[string]string{"stream": fmt.Sprint("s", i)}
		for k := range metadata.MaxMetadataBytes / metadata.MaxValueBytes {
			md[fmt.Sprint("k", k)] = strings.Repeat("v", metadata.MaxValueBytes-8)
		}
		require.NoError(t, metadata.CheckTriggerBounds("apps", "so", md))
		_, _, err := c.get(ref("apps", md))
		require.NoError(t, err)
	}
	require.LessOrEqual(t, c.lru.Bytes(), int64(budget))
	require.Less(t, c.lru.Len(), 40, "about 32 KB an entry: the bytes bound, not the count, holds")
}

// TestAKeptRequestDoesNotPinItsEvictedEntry: the trigger registry keeps
// each request it admits; once the cache lets the trigger's entry go, the
// entry's copy of the metadata must go with it.
func TestAKeptRequestDoesNotPinItsEvictedEntry(t *testing.T) {
	calls := 0
	c := newParseCache(countingParse(&calls), 10000, 64<<10)
	const n = 200
	kept := make([]*metadata.Request, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range kept {
		md := map[string]string{"stream": fmt.Sprint("s", i), "annotation": strings.Repeat("a", metadata.MaxValueBytes)}
		r, _, err := c.get(ref("apps", md))
		require.NoError(t, err)
		kept[i] = r
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	require.Less(t, grew, int64(n*metadata.MaxValueBytes/2), "%d bytes a kept request", grew/n)
	runtime.KeepAlive(kept)
}

// TestAParsedRequestKeepsTheCachesCopyOfTheMetadata: the strings a request
// takes from the metadata are parts of the one copy the cache keeps to
// compare with, not the call's strings kept beside it.
func TestAParsedRequestKeepsTheCachesCopyOfTheMetadata(t *testing.T) {
	t.Parallel()
	parse := func(ref *externalscaler.ScaledObjectRef) (metadata.Request, error) {
		return metadata.Request{MetricName: ref.GetScalerMetadata()["stream"], Profile: ref.GetScalerMetadata()["livenessProfile"]}, nil
	}
	c := newParseCache(parse, 8, 1<<20)
	md := map[string]string{"stream": strings.Repeat("s", 40), "consumerGroup": "w", "livenessProfile": "idle"}
	r, id, err := c.get(ref("apps", md))
	require.NoError(t, err)
	require.Equal(t, md["stream"], r.MetricName)
	require.Equal(t, "idle", r.Profile)
	p, ok := c.lru.Get(id)
	require.True(t, ok)
	text := p.metadata.text
	for _, s := range []string{r.MetricName, r.Profile} {
		at := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		start := uintptr(unsafe.Pointer(unsafe.StringData(text)))
		require.True(t, at >= start && at+uintptr(len(s)) <= start+uintptr(len(text)), "%q is not part of the cache's copy", s)
	}
}
