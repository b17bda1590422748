package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// policyTune is a trigger policy like one an operator would write: the
// jobs namespace may enroll its jobs* streams, judged by the workers
// profile; every namespace may read metrics from the default connection,
// with the workers profile or heartbeat keys under hb:. The floors are
// the shipped ones divided by 100, and the warm-up shorter than a test's
// wait, so that a legitimate trigger acts within a test and a refused one
// visibly does not.
func policyTune(c *config.Config) {
	c.Hygiene.ScanInterval, c.Hygiene.LeaseTTL = 200*time.Millisecond, 2*time.Second
	c.Triggers = config.Default().Triggers
	c.Triggers.Reclaim = policy.ReclaimRequeue
	c.Triggers.Floors = config.TriggerFloors{EntryStale: 300 * time.Millisecond, GhostIdle: 600 * time.Millisecond, HeartbeatMaxAge: 300 * time.Millisecond,
		PodDeletionGrace: 20 * time.Millisecond, MaxDeliveries: 3}
	c.Triggers.WarmUp = 300 * time.Millisecond
	c.Triggers.Profiles = map[string]map[string]string{"workers": workersProfile}
	c.Triggers.Rules = []config.TriggerRule{
		{Namespaces: []string{"*"}, Redis: []string{"default"}, Profiles: []string{"workers"}, HeartbeatKeys: []string{"hb:*"}},
		{Namespaces: []string{"jobs"}, Redis: []string{"default"}, HygieneStreams: []string{"jobs*"}, Profiles: []string{"*"}},
	}
}

// workersProfile is how the operator tells the victim's workers alive:
// their heartbeats, at the floor.
var workersProfile = map[string]string{"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "0.3"}

// legit is a trigger of the jobs namespace that asks for what the policy
// allows: the workers profile and requeue at the floors.
func legit(kv ...string) map[string]string {
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "livenessProfile": "workers",
		"reclaim": "requeue", "entryStaleSeconds": "0.3", "scalerAddress": "pelwarden:9090"}
	for i := 0; i+1 < len(kv); i += 2 {
		md[kv[i]] = kv[i+1]
		if kv[i+1] == "" {
			delete(md, kv[i])
		}
	}
	return md
}

// victim fills Redis with what the attacks aim at: jobs entries with a
// payload field, 3 held by a ghost (no heartbeat) and 3 by a live worker
// that heartbeats; another application's payments stream, with its own
// group and a consumer holding one entry.
func victim(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv, rdb := victimWithoutGhost(t)
	redistest.Read(t, rdb, "jobs", "workers", "ghost-0", 3)
	return srv, rdb
}

// victimWithoutGhost is victim before ghost-0 reads: its 3 entries are
// not delivered yet.
func victimWithoutGhost(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	for i := range 6 {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", i, "payload", strings.Repeat("x", i+1)}}).Err())
	}
	redistest.Read(t, rdb, "jobs", "workers", "w-live", 3)
	beatEvery(t, rdb, map[string]func() string{"hb:w-live": msAgo(0)})
	redistest.CreateGroup(t, rdb, "payments", "billing")
	redistest.AddJobs(t, rdb, "payments", "pay-", 3)
	redistest.Read(t, rdb, "payments", "billing", "biller", 1)
	return srv, rdb
}

// books is what an attack or a refused call must not change: every entry of every stream
// with its fields, every pending entry with its owner and delivery count,
// and every consumer.
type books struct {
	Entries   map[string][]redis.XMessage
	Pending   map[string][]string
	Consumers map[string][]string
}

func readBooks(t *testing.T, rdb *redis.Client) books {
	t.Helper()
	ctx := context.Background()
	b := books{Entries: map[string][]redis.XMessage{}, Pending: map[string][]string{}, Consumers: map[string][]string{}}
	for stream, group := range map[string]string{"jobs": "workers", "payments": "billing", "jobs:dead": "", "payments:dead": ""} {
		all, err := rdb.XRange(ctx, stream, "-", "+").Result()
		require.NoError(t, err)
		b.Entries[stream] = all
		if group == "" {
			continue
		}
		pel, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+", Count: 1000}).Result()
		if redisx.IsGroupMissing(err) {
			continue // a test that has no such group
		}
		require.NoError(t, err)
		for _, p := range pel {
			b.Pending[stream] = append(b.Pending[stream], fmt.Sprint(p.ID, " ", p.Consumer, " ", p.RetryCount))
		}
		cs, err := rdb.XInfoConsumers(ctx, stream, group).Result()
		require.NoError(t, err)
		for _, c := range cs {
			b.Consumers[stream] = append(b.Consumers[stream], c.Name)
		}
	}
	return b
}

// soObj is a ScaledObjectRef as KEDA sends it.
func soObj(namespace, name string, md map[string]string) *externalscaler.ScaledObjectRef {
	return &externalscaler.ScaledObjectRef{Namespace: namespace, Name: name, ScalerMetadata: md}
}

// withoutHygiene is md without the keys that ask for hygiene.
func withoutHygiene(md map[string]string) map[string]string {
	out := maps.Clone(md)
	for _, k := range []string{"reclaim", "entryStaleSeconds", "hardTimeoutSeconds", "maxDeliveries", "deadLetterStream",
		"deliveryCountField", "deleteGhostConsumers", "deleteOriginal", "claimFallback", "dryRun"} {
		delete(out, k)
	}
	return out
}

// requireMetricServed calls every ExternalScaler RPC with the attack's
// metadata: each answers, and the metric is what the same trigger without
// its hygiene keys gets.
func requireMetricServed(t *testing.T, c externalscaler.ExternalScalerClient, ref *externalscaler.ScaledObjectRef) {
	t.Helper()
	ctx := context.Background()
	spec, err := c.GetMetricSpec(ctx, ref)
	require.NoError(t, err, "GetMetricSpec must answer: without it KEDA builds no HPA metric")
	plain := soObj(ref.GetNamespace(), ref.GetName(), withoutHygiene(ref.GetScalerMetadata()))
	plainSpec, err := c.GetMetricSpec(ctx, plain)
	require.NoError(t, err)
	require.Equal(t, plainSpec.GetMetricSpecs()[0].GetTargetSize(), spec.GetMetricSpecs()[0].GetTargetSize())
	got, err := c.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "m"})
	require.NoError(t, err)
	want, err := c.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: plain, MetricName: "m"})
	require.NoError(t, err)
	require.Equal(t, want.GetMetricValues()[0].GetMetricValue(), got.GetMetricValues()[0].GetMetricValue())
	_, err = c.IsActive(ctx, ref)
	require.NoError(t, err)
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	specs, err := c.StreamMetricSpec(sctx, ref)
	require.NoError(t, err)
	first, err := specs.Recv()
	require.NoError(t, err, "StreamMetricSpec answers too")
	require.Equal(t, plainSpec.GetMetricSpecs()[0].GetMetricName(), first.GetMetricSpecs()[0].GetMetricName())
	active, err := c.StreamIsActive(sctx, ref)
	require.NoError(t, err)
	_, err = active.Recv()
	require.NoError(t, err, "StreamIsActive answers too")
}

// requireRefused finds the trigger among the refused ones of jobs/workers
// with the code and key expected.
func requireRefused(t *testing.T, admin pelwardenv1.AdminClient, trigger, code, key string) {
	t.Helper()
	res, err := admin.DescribeTarget(context.Background(), &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	for _, r := range res.GetRefusedTriggers() {
		if r.GetTrigger() == "trigger "+trigger {
			require.Equal(t, code, r.GetCode(), "refusal: %s", r.GetMessage())
			require.Equal(t, key, r.GetKey(), "refusal: %s", r.GetMessage())
			require.NotEmpty(t, r.GetMessage())
			return
		}
	}
	require.Failf(t, "trigger not among the refused", "%s in %v", trigger, res.GetRefusedTriggers())
}

// scansPass is long enough for several hygiene scans past every threshold
// of the victim's ghost: a trigger admitted with the same thresholds gets
// its entries requeued well within it (TestLegitimateTriggerGetsOnlyTheGhostsEntriesRequeued).
const scansPass = 1500 * time.Millisecond

func TestLegitimateTriggerGetsOnlyTheGhostsEntriesRequeued(t *testing.T) {
	t.Parallel()
	_, rdb := victim(t)
	before := readBooks(t, rdb)
	p := startPelwarden(t, rdbAddr(rdb), policyTune)
	_, err := p.client.GetMetricSpec(context.Background(), soObj("jobs", "workers", legit()))
	require.NoError(t, err)
	eventually(t, 5*time.Second, func() error {
		if n := len(readBooks(t, rdb).Pending["jobs"]); n != 3 {
			return status.Errorf(codes.Unknown, "%d entries pending, want the live worker's 3", n)
		}
		return nil
	})
	after := readBooks(t, rdb)
	var live []string
	for _, p := range before.Pending["jobs"] {
		if strings.Contains(p, " w-live ") {
			live = append(live, p)
		}
	}
	require.Equal(t, live, after.Pending["jobs"], "the live worker's entries stay with it")
	require.Equal(t, before.Entries["payments"], after.Entries["payments"])
	require.Equal(t, before.Pending["payments"], after.Pending["payments"])
	require.Len(t, after.Entries["jobs"], 9, "the 6 originals and 3 copies")
	for i, c := range after.Entries["jobs"][6:] {
		orig := before.Entries["jobs"][3+i] // ghost-0 read the last 3
		require.Equal(t, orig.Values["payload"], c.Values["payload"], "a copy keeps the job's fields")
		require.Equal(t, orig.Values["job"], c.Values["job"])
		require.Contains(t, c.Values, "pelwarden-deliveries")
	}
}

func rdbAddr(rdb *redis.Client) string { return rdb.Options().Addr }

// TestMetadataAttacksAreRefusedAndChangeNothing sends each attack of the
// issue through KEDA's client without credentials. Each one's metric is
// answered, its hygiene is refused (or, at the floor, bounded), and after
// several scans every stream, field, pending entry and consumer is as it
// was.
func TestMetadataAttacksAreRefusedAndChangeNothing(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		namespace string
		md        map[string]string
		code, key string // empty: admitted
	}{
		"a live worker's entries by hard timeout": {
			namespace: "jobs", md: legit("hardTimeoutSeconds", "0.001", "entryStaleSeconds", "0.001"),
			code: "InvalidArgument", key: "hardTimeoutSeconds",
		},
		"entries idle a millisecond": {
			namespace: "jobs", md: legit("entryStaleSeconds", "0.001"), code: "InvalidArgument", key: "entryStaleSeconds",
		},
		"originals deleted, payload overwritten": {
			namespace: "jobs", md: legit("deleteOriginal", "true", "deliveryCountField", "payload"),
			code: "InvalidArgument", key: "deleteOriginal",
		},
		"the carry field alone": {
			namespace: "jobs", md: legit("deliveryCountField", "payload"), code: "InvalidArgument", key: "deliveryCountField",
		},
		"dead letters into another application's stream": {
			namespace: "jobs", md: legit("maxDeliveries", "1", "deadLetterStream", "payments"),
			code: "InvalidArgument", key: "deadLetterStream",
		},
		"claim": {
			namespace: "jobs", md: legit("reclaim", "claim"), code: "InvalidArgument", key: "reclaim",
		},
		"dead letters after one delivery": {
			namespace: "jobs", md: legit("maxDeliveries", "1"), code: "InvalidArgument", key: "maxDeliveries",
		},
		"its own heartbeat key, which serves its metric only": {
			namespace: "jobs", md: legit("livenessProfile", "", "liveness", "heartbeat", "heartbeatKey", "hb:{consumer}", "heartbeatMaxAgeSeconds", "0.3"),
			code: "PermissionDenied", key: "livenessProfile",
		},
		"a foreign namespace enrolling the stream": {
			namespace: "intruder", md: legit(), code: "PermissionDenied", key: "stream",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, rdb := victim(t)
			before := readBooks(t, rdb)
			p := startPelwarden(t, rdbAddr(rdb), policyTune)
			admin := pelwardenv1.NewAdminClient(p.conn)
			ref := soObj(tc.namespace, "attacker", tc.md)
			requireMetricServed(t, p.client, ref)
			time.Sleep(scansPass)
			require.Equal(t, before, readBooks(t, rdb), "entries, fields, other streams, pending entries and consumers are unchanged")
			if tc.code != "" {
				requireRefused(t, admin, tc.namespace+"/attacker", tc.code, tc.key)
				require.Contains(t, scrape(t, p.app.HTTPAddr()), `pelwarden_trigger_hygiene_refused_total{code="`+tc.code+`"}`)
			}
		})
	}
}

// TestFreshInstallRefusesTriggerHygieneAndServesTheMetric: the shipped
// policy lets triggers read metrics only.
func TestFreshInstallRefusesTriggerHygieneAndServesTheMetric(t *testing.T) {
	t.Parallel()
	_, rdb := victim(t)
	before := readBooks(t, rdb)
	p := startPelwarden(t, rdbAddr(rdb), func(c *config.Config) {
		c.Hygiene.ScanInterval, c.Hygiene.LeaseTTL = 200*time.Millisecond, 2*time.Second
		c.Triggers = config.Default().Triggers
	})
	// Idle time is the one evidence a trigger may name on a fresh install:
	// it reads no key.
	ref := soObj("jobs", "workers", legit("livenessProfile", "", "entryStaleSeconds", "30", "ghostIdleSeconds", "300"))
	requireMetricServed(t, p.client, ref)
	time.Sleep(scansPass)
	requireRefused(t, pelwardenv1.NewAdminClient(p.conn), "jobs/workers", "PermissionDenied", "reclaim")
	require.Equal(t, before, readBooks(t, rdb))
}

// TestNamespaceNoRuleLetsReachAConnectionIsDeniedOnEveryRPC: reaching a
// connection is part of the metric, so that refusal is the RPC's.
func TestNamespaceNoRuleLetsReachAConnectionIsDeniedOnEveryRPC(t *testing.T) {
	t.Parallel()
	_, rdb := victim(t)
	before := readBooks(t, rdb)
	p := startPelwarden(t, rdbAddr(rdb), func(c *config.Config) {
		policyTune(c)
		orders := c.Redis[0]
		orders.Name = "orders"
		c.Redis = append(c.Redis, orders)
		c.Triggers.Rules = append(c.Triggers.Rules, config.TriggerRule{Namespaces: []string{"shop"}, Redis: []string{"orders"}})
	})
	ctx := context.Background()
	ref := soObj("intruder", "so", map[string]string{"redis": "orders", "stream": "payments", "consumerGroup": "billing"})
	spec, err := p.client.GetMetricSpec(ctx, ref)
	require.NoError(t, err)
	require.Equal(t, "pelwarden-orders-payments-billing", spec.GetMetricSpecs()[0].GetMetricName(),
		"GetMetricSpec answers the trigger's own spec: only the policy refuses it")
	_, err = p.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), "triggers.rules")
	_, err = p.client.IsActive(ctx, ref)
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	_, err = p.client.GetMetricSpec(ctx, soObj("shop", "so", ref.GetScalerMetadata()))
	require.NoError(t, err, "the namespace a rule names reaches it")
	require.Equal(t, before, readBooks(t, rdb))
}
