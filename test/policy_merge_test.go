package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// TestTwoScaledObjectsGetTheConservativeSettingsWhicheverArrivesLast: a
// careful trigger (entries stale after 30 s) and an eager one (0.3 s) name
// one group. In both orders the group is scanned with 30 s, DescribeTarget
// says it came from the careful one, and the ghost's entries, idle far past
// 0.3 s, stay where they are.
func TestTwoScaledObjectsGetTheConservativeSettingsWhicheverArrivesLast(t *testing.T) {
	t.Parallel()
	careful := soObj("jobs", "careful", legit("entryStaleSeconds", "30", "maxDeliveries", "5"))
	eager := soObj("jobs", "eager", legit("maxDeliveries", "0", "deleteGhostConsumers", "true", "dryRun", "false"))
	for name, order := range map[string][2]string{"careful first": {"careful", "eager"}, "eager first": {"eager", "careful"}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, rdb := victimWithoutGhost(t)
			p := startPelwarden(t, rdbAddr(rdb), policyTune)
			refs := map[string]*externalscaler.ScaledObjectRef{"careful": careful, "eager": eager}
			// The ghost's entries are fresh when both triggers arrive, so
			// the eager one alone cannot act in between.
			redistest.Read(t, rdb, "jobs", "workers", "ghost-0", 3)
			for _, so := range order {
				_, err := p.client.GetMetricSpec(context.Background(), refs[so])
				require.NoError(t, err)
			}
			before := readBooks(t, rdb)
			for _, so := range order {
				requireMetricServed(t, p.client, refs[so])
			}
			time.Sleep(scansPass)
			require.Equal(t, before, readBooks(t, rdb), "nothing is requeued at 0.3 s")
			res, err := pelwardenv1.NewAdminClient(p.conn).DescribeTarget(context.Background(), &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
			require.NoError(t, err)
			sources := map[string]*pelwardenv1.SettingSource{}
			for _, s := range res.GetHygieneSources() {
				sources[s.GetSetting()] = s
			}
			require.Equal(t, "30", sources["entryStaleSeconds"].GetValue())
			require.Equal(t, "trigger jobs/careful", sources["entryStaleSeconds"].GetSource())
			require.Equal(t, "0", sources["maxDeliveries"].GetValue(), "0 (never dead-letter) wins over 5")
			require.Equal(t, "trigger jobs/eager", sources["maxDeliveries"].GetSource())
			require.ElementsMatch(t, []string{"trigger jobs/careful", "trigger jobs/eager"}, res.GetHygieneTriggers())
			require.Contains(t, res.GetHygiene(), "entryStaleSeconds=30")
		})
	}
}

// TestTriggerSettingsDoNotOutliveTheirCaller: a trigger that enrolls a
// group and goes away is forgotten after scaler.targetIdleExpiry; a ghost
// that appears later keeps its entries, because nobody asks any more.
func TestTriggerSettingsDoNotOutliveTheirCaller(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 6)
	redistest.CreateGroup(t, rdb, "payments", "billing")
	p := startPelwarden(t, srv.Addr(), func(c *config.Config) {
		policyTune(c)
		c.Scaler.TargetIdleExpiry = time.Second
		c.Triggers.Profiles["idle"] = map[string]string{"liveness": "idle", "ghostIdleSeconds": "0.6"}
	})
	admin := pelwardenv1.NewAdminClient(p.conn)
	md := legit("livenessProfile", "idle")
	requireMetricServed(t, p.client, soObj("jobs", "passer-by", md))
	res, err := admin.DescribeTarget(context.Background(), &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	require.NotEmpty(t, res.GetHygiene(), "the trigger enrolled the group")
	eventually(t, 5*time.Second, func() error {
		res, err := admin.DescribeTarget(context.Background(), &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
		if err == nil && res.GetHygiene() != "" {
			return errors.New("hygiene still looks after the group")
		}
		return err
	})
	redistest.Read(t, rdb, "jobs", "workers", "ghost-0", 3)
	before := readBooks(t, rdb)
	time.Sleep(scansPass) // the ghost is idle past 0.6 s and its entries past 0.3 s
	require.Equal(t, before, readBooks(t, rdb), "no scan acts for a trigger that has gone")
}

// TestCheckTriggerAnswersAsTheScalerWouldAndRegistersNothing: the lint
// RPC gives the verdicts the scaler would, and leaves no trace.
func TestCheckTriggerAnswersAsTheScalerWouldAndRegistersNothing(t *testing.T) {
	t.Parallel()
	_, rdb := victim(t)
	before := readBooks(t, rdb)
	p := startPelwarden(t, rdbAddr(rdb), policyTune)
	admin := pelwardenv1.NewAdminClient(p.conn)
	ctx := context.Background()
	cases := map[string]struct {
		namespace string
		md        map[string]string
		code      string
		refusal   string // the refused hygiene key, or ""
	}{
		"admitted":             {namespace: "jobs", md: legit(), code: "OK"},
		"config-only key":      {namespace: "jobs", md: legit("deleteOriginal", "true"), code: "OK", refusal: "deleteOriginal"},
		"foreign namespace":    {namespace: "intruder", md: legit(), code: "OK", refusal: "stream"},
		"unknown connection":   {namespace: "jobs", md: legit("redis", "nope"), code: "InvalidArgument"},
		"malformed metric key": {namespace: "jobs", md: legit("pendingEntriesCount", "0"), code: "InvalidArgument"},
	}
	for name, tc := range cases {
		res, err := admin.CheckTrigger(ctx, &pelwardenv1.CheckTriggerRequest{Namespace: tc.namespace, Metadata: tc.md})
		require.NoError(t, err, name)
		require.Equal(t, tc.code, res.GetCode(), "%s: %s", name, res.GetMessage())
		require.Equal(t, tc.refusal, res.GetHygieneRefusal().GetKey(), name)
	}
	time.Sleep(scansPass)
	require.Equal(t, before, readBooks(t, rdb), "the admitted trigger was only checked, not enrolled")
	_, err := admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.Equal(t, codes.NotFound, status.Code(err), "no target was registered: %v", err)
}

// TestOneNamespaceCannotUseUpAnothersQuota: a namespace that enrolls more
// groups than its hygiene quota is refused the rest, and past its scaler
// quota gets ResourceExhausted; another namespace still enrolls and polls.
func TestOneNamespaceCannotUseUpAnothersQuota(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := startPelwarden(t, srv.Addr(), func(c *config.Config) {
		policyTune(c)
		c.Triggers.Quotas = config.TriggerQuotas{ScalerTargets: 3, HygieneTargets: 2}
		c.Triggers.Rules = []config.TriggerRule{{Namespaces: []string{"*"}, Redis: []string{"*"}, HygieneStreams: []string{"*"}, Profiles: []string{"*"}}}
	})
	ctx := context.Background()
	admin := pelwardenv1.NewAdminClient(p.conn)
	rdb := srv.Client(t)
	for i, stream := range []string{"jobs", "jobs-1", "jobs-2"} {
		redistest.CreateGroup(t, rdb, stream, "workers")
		_, err := p.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: soObj("flood", fmt.Sprint("so-", i), legit("stream", stream))})
		require.NoError(t, err, "within the scaler quota the metric is served")
	}
	_, err := p.client.GetMetricSpec(ctx, soObj("flood", "so-3", legit("stream", "jobs-3")))
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "past the scaler quota: %v", err)
	require.Contains(t, err.Error(), "triggers.quotas.scalerTargets")

	res, err := admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs-2", Group: "workers"}})
	require.NoError(t, err)
	require.Len(t, res.GetRefusedTriggers(), 1, "the third group is past the hygiene quota")
	require.Equal(t, "ResourceExhausted", res.GetRefusedTriggers()[0].GetCode())
	require.Contains(t, res.GetRefusedTriggers()[0].GetMessage(), "triggers.quotas.hygieneTargets")

	_, err = p.client.GetMetricSpec(ctx, soObj("jobs", "workers", legit("stream", "jobs-2")))
	require.NoError(t, err)
	res, err = admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs-2", Group: "workers"}})
	require.NoError(t, err)
	require.Equal(t, []string{"trigger jobs/workers"}, res.GetHygieneTriggers(), "another namespace enrolls the same group")
	require.NotEmpty(t, res.GetHygiene())
}
