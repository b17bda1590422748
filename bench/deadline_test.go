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

	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

const (
	deadlineRounds = 20
	deadlineHeld   = 20 // entries a dying consumer holds
	deadlineMaxAge = 2 * time.Second
	deadlineIdle   = 5 * time.Second
	deadlineStale  = 5 * time.Second
)

// BenchmarkDeadlineToRequeue times, from the instant a threshold lets
// pelwarden act, until the first entry it may take is requeued; pelwarden
// runs in this process on its defaults (scan every 10 s), with one
// hygiene target from configuration per kind:
//
//   - heartbeat: a worker holding entries beats for 4.5 s, then stops;
//     the instant is its last beat plus heartbeatMaxAgeSeconds (2 s);
//   - idle: a consumer reads entries and goes quiet; the instant is that
//     read plus ghostIdleSeconds (5 s);
//   - stale: seed 000's case, a consumer whose owner's heartbeat is an
//     hour old reads one more entry; the instant is that read plus
//     entryStaleSeconds (5 s).
//
// A deadline is computed from a read: a second after each consumer has
// read its entries (past scaler.freshness, so the poll is not answered
// from a read made before them), KEDA polls the group once, through a
// trigger judged alike, and that read gives the view the consumer's
// deadline. Each round checks
// that every entry taken was requeued exactly once.
func BenchmarkDeadlineToRequeue(b *testing.B) {
	for _, kind := range []string{"heartbeat", "idle", "stale"} {
		b.Run("kind="+kind, func(b *testing.B) { deadlineToRequeue(b, kind) })
	}
}

func deadlineToRequeue(b *testing.B, kind string) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, "jobs", "workers", "$").Err(); err != nil {
		b.Fatal(err)
	}
	target := map[string]string{"stream": "jobs", "consumerGroup": "workers", "reclaim": "requeue",
		"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": secs(deadlineMaxAge), "entryStaleSeconds": "0.5"}
	round := heartbeatRound
	switch kind {
	case "idle":
		target = map[string]string{"stream": "jobs", "consumerGroup": "workers", "reclaim": "requeue",
			"liveness": "idle", "ghostIdleSeconds": secs(deadlineIdle), "entryStaleSeconds": "0.5"}
		round = idleRound
	case "stale":
		target["entryStaleSeconds"] = secs(deadlineStale)
		round = staleRound
		setHeartbeat(b, rdb, "hb:agent", time.Now().Add(-time.Hour))
	}
	keda := externalscaler.NewExternalScalerClient(dial(b, startDeadlineApp(b, srv.Addr(), target)))
	poll := deadlinePoll(b, keda, target)
	// A heartbeat is evidence once pelwarden has read its node for a max
	// age (the outage rule): the rounds start after that.
	time.Sleep(deadlineMaxAge + 500*time.Millisecond)

	var lat latencies
	seq := 0
	for b.Loop() {
		for i := range deadlineRounds {
			seq++
			time.Sleep(time.Duration(i%5) * 400 * time.Millisecond)
			lat = append(lat, round(b, rdb, seq, poll))
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(lat[len(lat)/2].Seconds(), "p50-s")
	b.ReportMetric(lat[(len(lat)*99)/100].Seconds(), "p99-s")
	b.ReportMetric(lat[len(lat)-1].Seconds(), "max-s")
	b.ReportMetric(float64(len(lat)), "rounds")
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

// startDeadlineApp runs pelwarden with target from configuration, and
// returns its gRPC address. Its triggers may name the heartbeat keys.
func startDeadlineApp(b *testing.B, addr string, target map[string]string) string {
	b.Helper()
	cfg := config.Default()
	cfg.GRPC.Addr, cfg.HTTP.Addr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Redis = []config.Redis{benchRedis(addr)}
	cfg.Hygiene.Targets = []map[string]string{target}
	cfg.Triggers.Rules[0].HeartbeatKeys = []string{"hb:*"}
	a, err := app.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	return a.GRPCAddr()
}

// deadlinePoll is one KEDA poll of a trigger that reads the group as
// target does (its liveness settings, without hygiene).
func deadlinePoll(b *testing.B, keda externalscaler.ExternalScalerClient, target map[string]string) func() {
	md := map[string]string{"pendingEntriesCount": "5"}
	for _, k := range []string{"stream", "consumerGroup", "liveness", "heartbeatKey", "heartbeatMaxAgeSeconds", "ghostIdleSeconds"} {
		if v, ok := target[k]; ok {
			md[k] = v
		}
	}
	req := &externalscaler.GetMetricsRequest{ScaledObjectRef: &externalscaler.ScaledObjectRef{Name: "so", Namespace: "jobs", ScalerMetadata: md}, MetricName: "m"}
	fresh := config.Default().Scaler.Freshness
	return func() {
		time.Sleep(fresh + 50*time.Millisecond)
		if _, err := keda.GetMetrics(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// setHeartbeat writes key as a heartbeat at at, to the millisecond, and
// returns the instant written.
func setHeartbeat(b *testing.B, rdb *redis.Client, key string, at time.Time) time.Time {
	b.Helper()
	ms := at.UnixMilli()
	if err := rdb.Set(context.Background(), key, ms, 0).Err(); err != nil {
		b.Fatal(err)
	}
	return time.UnixMilli(ms)
}

// heartbeatRound: a worker reads its entries while beating, beats a last
// time and stops.
func heartbeatRound(b *testing.B, rdb *redis.Client, seq int, poll func()) time.Duration {
	name := fmt.Sprintf("beat-%d", seq)
	setHeartbeat(b, rdb, "hb:"+name, time.Now())
	jobs, _ := readNew(b, rdb, name, seq, deadlineHeld)
	poll()
	for range 9 {
		time.Sleep(500 * time.Millisecond)
		setHeartbeat(b, rdb, "hb:"+name, time.Now())
	}
	last := setHeartbeat(b, rdb, "hb:"+name, time.Now())
	return untilRequeued(b, rdb, name, jobs, last.Add(deadlineMaxAge))
}

// idleRound: a consumer reads its entries and is never heard of again.
func idleRound(b *testing.B, rdb *redis.Client, seq int, poll func()) time.Duration {
	name := fmt.Sprintf("idle-%d", seq)
	jobs, readAt := readNew(b, rdb, name, seq, deadlineHeld)
	poll()
	return untilRequeued(b, rdb, name, jobs, readAt.Add(deadlineIdle))
}

// staleRound: the silent owner's consumer reads one more entry.
func staleRound(b *testing.B, rdb *redis.Client, seq int, poll func()) time.Duration {
	jobs, readAt := readNew(b, rdb, "agent", seq, 1)
	poll()
	return untilRequeued(b, rdb, "agent", jobs, readAt.Add(deadlineStale))
}

// readNew adds n jobs and has consumer read them, returning the jobs and
// when the read was sent (the entries' delivery is no earlier).
func readNew(b *testing.B, rdb *redis.Client, consumer string, seq, n int) ([]string, time.Time) {
	b.Helper()
	ctx := context.Background()
	jobs := make([]string, n)
	pipe := rdb.Pipeline()
	for i := range jobs {
		jobs[i] = strconv.Itoa(seq*1000 + i)
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", jobs[i]}})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	at := time.Now()
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: consumer, Streams: []string{"jobs", ">"}, Count: int64(n), Block: -1}).Result()
	if err != nil || len(res[0].Messages) != n {
		b.Fatalf("%s read %v: %v", consumer, res, err)
	}
	return jobs, at
}

// untilRequeued waits for the first copy of one of jobs after the stream's
// tail and returns how long after from it came, then waits for consumer's
// PEL to empty and checks each job was requeued once.
func untilRequeued(b *testing.B, rdb *redis.Client, consumer string, jobs []string, from time.Time) time.Duration {
	b.Helper()
	ctx := context.Background()
	tail, err := rdb.XRevRangeN(ctx, "jobs", "+", "-", 1).Result()
	if err != nil || len(tail) != 1 {
		b.Fatalf("stream tail: %v", err)
	}
	first, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{"jobs", tail[0].ID}, Count: 1, Block: 30 * time.Second}).Result()
	if err != nil {
		b.Fatalf("no requeue within 30s: %v", err)
	}
	lat := time.Since(from)
	if got := first[0].Messages[0].Values["job"]; !slices.Contains(jobs, got.(string)) {
		b.Fatalf("the first new entry is job %v, not one %s held", got, consumer)
	}
	waitFor(b, 30*time.Second, func() bool {
		p, err := rdb.XPending(ctx, "jobs", "workers").Result()
		return err == nil && p.Consumers[consumer] == 0
	})
	verifyCopiedOnce(b, rdb, jobs)
	return lat
}
