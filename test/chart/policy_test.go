package chart

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// TestChartTriggerPolicyReachesPelwardensConfig: the chart's defaults are
// pelwarden's own safe ones, and a policy in values arrives whole.
func TestChartTriggerPolicyReachesPelwardensConfig(t *testing.T) {
	t.Parallel()
	load := func(files []string) config.Triggers {
		stream, err := renderChart(t, chartDir, files, nil)
		require.NoError(t, err)
		objs, err := decodeManifests(stream)
		require.NoError(t, err)
		cfg, err := loadRendered(t, objs)
		require.NoError(t, err)
		return cfg.Triggers
	}
	require.Equal(t, config.Default().Triggers, load(nil), "the chart ships pelwarden's defaults: triggers read metrics only")
	got := load([]string{allOnValues()})
	require.Equal(t, config.Triggers{
		Reclaim: policy.ReclaimRequeue,
		Floors: config.TriggerFloors{EntryStale: time.Minute, GhostIdle: 2 * time.Minute, HeartbeatMaxAge: 15 * time.Second,
			PodDeletionGrace: 5 * time.Second, MaxDeliveries: 4},
		Quotas: config.TriggerQuotas{ScalerTargets: 200, HygieneTargets: 10},
		Rules: []config.TriggerRule{
			{Namespaces: []string{"*"}, Redis: []string{"default"}, HeartbeatKeys: []string{"hb:*"}},
			{Namespaces: []string{"jobs", "team-*"}, Redis: []string{"default", "cache"}, HygieneStreams: []string{"jobs*", "orders:*"}, Profiles: []string{"*"}},
		},
		Profiles: map[string]map[string]string{
			"workers": {"liveness": "idle,heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "30", "ghostIdleSeconds": "300"},
			"agents":  {"liveness": "heartbeat", "heartbeatKey": "hb:{owner}", "ownerMatch": "prefix", "heartbeatMaxAgeSeconds": "30"},
		},
		WarmUp: 90 * time.Second,
	}, got)
}

// TestChartSchemaRefusesClaimFromTriggers: claim is never a trigger's.
func TestChartSchemaRefusesClaimFromTriggers(t *testing.T) {
	t.Parallel()
	_, err := renderChart(t, chartDir, nil, []string{"triggers.reclaim=claim"})
	require.ErrorContains(t, err, "/triggers/reclaim")
}
