// Package bench measures pelwarden against real redis-server processes, side
// by side with what KEDA's built-in redis-streams scaler sends for one poll
// (the XPENDING summary). Run with `make bench`.
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

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

var consumerCounts = []int{10, 1000, 10000}

// group fills a stream and group with one pending entry per consumer, plus
// as many undelivered entries.
func group(b *testing.B, rdb *redis.Client, consumers int) {
	b.Helper()
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, "jobs", "workers", "$").Err(); err != nil {
		b.Fatal(err)
	}
	pipe := rdb.Pipeline()
	for i := range 2 * consumers {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"n", i}})
	}
	for i := range consumers {
		pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "worker-" + strconv.Itoa(i), Streams: []string{"jobs", ">"}, Count: 1, Block: -1})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
}

func startApp(b *testing.B, addr string, tune ...func(*config.Config)) externalscaler.ExternalScalerClient {
	b.Helper()
	return externalscaler.NewExternalScalerClient(startAppConn(b, addr, tune...))
}

// benchRedis is the connection named default to addr. The rows' ghosts
// are idle-only and their workers never read while holding entries, so
// idle judges holders on Redis 7.0 too (redis[].idleBefore72: ghost).
func benchRedis(addr string) config.Redis {
	r := config.DefaultRedis("default", addr)
	r.IdleBefore72 = config.IdleGhost
	return r
}

// startAppConn runs pelwarden on its defaults with tune applied and returns
// a client connection to its gRPC port, for the scaler and the Admin API.
func startAppConn(b *testing.B, addr string, tune ...func(*config.Config)) *grpc.ClientConn {
	b.Helper()
	cfg := config.Default()
	cfg.GRPC.Addr, cfg.HTTP.Addr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Redis = []config.Redis{benchRedis(addr)}
	for _, f := range tune {
		f(&cfg)
	}
	a, err := app.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(); cancel(); <-done })
	return conn
}

var md = map[string]string{"stream": "jobs", "consumerGroup": "workers", "pendingEntriesCount": "5"}

// latencies records one duration per iteration and reports percentiles.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	p50, p99 := l.percentiles()
	b.ReportMetric(p50, "p50-µs")
	b.ReportMetric(p99, "p99-µs")
}

// percentiles sorts l and returns its p50 and p99 in microseconds.
func (l latencies) percentiles() (p50, p99 float64) {
	slices.Sort(l)
	pct := func(p float64) float64 { return float64(l[int(p*float64(len(l)-1))].Microseconds()) }
	return pct(0.50), pct(0.99)
}

// reportMs reports the percentiles in milliseconds, for reads that take
// that long.
func (l latencies) reportMs(b *testing.B) {
	slices.Sort(l)
	pct := func(p float64) float64 { return l[int(p*float64(len(l)-1))].Seconds() * 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkPoll is one KEDA poll: GetMetrics then IsActive, through KEDA's
// generated client. Both are served from the target's snapshot, read
// ahead of the polls.
func BenchmarkPoll(b *testing.B) {
	for _, n := range consumerCounts {
		b.Run(fmt.Sprintf("pelwarden/consumers=%d", n), func(b *testing.B) {
			srv := redistest.Start(b)
			group(b, srv.Client(b), n)
			c := startApp(b, srv.Addr())
			req := &externalscaler.GetMetricsRequest{ScaledObjectRef: &externalscaler.ScaledObjectRef{ScalerMetadata: md}}
			timePolls(b, c, req, n)
		})
		b.Run(fmt.Sprintf("keda-xpending-summary/consumers=%d", n), func(b *testing.B) {
			srv := redistest.Start(b)
			rdb := srv.Client(b)
			group(b, rdb, n)
			ctx := context.Background()
			lat := make(latencies, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				p, err := rdb.XPending(ctx, "jobs", "workers").Result()
				if err != nil || p.Count != int64(n) {
					b.Fatalf("XPENDING = %v, %v", p, err)
				}
				lat = append(lat, time.Since(t0))
			}
			lat.report(b)
		})
	}
}

// BenchmarkPollParallel is poll throughput with many KEDA-like callers,
// next to the same callers sending the XPENDING summary.
func BenchmarkPollParallel(b *testing.B) {
	for _, n := range consumerCounts {
		b.Run(fmt.Sprintf("pelwarden/consumers=%d", n), func(b *testing.B) {
			srv := redistest.Start(b)
			group(b, srv.Client(b), n)
			c := startApp(b, srv.Addr())
			req := &externalscaler.GetMetricsRequest{ScaledObjectRef: &externalscaler.ScaledObjectRef{ScalerMetadata: md}}
			if _, err := c.GetMetrics(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			parallelPolls(b, func(ctx context.Context) error {
				if _, err := c.GetMetrics(ctx, req); err != nil {
					return err
				}
				_, err := c.IsActive(ctx, req.GetScaledObjectRef())
				return err
			})
		})
		b.Run(fmt.Sprintf("keda-xpending-summary/consumers=%d", n), func(b *testing.B) {
			srv := redistest.Start(b)
			rdb := srv.Client(b)
			group(b, rdb, n)
			parallelPolls(b, func(ctx context.Context) error {
				p, err := rdb.XPending(ctx, "jobs", "workers").Result()
				if err == nil && p.Count != int64(n) {
					err = fmt.Errorf("XPENDING counted %d, want %d", p.Count, n)
				}
				return err
			})
		})
	}
}

// parallelPolls runs poll from 4 callers per GOMAXPROCS and reports the
// polls per second they got through together.
func parallelPolls(b *testing.B, poll func(context.Context) error) {
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := poll(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "polls/s")
}

// BenchmarkRefresh is one background read of a target: the pipelined round
// trip (TIME, XINFO GROUPS, XINFO CONSUMERS, XPENDING summary) and the
// judging of every consumer, next to the single XPENDING summary.
func BenchmarkRefresh(b *testing.B) {
	for _, n := range consumerCounts {
		b.Run(fmt.Sprintf("consumers=%d", n), func(b *testing.B) {
			srv := redistest.Start(b)
			group(b, srv.Client(b), n)
			modeRefresh(b, benchRedis(srv.Addr()), md["stream"], n)
		})
	}
}

// BenchmarkPushActivation is the time from the first XADD on an idle stream
// to StreamIsActive pushing true.
func BenchmarkPushActivation(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, "jobs", "workers", "$").Err(); err != nil {
		b.Fatal(err)
	}
	// A short resend reads the group again soon after each drain, bringing
	// the false back; the true after an XADD comes from the stream waker.
	c := startApp(b, srv.Addr(), func(cfg *config.Config) {
		cfg.Scaler.ActiveResendInterval, cfg.Scaler.Freshness = 100*time.Millisecond, 100*time.Millisecond
	})
	ref := &externalscaler.ScaledObjectRef{ScalerMetadata: map[string]string{"stream": "jobs", "consumerGroup": "workers", "lagCount": "1"}}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.StreamIsActive(sctx, ref)
	if err != nil {
		b.Fatal(err)
	}
	next := func(want bool) {
		for {
			r, err := stream.Recv()
			if err != nil {
				b.Fatal(err)
			}
			if r.GetResult() == want {
				return
			}
		}
	}
	lat := make(latencies, 0, b.N)
	for b.Loop() {
		b.StopTimer()
		next(false) // idle: everything delivered and acknowledged
		b.StartTimer()
		t0 := time.Now()
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"n", 1}}).Err(); err != nil {
			b.Fatal(err)
		}
		next(true)
		lat = append(lat, time.Since(t0))
		b.StopTimer()
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "w", Streams: []string{"jobs", ">"}, Count: 10, Block: -1}).Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range res[0].Messages {
			rdb.XAck(ctx, "jobs", "workers", m.ID)
		}
		b.StartTimer()
	}
	lat.report(b)
}

// timePolls checks that req's target reports n live pending entries, then
// times polls as KEDA makes them: GetMetrics, then IsActive.
func timePolls(b *testing.B, c externalscaler.ExternalScalerClient, req *externalscaler.GetMetricsRequest, n int) {
	b.Helper()
	ctx := context.Background()
	if first, err := c.GetMetrics(ctx, req); err != nil || first.GetMetricValues()[0].GetMetricValue() != int64(n) {
		b.Fatalf("GetMetrics = %v, %v; want %d live pending", first, err, n)
	}
	lat := make(latencies, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if _, err := c.GetMetrics(ctx, req); err != nil {
			b.Fatal(err)
		}
		if _, err := c.IsActive(ctx, req.GetScaledObjectRef()); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	lat.report(b)
}
