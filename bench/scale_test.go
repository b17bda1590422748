package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// Scale figures are memory figures too; run each in a process of its own
// (bench/report does) so one does not inherit another's heap.
const (
	scaleTargets   = 10_000 // the default scaler.maxTargets
	scaleConsumers = 10_000
)

// memSample is the Go heap after a full GC and the process's resident set.
type memSample struct{ heap, rss uint64 }

func sampleMem(b *testing.B) memSample {
	b.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{heap: ms.HeapAlloc, rss: vmRSS(b)}
}

// vmRSS reads this process's VmRSS, in bytes.
func vmRSS(b *testing.B) uint64 {
	b.Helper()
	return procRSS(b, "/proc/self/status")
}

// procRSS reads VmRSS from a /proc/<pid>/status file, in bytes.
func procRSS(b *testing.B, status string) uint64 {
	b.Helper()
	return procKB(b, status, "VmRSS:") << 10
}

// procKB reads one kB field of a /proc/<pid>/status file, such as VmRSS:
// or VmHWM: (the peak resident set).
func procKB(b *testing.B, status, field string) uint64 {
	b.Helper()
	f, err := os.Open(status)
	if err != nil {
		b.Fatalf("RSS needs Linux's /proc: %v", err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatalf("%s line %q: %v", field, sc.Text(), err)
			}
			return kb
		}
	}
	b.Fatalf("no %s in %s", field, status)
	return 0
}

// reportMem reports what pelwarden's structures added to the heap since
// base, and the process's RSS now (harness included).
func reportMem(b *testing.B, base memSample, prefix string) memSample {
	b.Helper()
	now := sampleMem(b)
	b.ReportMetric(float64(int64(now.heap)-int64(base.heap))/(1<<20), prefix+"heap-MB")
	b.ReportMetric(float64(now.rss)/(1<<20), prefix+"rss-MB")
	return now
}

func openReader(b *testing.B, addr string) *redisx.Reader {
	b.Helper()
	conns, err := redisx.Open([]config.Redis{benchRedis(addr)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conns.Close() })
	return &redisx.Reader{Conns: conns, LagEstimateCap: 10000}
}

func parseTarget(b *testing.B, md map[string]string) liveness.Target {
	b.Helper()
	r, err := metadata.Parse(md, metadata.Env{Conns: []string{"default"}})
	if err != nil {
		b.Fatal(err)
	}
	return r.Target
}

// BenchmarkScale: 10k targets registered in one liveness view, each read
// once through it (a cycle is from the first read until the last one
// returned), the reads batched as polls due together are; and one group
// of 10k consumers read through the view.
func BenchmarkScale(b *testing.B) {
	b.Run(fmt.Sprintf("targets=%d", scaleTargets), benchTargets)
	b.Run(fmt.Sprintf("consumers=%d", scaleConsumers), func(b *testing.B) {
		srv := redistest.Start(b)
		group(b, srv.Client(b), scaleConsumers)
		reader := openReader(b, srv.Addr())
		t := parseTarget(b, md)
		base := sampleMem(b)
		v := liveness.NewView(reader.Fetch, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: 30 * time.Second, Expiry: time.Hour, MaxTargets: 1})
		lat := make(latencies, 0, b.N)
		for b.Loop() {
			t0 := time.Now()
			s, err := v.Refresh(context.Background(), t)
			if err != nil || s.LivePending != scaleConsumers || len(s.Consumers) != scaleConsumers {
				b.Fatalf("refresh: %v; want %d consumers each holding one live entry", err, scaleConsumers)
			}
			lat = append(lat, time.Since(t0))
		}
		lat.reportMs(b)
		reportMem(b, base, "")
		runtime.KeepAlive(v)
	})
}

func benchTargets(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	targets := make([]liveness.Target, scaleTargets)
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range targets {
		stream := "jobs:" + strconv.Itoa(i)
		targets[i] = parseTarget(b, map[string]string{"stream": stream, "consumerGroup": "workers", "pendingEntriesCount": "5"})
		pipe.XGroupCreateMkStream(ctx, stream, "workers", "$")
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"n", i}})
		pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "w", Streams: []string{stream, ">"}, Count: 1, Block: -1})
		if (i+1)%1000 == 0 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	reader := openReader(b, srv.Addr())
	base := sampleMem(b)
	var v *liveness.View
	for b.Loop() {
		v = refreshCycle(b, reader, targets)
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "cycle-s")
	b.ReportMetric(float64(scaleTargets*b.N)/b.Elapsed().Seconds(), "targets/s")
	for _, l := range v.Latest() {
		if l.Err != nil || l.Snapshot == nil || l.Snapshot.LivePending != 1 {
			b.Fatalf("%s: snapshot %v, err %v; want one live pending entry", l.Target, l.Snapshot, l.Err)
		}
	}
	reportMem(b, base, "")
	runtime.KeepAlive(v)
}

// refreshCycle registers targets in a new view and reads each once
// through it, as polls due together do: from 64 callers, the reads of the
// connection batched.
func refreshCycle(b *testing.B, reader *redisx.Reader, targets []liveness.Target) *liveness.View {
	v := liveness.NewView(reader.Fetch, liveness.ViewOptions{
		Freshness: time.Hour, FetchTimeout: 30 * time.Second, FetchBatch: reader.FetchBatch,
		Expiry: time.Hour, MaxTargets: len(targets),
	})
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(targets)); i = next.Add(1) - 1 {
				if _, err := v.Refresh(context.Background(), targets[i]); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d reads failed", n, len(targets))
	}
	return v
}
