package bench

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/hygiene"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

const (
	pelMemConsumers = 1000
	// pelMemTolerance is how far apart the heap pelwarden holds for the
	// same consumers may be between the small and the large PEL.
	pelMemTolerance = 0.10
)

var pelMemSizes = []int{1_000, 1_000_000}

// pelMem is what one PEL size cost: the heap pelwarden's view and hygiene
// loop hold after GC, the process's RSS then, and the time of one refresh
// and of one (dry-run) hygiene scan paging through every entry.
type pelMem struct {
	heapMB, rssMB float64
	refresh, scan time.Duration
}

// BenchmarkMemoryVsPEL: the same 1000 ghost consumers holding 1k entries,
// then 1M, each read by a liveness view and paged through to the end by a
// dry-run hygiene scan. pelwarden's memory must follow the consumers, not
// the entries: the benchmark fails if the heap it holds after GC, or the
// process's RSS, for the 1M PEL is more than 10% away from that for the 1k
// PEL. The heap is the precise figure (what the view and the loop retain);
// the RSS includes the harness and answers "does the process grow".
func BenchmarkMemoryVsPEL(b *testing.B) {
	var res []pelMem
	for b.Loop() {
		// A first round, not counted, takes the process's one-time growth
		// (connection pools, script cache, metric families) out of the
		// comparison.
		measurePELMem(b, pelMemSizes[0])
		res = res[:0]
		for _, size := range pelMemSizes {
			res = append(res, measurePELMem(b, size))
		}
	}
	for i, size := range pelMemSizes {
		sfx := "-pel" + strconv.Itoa(size)
		b.ReportMetric(res[i].heapMB, "heap-MB"+sfx)
		b.ReportMetric(res[i].rssMB, "rss-MB"+sfx)
		b.ReportMetric(float64(res[i].refresh.Microseconds())/1000, "refresh-ms"+sfx)
		b.ReportMetric(res[i].scan.Seconds(), "scan-s"+sfx)
	}
	small, large := res[0], res[len(res)-1]
	heapRatio, rssRatio := large.heapMB/small.heapMB, large.rssMB/small.rssMB
	b.ReportMetric(heapRatio, "heap-ratio")
	b.ReportMetric(rssRatio, "rss-ratio")
	for what, ratio := range map[string]float64{"heap held": heapRatio, "process RSS": rssRatio} {
		if math.Abs(ratio-1) > pelMemTolerance {
			b.Fatalf("%s for a %d-entry PEL is %.3fx that for %d entries over the same %d consumers; want within %.0f%% (heap %.2f vs %.2f MB, RSS %.1f vs %.1f MB)",
				what, pelMemSizes[len(res)-1], ratio, pelMemSizes[0], pelMemConsumers, pelMemTolerance*100, large.heapMB, small.heapMB, large.rssMB, small.rssMB)
		}
	}
}

func measurePELMem(b *testing.B, size int) pelMem {
	srv := redistest.Start(b)
	defer srv.Close()
	fillGhosts(b, srv.Client(b), size)
	time.Sleep(350 * time.Millisecond) // every consumer idles past ghostIdleSeconds
	base := sampleMem(b)

	conns, err := redisx.Open([]config.Redis{benchRedis(srv.Addr())})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = conns.Close() }()
	reader := &redisx.Reader{Conns: conns, LagEstimateCap: 10000}
	view := liveness.NewView(reader.Fetch, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Minute, Expiry: time.Hour, MaxTargets: 1})
	loop := newLoop(b, view, conns, time.Hour)
	r, err := metadata.Parse(map[string]string{"stream": "jobs", "consumerGroup": "workers", "reclaim": "requeue", "dryRun": "true",
		"ghostIdleSeconds": "0.3", "entryStaleSeconds": "0.01", "deleteGhostConsumers": "false"}, metadata.Env{Conns: []string{"default"}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var m pelMem
	t0 := time.Now()
	snap, err := view.Refresh(ctx, r.Target)
	m.refresh = time.Since(t0)
	if err != nil || len(snap.Consumers) != pelMemConsumers || snap.LivePending != 0 {
		b.Fatalf("refresh: %v; want %d ghost consumers and no live pending", err, pelMemConsumers)
	}
	t0 = time.Now()
	rep, err := loop.Scan(ctx, hygiene.Target{Target: r.Target, Hygiene: r.Hygiene})
	m.scan = time.Since(t0)
	if err != nil || rep.Counts()[redisx.Requeued] != int64(size) {
		b.Fatalf("dry-run scan: %v, %v; want all %d entries found requeueable", rep.Counts(), err, size)
	}
	after := sampleMem(b)
	m.heapMB = float64(int64(after.heap)-int64(base.heap)) / (1 << 20)
	m.rssMB = float64(after.rss) / (1 << 20)
	runtime.KeepAlive(loop)
	runtime.KeepAlive(view)
	return m
}

// fillGhosts adds size entries and has pelMemConsumers consumers read an
// equal share each, leaving them pending.
func fillGhosts(b *testing.B, rdb *redis.Client, size int) {
	b.Helper()
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, "jobs", "workers", "$").Err(); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < size; i += 10_000 {
		pipe := rdb.Pipeline()
		for j := i; j < min(i+10_000, size); j++ {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", strconv.Itoa(j)}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	pipe := rdb.Pipeline()
	for c := range pelMemConsumers {
		// The replies are dropped: the delivery into the PEL is what counts.
		pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: fmt.Sprintf("consumer-%d", c), Streams: []string{"jobs", ">"}, Count: int64(size / pelMemConsumers), Block: -1})
		if (c+1)%50 == 0 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	p, err := rdb.XPending(ctx, "jobs", "workers").Result()
	if err != nil || p.Count != int64(size) || len(p.Consumers) != pelMemConsumers {
		b.Fatalf("filled PEL: %v, %v; want %d entries over %d consumers", p, err, size, pelMemConsumers)
	}
}
