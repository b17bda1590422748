package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/kube"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

const (
	podDeletions = 20
	podHeld      = 20 // entries the deleted pod's consumer holds
)

// BenchmarkPodDeletionToRequeue: a consumer holds K entries and its pod is
// deleted; the time runs from the deletion until the first of its entries
// is requeued. pelwarden runs on its defaults (hygiene scan
// every 10 s, podDeletionGraceSeconds 2), with pods from client-go's fake
// clientset behind the same informers a real API server feeds. The pods
// belong to a ReplicaSet (no grace: a Deployment's pod names never
// return) or to a StatefulSet (the grace), in the same run.
func BenchmarkPodDeletionToRequeue(b *testing.B) {
	for _, owner := range []string{ownerReplicaSet, ownerStatefulSet} {
		b.Run("owner="+owner, func(b *testing.B) { podDeletionToRequeue(b, owner) })
	}
}

func podDeletionToRequeue(b *testing.B, owner string) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, "jobs", "workers", "$").Err(); err != nil {
		b.Fatal(err)
	}
	pods := fake.NewClientset()
	startPodWatchApp(b, srv.Addr(), pods)

	var lat latencies
	seq := 0
	for b.Loop() {
		for round := range podDeletions {
			seq++
			name := fmt.Sprintf("worker-%d", seq)
			jobs := holdAs(b, rdb, pods, name, owner, seq)
			time.Sleep(time.Duration(200+round%5*100) * time.Millisecond) // deletions land at different points of the refresh cycle
			tail, err := rdb.XRevRangeN(ctx, "jobs", "+", "-", 1).Result()
			if err != nil || len(tail) != 1 {
				b.Fatalf("stream tail: %v", err)
			}
			if err := pods.CoreV1().Pods("jobs").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
			deleted := time.Now()
			first, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{"jobs", tail[0].ID}, Count: 1, Block: 15 * time.Second}).Result()
			if err != nil {
				b.Fatalf("no requeue within 15s of deleting %s: %v", name, err)
			}
			lat = append(lat, time.Since(deleted))
			if got := first[0].Messages[0].Values["job"]; !slices.Contains(jobs, got.(string)) {
				b.Fatalf("the first new entry is job %v, not one %s held", got, name)
			}
			waitFor(b, 15*time.Second, func() bool {
				p, err := rdb.XPending(ctx, "jobs", "workers").Result()
				return err == nil && p.Consumers[name] == 0
			})
			verifyCopiedOnce(b, rdb, jobs)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(lat[len(lat)/2].Seconds(), "p50-s")
	b.ReportMetric(lat[(len(lat)*99)/100].Seconds(), "p99-s")
	b.ReportMetric(lat[len(lat)-1].Seconds(), "max-s")
	b.ReportMetric(float64(len(lat)), "deletions")
	b.ReportMetric(podHeld, "entries-per-pod")
}

func startPodWatchApp(b *testing.B, addr string, pods *fake.Clientset) {
	b.Helper()
	cfg := config.Default()
	cfg.GRPC.Addr, cfg.HTTP.Addr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Redis = []config.Redis{benchRedis(addr)}
	cfg.Kubernetes.Enabled = true
	cfg.Hygiene.Targets = []map[string]string{{"stream": "jobs", "consumerGroup": "workers", "reclaim": "requeue",
		"liveness": "kubernetes", "podSelector": "app=worker", "podNamespace": "jobs"}}
	a, err := app.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), app.WithKubernetesClient(kube.PodsFrom(pods.CoreV1().Pods)))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
}

// holdAs starts a pod that owner controls and has its consumer read
// podHeld new jobs, leaving them pending. It returns the jobs.
func holdAs(b *testing.B, rdb *redis.Client, pods *fake.Clientset, name, owner string, seq int) []string {
	b.Helper()
	ctx := context.Background()
	if err := createPod(ctx, pods, name, owner); err != nil {
		b.Fatal(err)
	}
	jobs := make([]string, podHeld)
	pipe := rdb.Pipeline()
	for i := range jobs {
		jobs[i] = strconv.Itoa(seq*1000 + i)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", jobs[i]}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: name, Streams: []string{"jobs", ">"}, Count: podHeld, Block: -1}).Result()
	if err != nil || len(res[0].Messages) != podHeld {
		b.Fatalf("%s read %v: %v", name, res, err)
	}
	return jobs
}

// verifyCopiedOnce checks that each held job was requeued exactly once:
// the group reads each copy once more, and acknowledges it.
func verifyCopiedOnce(b *testing.B, rdb *redis.Client, jobs []string) {
	b.Helper()
	ctx := context.Background()
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "drain", Streams: []string{"jobs", ">"}, Count: 10 * podHeld, Block: -1}).Result()
	if err != nil {
		b.Fatalf("reading the copies: %v", err)
	}
	seen := map[string]int{}
	var ids []string
	for _, m := range res[0].Messages {
		seen[m.Values["job"].(string)]++
		ids = append(ids, m.ID)
	}
	for _, j := range jobs {
		if seen[j] != 1 {
			b.Fatalf("job %s requeued %d times, want once (copies: %v)", j, seen[j], seen)
		}
	}
	if len(seen) != len(jobs) {
		b.Fatalf("%d jobs requeued, want %d", len(seen), len(jobs))
	}
	if err := rdb.XAck(ctx, "jobs", "workers", ids...).Err(); err != nil {
		b.Fatal(err)
	}
}
