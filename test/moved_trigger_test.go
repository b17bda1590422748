package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// TestAMovedTriggerIsServedExactlyOrRefusedAndItsCredentialsAreNamedNeverKept:
// a trigger moved from KEDA's redis-streams scaler by its two lines
// still carries passwordFromEnv (KEDA forwards the resolved password) and
// databaseIndex. On db 0 it is served, check-trigger and one warning tell
// the operator to remove the password key, and the password appears in
// no answer and no log line. Naming db 1 it is refused, naming
// databaseIndex and the connection that reads db 1. Before Redis 7.2
// check-trigger also says what idle alone cannot judge there; `make
// compat` runs this once per server.
func TestAMovedTriggerIsServedExactlyOrRefusedAndItsCredentialsAreNamedNeverKept(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	version := srv.Version(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "w-0", "", 3)
	p := startPelwarden(t, srv.Addr(), func(c *config.Config) {
		c.Redis[0].IdleBefore72 = config.IdleUnknown // the default, which the suites' harness changes
		db1 := c.Redis[0]
		db1.Name, db1.DB = "db1", 1
		c.Redis = append(c.Redis, db1)
	})
	ctx := context.Background()
	const password = "kEDA-resolved-pa55word"
	md := map[string]string{"scalerAddress": "pelwarden:9090", "stream": "jobs", "consumerGroup": "workers",
		"pendingEntriesCount": "2", "databaseIndex": "0", "enableTLS": "false", "passwordFromEnv": password}

	requireMetric(t, p, md, 3)
	admin := pelwardenv1.NewAdminClient(p.conn)
	check, err := admin.CheckTrigger(ctx, &pelwardenv1.CheckTriggerRequest{Namespace: "default", Metadata: md})
	require.NoError(t, err)
	require.Equal(t, "OK", check.GetCode())
	notes := strings.Join(check.GetNotes(), "\n")
	t.Logf("%s: check-trigger's notes:\n%s", version, notes)
	require.Contains(t, notes, "remove passwordFromEnv from the trigger")
	require.Equal(t, !version.AtLeast(7, 2), strings.Contains(notes, "before 7.2"), "%s: the note on idle before 7.2", version)
	if !version.AtLeast(7, 2) {
		require.Contains(t, notes, "add heartbeats")
	}

	md["databaseIndex"] = "1"
	_, err = p.client.IsActive(ctx, ref(md))
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	msg := status.Convert(err).Message()
	t.Logf("databaseIndex 1 on connection default: %s", msg)
	require.Contains(t, msg, `"databaseIndex"`)
	require.Contains(t, msg, `connection "default" reads db 0`)
	require.Contains(t, msg, "set redis: db1")
	md["redis"] = "db1"
	spec, err := p.client.GetMetricSpec(ctx, ref(md))
	require.NoError(t, err)
	require.Equal(t, "pelwarden-db1-jobs-workers", spec.GetMetricSpecs()[0].GetMetricName())
	m, err := p.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(md), MetricName: "pelwarden-db1-jobs-workers"})
	require.NoError(t, err)
	require.Zero(t, m.GetMetricValues()[0].GetMetricValue(), "db 1 has no such group")

	logs := p.logs.String()
	require.Equal(t, 2, strings.Count(logs, "carries Redis credentials"), "one warning per trigger, on db 0 and on db 1:\n%s", logs)
	for _, where := range []string{logs, check.String(), msg} {
		require.NotContains(t, where, password)
	}
}
