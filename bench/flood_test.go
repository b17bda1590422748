package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"

	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// floodSmallEnv, when set, runs every flood small and short: to see the
// harness work, not to measure.
const floodSmallEnv = "PELWARDEN_BENCH_FLOOD_SMALL"

// floodProfileEnv, when set to a directory, turns pelwarden's pprof on and
// writes there a CPU profile of each class's flooded window
// (<class>.cpu.pprof) and its allocations after it (<class>.allocs.pprof),
// to find what a flood costs pelwarden.
const floodProfileEnv = "PELWARDEN_BENCH_FLOOD_PROFILE"

// floodSize is one run's scale.
type floodSize struct {
	window  time.Duration // each of the quiet and the flooded windows
	warm    time.Duration // flood before the flooded window, to fill the caps
	bytes   int           // of one oversized value (bytes class)
	pattern int           // of one ownerMatch pattern (regex class)
}

func floodScale() floodSize {
	if os.Getenv(floodSmallEnv) != "" {
		return floodSize{window: 1500 * time.Millisecond, warm: time.Second, bytes: 8 << 10, pattern: 4 << 10}
	}
	return floodSize{window: 6 * time.Second, warm: 3 * time.Second, bytes: 3 << 20, pattern: 1 << 20}
}

// floodClass is one resource an uncredentialed caller can make pelwarden
// spend, and how a flood of it is sent.
type floodClass struct {
	name string
	// callers run flood at once in the attacker's process, each until ctx
	// ends.
	callers int
	// config is YAML added to pelwarden's defaults; %s is the kubeconfig
	// path where the class needs the API server.
	config string
	// kube: the class watches pods through a real API server.
	kube bool
	// setup runs once pelwarden serves, before the quiet window.
	setup func(r *floodRig)
	flood func(ctx context.Context, s *stranger)
	// during, when set, runs in the flooded window and adds its figures.
	during func(r *floodRig)
	// perXAdd names counters of pelwarden's /metrics whose growth in the
	// flooded window is reported per producer XADD, by unit.
	perXAdd map[string]string
}

// floodRig is pelwarden serve in a process of its own, the Redis it reads,
// the legitimate ScaledObject's clients, and the attacker once it runs.
type floodRig struct {
	b     *testing.B
	size  floodSize
	rdb   *redis.Client
	keda  externalscaler.ExternalScalerClient
	admin pelwardenv1.AdminClient
	pid   int
	grpc  string
	http  string
	kube  *floodKube
	cpus  floodCPUs
	// attacker is the flood's process, in the flooded window.
	attacker *floodAttacker
	// extra are the class's own figures, by unit.
	extra map[string]float64
}

// floodRun is one window's figures.
type floodRun struct {
	poll         latencies
	cmdsPerXAdd  float64
	goroutines   float64
	callsPerSec  float64
	refusedShare float64
	perXAdd      map[string]float64 // by unit
	// pelwardenCPU and attackerCPU are the share of one CPU each process
	// used in the window.
	pelwardenCPU, attackerCPU float64
}

// BenchmarkFlood: for each resource class a stranger without credentials
// can spend (oversized bytes, expensive regexes, StreamIsActive streams,
// pod watches, claimed namespaces), pelwarden serve runs in a process of
// its own on its defaults, as the chart deploys it. A legitimate
// ScaledObject polls (GetMetrics then IsActive, KEDA's client) while a
// producer XADDs to its stream every 20 ms, first quiet, then while the
// class's flood runs. The flood comes from a process of its own (this
// test binary run again as the attacker), so that what it costs to build
// and send is not taken from pelwarden, and the CPUs are split: an
// attacker with one core of its own against pelwarden's one core.
// pelwarden, its Redis (and API server), the legitimate poll and the
// producer keep to the first CPU this process may use, the attacker to
// the second, the same in the quiet and the flooded windows; with one CPU
// nothing is pinned. Reported per class: the poll's p50/p99 both ways,
// Redis commands per XADD (INFO commandstats, the XADDs left out) both
// ways, pelwarden's peak RSS (VmHWM) and most goroutines, the share of a
// CPU pelwarden used both ways and the attacker used, and the flood's
// calls/s and the share refused. Goals: peak RSS under the chart's memory
// limit (256 MiB); the poll's p99 within 2x the quiet one. The pod-watch
// class needs etcd and kube-apiserver (PELWARDEN_KUBE_BIN); without them
// it is skipped.
func BenchmarkFlood(b *testing.B) {
	bin := proctest.Build(b, "../cmd/pelwarden")[0]
	for _, c := range floodClasses() {
		b.Run(c.name, func(b *testing.B) { benchFlood(b, bin, c) })
	}
}

func benchFlood(b *testing.B, bin string, c floodClass) {
	cpus := pinFlood(b)
	var kube *floodKube
	if c.kube {
		if kube = startFloodKube(b); kube == nil {
			b.Skip("the pod-watch flood needs a real API server: set PELWARDEN_KUBE_BIN")
		}
	}
	var quiet, flooded floodRun
	var r *floodRig
	for b.Loop() {
		r = startFlood(b, bin, c, kube, cpus)
		quiet = r.window(nil, nil)
		r.attacker = startFloodAttacker(b, c.name, r.grpc, cpus.attacker)
		time.Sleep(r.size.warm)
		cpus.check(b, "the attacker", r.attacker.proc.Pid(), cpus.attacker)
		flooded = r.window(c.during, c.perXAdd)
		r.attacker.stop()
	}
	qp50, qp99 := quiet.poll.percentiles()
	fp50, fp99 := flooded.poll.percentiles()
	b.ReportMetric(qp50, "poll-p50-µs-quiet")
	b.ReportMetric(qp99, "poll-p99-µs-quiet")
	b.ReportMetric(fp50, "poll-p50-µs-flood")
	b.ReportMetric(fp99, "poll-p99-µs-flood")
	b.ReportMetric(fp99/qp99, "p99-ratio")
	b.ReportMetric(quiet.cmdsPerXAdd, "cmds/xadd-quiet")
	b.ReportMetric(flooded.cmdsPerXAdd, "cmds/xadd-flood")
	b.ReportMetric(float64(procKB(b, fmt.Sprintf("/proc/%d/status", r.pid), "VmHWM:"))/1024, "peak-rss-MB")
	b.ReportMetric(flooded.goroutines, "goroutines")
	b.ReportMetric(flooded.callsPerSec, "flood-calls/s")
	b.ReportMetric(flooded.refusedShare, "refused-share")
	b.ReportMetric(quiet.pelwardenCPU, "pelwarden-cpu-quiet")
	b.ReportMetric(flooded.pelwardenCPU, "pelwarden-cpu-flood")
	b.ReportMetric(flooded.attackerCPU, "attacker-cpu")
	for unit, v := range flooded.perXAdd {
		b.ReportMetric(v, unit)
	}
	for unit, v := range r.extra {
		b.ReportMetric(v, unit)
	}
}

// floodConfig is pelwarden's configuration: its defaults, and the most
// open trigger policy an operator can set, so that only the caps stop a
// flood.
const floodConfig = `grpc: {addr: %q}
http: {addr: %q, pprof: %t}
redis:
  - {name: default, addr: %q}
triggers:
  reclaim: requeue
  profiles:
    idle: {}
  rules:
    - {namespaces: ["*"], redis: ["*"], hygieneStreams: ["*"], profiles: ["*"]}
`

// startFlood starts Redis with the legitimate stream and pelwarden serve,
// and runs the class's setup.
func startFlood(b *testing.B, bin string, c floodClass, kube *floodKube, cpus floodCPUs) *floodRig {
	b.Helper()
	srv := redistest.Start(b)
	r := &floodRig{b: b, size: floodScale(), rdb: srv.Client(b), kube: kube, cpus: cpus, extra: map[string]float64{}}
	group(b, r.rdb, 10)
	grpcAddr, httpAddr := freeAddr(b), freeAddr(b)
	yml := fmt.Sprintf(floodConfig, grpcAddr, httpAddr, os.Getenv(floodProfileEnv) != "", srv.Addr())
	if c.config != "" {
		kubeconfig := ""
		if kube != nil {
			kubeconfig = kube.kubeconfig
		}
		yml += strings.ReplaceAll(c.config, "%s", kubeconfig)
	}
	cfg := filepath.Join(b.TempDir(), "pelwarden.yaml")
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		b.Fatal(err)
	}
	proc := proctest.Start(b, "pelwarden-"+c.name, bin, "serve", "--config", cfg, "--log-level", "warn")
	b.Cleanup(proc.Kill)
	conn := dial(b, grpcAddr)
	r.keda, r.admin = externalscaler.NewExternalScalerClient(conn), pelwardenv1.NewAdminClient(conn)
	r.pid, r.grpc, r.http = proc.Pid(), grpcAddr, "http://"+httpAddr+"/metrics"
	cpus.check(b, "pelwarden", r.pid, cpus.pelwarden)
	waitFor(b, 10*time.Second, func() bool {
		_, err := r.keda.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{MetricName: "m",
			ScaledObjectRef: &externalscaler.ScaledObjectRef{Name: "legit", Namespace: "bench", ScalerMetadata: md}})
		return err == nil
	})
	if c.setup != nil {
		c.setup(r)
	}
	return r
}

// window polls for the run's window while a producer XADDs every 20 ms
// and, with during, while the class measures its own figures; it counts
// Redis's commands, perXAdd's counters and the attacker's calls, and
// samples pelwarden's goroutines meanwhile.
func (r *floodRig) window(during func(*floodRig), perXAdd map[string]string) floodRun {
	run := floodRun{perXAdd: map[string]float64{}}
	counters0 := r.counters(perXAdd)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var xadds atomic.Int64
	wg.Go(func() {
		for ctx.Err() == nil {
			if r.rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"n", 1}}).Err() == nil {
				xadds.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	// A scrape encodes every target's series: with the flood's thousand
	// targets it is milliseconds of the CPU the poll shares, so the
	// goroutines are sampled once a second (Prometheus scrapes the chart's
	// ServiceMonitor every 30 s), and once more as the window ends.
	wg.Go(func() {
		for ctx.Err() == nil {
			run.goroutines = max(run.goroutines, metricValue(r.b, r.http, "go_goroutines"))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
		run.goroutines = max(run.goroutines, metricValue(r.b, r.http, "go_goroutines"))
	})
	if during != nil {
		wg.Go(func() { during(r) })
	}
	if dir := os.Getenv(floodProfileEnv); dir != "" && r.attacker != nil {
		wg.Go(func() { r.profile(dir, "cpu", fmt.Sprintf("profile?seconds=%d", int(r.size.window.Seconds()))) })
		defer r.profile(dir, "allocs", "allocs")
	}
	before := redistest.CommandCalls(r.b, r.rdb)
	calls0, refused0 := r.attackerCounts()
	cpu0, attackerCPU0, t0 := procCPU(r.b, r.pid), r.attackerCPU(), time.Now()
	run.poll = pollFor(r.b, r.keda, r.size.window)
	stop()
	wg.Wait()
	elapsed := time.Since(t0).Seconds()
	run.pelwardenCPU = (procCPU(r.b, r.pid) - cpu0).Seconds() / elapsed
	run.attackerCPU = (r.attackerCPU() - attackerCPU0).Seconds() / elapsed
	by, total := redistest.CallsSince(before, redistest.CommandCalls(r.b, r.rdb))
	if n := xadds.Load(); n > 0 {
		run.cmdsPerXAdd = float64(total-by["xadd"]) / float64(n)
		if os.Getenv("FLOOD_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "DEBUG cmds by name over %d xadds: %v\n", n, by)
		}
		for unit, v := range r.counters(perXAdd) {
			run.perXAdd[unit] = (v - counters0[unit]) / float64(n)
		}
	}
	calls1, refused1 := r.attackerCounts()
	run.callsPerSec = float64(calls1-calls0) / elapsed
	if calls1 > calls0 {
		run.refusedShare = float64(refused1-refused0) / float64(calls1-calls0)
	}
	return run
}

// attackerCounts are the attacker's calls sent and refused so far; none
// before it runs.
func (r *floodRig) attackerCounts() (calls, refused int64) {
	if r.attacker == nil {
		return 0, 0
	}
	return r.attacker.counts(r.b)
}

// attackerCPU is the CPU time the attacker has used so far.
func (r *floodRig) attackerCPU() time.Duration {
	if r.attacker == nil {
		return 0
	}
	return procCPU(r.b, r.attacker.proc.Pid())
}

// counters reads pelwarden's counters named by unit; a scrape costs Redis
// nothing.
func (r *floodRig) counters(names map[string]string) map[string]float64 {
	out := make(map[string]float64, len(names))
	for unit, name := range names {
		out[unit] = metricValue(r.b, r.http, name)
	}
	return out
}

// profile saves one of pelwarden's pprof profiles as <class>.<kind>.pprof
// in dir.
func (r *floodRig) profile(dir, kind, path string) {
	url := strings.TrimSuffix(r.http, "metrics") + "debug/pprof/" + path
	res, err := http.Get(url) //nolint:noctx // a bench helper; the profile ends by itself
	if err != nil {
		r.b.Error(err)
		return
	}
	defer func() { _ = res.Body.Close() }()
	body, err := io.ReadAll(res.Body)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, strings.ReplaceAll(r.b.Name(), "/", "_")+"."+kind+".pprof"), body, 0o600)
	}
	if err != nil {
		r.b.Error(err)
	}
}
