package bench

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

const (
	floodWindow  = 6 * time.Second
	floodCallers = 4
)

// BenchmarkTriggerFlood: a legitimate ScaledObject's poll (GetMetrics then
// IsActive through KEDA's client), first on a quiet pelwarden, then while
// floodCallers callers send GetMetricSpec as fast as they can, each with a
// trigger never seen before (its own namespace and stream, asking for
// reclaim), so every call passes the per-namespace quotas and only the
// global caps (hygiene.maxTargets, scaler.maxTargets, the registry's own)
// stop it. The policy is the most open an operator can set. Reported: the
// poll's p50/p99 both ways, the flood's calls/s, and pelwarden's heap and
// goroutines after it.
func BenchmarkTriggerFlood(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	redistest.CreateGroup(b, rdb, "jobs", "workers")
	cfg := config.Default()
	cfg.GRPC.Addr, cfg.HTTP.Addr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Redis = []config.Redis{benchRedis(srv.Addr())}
	enrollingPolicy(&cfg, config.Default().Triggers.Quotas.HygieneTargets)
	base := sampleMem(b)
	a, err := app.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	keda := externalscaler.NewExternalScalerClient(conn)

	var quiet, flooded latencies
	var calls int64
	for b.Loop() {
		quiet = pollFor(b, keda, floodWindow)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var next atomic.Int64
		for range floodCallers {
			wg.Go(func() { flood(keda, &next, stop) })
		}
		flooded = pollFor(b, keda, floodWindow)
		close(stop)
		wg.Wait()
		calls = next.Load()
	}
	after := sampleMem(b)
	b.ReportMetric(float64(quiet[len(quiet)/2].Microseconds()), "poll-p50-µs-quiet")
	b.ReportMetric(float64(quiet[len(quiet)*99/100].Microseconds()), "poll-p99-µs-quiet")
	b.ReportMetric(float64(flooded[len(flooded)/2].Microseconds()), "poll-p50-µs-flood")
	b.ReportMetric(float64(flooded[len(flooded)*99/100].Microseconds()), "poll-p99-µs-flood")
	b.ReportMetric(float64(flooded[len(flooded)*99/100])/float64(quiet[len(quiet)*99/100]), "p99-ratio")
	b.ReportMetric(float64(calls)/floodWindow.Seconds(), "flood-calls/s")
	b.ReportMetric(float64(int64(after.heap)-int64(base.heap))/(1<<20), "heap-MB")
	b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
	if calls < int64(cfg.Hygiene.MaxTargets) {
		b.Fatalf("the flood sent %d triggers, not past hygiene.maxTargets (%d)", calls, cfg.Hygiene.MaxTargets)
	}
}

// flood sends never-seen triggers until stop closes; errors (a full cap
// answers ResourceExhausted) are what a flood gets and are ignored.
func flood(keda externalscaler.ExternalScalerClient, next *atomic.Int64, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		n := strconv.FormatInt(next.Add(1), 10)
		ref := &externalscaler.ScaledObjectRef{Name: "so", Namespace: "ns-" + n,
			ScalerMetadata: map[string]string{"stream": "flood-" + n, "consumerGroup": "workers", "reclaim": "requeue"}}
		_, _ = keda.GetMetricSpec(context.Background(), ref)
	}
}
