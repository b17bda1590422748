package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/hygiene"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// pelSizes are the ghost PELs the reclaim benchmarks work through;
// PELWARDEN_BENCH_PEL overrides them with a comma-separated list.
func pelSizes(b *testing.B) []int {
	env := os.Getenv("PELWARDEN_BENCH_PEL")
	if env == "" {
		return []int{200_000, 1_000_000}
	}
	var sizes []int
	for f := range strings.SplitSeq(env, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("PELWARDEN_BENCH_PEL=%q: want positive entry counts separated by commas", env)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// naiveSize bounds the per-entry loop: at two round trips an entry it would
// take minutes over the full PEL; its rate is what is compared.
const naiveSize = 20_000

// ghostPEL fills a stream with n entries (job=i) and has the consumer
// "ghost" read them all.
func ghostPEL(b *testing.B, n int) (*redistest.Server, *redis.Client) {
	b.Helper()
	return ghostPELOf(b, redistest.Start(b), n)
}

// ghostPELOf is ghostPEL on srv.
func ghostPELOf(b *testing.B, srv *redistest.Server, n int) (*redistest.Server, *redis.Client) {
	b.Helper()
	rdb := srv.Client(b)
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, "jobs", "workers", "$").Err(); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i += 10_000 {
		pipe := rdb.Pipeline()
		for j := i; j < min(i+10_000, n); j++ {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", strconv.Itoa(j)}})
		}
		pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "ghost", Streams: []string{"jobs", ">"}, Count: 10_000, Block: -1})
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	// A live consumer for claims to go to.
	if err := rdb.XGroupCreateConsumer(ctx, "jobs", "workers", "live").Err(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // entries pass entryStaleSeconds
	return srv, rdb
}

func rate(b *testing.B, n int) {
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkReclaim compares, over the same ghost PEL, pelwarden's guarded
// hygiene scan (XPENDING pages + one Lua script per batch of 1000) with a
// raw XAUTOCLAIM COUNT 1000 loop and a naive per-entry XPENDING+XCLAIM loop.
// Each run checks its own result before reporting.
func BenchmarkReclaim(b *testing.B) {
	for _, n := range pelSizes(b) {
		b.Run(fmt.Sprintf("pel=%d", n), func(b *testing.B) { reclaimLoops(b, n) })
	}
	b.Run("naive-xpending-xclaim-per-entry", func(b *testing.B) { b.Run(fmt.Sprintf("pel=%d", naiveSize), naiveLoop) })
}

// reclaimLoops runs pelwarden's guarded scan in both modes and the raw
// XAUTOCLAIM loops over a fresh ghost PEL of n entries each.
func reclaimLoops(b *testing.B, n int) {
	for _, mode := range []string{"requeue", "claim"} {
		b.Run("pelwarden-guarded-"+mode, func(b *testing.B) {
			srv, rdb := ghostPEL(b, n)
			loop, tg := benchLoop(b, srv.Addr(), mode)
			for b.Loop() {
				rep, err := loop.Scan(context.Background(), tg)
				if err != nil {
					b.Fatal(err)
				}
				want := redisx.Requeued
				if mode == "claim" {
					want = redisx.Claimed
				}
				if rep.Counts()[want] != int64(n) {
					b.Fatalf("scan %s %d entries, want %d: %v", want, rep.Counts()[want], n, rep.Counts())
				}
			}
			rate(b, n)
			b.StopTimer()
			if mode == "requeue" {
				verifyRequeuedOnce(b, rdb, n)
			} else {
				verifyOwner(b, rdb, "live", n)
			}
		})
	}
	for _, justID := range []bool{false, true} {
		name := "xautoclaim-count-1000"
		if justID {
			name += "-justid"
		}
		b.Run(name, func(b *testing.B) {
			_, rdb := ghostPEL(b, n)
			autoclaimAll(b, rdb, n, justID)
		})
	}
}

// autoclaimAll is the raw loop: XAUTOCLAIM ... COUNT 1000 to "live" until
// the PEL is walked, then its rate and its check.
func autoclaimAll(b *testing.B, rdb *redis.Client, n int, justID bool) {
	b.Helper()
	ctx := context.Background()
	for b.Loop() {
		start := "0-0"
		for {
			args := &redis.XAutoClaimArgs{Stream: "jobs", Group: "workers", Consumer: "live", MinIdle: 0, Start: start, Count: 1000}
			var next string
			var err error
			if justID {
				_, next, err = rdb.XAutoClaimJustID(ctx, args).Result()
			} else {
				_, next, err = rdb.XAutoClaim(ctx, args).Result()
			}
			if err != nil {
				b.Fatal(err)
			}
			if next == "0-0" {
				break
			}
			start = next
		}
	}
	rate(b, n)
	b.StopTimer()
	verifyOwner(b, rdb, "live", n)
}

// naiveLoop is the per-entry loop: one XPENDING for the ghost's next entry,
// one XCLAIM of it. At two round trips an entry it would take minutes over
// the large PELs, so it runs over naiveSize entries and its rate is what is
// compared.
func naiveLoop(b *testing.B) {
	_, rdb := ghostPEL(b, naiveSize)
	ctx := context.Background()
	for b.Loop() {
		for {
			p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 1, Consumer: "ghost"}).Result()
			if err != nil {
				b.Fatal(err)
			}
			if len(p) == 0 {
				break
			}
			if err := rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: "jobs", Group: "workers", Consumer: "live", Messages: []string{p[0].ID}}).Err(); err != nil {
				b.Fatal(err)
			}
		}
	}
	rate(b, naiveSize)
	b.StopTimer()
	verifyOwner(b, rdb, "live", naiveSize)
}

// newLoop is a hygiene loop over view, scanning every scan, with its
// engine paging 1000 entries per script call.
func newLoop(b *testing.B, view *liveness.View, conns *redisx.Conns, scan time.Duration) *hygiene.Loop {
	b.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	engine, err := reclaim.New(reclaim.Options{View: view, BatchSize: 1000, Log: log}, reg)
	if err != nil {
		b.Fatal(err)
	}
	return hygiene.New(view, conns, hygiene.Options{
		ScanInterval: scan, LeaseTTL: 2 * scan, Identity: "bench", Expiry: time.Hour, Log: log, Engine: engine,
	}, reg)
}

func benchLoop(b *testing.B, addr, mode string) (*hygiene.Loop, hygiene.Target) {
	b.Helper()
	conns, err := redisx.Open([]config.Redis{benchRedis(addr)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conns.Close() })
	reader := &redisx.Reader{Conns: conns, LagEstimateCap: 1000}
	view := liveness.NewView(reader.Fetch, liveness.ViewOptions{Freshness: time.Second, FetchTimeout: 10 * time.Second, Expiry: time.Hour, MaxTargets: 10})
	loop := newLoop(b, view, conns, time.Second)
	// The ghost is judged by the idle source: it has not read for over
	// 300 ms; "live" reads just before the scan, so claims can go to it.
	r, err := metadata.Parse(map[string]string{"stream": "jobs", "consumerGroup": "workers", "reclaim": mode,
		"ghostIdleSeconds": "0.3", "entryStaleSeconds": "0.01", "deleteGhostConsumers": "false"}, metadata.Env{Conns: []string{"default"}})
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(350 * time.Millisecond)
	c, _ := conns.Get("default")
	// Before Redis 7.2 only a read that delivers resets idle: give it one.
	if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: "jobs", Values: []any{"job", "live"}}).Err(); err != nil {
		b.Fatal(err)
	}
	if err := c.XReadGroup(context.Background(), &redis.XReadGroupArgs{Group: "workers", Consumer: "live", Streams: []string{"jobs", ">"}, Count: 1, Block: -1}).Err(); err != nil {
		b.Fatal(err)
	}
	return loop, hygiene.Target{Target: r.Target, Hygiene: r.Hygiene}
}

// verifyRequeuedOnce checks that the ghost's PEL is empty and the stream
// holds exactly one copy of every original.
func verifyRequeuedOnce(b *testing.B, rdb *redis.Client, n int) {
	b.Helper()
	ctx := context.Background()
	p, err := rdb.XPending(ctx, "jobs", "workers").Result()
	if err != nil || p.Consumers["ghost"] != 0 {
		b.Fatalf("the ghost still holds entries after requeue: %v %v", p, err)
	}
	seen := make([]int8, n)
	start := "-"
	for {
		page, err := rdb.XRangeN(ctx, "jobs", start, "+", 10_000).Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range page {
			if job, err := strconv.Atoi(e.Values["job"].(string)); err == nil {
				seen[job]++
			}
		}
		if len(page) < 10_000 {
			break
		}
		start = "(" + page[len(page)-1].ID
	}
	for job, c := range seen {
		if c != 2 {
			b.Fatalf("job %d appears %d times, want the original and one copy", job, c)
		}
	}
}

func verifyOwner(b *testing.B, rdb *redis.Client, owner string, n int) {
	b.Helper()
	p, err := rdb.XPending(context.Background(), "jobs", "workers").Result()
	if err != nil {
		b.Fatal(err)
	}
	if p.Consumers[owner] < int64(n) || p.Consumers["ghost"] != 0 {
		b.Fatalf("after the loop: %v, want %d entries with %s", p.Consumers, n, owner)
	}
}
