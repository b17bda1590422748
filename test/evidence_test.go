package e2e

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/kube"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// attackBooks is what an attack must leave as it was: the books, and
// every other key but the live worker's heartbeat, which it rewrites.
type attackBooks struct {
	Books books
	Other map[string]string
}

func readAttackBooks(t *testing.T, rdb *redis.Client) attackBooks {
	t.Helper()
	return attackBooks{Books: readBooks(t, rdb), Other: otherKeys(t, rdb, "hb:w-live")}
}

// policyStranger is a pelwarden under policyTune (and tune) whose log is
// kept, over the victim's Redis.
func policyStranger(t *testing.T, rdb *redis.Client, tune func(*config.Config), opts ...app.Option) *stranger {
	t.Helper()
	cfg := testConfig(rdbAddr(rdb))
	policyTune(&cfg)
	if tune != nil {
		tune(&cfg)
	}
	return startStranger(t, cfg, opts...)
}

// requireEveryRPCRefused calls every ExternalScaler RPC of ref: each is
// refused with code, naming key and mention, but GetMetricSpec, which
// and StreamMetricSpec answer the placeholder spec (KEDA would drop a
// GetMetricSpec error unseen). The
// answers are kept for requireNoSecret.
func requireEveryRPCRefused(t *testing.T, s *stranger, ref *externalscaler.ScaledObjectRef, code codes.Code, key, mention string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	check := func(rpc string, err error) {
		t.Helper()
		require.Equal(t, code, status.Code(err), "%s: %v", rpc, err)
		require.Contains(t, err.Error(), key, rpc)
		require.Contains(t, err.Error(), mention, rpc)
		s.answers = append(s.answers, err.Error())
	}
	// GetMetricSpec answers a spec, the trigger's own where only the
	// policy refuses it, the placeholder where its metadata does not parse.
	spec, err := s.client.GetMetricSpec(ctx, ref)
	require.NoError(t, err)
	require.Len(t, spec.GetMetricSpecs(), 1)
	s.saw(t, spec)
	_, err = s.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "m"})
	check("GetMetrics", err)
	_, err = s.client.IsActive(ctx, ref)
	check("IsActive", err)
	active, err := s.client.StreamIsActive(ctx, ref)
	require.NoError(t, err)
	_, err = active.Recv()
	check("StreamIsActive", err)
	specs, err := s.client.StreamMetricSpec(ctx, ref)
	require.NoError(t, err)
	pushed, err := specs.Recv()
	require.NoError(t, err)
	require.Equal(t, spec.GetMetricSpecs()[0].GetMetricName(), pushed.GetMetricSpecs()[0].GetMetricName(), "StreamMetricSpec sends the same spec")
	res, err := s.admin.CheckTrigger(ctx, &pelwardenv1.CheckTriggerRequest{Namespace: ref.GetNamespace(), Metadata: ref.GetScalerMetadata()})
	require.NoError(t, err)
	require.Equal(t, code.String(), res.GetCode(), "CheckTrigger answers as the scaler does: %s", res.GetMessage())
	s.saw(t, res)
}

// TestATriggerCannotPointALiveWorkerAtADeadOnesHeartbeat is the attack of
// the issue: a trigger names a dead worker's heartbeat and an owner match
// that maps the live worker onto it, and asks for requeue. With the
// operator's profile it may not name either; without one, its evidence
// judges its own metric only and its hygiene is refused. Nothing moves.
func TestATriggerCannotPointALiveWorkerAtADeadOnesHeartbeat(t *testing.T) {
	t.Parallel()
	_, rdb := victim(t)
	plantSecrets(t, rdb)
	heartbeat(t, rdb, "hb:ghost-e", time.Now().Add(-time.Hour)) // a dead worker's last beat
	before := readAttackBooks(t, rdb)
	s := policyStranger(t, rdb, nil)
	evidence := []string{"heartbeatKey", "hb:ghost-{owner}", "ownerMatch", "regex:(?P<owner>e)$"}

	own := soObj("jobs", "own-evidence", legit(append([]string{"livenessProfile", "", "liveness", "heartbeat", "heartbeatMaxAgeSeconds", "0.3"}, evidence...)...))
	requireMetricServed(t, s.client, own)
	requireEveryRPCRefused(t, s, soObj("jobs", "over-profile", legit(evidence...)), codes.InvalidArgument, "heartbeatKey", "set by livenessProfile workers")
	requireEveryRPCRefused(t, s, soObj("jobs", "owner-only", legit(evidence[2:]...)), codes.InvalidArgument, "ownerMatch", "set by livenessProfile workers")
	time.Sleep(scansPass) // past the warm-up and the floors, several scans
	require.Equal(t, before, readAttackBooks(t, rdb), "no entry of the live worker moved")
	requireRefused(t, s.admin, "jobs/own-evidence", "PermissionDenied", "livenessProfile")
	s.requireNoSecret(t)
}

// TestTheDefaultPolicyReadsNoKeyATriggerNames: on a fresh install no
// trigger makes pelwarden read a key of its choosing; every RPC of one
// that tries is refused, and no target is registered for it.
func TestTheDefaultPolicyReadsNoKeyATriggerNames(t *testing.T) {
	t.Parallel()
	_, rdb := victim(t)
	plantSecrets(t, rdb)
	before := readAttackBooks(t, rdb)
	cfg := testConfig(rdbAddr(rdb))
	cfg.Triggers = config.Default().Triggers
	s := startStranger(t, cfg)
	for _, key := range []string{"secre{owner}:db-password", "secre{owner}:pin", "{consumer}"} {
		md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "heartbeat", "heartbeatKey": key, "ownerMatch": "regex:(?P<owner>t)-0$"}
		requireEveryRPCRefused(t, s, soObj("jobs", "reader", md), codes.PermissionDenied, "heartbeatKey", "triggers.rules[].heartbeatKeys")
	}
	list, err := s.admin.ListTargets(context.Background(), &pelwardenv1.ListTargetsRequest{})
	require.NoError(t, err)
	require.Empty(t, list.GetTargets(), "nothing was registered, so nothing was read")
	require.Equal(t, before, readAttackBooks(t, rdb))
	s.requireNoSecret(t)
}

// TestDeadLetteringFromATriggerWaitsForTheFloor: maxDeliveries=1 would
// move the ghost's first-delivery entries to jobs:dead; below
// triggers.floors.maxDeliveries the trigger's hygiene is refused.
func TestDeadLetteringFromATriggerWaitsForTheFloor(t *testing.T) {
	t.Parallel()
	_, rdb := victim(t)
	plantSecrets(t, rdb)
	before := readAttackBooks(t, rdb)
	s := policyStranger(t, rdb, nil)
	ref := soObj("jobs", "poison", legit("maxDeliveries", "1"))
	requireMetricServed(t, s.client, ref)
	time.Sleep(scansPass)
	require.Equal(t, before, readAttackBooks(t, rdb), "no entry was dead-lettered")
	requireRefused(t, s.admin, "jobs/poison", "InvalidArgument", "maxDeliveries")
	d, err := s.admin.DescribeTarget(context.Background(), &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	require.Contains(t, d.GetRefusedTriggers()[0].GetMessage(), "triggers.floors.maxDeliveries")
	s.saw(t, d)
	s.requireNoSecret(t)
}

// TestAfterARestartNothingActsBeforeEveryTriggerHasPolled: a careful
// trigger and a harsh one (entries stale at the floor, dead-lettered
// after 3 deliveries) name the group; merged, nothing is due. pelwarden
// restarts and the harsh trigger polls first: it alone would dead-letter
// the ghost's 3 entries at once. The group waits out the warm-up, the
// careful trigger polls within it, and the merge acts on nothing.
func TestAfterARestartNothingActsBeforeEveryTriggerHasPolled(t *testing.T) {
	t.Parallel()
	_, rdb := victim(t)
	plantSecrets(t, rdb)
	ctx := context.Background()
	ids := pendingIDs(t, rdb, "ghost-0")
	for range 2 { // the ghost's entries have been delivered 3 times
		require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "jobs", Group: "workers", Consumer: "ghost-0", Messages: ids}).Err())
	}
	careful := soObj("jobs", "careful", legit("entryStaleSeconds", "3600"))
	harsh := soObj("jobs", "harsh", legit("maxDeliveries", "3"))
	warm := func(c *config.Config) { c.Triggers.WarmUp = 1500 * time.Millisecond }
	before := readAttackBooks(t, rdb)

	first := policyStranger(t, rdb, warm)
	for _, ref := range []*externalscaler.ScaledObjectRef{careful, harsh} {
		_, err := first.client.GetMetricSpec(ctx, ref)
		require.NoError(t, err)
	}
	first.stop()

	s := policyStranger(t, rdb, warm)
	started := time.Now()
	requireMetricServed(t, s.client, harsh)
	d, err := s.admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	require.Equal(t, []string{"trigger jobs/harsh"}, d.GetHygieneTriggers(), "the harsh trigger alone sets the group's settings")
	require.Positive(t, d.GetHygieneActsFromMs(), "and the group warms up")
	require.Contains(t, d.GetHygieneWarmUp(), "pelwarden started")
	s.saw(t, d)
	time.Sleep(time.Second - time.Since(started)) // three scans past every threshold of the harsh trigger
	require.Equal(t, before, readAttackBooks(t, rdb), "nothing acts while the group warms up")

	requireMetricServed(t, s.client, careful)
	d, err = s.admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"trigger jobs/careful", "trigger jobs/harsh"}, d.GetHygieneTriggers())
	require.Contains(t, d.GetHygieneWarmUp(), "trigger jobs/careful joined", "a member joining starts the warm-up again")
	require.Contains(t, d.GetHygiene(), "entryStaleSeconds=3600")
	s.saw(t, d)
	time.Sleep(1500*time.Millisecond + scansPass) // the warm-up ends; the merge acts
	d, err = s.admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	require.Zero(t, d.GetHygieneActsFromMs(), "the warm-up is over")
	require.Equal(t, before, readAttackBooks(t, rdb), "the merged settings take nothing")
	s.requireNoSecret(t)
}

// TestClaimedNamespacesCannotLockOutANamedOne fills the scaler targets,
// the hygiene groups and the triggers that triggers may hold from
// namespaces a caller only claims; the jobs namespace, which a rule names,
// is still admitted and enrolled. The warm-up is an hour, so nothing
// acts.
func TestClaimedNamespacesCannotLockOutANamedOne(t *testing.T) {
	t.Parallel()
	_, rdb := victim(t)
	plantSecrets(t, rdb)
	before := readAttackBooks(t, rdb)
	s := policyStranger(t, rdb, func(c *config.Config) {
		c.Scaler.MaxTargets, c.Hygiene.MaxTargets = 40, 10
		c.Triggers.Quotas = config.TriggerQuotas{ScalerTargets: 5, HygieneTargets: 2}
		c.Triggers.WarmUp = time.Hour
		c.Triggers.Rules = append(c.Triggers.Rules, config.TriggerRule{Namespaces: []string{"*"}, Redis: []string{"default"},
			HygieneStreams: []string{"flood-*"}, Profiles: []string{"workers"}})
	})
	ctx := context.Background()
	exhausted := 0
	for i := range 12 {
		ns := "claimed-" + string(rune('a'+i))
		for j := range 5 {
			md := legit("stream", "flood-"+ns+"-"+string(rune('0'+j)))
			_, err := s.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: soObj(ns, "so", md), MetricName: "m"})
			if status.Code(err) == codes.ResourceExhausted {
				exhausted++
				continue
			}
			require.NoError(t, err)
		}
	}
	ref := soObj("jobs", "workers", legit())
	requireMetricServed(t, s.client, ref)
	require.Equal(t, 60-(30-5), exhausted, "claimed namespaces hold every target not reserved for jobs")
	d, err := s.admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	require.Equal(t, []string{"trigger jobs/workers"}, d.GetHygieneTriggers(), "enrolled within its reservation")
	require.Empty(t, d.GetRefusedTriggers())
	require.Positive(t, d.GetHygieneActsFromMs())
	s.saw(t, d)
	require.Equal(t, before, readAttackBooks(t, rdb))
	s.requireNoSecret(t)
}

// podsProfile is how an operator tells pods of app=worker in jobs alive;
// kv overrides its keys.
func podsProfile(kv ...string) map[string]string {
	p := map[string]string{"liveness": "kubernetes", "podSelector": "app=worker", "podNamespace": "jobs"}
	for i := 0; i+1 < len(kv); i += 2 {
		p[kv[i]] = kv[i+1]
	}
	return p
}

// TestFloorsHoldForEveryThresholdTheEvidenceUses: with pod liveness, a
// consumer whose pod is not among the workers is judged by idle time, and
// a pod that goes by the pod deletion grace. A profile below either floor
// does not load; a trigger may not shorten its profile's thresholds; and
// a trigger's own pod evidence with a thousandth of a second's idle time
// serves its metric only. The live worker, whose pod has another name,
// keeps its entries.
func TestFloorsHoldForEveryThresholdTheEvidenceUses(t *testing.T) {
	t.Parallel()
	_, rdb := victim(t)
	plantSecrets(t, rdb)
	before := readAttackBooks(t, rdb)
	pods := kube.PodsFrom(fake.NewClientset(workerPod("worker-7f9c")).CoreV1().Pods)
	k8s := func(profile map[string]string) func(*config.Config) {
		return func(c *config.Config) {
			c.Kubernetes.Enabled = true
			c.Triggers.Floors.PodDeletionGrace = 2 * time.Second
			c.Triggers.Profiles["pods"] = profile
		}
	}
	for key, profile := range map[string]map[string]string{
		"ghostIdleSeconds":        podsProfile("ghostIdleSeconds", "0.001"),
		"podDeletionGraceSeconds": podsProfile("podDeletionGraceSeconds", "0"),
	} {
		cfg := testConfig(rdbAddr(rdb))
		policyTune(&cfg)
		k8s(profile)(&cfg)
		_, err := app.New(cfg, slog.New(slog.DiscardHandler), app.WithKubernetesClient(pods))
		require.ErrorContains(t, err, "triggers.profiles.pods."+key, "a profile below a floor does not load")
	}

	s := policyStranger(t, rdb, k8s(podsProfile()), app.WithKubernetesClient(pods))
	requireEveryRPCRefused(t, s, soObj("jobs", "shorter-idle", legit("livenessProfile", "pods", "ghostIdleSeconds", "0.001")),
		codes.InvalidArgument, "ghostIdleSeconds", "may only lengthen livenessProfile pods")
	requireEveryRPCRefused(t, s, soObj("jobs", "no-grace", legit("livenessProfile", "pods", "podDeletionGraceSeconds", "0")),
		codes.InvalidArgument, "podDeletionGraceSeconds", "may only lengthen livenessProfile pods")
	own := map[string]string{"livenessProfile": ""}
	for k, v := range podsProfile("ghostIdleSeconds", "0.001", "podDeletionGraceSeconds", "0") {
		own[k] = v
	}
	ref := soObj("jobs", "own-pods", legit(flatten(own)...))
	plain := &externalscaler.GetMetricsRequest{ScaledObjectRef: soObj("jobs", "own-pods", withoutHygiene(ref.GetScalerMetadata())), MetricName: "m"}
	eventually(t, 5*time.Second, func() error {
		// Until the pod watch has listed the pods every consumer is
		// Unknown; then both are ghosts by the trigger's own evidence,
		// which is the trigger's metric to fake.
		res, err := s.client.GetMetrics(context.Background(), plain)
		if err == nil && res.GetMetricValues()[0].GetMetricValue() != 0 {
			err = status.Errorf(codes.Unknown, "metric %d, want 0 once the pods are listed", res.GetMetricValues()[0].GetMetricValue())
		}
		return err
	})
	requireMetricServed(t, s.client, ref)
	time.Sleep(scansPass)
	require.Equal(t, before, readAttackBooks(t, rdb), "no entry moved")
	requireRefused(t, s.admin, "jobs/own-pods", "PermissionDenied", "livenessProfile")
	s.requireNoSecret(t)
}

// flatten is a map's keys and values, one after the other.
func flatten(m map[string]string) []string {
	out := make([]string, 0, 2*len(m))
	for k, v := range m {
		out = append(out, k, v)
	}
	return out
}
