package bench

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pelwarden/pelwarden/internal/kubetest"
	"github.com/pelwarden/pelwarden/internal/scaler"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// floodClasses are the five resource classes of the flood benchmark.
func floodClasses() []floodClass {
	return []floodClass{
		{name: "bytes", callers: 4, flood: floodBytes},
		{name: "regex", callers: 4, flood: floodRegex},
		{name: "stream-is-active", callers: 4, flood: floodActiveStreams(fewTargets), perXAdd: activeCounters},
		{name: "stream-is-active-thresholds", callers: 4, flood: floodActiveStreams(ownThreshold), perXAdd: activeCounters},
		{name: "stream-is-active-targets", callers: 4, flood: floodActiveStreams(ownTarget), perXAdd: activeCounters},
		{name: "pod-watches", callers: 4, kube: true, config: floodKubeConfig, setup: legitPod, flood: floodSelectors, during: legitSelectorCurrent},
		// The same with client-go's default rate limit, as before
		// kubernetes.apiQPS and apiBurst.
		{name: "pod-watches-client-go-rate-limit", callers: 4, kube: true, config: floodKubeClientGoLimit, setup: legitPod, flood: floodSelectors, during: legitSelectorCurrent},
		{name: "namespaces", callers: 4, flood: floodNamespaces},
	}
}

// floodClassNamed is the class of that name.
func floodClassNamed(name string) (floodClass, bool) {
	for _, c := range floodClasses() {
		if c.name == name {
			return c, true
		}
	}
	return floodClass{}, false
}

// floodBytes sends oversized strings where a ScaledObject sends short
// ones, each new so no cache serves it: a metadata value, a metric name,
// a namespace.
func floodBytes(ctx context.Context, s *stranger) {
	for i := 0; ctx.Err() == nil; i++ {
		big := s.fresh(strings.Repeat("x", s.size.bytes))
		trigger := map[string]string{"stream": "jobs", "consumerGroup": "workers"}
		ref := &externalscaler.ScaledObjectRef{Name: "so", Namespace: "ns-" + strconv.Itoa(s.id), ScalerMetadata: trigger}
		var err error
		switch i % 3 {
		case 0:
			trigger["pendingEntriesCount"] = "5"
			trigger["x-"+strconv.Itoa(i)] = big
			_, err = s.keda.GetMetricSpec(ctx, ref)
		case 1:
			_, err = s.keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: big})
		default:
			ref.Namespace = big
			_, err = s.keda.GetMetricSpec(ctx, ref)
		}
		s.count(err)
	}
}

// floodRegex sends a new expensive ownerMatch pattern on every call, to
// the scaler and to the Admin API's open CheckTrigger.
func floodRegex(ctx context.Context, s *stranger) {
	for i := 0; ctx.Err() == nil; i++ {
		n := s.next.Add(1)
		alts := strings.Repeat("(a|b|[c-z]+)*x?", max(1, s.size.pattern/16))
		trigger := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "idle",
			"ownerMatch": "regex:(?P<owner>" + alts + "w" + strconv.FormatInt(n, 10) + ")"}
		var err error
		if i%2 == 0 {
			var spec *externalscaler.GetMetricSpecResponse
			spec, err = s.keda.GetMetricSpec(ctx, &externalscaler.ScaledObjectRef{Name: "so", Namespace: "ns", ScalerMetadata: trigger})
			// A refused trigger's spec is the placeholder, not an error.
			if err == nil && scaler.IsRefusedSpec(spec) {
				err = errors.New(scaler.RefusedMetricName)
			}
		} else {
			var res *pelwardenv1.CheckTriggerResponse
			res, err = s.admin.CheckTrigger(ctx, &pelwardenv1.CheckTriggerRequest{Namespace: "ns", Metadata: trigger})
			if err == nil && res.GetCode() != "OK" {
				err = errors.New(res.GetMessage())
			}
		}
		s.count(err)
	}
}

// activeCounters are the StreamIsActive counters reported per XADD.
var activeCounters = map[string]string{
	"evaluations/xadd": "pelwarden_scaler_active_evaluations_total", "stream-wakes/xadd": "pelwarden_scaler_active_stream_wakes_total",
}

// The StreamIsActive floods differ in what their n-th stream asks: a
// stranger picks the metadata that costs pelwarden most.
var (
	// fewTargets spreads the streams over 4 targets of one threshold.
	fewTargets = func(n int64) (activation, ghostIdle int64) { return 100000000, 100 + n%4 }
	// ownThreshold gives every stream a threshold of its own on those 4
	// targets.
	ownThreshold = func(n int64) (activation, ghostIdle int64) { return 100000000 + n, 100 + n%4 }
	// ownTarget gives every stream a target of its own: the same group,
	// judged with another ghostIdleSeconds; past
	// scaler.maxActiveTargetsPerGroup each is refused.
	ownTarget = func(n int64) (activation, ghostIdle int64) { return 100000000, 100 + n }
)

// floodActiveStreams opens StreamIsActive streams on the legitimate
// stream, from ever new namespaces, that stay inactive, so that every
// XADD wakes them all; past the caps it keeps trying. ask sets each
// stream's activation and ghostIdleSeconds.
func floodActiveStreams(ask func(n int64) (activation, ghostIdle int64)) func(context.Context, *stranger) {
	return func(ctx context.Context, s *stranger) {
		for ctx.Err() == nil {
			n := s.next.Add(1)
			activation, ghostIdle := ask(n)
			trigger := map[string]string{"stream": "jobs", "consumerGroup": "workers", "lagCount": "5",
				"activationLagCount": strconv.FormatInt(activation, 10), "ghostIdleSeconds": strconv.FormatInt(ghostIdle, 10)}
			st, err := s.keda.StreamIsActive(ctx, &externalscaler.ScaledObjectRef{Name: "so", Namespace: "ns-" + strconv.FormatInt(n/50, 10), ScalerMetadata: trigger})
			if err == nil {
				_, err = st.Recv()
			}
			if ctx.Err() != nil {
				return
			}
			s.count(err)
			if status.Code(err) == codes.ResourceExhausted {
				time.Sleep(50 * time.Millisecond) // a stranger retries; the open ones stay open
			}
		}
	}
}

// floodNamespaces sends triggers asking for reclaim from a new namespace
// and on a new stream each, so that every call passes the per-namespace
// quotas and only the global caps stop it.
func floodNamespaces(ctx context.Context, s *stranger) {
	for ctx.Err() == nil {
		n := strconv.FormatInt(s.next.Add(1), 10)
		ref := &externalscaler.ScaledObjectRef{Name: "so", Namespace: "ns-" + n,
			ScalerMetadata: map[string]string{"stream": "flood-" + n, "consumerGroup": "workers", "reclaim": "requeue", "livenessProfile": "idle"}}
		_, err := s.keda.GetMetricSpec(ctx, ref)
		s.count(err)
	}
}

// floodKube is a real API server and pelwarden's kubeconfig for it.
type floodKube struct {
	client     kubernetes.Interface
	kubeconfig string
}

// startFloodKube starts etcd and kube-apiserver when their binaries are
// named; nil otherwise.
func startFloodKube(b *testing.B) *floodKube {
	b.Helper()
	if os.Getenv(kubetest.EnvBin) == "" {
		return nil
	}
	c := kubetest.Start(b)
	client := c.API.Client(b)
	kubetest.CreateNamespace(b, client, "legit", nil)
	return &floodKube{client: client, kubeconfig: kubetest.WriteKubeconfig(b, c.API.Config())}
}

// floodKubeConfig turns the kubernetes source on, on its defaults.
const floodKubeConfig = `kubernetes: {enabled: true, kubeconfig: %s}
`

// floodKubeClientGoLimit is floodKubeConfig with client-go's default
// rate limit (rest.Config's QPS 5, burst 10).
const floodKubeClientGoLimit = `kubernetes: {enabled: true, kubeconfig: %s, apiQPS: 5, apiBurst: 10}
`

// legitPod is a worker pod and its consumer, holding one entry, that a
// legitimate ScaledObject names during the flood.
func legitPod(r *floodRig) {
	ctx := context.Background()
	pods := r.kube.client.CoreV1().Pods("legit")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0", Namespace: "legit", Labels: map[string]string{"app": "worker"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker:1"}}}}
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		r.b.Fatal(err)
	}
	created.Status.Phase = corev1.PodRunning
	if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		r.b.Fatal(err)
	}
	if err := r.rdb.XGroupCreateMkStream(ctx, "pods", "workers", "$").Err(); err != nil {
		r.b.Fatal(err)
	}
	r.rdb.XAdd(ctx, &redis.XAddArgs{Stream: "pods", Values: []any{"n", 1}})
	if err := r.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "w-0", Streams: []string{"pods", ">"}, Count: 1, Block: -1}).Err(); err != nil {
		r.b.Fatal(err)
	}
}

// floodSelectors polls with a new podSelector on every call, each caller
// from a namespace of its own, so that each takes its namespace's share of
// kubernetes.maxPodWatches, and the watches the legitimate ScaledObject's
// selector waits behind are as many as the caps allow four namespaces.
func floodSelectors(ctx context.Context, s *stranger) {
	for ctx.Err() == nil {
		n := s.next.Add(1)
		ref := &externalscaler.ScaledObjectRef{Name: "so", Namespace: "ns-" + strconv.Itoa(s.id),
			ScalerMetadata: map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "kubernetes",
				"podSelector": "app=flood-" + strconv.FormatInt(n, 10)}}
		_, err := s.keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "m"})
		s.count(err)
	}
}

// legitSelectorCurrent polls a ScaledObject whose podSelector no one has
// named yet, with the caps full of the flood's, and records how long until
// its consumer is judged by its running pod: its watch's list and watch
// waited behind the flood's at the API client's rate limit.
func legitSelectorCurrent(r *floodRig) {
	ctx := context.Background()
	ref := &externalscaler.ScaledObjectRef{Name: "workers", Namespace: "legit", ScalerMetadata: map[string]string{
		"stream": "pods", "consumerGroup": "workers", "liveness": "kubernetes", "podSelector": "app=worker"}}
	t0 := time.Now()
	for time.Since(t0) < time.Minute {
		if _, err := r.keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "m"}); err != nil {
			r.extra["legit-refused"] = 1
			return
		}
		res, err := r.admin.ListTargets(ctx, &pelwardenv1.ListTargetsRequest{})
		if err != nil {
			r.b.Error(err)
			return
		}
		for _, t := range res.GetTargets() {
			if t.GetStream() == "pods" && len(t.GetConsumers()) == 1 && t.GetConsumers()[0].GetPod() == "running" {
				r.extra["legit-current-ms"] = float64(time.Since(t0).Milliseconds())
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.b.Error("the legitimate selector's pod was not seen running within a minute")
}
