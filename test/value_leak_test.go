package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// TestNoValueUnderAHeartbeatKeyLeavesPelwarden: the operator's
// configuration judges jobs/workers by heartbeat keys hb:{consumer}, and
// three of them hold what a heartbeat key should never hold: a password,
// a session hash with the password in it, and a PIN that parses as a Unix
// time in milliseconds long past. Each consumer is Unknown, its reason
// names the value's size or type and gives no age, and neither the
// password nor the PIN appears in any open RPC's answer, in KEDA's, in the
// log or on /metrics. Nothing in Redis changes.
func TestNoValueUnderAHeartbeatKeyLeavesPelwarden(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 8)
	for _, c := range []string{"w-pass", "w-hash", "w-pin", "w-live"} {
		redistest.Read(t, rdb, "jobs", "workers", c, 2)
	}
	plantSecrets(t, rdb)
	require.NoError(t, rdb.Set(ctx, "hb:w-pass", secretValue, 0).Err())
	require.NoError(t, rdb.HSet(ctx, "hb:w-hash", "token", secretValue).Err())
	require.NoError(t, rdb.Set(ctx, "hb:w-pin", secretPIN, 0).Err())
	beatEvery(t, rdb, map[string]func() string{"hb:w-live": msAgo(0)})
	before, keys := readBooks(t, rdb), otherKeys(t, rdb, "hb:w-live")

	cfg := testConfig(srv.Addr())
	cfg.Hygiene.ScanInterval, cfg.Hygiene.LeaseTTL = 200*time.Millisecond, time.Second
	cfg.Hygiene.Targets = []map[string]string{hygieneTarget("liveness", "heartbeat", "heartbeatKey", "hb:{consumer}", "heartbeatMaxAgeSeconds", "5")}
	s := startStranger(t, cfg)
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "idle", "ghostIdleSeconds": "3600", "pendingEntriesCount": "5"}
	res, err := s.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: soObj("jobs", "workers", md), MetricName: "s0-pelwarden"})
	require.NoError(t, err)
	s.saw(t, res)

	want := map[string]string{
		"w-pass": "heartbeat value (a string of 22 bytes) is not a positive Unix time",
		"w-hash": "the key holds a value of type hash, not a string",
		"w-pin":  "is not a plausible heartbeat time",
	}
	var d *pelwardenv1.DescribeTargetResponse
	eventually(t, 5*time.Second, func() error {
		d, err = s.admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
		if err == nil && !strings.Contains(d.GetTarget().GetLiveness(), "heartbeat") {
			err = errors.New("the configured heartbeat target is not described yet")
		}
		return err
	})
	s.saw(t, d)
	seen := 0
	for _, c := range d.GetTarget().GetConsumers() {
		mention, ok := want[c.GetName()]
		if !ok {
			require.Equal(t, pelwardenv1.Verdict_VERDICT_ALIVE, c.GetVerdict(), "%s: %v", c.GetName(), c.GetReasons())
			continue
		}
		seen++
		reasons := strings.Join(c.GetReasons(), "; ")
		require.Equal(t, pelwardenv1.Verdict_VERDICT_UNKNOWN, c.GetVerdict(), "%s: a value that is no heartbeat is no evidence: %s", c.GetName(), reasons)
		require.Contains(t, reasons, mention, c.GetName())
		require.Equal(t, int64(-1), c.GetHeartbeatAgeMs(), "%s: no age, which would give the number away", c.GetName())
	}
	require.Equal(t, len(want), seen)

	time.Sleep(time.Second) // scans past every threshold: nothing Unknown is taken
	require.Equal(t, before, readBooks(t, rdb))
	require.Equal(t, keys, otherKeys(t, rdb, "hb:w-live"))
	s.requireNoSecret(t)
}
