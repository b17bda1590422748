package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// modesPEL is the ghost PEL the mode rows reclaim: large enough for a
// steady rate, small enough to keep the rows within a minute.
const modesPEL = 20_000

// BenchmarkModes runs the same poll, refresh and guarded requeue on one
// server and on a 3-master cluster, side by side in one run, and the
// requeue on a master with one replica with and without waitReplicas: 1.
func BenchmarkModes(b *testing.B) {
	single := redistest.Start(b)
	cl := redistest.StartCluster(b, redistest.ClusterOptions{})
	clusterConn := benchRedis("")
	clusterConn.Mode, clusterConn.Cluster.Addrs = config.RedisCluster, cl.Addrs()
	modes := []struct {
		name string
		conn config.Redis
		rdb  redis.UniversalClient
	}{
		{"single", benchRedis(single.Addr()), single.Client(b)},
		{"cluster", clusterConn, cl.Client(b)},
	}
	filled := map[string]bool{}
	fill := func(b *testing.B, rdb redis.UniversalClient, mode, stream string, consumers int) {
		if !filled[mode+stream] {
			fillGroup(b, rdb, stream, consumers)
			filled[mode+stream] = true
		}
	}
	for _, m := range modes {
		b.Run("poll/consumers=1000/mode="+m.name, func(b *testing.B) {
			fill(b, m.rdb, m.name, "poll", 1000)
			modePoll(b, m.conn, "poll", 1000)
		})
		for _, n := range []int{1000, 10000} {
			stream := "refresh-" + strconv.Itoa(n)
			b.Run(fmt.Sprintf("refresh/consumers=%d/mode=%s", n, m.name), func(b *testing.B) {
				fill(b, m.rdb, m.name, stream, n)
				modeRefresh(b, m.conn, stream, n)
			})
		}
	}
	// The requeue rows alternate their two sides round by round and
	// report each side's median: on a shared machine one run of each,
	// seconds apart, compares the machine's load more than the sides.
	b.Run("reclaim", func(b *testing.B) {
		sides := []reclaimSide{{"single", modes[0].rdb, redisx.Durability{}}, {"cluster", modes[1].rdb, redisx.Durability{}}}
		for b.Loop() {
			medianRates(b, sides)
		}
	})
	master, _ := withReplica(b)
	// A generous waitTimeout: on a loaded machine a replica may take
	// seconds, and the row measures what WAIT costs, not whether it fails.
	b.Run("reclaim-wait", func(b *testing.B) {
		sides := []reclaimSide{{"wait0", master, redisx.Durability{}}, {"wait1", master, redisx.Durability{Replicas: 1, Timeout: 10 * time.Second}}}
		for b.Loop() {
			medianRates(b, sides)
		}
	})
}

// reclaimSide is one side of a requeue row.
type reclaimSide struct {
	name string
	rdb  redis.UniversalClient
	wait redisx.Durability
}

// reclaimRounds is how many times each side requeues a fresh PEL.
const reclaimRounds = 3

// medianRates requeues a fresh ghost PEL on each side in turn, for
// reclaimRounds rounds, and reports each side's median rate as
// entries/s-<side>.
func medianRates(b *testing.B, sides []reclaimSide) {
	rates := make([][]float64, len(sides))
	for range reclaimRounds {
		for i, s := range sides {
			rates[i] = append(rates[i], float64(modesPEL)/modeReclaim(b, s.rdb, s.wait).Seconds())
		}
	}
	for i, s := range sides {
		slices.Sort(rates[i])
		b.ReportMetric(rates[i][len(rates[i])/2], "entries/s-"+s.name)
	}
}

// fillGroup gives stream a group with one pending entry per consumer and
// as many undelivered entries.
func fillGroup(b *testing.B, rdb redis.UniversalClient, stream string, consumers int) {
	b.Helper()
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, stream, "workers", "$").Err(); err != nil {
		b.Fatal(err)
	}
	pipe := rdb.Pipeline()
	for i := range 2 * consumers {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"n", i}})
	}
	for i := range consumers {
		pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "worker-" + strconv.Itoa(i), Streams: []string{stream, ">"}, Count: 1, Block: -1})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
}

func modePoll(b *testing.B, conn config.Redis, stream string, n int) {
	c := startApp(b, "", func(cfg *config.Config) { cfg.Redis = []config.Redis{conn} })
	req := &externalscaler.GetMetricsRequest{ScaledObjectRef: &externalscaler.ScaledObjectRef{
		ScalerMetadata: map[string]string{"stream": stream, "consumerGroup": "workers", "pendingEntriesCount": "5"}}}
	timePolls(b, c, req, n)
}

// modeRefresh times one background read of stream's group (n live
// consumers) over conn: the pipelined round trip and the judging.
func modeRefresh(b *testing.B, conn config.Redis, stream string, n int) {
	conns, err := redisx.Open([]config.Redis{conn})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conns.Close() })
	r, err := metadata.Parse(map[string]string{"stream": stream, "consumerGroup": "workers"}, metadata.Env{Conns: []string{"default"}})
	if err != nil {
		b.Fatal(err)
	}
	reader := &redisx.Reader{Conns: conns, LagEstimateCap: 10000}
	ctx := context.Background()
	lat := make(latencies, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		obs, err := reader.Fetch(ctx, r.Target, nil)
		if err != nil {
			b.Fatal(err)
		}
		if s := liveness.Build(&r.Target, obs, nil, time.Now()); s.LivePending != int64(n) {
			b.Fatalf("live pending %d, want %d", s.LivePending, n)
		}
		lat = append(lat, time.Since(t0))
	}
	lat.report(b)
}

var reclaimRuns int

// modeReclaim is the engine's guarded requeue of a ghost's modesPEL
// entries, in batches of the default 1000, on a fresh stream each run; it
// returns how long the requeue took, checked.
func modeReclaim(b *testing.B, rdb redis.UniversalClient, d redisx.Durability) time.Duration {
	reclaimRuns++
	stream := fmt.Sprintf("reclaim-%d", reclaimRuns)
	ghostPELOn(b, rdb, stream, modesPEL)
	view := liveness.NewView(nil, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1})
	engine, err := reclaim.New(reclaim.Options{View: view, BatchSize: int64(config.Default().Hygiene.BatchSize),
		Durability: func(string) redisx.Durability { return d }}, prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	h := policy.Hygiene{Mode: policy.ReclaimRequeue, EntryStale: time.Millisecond, ClaimFallback: policy.FallbackRequeue}
	job := reclaim.Job{Client: rdb, Target: liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: stream, Group: "workers"}},
		Hygiene: h, Source: events.SourceHygiene}
	snap := &liveness.Snapshot{Consumers: []liveness.ConsumerView{{Name: "ghost", Pending: modesPEL, Idle: time.Hour, Verdict: liveness.Ghost}}}
	t0 := time.Now()
	rep, err := engine.RunAll(context.Background(), job, reclaim.Decide(snap, h, time.Now()))
	took := time.Since(t0)
	if err != nil {
		b.Fatal(err)
	}
	if got := rep.Counts()[redisx.Requeued]; got != modesPEL {
		b.Fatalf("requeued %d, want %d: %v", got, modesPEL, rep.Counts())
	}
	if n := rdb.XLen(context.Background(), stream).Val(); n != 2*modesPEL {
		b.Fatalf("stream holds %d entries, want %d originals and as many copies", n, modesPEL)
	}
	return took
}

// ghostPELOn fills stream with n entries the consumer "ghost" has read.
func ghostPELOn(b *testing.B, rdb redis.UniversalClient, stream string, n int) {
	b.Helper()
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, stream, "workers", "$").Err(); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i += 10_000 {
		pipe := rdb.Pipeline()
		for j := i; j < min(i+10_000, n); j++ {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"job", strconv.Itoa(j)}})
		}
		pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "ghost", Streams: []string{stream, ">"}, Count: 10_000, Block: -1})
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond) // entries pass entryStale
}

// withReplica starts a master and one replica of it, in sync.
func withReplica(b *testing.B) (master, replica *redis.Client) {
	b.Helper()
	m := redistest.Start(b, redistest.Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
	host, port, _ := strings.Cut(m.Addr(), ":")
	r := redistest.Start(b, redistest.Options{Args: []string{"--replicaof", host, port}})
	master, replica = m.Client(b), r.Client(b)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info := master.Info(context.Background(), "replication").Val()
		if strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online") {
			return master, replica
		}
		if time.Now().After(deadline) {
			b.Fatal("the replica did not sync within 10s")
		}
	}
}
