package metadata

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// aRealTrigger is the metadata of a ScaledObject that uses every kind of
// key pelwarden reads, with KEDA's own keys beside them.
func aRealTrigger() map[string]string {
	return map[string]string{
		"scalerAddress": "pelwarden.pelwarden.svc.cluster.local:9090", "caCert": "/etc/keda/certs/pelwarden-ca.crt",
		"tlsClientCert": "/etc/keda/certs/tls.crt", "tlsClientKey": "/etc/keda/certs/tls.key", "unsafeSsl": "false",
		"redis": "orders", "stream": "orders:jobs:" + strings.Repeat("s", 200), "consumerGroup": "workers",
		"pendingEntriesCount": "5", "activationPendingEntriesCount": "1", "liveness": "idle,heartbeat,kubernetes",
		"ghostIdleSeconds": "300", "heartbeatKey": "orders:heartbeat:{owner}", "heartbeatMaxAgeSeconds": "30",
		"heartbeatStartGraceSeconds": "60", "ownerMatch": `regex:^(?P<owner>[a-z0-9-]+)-[a-f0-9]{8,10}-[a-z0-9]{5}$`,
		"podSelector": "app.kubernetes.io/name=worker,app.kubernetes.io/component in (jobs,batch)", "podNamespace": "orders",
		"podDeletionGraceSeconds": "2", "reclaim": "requeue", "entryStaleSeconds": "60", "maxDeliveries": "5",
		"deleteGhostConsumers": "true", "dryRun": "false",
	}
}

func TestARealTriggerFitsEveryBound(t *testing.T) {
	t.Parallel()
	require.NoError(t, CheckTriggerBounds(strings.Repeat("n", MaxNamespaceBytes), strings.Repeat("o", MaxObjectNameBytes), aRealTrigger()))
	require.NoError(t, CheckMetricName("s12-pelwarden-orders-"+strings.Repeat("s", 180)))
	atBounds := map[string]string{strings.Repeat("k", MaxKeyBytes): strings.Repeat("v", MaxValueBytes)}
	require.NoError(t, CheckTriggerBounds("jobs", "so", atBounds), "a key and a value at their bounds")
}

func TestFieldsPastTheirBoundsAreNamedWithTheLimit(t *testing.T) {
	t.Parallel()
	many := map[string]string{}
	for i := range MaxKeys + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	big := map[string]string{}
	for i := range MaxMetadataBytes/MaxValueBytes + 1 {
		big[fmt.Sprint("k", i)] = strings.Repeat("v", MaxValueBytes)
	}
	huge := strings.Repeat("x", 1<<20)
	cases := map[string]struct {
		namespace, name string
		md              map[string]string
		want            string
	}{
		"namespace":          {namespace: huge, want: "namespace: must be at most 63 bytes"},
		"name":               {name: huge, want: "name: must be at most 253 bytes"},
		"a key":              {md: map[string]string{huge: "v"}, want: "metadata key \"xxx"},
		"a value":            {md: map[string]string{"stream": huge}, want: `metadata["stream"]: must be at most 4096 bytes, got 1048576`},
		"too many keys":      {md: many, want: "metadata: must be at most 64 keys, got 65"},
		"too many bytes":     {md: big, want: "metadata: must be at most 16384 bytes of keys and values together"},
		"the least key of 2": {md: map[string]string{"b": huge, "a": huge}, want: `metadata["a"]`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := CheckTriggerBounds(tc.namespace, tc.name, tc.md)
			require.ErrorContains(t, err, tc.want)
			var be *BoundError
			require.ErrorAs(t, err, &be)
			require.Less(t, len(err.Error()), 200, "the error never quotes the value")
		})
	}
	require.ErrorContains(t, CheckMetricName(huge), "metricName: must be at most 256 bytes, got 1048576")
}

// FuzzTriggerBounds: a trigger passes exactly when every field is within
// its bound, and a refusal is short and names a field.
func FuzzTriggerBounds(f *testing.F) {
	f.Add("jobs", "so", "stream", "jobs", 1, 1)
	f.Add(strings.Repeat("n", 64), "so", "stream", "jobs", 1, 1)
	f.Add("jobs", strings.Repeat("o", 254), "k", "v", 1, 1)
	f.Add("jobs", "so", strings.Repeat("k", 257), "v", 1, 1)
	f.Add("jobs", "so", "stream", "v", 4097, 1)
	f.Add("jobs", "so", "stream", "v", 1, 65)
	f.Add("jobs", "so", "stream", "vv", 2048, 8)
	f.Fuzz(func(t *testing.T, namespace, name, key, value string, repeat, keys int) {
		repeat, keys = 1+abs(repeat)%5000, 1+abs(keys)%80
		md := map[string]string{}
		total, within := 0, true
		for i := range keys {
			k, v := fmt.Sprint(key, i), strings.Repeat(value, repeat)
			md[k] = v
			total += len(k) + len(v)
			within = within && len(k) <= MaxKeyBytes && len(v) <= MaxValueBytes
		}
		within = within && len(namespace) <= MaxNamespaceBytes && len(name) <= MaxObjectNameBytes &&
			len(md) <= MaxKeys && total <= MaxMetadataBytes
		err := CheckTriggerBounds(namespace, name, md)
		if within {
			require.NoError(t, err)
			return
		}
		var be *BoundError
		require.ErrorAs(t, err, &be)
		require.NotEmpty(t, be.Field)
		require.Greater(t, be.Got, be.Limit)
		require.Less(t, len(err.Error()), 250)
	})
}

func abs(n int) int {
	if n < 0 {
		return -(n + 1)
	}
	return n
}

// oldMetricName is metricName as it was first written, the reference for
// the names KEDA already knows: a change of name is a new HPA metric.
func oldMetricName(conn, stream, group string) string {
	var b strings.Builder
	b.WriteString("pelwarden")
	for _, part := range []string{conn, stream, group} {
		b.WriteByte('-')
		for _, r := range strings.ToLower(part) {
			if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
				b.WriteRune(r)
			} else {
				b.WriteByte('-')
			}
		}
	}
	name := b.String()
	return name[:min(len(name), maxMetricName)]
}

// TestMetricNamesOfLongNamesKeepOnlyTheirOwnBytes: a metric name is kept
// by every trigger's request; built from kilobyte names it must hold its
// 200 bytes, not the kilobytes it was cut from.
func TestMetricNamesOfLongNamesKeepOnlyTheirOwnBytes(t *testing.T) {
	const n = 2000
	long := strings.Repeat("S", MaxNameLen)
	kept := make([]string, n)
	before := heap()
	for i := range kept {
		kept[i] = metricName("default", long, fmt.Sprint(i, long))
	}
	grew := int64(heap()) - int64(before)
	require.Less(t, grew, int64(n*2*maxMetricName), "%d bytes a name", grew/n)
	require.Equal(t, oldMetricName("default", long, "0"+long), kept[0])
}

func FuzzMetricName(f *testing.F) {
	f.Add("default", "jobs", "workers")
	f.Add("orders", strings.Repeat("İ", 150), "Ⅻ-group")
	f.Add("default", strings.Repeat("s", 300), "g")
	f.Fuzz(func(t *testing.T, conn, stream, group string) {
		require.Equal(t, oldMetricName(conn, stream, group), metricName(conn, stream, group))
	})
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
