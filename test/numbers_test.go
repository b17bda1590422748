package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/scaler"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// TestTriggerNumbersAreCheckedAfterConversion: through KEDA's own client,
// with no credentials, values that would become 0 or unbounded once
// converted are InvalidArgument naming the key, register nothing and
// change nothing in Redis.
func TestTriggerNumbersAreCheckedAfterConversion(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "w-0", "", 3)
	p := startPelwarden(t, srv.Addr(), nil)
	admin := pelwardenv1.NewAdminClient(p.conn)
	ctx := context.Background()
	before := readBooks(t, rdb)

	cases := map[string]struct {
		kv  []string
		key string
	}{
		"a ghost idle time that rounds to zero": {[]string{"ghostIdleSeconds", "1e-12"}, "ghostIdleSeconds"},
		"a heartbeat max age under 1 ms": {[]string{"liveness", "heartbeat", "heartbeatKey", "hb:{consumer}", "heartbeatMaxAgeSeconds", "1e-9"},
			"heartbeatMaxAgeSeconds"},
		"a target of 1e-300 entries per replica": {[]string{"pendingEntriesCount", "1e-300"}, "pendingEntriesCount"},
		"a heartbeat key with 145 {owner} placeholders": {[]string{"liveness", "heartbeat", "ownerMatch", "prefix",
			"heartbeatKey", strings.Repeat("{owner}", 145)}, "heartbeatKey"},
	}
	for name, tc := range cases {
		md := map[string]string{"scalerAddress": "pelwarden:9090", "stream": "jobs", "consumerGroup": "workers"}
		for i := 0; i+1 < len(tc.kv); i += 2 {
			md[tc.kv[i]] = tc.kv[i+1]
		}
		spec, err := p.client.GetMetricSpec(ctx, ref(md))
		require.NoError(t, err, name)
		require.Equal(t, scaler.RefusedMetricName, spec.GetMetricSpecs()[0].GetMetricName(), "%s: the placeholder", name)
		_, err = p.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(md), MetricName: "pelwarden-default-jobs-workers"})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", name, err)
		require.Contains(t, status.Convert(err).Message(), `"`+tc.key+`"`, name)
		_, err = p.client.IsActive(ctx, ref(md))
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", name, err)
		require.Contains(t, status.Convert(err).Message(), `"`+tc.key+`"`, name)
	}
	targets, err := admin.ListTargets(ctx, &pelwardenv1.ListTargetsRequest{})
	require.NoError(t, err)
	require.Empty(t, targets.GetTargets(), "no refused trigger registered a target")
	require.Equal(t, before, readBooks(t, rdb), "entries, PEL and consumers unchanged")
}
