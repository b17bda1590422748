package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// The groups of the cost rows: three live workers holding three entries
// each, beating every costBeat (the benchmark writes their heartbeats, on
// every server alike), and a ghost holding ten, its heartbeat two hours
// old. pelwarden reports the live workers' 9; KEDA's built-in scaler,
// with one XPENDING summary, all 19. The workers of every group share
// their names, so their heartbeats are four keys in all.
const (
	costLive, costLiveHolds, costGhostHolds = 3, 3, 10
	costLivePending                         = costLive * costLiveHolds
	costAllPending                          = costLivePending + costGhostHolds
	costBeat                                = 2 * time.Second
)

// BenchmarkCost is what pelwarden costs Redis beside KEDA's built-in
// redis-streams scaler for the same ScaledObjects, in one run. Each size
// has three Redis servers with the same groups: one read by pelwarden, as
// deployed (its own process, its defaults), one polled the way KEDA's
// built-in scaler polls (one XPENDING summary per poll and target), and
// one left idle, the baseline subtracted from both. Every target is
// polled once an interval, the polls spread evenly over it: GetMetrics
// then IsActive through KEDA's generated client to pelwarden, and the
// same to a no-op external scaler in its own process (bench/noopscaler),
// the floor of a poll's latency. After a warm-up of two intervals
// (pelwarden learns each target's rhythm from its first two polls), it
// measures for PELWARDEN_BENCH_COST_WINDOWS intervals (default 2): each
// Redis's CPU (INFO cpu), the commands it ran (INFO commandstats) per
// poll, pelwarden's own CPU (/proc), the age of the read each answer came
// from (pelwarden_scaler_answer_age_seconds), and the polls' latencies.
//
// PELWARDEN_BENCH_COST_TARGETS and PELWARDEN_BENCH_COST_INTERVALS choose
// the sizes (default 1000,10000 and 30s,5s); PELWARDEN_BENCH_PELWARDEN
// runs another pelwarden binary, an earlier build, in the same rows;
// PELWARDEN_BENCH_COST_ENV adds variables to pelwarden's environment
// (GOGC=off: the rows without its garbage collector).
func BenchmarkCost(b *testing.B) {
	bins := proctest.Build(b, "../cmd/pelwarden", "./noopscaler")
	if bin := os.Getenv("PELWARDEN_BENCH_PELWARDEN"); bin != "" {
		bins[0] = bin
	}
	targets, intervals := costSizes(b)
	for _, n := range targets {
		for _, iv := range intervals {
			b.Run(fmt.Sprintf("targets=%d/interval=%s", n, iv), func(b *testing.B) {
				var m costRun
				for b.Loop() {
					m = measureCost(b, bins, n, iv)
				}
				m.report(b, n)
			})
		}
	}
}

// costSizes are the target counts and polling intervals to run.
func costSizes(b *testing.B) ([]int, []time.Duration) {
	b.Helper()
	var targets []int
	for _, s := range strings.Split(envOr("PELWARDEN_BENCH_COST_TARGETS", "1000,10000"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			b.Fatalf("PELWARDEN_BENCH_COST_TARGETS: %q is not a count of targets", s)
		}
		targets = append(targets, n)
	}
	var intervals []time.Duration
	for _, s := range strings.Split(envOr("PELWARDEN_BENCH_COST_INTERVALS", "30s,5s"), ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d <= 0 {
			b.Fatalf("PELWARDEN_BENCH_COST_INTERVALS: %q is not a polling interval", s)
		}
		intervals = append(intervals, d)
	}
	return targets, intervals
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// costWindows is how many polling intervals the rows measure.
func costWindows(b *testing.B) int {
	b.Helper()
	n, err := strconv.Atoi(envOr("PELWARDEN_BENCH_COST_WINDOWS", "2"))
	if err != nil || n < 1 {
		b.Fatalf("PELWARDEN_BENCH_COST_WINDOWS: %v", err)
	}
	return n
}

// costRun is what one size measured.
type costRun struct {
	seconds float64
	// cpu is each Redis's CPU in the window, in seconds: pelwarden's,
	// the built-in's and the idle one's; pelCPU is pelwarden's own, and
	// noopCPU the no-op scaler's, which serves the same polls.
	cpu             [3]float64
	pelCPU, noopCPU float64
	// commands each non-idle Redis ran, and the polls answered.
	commands, polls [2]int64
	// fresh are the answers' ages; reads pelwarden's reads by what asked
	// for them, batches its round trips (missing from builds without).
	fresh   ageQuantiles
	reads   map[string]float64
	batches float64
	// lat are the polls' latencies: pelwarden's and the no-op's; allocs
	// the bytes each process allocated (the Go runtime's counter), and
	// gcs its garbage collections, which the latencies' tails follow.
	lat         [2]latencies
	allocs, gcs [2]float64
}

const (
	sidePelwarden = iota
	sideBuiltin
	sideIdle
)

func measureCost(b *testing.B, bins []string, n int, interval time.Duration) costRun {
	b.Helper()
	var srvs [3]*redistest.Server
	var rdbs [3]*redis.Client
	for i := range srvs {
		srvs[i] = redistest.Start(b)
		rdbs[i] = srvs[i].Client(b)
		costGroups(b, rdbs[i], n)
	}
	beats, stopBeats := context.WithCancel(context.Background())
	var beating sync.WaitGroup
	beating.Go(func() { costBeats(beats, rdbs) })
	defer func() { stopBeats(); beating.Wait() }()
	pel, pelMetrics := startCostPelwarden(b, bins[0], srvs[sidePelwarden].Addr(), n)
	g, h := freeAddr(b), freeAddr(b)
	noopProc := proctest.Start(b, "noopscaler", bins[1], "-grpc", g, "-http", h)
	noop := externalscaler.NewExternalScalerClient(dial(b, g))
	waitFor(b, 10*time.Second, func() bool { return kedaPoll(context.Background(), noop, 0, 10) == nil })
	keda := externalscaler.NewExternalScalerClient(dial(b, pel.grpc))
	builtin := redis.NewClient(&redis.Options{Addr: srvs[sideBuiltin].Addr(), PoolSize: 64})
	b.Cleanup(func() { _ = builtin.Close() })

	pollers := []*costPoller{
		{n: n, interval: interval, poll: func(ctx context.Context, i int) error { return kedaPoll(ctx, keda, i, costLivePending) }},
		{n: n, interval: interval, poll: func(ctx context.Context, i int) error { return builtinPoll(ctx, builtin, i) }},
		{n: n, interval: interval, poll: func(ctx context.Context, i int) error { return kedaPoll(ctx, noop, i, 10) }},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := time.Now()
	for _, p := range pollers {
		wg.Go(func() { p.run(ctx, start) })
	}
	defer func() { cancel(); wg.Wait() }()
	// Each target has polled twice by then: its next poll is expected.
	time.Sleep(2*interval + time.Second)

	var run costRun
	noopMetrics := "http://" + h + "/metrics"
	m0, n0 := scrapeText(b, pelMetrics), scrapeText(b, noopMetrics)
	cpu0, cmd0, pel0, noop0 := redisCPUs(b, rdbs), costCommands(b, rdbs), procCPU(b, pel.pid), procCPU(b, noopProc.Pid())
	for _, p := range pollers {
		p.record(true)
	}
	t0 := time.Now()
	window := time.Duration(costWindows(b)) * interval
	if dir := os.Getenv("PELWARDEN_BENCH_COST_PROFILE"); dir != "" {
		saveProfiles(b, strings.TrimSuffix(pelMetrics, "/metrics"), window, dir, fmt.Sprintf("%d-%s", n, interval))
	}
	time.Sleep(window - time.Since(t0))
	for _, p := range pollers {
		p.record(false)
	}
	run.seconds = time.Since(t0).Seconds()
	cpu1, cmd1, pel1, noop1 := redisCPUs(b, rdbs), costCommands(b, rdbs), procCPU(b, pel.pid), procCPU(b, noopProc.Pid())
	m1 := scrapeText(b, pelMetrics)
	n1 := scrapeText(b, noopMetrics)
	run.allocs = [2]float64{counterDelta(m0, m1, "go_memstats_alloc_bytes_total"), counterDelta(n0, n1, "go_memstats_alloc_bytes_total")}
	run.gcs = [2]float64{counterDelta(m0, m1, "go_gc_duration_seconds_count"), counterDelta(n0, n1, "go_gc_duration_seconds_count")}
	for i := range run.cpu {
		run.cpu[i] = cpu1[i] - cpu0[i]
	}
	run.pelCPU, run.noopCPU = (pel1 - pel0).Seconds(), (noop1 - noop0).Seconds()
	for i := range run.commands {
		run.commands[i] = cmd1[i] - cmd0[i]
		run.polls[i] = pollers[i].polls.Load()
	}
	run.lat = [2]latencies{pollers[0].latencies(), pollers[2].latencies()}
	if run.fresh = answerAges(m0, m1); !run.fresh.ok {
		// An earlier build: sampled over more than its 2 s refresh, after
		// the window, so the scrapes cost its CPU nothing measured.
		run.fresh = sampledAges(b, pelMetrics, 10, 230*time.Millisecond)
	}
	run.reads, run.batches = readsByCause(m0, m1)
	for _, p := range pollers {
		if err := p.failure(); err != nil {
			b.Fatal(err)
		}
	}
	return run
}

// report gives the run's figures: CPU in percent of a core, net of the
// idle Redis for the other two.
func (r costRun) report(b *testing.B, n int) {
	pct := func(sec float64) float64 { return 100 * sec / r.seconds }
	idle := pct(r.cpu[sideIdle])
	pelNet, builtinNet := pct(r.cpu[sidePelwarden])-idle, pct(r.cpu[sideBuiltin])-idle
	b.ReportMetric(pelNet, "redis-cpu-%-pelwarden")
	b.ReportMetric(builtinNet, "redis-cpu-%-builtin")
	b.ReportMetric(idle, "redis-cpu-%-idle")
	b.ReportMetric(pelNet/builtinNet, "redis-cpu-ratio")
	b.ReportMetric(pct(r.pelCPU), "pelwarden-cpu-%")
	b.ReportMetric(pct(r.pelCPU)/(float64(n)/1000), "pelwarden-cpu-%-per-1k")
	b.ReportMetric(pct(r.noopCPU), "noop-cpu-%")
	b.ReportMetric(float64(r.commands[sidePelwarden])/float64(r.polls[sidePelwarden]), "cmds/poll-pelwarden")
	b.ReportMetric(float64(r.commands[sideBuiltin])/float64(r.polls[sideBuiltin]), "cmds/poll-builtin")
	b.ReportMetric(float64(r.polls[sidePelwarden]), "polls")
	if r.fresh.ok {
		b.ReportMetric(r.fresh.p50*1000, "fresh-p50-ms")
		b.ReportMetric(r.fresh.p99*1000, "fresh-p99-ms")
		b.ReportMetric(r.fresh.max*1000, "fresh-max-ms")
	}
	if len(r.reads) > 0 {
		total := 0.0
		for _, v := range r.reads {
			total += v
		}
		b.ReportMetric(total/float64(r.polls[sidePelwarden]), "reads/poll")
		b.ReportMetric(r.reads["poll"]/float64(r.polls[sidePelwarden]), "waited/poll")
		if r.batches > 0 {
			b.ReportMetric(total/r.batches, "reads/round-trip")
		}
	}
	for i, side := range []string{"pelwarden", "noop"} {
		p50, p99 := r.lat[i].percentiles()
		b.ReportMetric(p50, "poll-p50-µs-"+side)
		b.ReportMetric(p99, "poll-p99-µs-"+side)
		b.ReportMetric(r.allocs[i]/1024/float64(r.polls[sidePelwarden]), "alloc-KiB/poll-"+side)
		b.ReportMetric(r.gcs[i]/r.seconds, "gc/s-"+side)
	}
}

// costGroups creates n groups c:0 ... c:n-1, each with the workers of the
// cost rows and their heartbeats.
func costGroups(b *testing.B, rdb *redis.Client, n int) {
	b.Helper()
	ctx := context.Background()
	if err := rdb.Set(ctx, "hb:ghost", strconv.FormatInt(time.Now().Add(-2*time.Hour).UnixMilli(), 10), 0).Err(); err != nil {
		b.Fatal(err)
	}
	pipe := rdb.Pipeline()
	for i := range n {
		stream := costStream(i)
		pipe.XGroupCreateMkStream(ctx, stream, "workers", "$")
		for j := range costAllPending {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"n", j}})
		}
		for w := range costLive {
			pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "live-" + strconv.Itoa(w), Streams: []string{stream, ">"}, Count: costLiveHolds, Block: -1})
		}
		pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "ghost", Streams: []string{stream, ">"}, Count: costGhostHolds, Block: -1})
		if (i+1)%500 == 0 || i == n-1 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func costStream(i int) string { return "c:" + strconv.Itoa(i) }

// costBeats writes the live workers' heartbeats on every server every
// costBeat until ctx ends.
func costBeats(ctx context.Context, rdbs [3]*redis.Client) {
	tick := time.NewTicker(costBeat)
	defer tick.Stop()
	for {
		now := strconv.FormatInt(time.Now().UnixMilli(), 10)
		for _, rdb := range rdbs {
			pipe := rdb.Pipeline()
			for w := range costLive {
				pipe.Set(ctx, "hb:live-"+strconv.Itoa(w), now, 0)
			}
			_, _ = pipe.Exec(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// costConfig is pelwarden's configuration for the rows: its defaults,
// the limits raised for the targets, and a liveness profile of heartbeats
// that every namespace may name.
const costConfig = `grpc: {addr: %[1]q}
http: {addr: %[2]q, pprof: %[5]t}
redis:
  - {name: default, addr: %[3]q}
scaler: {maxTargets: %[4]d}
triggers:
  quotas: {scalerTargets: %[4]d}
  profiles:
    beat: {liveness: heartbeat, heartbeatKey: "hb:{consumer}", heartbeatMaxAgeSeconds: "10"}
  rules:
    - {namespaces: ["*"], redis: ["*"], profiles: ["*"], heartbeatKeys: ["hb:*"]}
`

// costPelwarden is the pelwarden process of a run.
type costPelwarden struct {
	grpc string
	pid  int
}

func startCostPelwarden(b *testing.B, bin, redisAddr string, n int) (costPelwarden, string) {
	b.Helper()
	grpcAddr, httpAddr := freeAddr(b), freeAddr(b)
	cfg := filepath.Join(b.TempDir(), "pelwarden.yaml")
	profile := os.Getenv("PELWARDEN_BENCH_COST_PROFILE") != ""
	if err := os.WriteFile(cfg, fmt.Appendf(nil, costConfig, grpcAddr, httpAddr, redisAddr, 2*n, profile), 0o600); err != nil {
		b.Fatal(err)
	}
	proc := proctest.StartEnv(b, "pelwarden", bin, strings.Fields(os.Getenv("PELWARDEN_BENCH_COST_ENV")), "serve", "--config", cfg)
	keda := externalscaler.NewExternalScalerClient(dial(b, grpcAddr))
	// The ghost is Unknown until a max age has passed since pelwarden
	// could first read its heartbeat (it could not have seen it written).
	var err error
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if err = kedaPoll(context.Background(), keda, 0, costLivePending); err == nil {
			break
		}
	}
	if err != nil {
		b.Fatalf("pelwarden does not answer: %v\n%s", err, proc.Tail(20))
	}
	return costPelwarden{grpc: grpcAddr, pid: proc.Pid()}, "http://" + httpAddr + "/metrics"
}

// kedaRefs are the ScaledObject refs of the targets, made once: KEDA
// keeps its own.
var kedaRefs sync.Map // int -> *externalscaler.ScaledObjectRef

func kedaRef(i int) *externalscaler.ScaledObjectRef {
	if r, ok := kedaRefs.Load(i); ok {
		return r.(*externalscaler.ScaledObjectRef) //nolint:forcetypeassert // only refs are stored
	}
	ref := &externalscaler.ScaledObjectRef{Name: "so-" + strconv.Itoa(i), Namespace: "bench", ScalerMetadata: map[string]string{
		"stream": costStream(i), "consumerGroup": "workers", "pendingEntriesCount": "5", "livenessProfile": "beat"}}
	r, _ := kedaRefs.LoadOrStore(i, ref)
	return r.(*externalscaler.ScaledObjectRef) //nolint:forcetypeassert // only refs are stored
}

// kedaPoll is one poll of KEDA's scale loop: GetMetrics, then IsActive.
func kedaPoll(ctx context.Context, c externalscaler.ExternalScalerClient, i int, want int64) error {
	ref := kedaRef(i)
	res, err := c.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref, MetricName: "m"})
	if err != nil {
		return fmt.Errorf("GetMetrics of %s: %w", ref.GetName(), err)
	}
	if v := res.GetMetricValues()[0].GetMetricValue(); v != want {
		return fmt.Errorf("GetMetrics of %s is %d, want %d", ref.GetName(), v, want)
	}
	if _, err := c.IsActive(ctx, ref); err != nil {
		return fmt.Errorf("IsActive of %s: %w", ref.GetName(), err)
	}
	return nil
}

// builtinPoll is one poll of KEDA's built-in redis-streams scaler with
// pendingEntriesCount: one XPENDING summary, which counts every entry.
func builtinPoll(ctx context.Context, rdb *redis.Client, i int) error {
	p, err := rdb.XPending(ctx, costStream(i), "workers").Result()
	if err != nil {
		return err
	}
	if p.Count != costAllPending {
		return fmt.Errorf("XPENDING %s counts %d, want %d", costStream(i), p.Count, costAllPending)
	}
	return nil
}

// costPoller polls n targets every interval, target i at i*interval/n
// into each interval, as KEDA's scale loops of n ScaledObjects do.
type costPoller struct {
	n        int
	interval time.Duration
	poll     func(ctx context.Context, i int) error

	recording atomic.Bool
	polls     atomic.Int64
	mu        sync.Mutex
	lat       latencies
	err       error
}

func (p *costPoller) record(on bool) { p.recording.Store(on) }

// run polls until ctx ends, from start.
func (p *costPoller) run(ctx context.Context, start time.Time) {
	work := make(chan int, p.n)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				t0 := time.Now()
				err := p.poll(ctx, i)
				d := time.Since(t0)
				if ctx.Err() != nil {
					continue
				}
				p.done(d, err)
			}
		})
	}
	defer func() { close(work); wg.Wait() }()
	// Polls go out each millisecond, as KEDA's loops of n ScaledObjects
	// send them, each on its own timer: not in bursts that would let Redis
	// serve several in one pass of its event loop.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent := int64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			due := int64(now.Sub(start)) * int64(p.n) / int64(p.interval)
			for ; sent <= due; sent++ {
				select {
				case work <- int(sent % int64(p.n)):
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

// done counts a poll that took d while the window is open; a failed one
// is kept, to fail the benchmark.
func (p *costPoller) done(d time.Duration, err error) {
	if !p.recording.Load() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil && p.err == nil {
		p.err = err
	}
	p.polls.Add(1)
	p.lat = append(p.lat, d)
}

func (p *costPoller) latencies() latencies {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lat
}

func (p *costPoller) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
