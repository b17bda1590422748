package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

const (
	hygieneTargets = 10_000
	// hygieneGhostEvery: one group in a hundred has a ghost holding an entry.
	hygieneGhostEvery = 100
	hygieneScan       = 10 * time.Second // hygiene.scanInterval's default
	hygieneSettle     = 12 * time.Second // longer than one scan interval
	// hygieneOffSettle lets the polls that registered the targets end.
	hygieneOffSettle = 5 * time.Second
	hygieneWindow    = 12 * time.Second
)

// hygieneRun is what one configuration cost at steady state.
type hygieneRun struct {
	heapMB, rssMB    float64
	goroutines       int
	opsPerSec        float64
	pollP50, pollP99 time.Duration
}

// BenchmarkHygieneTargets: 10k groups, 1% of them with a ghost holding an
// entry, each polled once, which registers it. On one Redis, one after the
// other, each in a pelwarden serve process of its own: the targets with
// hygiene off (nobody polls them again, so nothing reads them), then the
// same targets enrolled for hygiene (dry run, so the ghosts stay and every
// interval scans them again; each group's turn reads it once a scan
// interval). For each: the pelwarden process's heap in use and RSS, its
// goroutines, Redis commands per second (INFO stats deltas) and a poll's
// p50/p99 through KEDA's client on one more group. Goals: RSS <= 128 MB,
// at most a read's 3 commands per group and scan interval, poll p99
// within 1.5x of no hygiene.
func BenchmarkHygieneTargets(b *testing.B) {
	b.Run(fmt.Sprintf("targets=%d", hygieneTargets), benchHygieneTargets)
}

func benchHygieneTargets(b *testing.B) {
	bin := proctest.Build(b, "../cmd/pelwarden")[0]
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	hygieneGroups(b, rdb)
	var off, on hygieneRun
	for b.Loop() {
		off, on = measureHygiene(b, bin, srv.Addr(), rdb)
	}
	for _, r := range []struct {
		sfx string
		run hygieneRun
	}{{"-hygiene", on}, {"-off", off}} {
		b.ReportMetric(r.run.heapMB, "heap-MB"+r.sfx)
		b.ReportMetric(r.run.rssMB, "rss-MB"+r.sfx)
		b.ReportMetric(float64(r.run.goroutines), "goroutines"+r.sfx)
		b.ReportMetric(r.run.opsPerSec, "redis-ops/s"+r.sfx)
		b.ReportMetric(float64(r.run.pollP50.Microseconds()), "poll-p50-µs"+r.sfx)
		b.ReportMetric(float64(r.run.pollP99.Microseconds()), "poll-p99-µs"+r.sfx)
	}
	b.ReportMetric(on.opsPerSec*hygieneScan.Seconds()/hygieneTargets, "cmds/group/scan-hygiene")
	b.ReportMetric(float64(on.pollP99)/float64(off.pollP99), "p99-ratio")
}

// hygieneGroups creates the groups: each has one undelivered entry; every
// hygieneGhostEvery-th has a consumer holding one more, idle long enough
// by the time it is measured to be a ghost.
func hygieneGroups(b *testing.B, rdb *redis.Client) {
	b.Helper()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range hygieneTargets {
		stream := "h:" + strconv.Itoa(i)
		pipe.XGroupCreateMkStream(ctx, stream, "workers", "$")
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"n", i}})
		if i%hygieneGhostEvery == 0 {
			pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "ghost", Streams: []string{stream, ">"}, Count: 1, Block: -1})
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"n", i}})
		}
		if (i+1)%1000 == 0 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := rdb.XGroupCreateMkStream(ctx, "jobs", "workers", "$").Err(); err != nil {
		b.Fatal(err)
	}
}

// metricValue reads one unlabelled series from a /metrics page.
func metricValue(b *testing.B, url, name string) float64 {
	b.Helper()
	resp, err := http.Get(url) //nolint:noctx // a benchmark's scrape of its own server
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	b.Fatalf("%s not on %s", name, url)
	return 0
}

func hygieneMetadata(i int, reclaim string) map[string]string {
	return map[string]string{"stream": "h:" + strconv.Itoa(i), "consumerGroup": "workers", "lagCount": "5",
		"reclaim": reclaim, "dryRun": "true", "livenessProfile": "idle"}
}

// measureHygiene runs pelwarden serve, as deployed, in its own process on
// its defaults (limits raised for 10k targets), twice, one after the
// other, on the same Redis: first with every group polled once with
// reclaim off, which registers them all, and that steady state is measured;
// then, in a fresh process, with every group polled asking for reclaim,
// which enrolls the same targets for hygiene. Each holds what a deployment
// of 10k ScaledObjects would: one trigger per group. Memory and goroutines
// are the pelwarden process's own (its /proc status and /metrics).
func measureHygiene(b *testing.B, bin, addr string, rdb *redis.Client) (off, on hygieneRun) {
	b.Helper()
	return runHygiene(b, bin, addr, rdb, "off"), runHygiene(b, bin, addr, rdb, "requeue")
}

// hygieneConfig is pelwarden's configuration for the row: its defaults,
// limits raised for the targets, and a trigger policy that enrolls.
const hygieneConfig = `grpc: {addr: %q}
http: {addr: %q, pprof: true}
redis:
  - {name: default, addr: %q, idleBefore72: ghost}
scaler: {maxTargets: %[5]d}
hygiene: {maxTargets: %[4]d}
triggers:
  reclaim: requeue
  warmUp: 1ms
  floors: {entryStale: 1ms, ghostIdle: 1ms, heartbeatMaxAge: 1ms, podDeletionGrace: 1ms, maxDeliveries: 1}
  quotas: {scalerTargets: %[4]d, hygieneTargets: %[4]d}
  profiles:
    idle: {ghostIdleSeconds: "1"}
  rules:
    - {namespaces: ["*"], redis: ["*"], hygieneStreams: ["*"], profiles: ["*"]}
`

// runHygiene starts a pelwarden process, polls every group once with
// reclaim set so, lets it settle, measures its steady state and stops it.
func runHygiene(b *testing.B, bin, addr string, rdb *redis.Client, reclaim string) hygieneRun {
	b.Helper()
	grpcAddr, httpAddr := freeAddr(b), freeAddr(b)
	cfg := filepath.Join(b.TempDir(), "pelwarden.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, hygieneConfig, grpcAddr, httpAddr, addr, 2*hygieneTargets, 4*hygieneTargets), 0o600); err != nil {
		b.Fatal(err)
	}
	proc := proctest.Start(b, "pelwarden-"+reclaim, bin, "serve", "--config", cfg)
	defer proc.Kill()
	keda := externalscaler.NewExternalScalerClient(dial(b, grpcAddr))
	waitFor(b, 10*time.Second, func() bool {
		_, err := keda.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{ScaledObjectRef: &externalscaler.ScaledObjectRef{Name: "legit", Namespace: "bench", ScalerMetadata: md}, MetricName: "m"})
		return err == nil
	})
	enrollAll(b, keda, reclaim)
	settle, want := hygieneOffSettle, 0.0
	if reclaim != "off" {
		settle, want = hygieneSettle, hygieneTargets
	}
	time.Sleep(settle)
	run := steadyState(b, keda, rdb, proc.Pid(), "http://"+httpAddr+"/metrics")
	saveHeapProfile(b, "http://"+httpAddr, reclaim)
	if n := metricValue(b, "http://"+httpAddr+"/metrics", "pelwarden_hygiene_targets"); n != want {
		b.Fatalf("pelwarden_hygiene_targets is %v with reclaim %s; want %v", n, reclaim, want)
	}
	checkGhostsSeen(b, keda)
	return run
}

// steadyState polls one more group for hygieneWindow and measures Redis's
// commands meanwhile, then the pelwarden process's goroutines and memory.
func steadyState(b *testing.B, keda externalscaler.ExternalScalerClient, rdb *redis.Client, pid int, metrics string) hygieneRun {
	b.Helper()
	var run hygieneRun
	before := commandsProcessed(b, rdb)
	t0 := time.Now()
	lat := pollFor(b, keda, hygieneWindow)
	run.opsPerSec = float64(commandsProcessed(b, rdb)-before) / time.Since(t0).Seconds()
	run.pollP50, run.pollP99 = lat[len(lat)/2], lat[len(lat)*99/100]
	run.goroutines = int(metricValue(b, metrics, "go_goroutines"))
	run.heapMB = metricValue(b, metrics, "go_memstats_heap_inuse_bytes") / (1 << 20)
	run.rssMB = float64(procRSS(b, fmt.Sprintf("/proc/%d/status", pid))) / (1 << 20)
	return run
}

// enrollAll polls every group once, from 8 callers, as KEDA does when it
// starts; with reclaim on, the poll enrolls the group for hygiene.
func enrollAll(b *testing.B, keda externalscaler.ExternalScalerClient, reclaim string) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < hygieneTargets; i += 8 {
				ref := &externalscaler.ScaledObjectRef{Name: "so-" + strconv.Itoa(i), Namespace: "bench", ScalerMetadata: hygieneMetadata(i, reclaim)}
				if _, err := keda.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "m"}); err != nil {
					errs <- fmt.Errorf("group %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// pollFor polls one more group (GetMetrics then IsActive) for d and
// returns the sorted latencies.
func pollFor(b *testing.B, keda externalscaler.ExternalScalerClient, d time.Duration) latencies {
	b.Helper()
	ref := &externalscaler.ScaledObjectRef{Name: "legit", Namespace: "bench", ScalerMetadata: md}
	req := &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "m"}
	ctx := context.Background()
	var lat latencies
	for end := time.Now().Add(d); time.Now().Before(end); {
		t0 := time.Now()
		if _, err := keda.GetMetrics(ctx, req); err != nil {
			b.Fatal(err)
		}
		if _, err := keda.IsActive(ctx, ref); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		time.Sleep(time.Millisecond) // a steady trickle, as KEDA polls, not a load test
	}
	slices.Sort(lat)
	return lat
}

// checkGhostsSeen fails the benchmark unless the ghost groups are judged
// so: the hygiene being measured had work to find.
func checkGhostsSeen(b *testing.B, keda externalscaler.ExternalScalerClient) {
	b.Helper()
	ref := &externalscaler.ScaledObjectRef{Name: "so-0", Namespace: "bench", ScalerMetadata: hygieneMetadata(0, "requeue")}
	ref.ScalerMetadata["pendingEntriesCount"] = "5"
	delete(ref.ScalerMetadata, "lagCount")
	r, err := keda.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "m"})
	if err != nil || r.GetMetricValues()[0].GetMetricValue() != 0 {
		b.Fatalf("group 0: %v, %v; want its one pending entry left out as a ghost's", r, err)
	}
}

// commandsProcessed is Redis's total_commands_processed.
func commandsProcessed(b *testing.B, rdb *redis.Client) int64 {
	b.Helper()
	info, err := rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no total_commands_processed in INFO stats")
	return 0
}

// saveHeapProfile writes the process's heap profile to
// $PELWARDEN_BENCH_PROFILES/heap-<reclaim>.pb.gz when that directory is
// set, for `go tool pprof -sample_index=inuse_space`.
func saveHeapProfile(b *testing.B, base, reclaim string) {
	b.Helper()
	dir := os.Getenv("PELWARDEN_BENCH_PROFILES")
	if dir == "" {
		return
	}
	resp, err := http.Get(base + "/debug/pprof/heap") //nolint:noctx // a benchmark's read of its own server
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("heap profile: %v, %s", err, resp.Status)
	}
	if err := os.WriteFile(filepath.Join(dir, "heap-"+reclaim+".pb.gz"), body, 0o600); err != nil {
		b.Fatal(err)
	}
}
