package scaler

import (
	"context"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// BenchmarkServedPoll is the handlers' share of a KEDA poll served from a
// fresh snapshot (GetMetrics then IsActive, as KEDA calls them), without
// the transport and the interceptors: what pelwarden itself allocates per
// poll. The snapshot comes from a real Redis read.
func BenchmarkServedPoll(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	redistest.CreateGroup(b, rdb, "jobs", "workers")
	redistest.AddJobs(b, rdb, "jobs", "", 20)
	redistest.Read(b, rdb, "jobs", "workers", "w-0", 10)
	conns, err := redisx.Open([]config.Redis{config.DefaultRedis("default", srv.Addr())})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conns.Close() })
	reader := &redisx.Reader{Conns: conns, LagEstimateCap: 10000}
	view := liveness.NewView(reader.Fetch, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, MaxTargets: 10})
	s := New(view, Options{Env: metadata.Env{Conns: conns.Names()}, RequestTimeout: time.Second, ParseCacheSize: 10})
	ref := &externalscaler.ScaledObjectRef{Name: "so", Namespace: "jobs",
		ScalerMetadata: map[string]string{"stream": "jobs", "consumerGroup": "workers", "pendingEntriesCount": "5"}}
	req := &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "s0-pelwarden"}
	ctx := context.Background()
	if res, err := s.GetMetrics(ctx, req); err != nil || res.GetMetricValues()[0].GetMetricValue() != 10 {
		b.Fatalf("GetMetrics = %v, %v; want 10 pending", res, err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.GetMetrics(ctx, req); err != nil {
			b.Fatal(err)
		}
		if _, err := s.IsActive(ctx, ref); err != nil {
			b.Fatal(err)
		}
	}
}
