//go:build kube

package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/kubetest"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// apiRounds is how many times each mode takes the API server away.
const apiRounds = 20

// BenchmarkAPIRestartToCurrentVerdicts: pelwarden, on its defaults
// (scaler.freshness 1 s), is polled every 10 ms the way KEDA's scale loop
// polls, and watches one running pod through a real
// kube-apiserver (internal/kubetest); its consumer is idle past ghostIdle,
// so only the pod keeps it Alive, and it is Unknown while the API is away.
// Each round kills the API server (SIGKILL) once pelwarden's watch has run
// a while, waits until pelwarden's view shows the consumer Unknown, and
// starts the server again on its port (about 4 s away). The time runs from
// the first moment the restarted server answers a pods list (probed every
// 20 ms through the same address; it answers before /readyz does) until
// pelwarden's view, which only the reads its polls drive update, judges
// the consumer by its pod again.
func BenchmarkAPIRestartToCurrentVerdicts(b *testing.B) {
	c := kubetest.Start(b)
	kubetest.CreateNamespace(b, c.API.Client(b), "jobs", nil)
	rig := apiRig{c: c}
	rig.start(b)
	var lat, fromReady latencies
	for b.Loop() {
		for range apiRounds {
			answered, ready, current := rig.round(b)
			lat = append(lat, max(current.Sub(answered), 0))
			fromReady = append(fromReady, max(current.Sub(ready), 0))
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	slices.Sort(fromReady)
	b.ReportMetric(lat[len(lat)/2].Seconds(), "p50-s")
	b.ReportMetric(lat[(len(lat)*99)/100].Seconds(), "p99-s")
	b.ReportMetric(lat[len(lat)-1].Seconds(), "max-s")
	b.ReportMetric(fromReady[(len(fromReady)*99)/100].Seconds(), "p99-from-readyz-s")
	b.ReportMetric(float64(len(lat)), "restarts")
}

// apiRig is pelwarden watching one pod through the API server.
type apiRig struct {
	c      *kubetest.Cluster
	admin  pelwardenv1.AdminClient
	scaler externalscaler.ExternalScalerClient
	poll   *externalscaler.GetMetricsRequest
}

func (r *apiRig) start(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w-0", Namespace: "jobs", Labels: map[string]string{"app": "worker"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker:1"}}}}
	pods := r.c.API.Client(b).CoreV1().Pods("jobs")
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	created.Status.Phase = corev1.PodRunning
	if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}

	srv := redistest.Start(b)
	rdb := srv.Client(b)
	if err := rdb.XGroupCreateMkStream(ctx, "jobs", "workers", "$").Err(); err != nil {
		b.Fatal(err)
	}
	for i := range 5 {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", i}})
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "w-0", Streams: []string{"jobs", ">"}, Count: 5, Block: -1}).Err(); err != nil {
		b.Fatal(err)
	}

	kubeconfig := kubetest.WriteKubeconfig(b, r.c.API.Config())
	conn := startAppConn(b, srv.Addr(), func(c *config.Config) { c.Kubernetes.Enabled, c.Kubernetes.Kubeconfig = true, kubeconfig })
	r.admin = pelwardenv1.NewAdminClient(conn)
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "kubernetes",
		"podSelector": "app=worker", "podNamespace": "jobs", "ghostIdleSeconds": "1"}
	r.poll = &externalscaler.GetMetricsRequest{MetricName: "s0-pelwarden",
		ScaledObjectRef: &externalscaler.ScaledObjectRef{Name: "workers", Namespace: "jobs", ScalerMetadata: md}}
	r.scaler = externalscaler.NewExternalScalerClient(conn)
	if _, err := r.scaler.GetMetrics(ctx, r.poll); err != nil {
		b.Fatal(err)
	}
	r.waitUnknown(b, 0, 30*time.Second)
}

// round restarts the API server and returns when it first answered a
// list, when it answered /readyz, and when the view judged by the pod again.
func (r *apiRig) round(b *testing.B) (answered, ready, current time.Time) {
	b.Helper()
	time.Sleep(2 * time.Second) // the watch has run a while: it is resumed, not listed, when it ends
	r.c.API.Kill()
	r.waitUnknown(b, 5, 30*time.Second)
	ctx, stop := context.WithCancel(context.Background())
	first := make(chan time.Time, 1)
	go func() {
		pods := r.c.API.Client(b).CoreV1().Pods("jobs")
		for ctx.Err() == nil {
			if _, err := pods.List(ctx, metav1.ListOptions{}); err == nil {
				first <- time.Now()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	r.c.API.Restart(b)
	ready = time.Now()
	current = r.waitUnknown(b, 0, 60*time.Second)
	select {
	case answered = <-first:
	case <-time.After(10 * time.Second):
		b.Fatal("the restarted API server answered pelwarden's view but not the list probe")
	}
	stop()
	return answered, ready, current
}

// waitUnknown polls the target as KEDA does, every 10 ms, and reads the
// view's latest snapshot after each poll until the target's Unknown-held
// entries are want; it returns when. A poll within scaler.freshness of the
// last read is answered from it, so the view moves at most once a second.
func (r *apiRig) waitUnknown(b *testing.B, want int64, within time.Duration) time.Time {
	b.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		_, _ = r.scaler.GetMetrics(context.Background(), r.poll) // the answer is not what is measured; the read it drives is
		res, err := r.admin.ListTargets(context.Background(), &pelwardenv1.ListTargetsRequest{})
		if err == nil && len(res.GetTargets()) == 1 && res.GetTargets()[0].GetUnknownPending() == want {
			return time.Now()
		}
		last = fmt.Sprint(res.GetTargets(), err)
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("unknown pending not %d within %s: %s", want, within, last)
	return time.Time{}
}
