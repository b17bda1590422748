//go:build kube

package e2e

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/pelwarden/pelwarden/internal/hpaloop"
	"github.com/pelwarden/pelwarden/internal/kubetest"
	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// The HPA suite's two Deployments, each with a ScaledObject of its name:
// one on pelwarden's trigger, one on KEDA's built-in redis-streams trigger,
// on the same group, with the same target and bounds.
const (
	hpaPW   = "pw-workers"
	hpaKEDA = "keda-workers"
	// hpaTarget is both triggers' pendingEntriesCount.
	hpaTarget   = 3
	hpaMin      = 1
	hpaMax      = 20
	hpaFallback = 6
	// hpaFailures is the fallback's failureThreshold: polls that fail in
	// a row before KEDA serves the fallback.
	hpaFailures = 3
	// hpaPolling and hpaSync keep KEDA's polls and the HPA's syncs short,
	// so a step waits for the HPA's own limits, not for a poll.
	hpaPolling = 1
	hpaSync    = time.Second
)

var (
	// hpaLive are the consumers whose heartbeats go on; hpaGhosts died
	// an hour ago holding entries.
	hpaLive   = []string{"w1", "w2", "w3"}
	hpaGhosts = []string{"g1", "g2"}
	// hpaSides are the Deployments in the order the results show them.
	hpaSides = []struct{ name, trigger string }{
		{hpaPW, "pelwarden (external)"},
		{hpaKEDA, "KEDA's redis-streams"},
	}
)

// hpaSuite is the whole loop: the API server with its aggregation layer,
// kube-controller-manager, KEDA's operator and metrics adapter, Redis and
// pelwarden, with both Deployments at one replica and their replicas
// sampled from the start.
type hpaSuite struct {
	*kedaSuite
	controllers *kubetest.ControllerManager
	adapter     *proctest.Proc
	started     time.Time
	run         hpaloop.Run
}

func startHPASuite(t *testing.T) *hpaSuite {
	t.Helper()
	started := time.Now()
	bins := findHPABinaries(t)
	cluster := kubetest.StartWith(t, kubetest.Options{Aggregation: true})
	api := &realAPI{cluster: cluster, admin: cluster.API.Client(t)}
	kubetest.CreateNamespace(t, api.admin, kedaNS, nil)
	e := startKEDA(t, api, bins.operator, bins.crdDir, hpaHost)
	// After KEDA's CRDs: the controllers' first discovery then knows
	// keda.sh.
	controllers := cluster.StartControllerManager(t, kubetest.Unpack(t, bins.controllerManager), hpaSync)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("kube-controller-manager:\n" + controllers.Tail())
		}
	})
	adapterBin := kubetest.Unpack(t, bins.adapter)
	adapter := startKEDAAdapter(t, e, adapterBin)

	// With the append-only file the group survives the outage step.
	rs := redistest.Start(t, redistest.Options{AOF: true})
	rdb := rs.Client(t)
	redistest.CreateGroup(t, rdb, kedaStream, kedaGroup)
	bin := os.Getenv(envHPAPelwarden)
	require.NotEmpty(t, bin, "%s names the pelwarden binary built outside the namespace", envHPAPelwarden)
	pw := startPelwardenFromChart(t, bin, hpaValues(t, rs.Addr()), map[string][]byte{}, nil)

	s := &hpaSuite{kedaSuite: &kedaSuite{kedaEnv: e, redis: rs, rdb: rdb, pw: pw, pwBin: bin, pwFiles: map[string][]byte{}},
		controllers: controllers, adapter: adapter, started: started}
	for _, side := range hpaSides {
		createDeploymentAt(t, e, kedaNS, side.name, 1)
	}
	s.timeline = startReplicaLog(t, e, kedaNS, hpaPW, hpaKEDA)
	version, err := api.admin.Discovery().ServerVersion()
	require.NoError(t, err)
	s.run = hpaloop.Run{
		Date: started.UTC().Format(time.DateOnly), CPUs: runtime.NumCPU(),
		Kubernetes: version.GitVersion, KEDA: moduleVersion(t, adapterBin, "github.com/kedacore/keda/v2"),
		Redis: rs.Version(t).String(), HPASyncSeconds: hpaSync.Seconds(), PollingIntervalSeconds: hpaPolling,
		Target: hpaTarget, MinReplicas: hpaMin, MaxReplicas: hpaMax, FallbackReplicas: hpaFallback,
	}
	t.Logf("the whole loop is up after %s", time.Since(started).Round(100*time.Millisecond))
	return s
}

// hpaMaxAge is the workers profile's heartbeat max age here. The ghosts'
// heartbeats are an hour old, so it changes no scenario; a live worker's
// beats, written every 100 ms by this process, must not look stale when
// a machine shared with other work stalls the writer for seconds.
const hpaMaxAge = "10"

// hpaValues are the KEDA suite's chart values with gRPC in plain text and
// no pod watch: the loop's workers are judged by heartbeats alone.
func hpaValues(t *testing.T, redisAddr string) map[string]any {
	v := pelwardenValues(t, redisAddr)
	v["grpc"] = map[string]any{"shutdownTimeout": "2s"}
	v["kubernetes"] = map[string]any{"enabled": false}
	profile := map[string]any{"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": hpaMaxAge}
	// No rule lets a namespace name batch, until the policy step's
	// rollout.
	v["triggers"].(map[string]any)["profiles"] = map[string]any{"workers": profile, "batch": profile}
	return v
}

// seedGhosts makes the group of the ghost step: the live consumers hold 3
// entries each and beat every 100 ms; the ghosts hold 20 each, idle for an
// hour, with heartbeats an hour old.
func (s *hpaSuite) seedGhosts(t *testing.T) {
	t.Helper()
	redistest.AddJobs(t, s.rdb, kedaStream, "job-", len(hpaLive)*3+len(hpaGhosts)*20)
	beats := map[string]func() string{}
	for _, w := range hpaLive {
		redistest.Read(t, s.rdb, kedaStream, kedaGroup, w, 3)
		beats["hb:"+w] = msAgo(0)
	}
	beatEvery(t, s.rdb, beats)
	for _, g := range hpaGhosts {
		ids := redistest.Read(t, s.rdb, kedaStream, kedaGroup, g, 20)
		redistest.Age(t, s.rdb, kedaStream, kedaGroup, g, time.Hour, ids...)
		heartbeat(t, s.rdb, "hb:"+g, time.Now().Add(-time.Hour))
	}
}

// warm polls pelwarden as KEDA will, until it leaves the ghosts out: a
// pelwarden that has run for a while has read the group already, while a
// heartbeat it has not read before is Unknown for one max age.
func (s *hpaSuite) warm(t *testing.T) {
	t.Helper()
	conn, err := grpc.NewClient(s.pw.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	client := externalscaler.NewExternalScalerClient(conn)
	ref := &externalscaler.ScaledObjectRef{Name: hpaPW, Namespace: kedaNS, ScalerMetadata: s.pwMetadata()}
	spec, err := client.GetMetricSpec(t.Context(), ref)
	require.NoError(t, err)
	require.Len(t, spec.GetMetricSpecs(), 1)
	eventually(t, 30*time.Second, func() error {
		res, err := client.GetMetrics(t.Context(), &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: spec.GetMetricSpecs()[0].GetMetricName()})
		if err != nil {
			return err
		}
		if got := res.GetMetricValues()[0].GetMetricValue(); got != int64(len(hpaLive)*3) {
			return fmt.Errorf("pelwarden's metric is %d", got)
		}
		return nil
	})
}

// pwMetadata is pelwarden's trigger: the two lines of a move from the
// built-in trigger, and the operator's liveness profile.
func (s *hpaSuite) pwMetadata() map[string]string {
	return map[string]string{"scalerAddress": s.pw.grpcAddr, "stream": kedaStream, "consumerGroup": kedaGroup,
		"pendingEntriesCount": fmt.Sprint(hpaTarget), "livenessProfile": "workers"}
}

// scaledObject is side's ScaledObject with one trigger: scale-up at the
// HPA's defaults, scale-down without a stabilization window, and a
// fallback.
func (s *hpaSuite) scaledObject(side, typ string, md map[string]string) *unstructured.Unstructured {
	metadata := map[string]any{}
	for k, v := range md {
		metadata[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": side, "namespace": kedaNS},
		"spec": map[string]any{
			"scaleTargetRef":  map[string]any{"name": side},
			"pollingInterval": int64(hpaPolling),
			"minReplicaCount": int64(hpaMin), "maxReplicaCount": int64(hpaMax),
			"fallback": map[string]any{"failureThreshold": int64(hpaFailures), "replicas": int64(hpaFallback)},
			"advanced": map[string]any{"horizontalPodAutoscalerConfig": map[string]any{
				"behavior": map[string]any{"scaleDown": map[string]any{"stabilizationWindowSeconds": int64(0)}}}},
			"triggers": []any{map[string]any{"type": typ, "metadata": metadata}},
		},
	}}
}

// applyScaledObjects applies both sides' ScaledObjects.
func (s *hpaSuite) applyScaledObjects(t *testing.T) {
	t.Helper()
	s.create(t, scaledObjects, s.scaledObject(hpaPW, "external", s.pwMetadata()))
	s.create(t, scaledObjects, s.scaledObject(hpaKEDA, "redis-streams", map[string]string{
		"address": s.redis.Addr(), "stream": kedaStream, "consumerGroup": kedaGroup, "pendingEntriesCount": fmt.Sprint(hpaTarget)}))
}

// ackAll acknowledges every pending entry, as workers that finished them.
func (s *hpaSuite) ackAll(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	pending, err := s.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: kedaStream, Group: kedaGroup, Start: "-", End: "+", Count: 10000}).Result()
	require.NoError(t, err)
	ids := make([]string, len(pending))
	for i, p := range pending {
		ids[i] = p.ID
	}
	require.NoError(t, s.rdb.XAck(ctx, kedaStream, kedaGroup, ids...).Err())
}

// requireBetween checks that name's replicas stayed within [lo, hi] from
// from on.
func (s *hpaSuite) requireBetween(t *testing.T, name string, lo, hi int32, from time.Time) {
	t.Helper()
	for _, r := range s.timeline.since(name, from) {
		require.True(t, r.replicas >= lo && r.replicas <= hi, "%s had %d replicas at %.1fs, outside %d..%d:\n%s",
			name, r.replicas, r.at.Sub(from).Seconds(), lo, hi, s.timeline.table(from))
	}
}

// record keeps both sides' replicas from from to to as a scenario of the
// results.
func (s *hpaSuite) record(name, what string, from, to time.Time) hpaloop.Scenario {
	sc := hpaloop.Scenario{Name: name, What: what, Seconds: to.Sub(from).Seconds()}
	for _, side := range hpaSides {
		var changes []hpaloop.Change
		for _, r := range s.timeline.since(side.name, from) {
			if r.at.After(to) {
				break
			}
			changes = append(changes, hpaloop.Change{At: max(0, r.at.Sub(from).Seconds()), Replicas: r.replicas})
		}
		sc.Sides = append(sc.Sides, hpaloop.Side{Trigger: side.trigger, Changes: changes, ReplicaSeconds: hpaloop.ReplicaSeconds(changes, sc.Seconds)})
	}
	s.run.Scenarios = append(s.run.Scenarios, sc)
	return sc
}

// scenarioText is a scenario as the log shows it: each side's replicas as
// count@seconds, and its replica-seconds.
func scenarioText(sc hpaloop.Scenario) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%.1f s): %s\n", sc.Name, sc.Seconds, sc.What)
	for _, side := range sc.Sides {
		fmt.Fprintf(&b, "  %-22s %7.1f replica-s:", side.Trigger, side.ReplicaSeconds)
		for _, c := range side.Changes {
			fmt.Fprintf(&b, " %d@%.1f", c.Replicas, c.At)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
