package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// TestATriggerWithOtherSettingsCannotFakeAnotherTriggersFigures: a
// ScaledObject judges jobs/workers by a one-second ghostIdle, so both
// consumers, idle longer, are ghosts and its metric is 0. A stranger polls
// the same group, under the same KEDA metric name, with a ghostIdle of an
// hour and another per-replica target, again and again after it. The
// legitimate trigger's series and DescribeTarget values stay its own: 0
// against a target of 5. The stranger's figures are beside them, and go
// with its target when it stops asking.
func TestATriggerWithOtherSettingsCannotFakeAnotherTriggersFigures(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 5)
	redistest.Read(t, rdb, "jobs", "workers", "a", 3)
	redistest.Read(t, rdb, "jobs", "workers", "b", 2)
	plantSecrets(t, rdb)
	time.Sleep(1100 * time.Millisecond)
	before, keys := readBooks(t, rdb), otherKeys(t, rdb)

	cfg := testConfig(srv.Addr())
	cfg.Scaler.TargetIdleExpiry = 2 * time.Second
	s := startStranger(t, cfg)
	legit := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "idle", "ghostIdleSeconds": "1", "pendingEntriesCount": "5"}
	fake := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "idle", "ghostIdleSeconds": "3600", "pendingEntriesCount": "1"}
	poll := func(md map[string]string) int64 {
		res, err := s.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: soObj("jobs", "workers", md), MetricName: "s0-pelwarden"})
		require.NoError(t, err)
		s.saw(t, res)
		return res.GetMetricValues()[0].GetMetricValue()
	}
	require.Equal(t, int64(0), poll(legit), "both consumers are ghosts to the legitimate trigger")
	for range 5 {
		require.Equal(t, int64(5), poll(fake), "and alive to the stranger's")
	}

	lv := func(md map[string]string, target string) string {
		return fmt.Sprintf(`{group="workers",liveness=%q,metric="pendingEntriesCount",redis="default",stream="jobs",target=%q}`, livenessLabel(t, md), target)
	}
	body := scrape(t, s.app.HTTPAddr())
	require.Equal(t, map[string]string{lv(legit, "5"): "0", lv(fake, "1"): "5"}, series(body, "pelwarden_scaler_reported_value"),
		"each trigger's value is its own series")
	require.Equal(t, map[string]string{lv(legit, "5"): "5", lv(fake, "1"): "1"}, series(body, "pelwarden_scaler_target_value"))

	d, err := s.admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	s.saw(t, d)
	shown := map[string]string{}
	for _, m := range d.GetMetrics() {
		shown[m.GetLiveness()] = fmt.Sprintf("%s %d/%g active=%t", m.GetMetric(), m.GetValue(), m.GetTargetValue(), m.GetActive())
	}
	require.Equal(t, map[string]string{
		livenessLabel(t, legit): "pendingEntriesCount 0/5 active=false",
		livenessLabel(t, fake):  "pendingEntriesCount 5/1 active=true",
	}, shown, "DescribeTarget shows each target's own values")

	// The stranger stops; the legitimate trigger keeps polling, as KEDA does.
	eventually(t, 10*time.Second, func() error {
		poll(legit)
		if got := series(scrape(t, s.app.HTTPAddr()), "pelwarden_scaler_reported_value"); len(got) != 1 || got[lv(legit, "5")] != "0" {
			return fmt.Errorf("reported series %v, want the legitimate trigger's alone once the stranger's target expired", got)
		}
		return nil
	})
	require.Equal(t, before, readBooks(t, rdb), "reading figures changes nothing")
	require.Equal(t, keys, otherKeys(t, rdb))
	s.requireNoSecret(t)
}
