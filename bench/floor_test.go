package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// floorConsumers is the group behind pelwarden's side of the floor rows,
// the smallest of the poll rows.
const floorConsumers = 10

// floorRoundPolls is the length of one round of the throughput comparison:
// long enough to be timed, short enough that a pair of rounds sees the
// same machine.
const floorRoundPolls = 1000

// BenchmarkPollFloor is one KEDA poll (GetMetrics then IsActive, through
// KEDA's generated client) to pelwarden and to the floor: a no-op
// ExternalScaler (bench/noopscaler) that answers constants. Both run as
// processes of their own on their defaults, polled by the same client, in
// the same run: sequential polls for the latency, 4 callers per CPU for
// the throughput. Each also reports what a served poll allocated in the
// server process, from the Go runtime's counters on its /metrics.
//
// The throughput is measured in rounds that alternate between the two
// servers (pelwarden, floor, floor, pelwarden, ...): a pair of rounds
// runs under the same load from whatever else shares the machine, so the
// ratio of each pair is the comparison, and the median of the pairs is
// reported with their spread.
func BenchmarkPollFloor(b *testing.B) {
	bins := proctest.Build(b, "../cmd/pelwarden", "./noopscaler")
	srv := redistest.Start(b)
	group(b, srv.Client(b), floorConsumers)
	servers := []struct {
		name string
		addr func() (grpcAddr, httpAddr string)
	}{
		{"pelwarden", func() (string, string) { return startPelwardenProcess(b, bins[0], srv.Addr()) }},
		{"noop-scaler", func() (string, string) {
			g, h := freeAddr(b), freeAddr(b)
			proctest.Start(b, "noopscaler", bins[1], "-grpc", g, "-http", h)
			return g, h
		}},
	}
	type target struct {
		c       externalscaler.ExternalScalerClient
		metrics string
	}
	targets := make([]target, len(servers))
	req := &externalscaler.GetMetricsRequest{ScaledObjectRef: &externalscaler.ScaledObjectRef{Name: "so", Namespace: "jobs", ScalerMetadata: md}, MetricName: "s0-pelwarden"}
	for i, s := range servers {
		g, h := s.addr()
		c := externalscaler.NewExternalScalerClient(dial(b, g))
		waitFor(b, 10*time.Second, func() bool { _, err := c.GetMetrics(context.Background(), req); return err == nil })
		targets[i] = target{c: c, metrics: "http://" + h + "/metrics"}
	}
	poll := func(c externalscaler.ExternalScalerClient) func(context.Context) error {
		return func(ctx context.Context) error {
			if _, err := c.GetMetrics(ctx, req); err != nil {
				return err
			}
			_, err := c.IsActive(ctx, req.GetScaledObjectRef())
			return err
		}
	}
	// The sequential polls alternate between the two servers, so that
	// whatever else the machine runs weighs on both alike.
	b.Run("sequential", func(b *testing.B) {
		ctx := context.Background()
		lat := make([]latencies, len(targets))
		// What a scrape of /metrics itself allocates between reading the
		// counters of one scrape and the next falls into the window: two
		// scrapes back to back measure it, and it is taken off.
		before, scrape := make([]allocs, len(targets)), make([]allocs, len(targets))
		for i, t := range targets {
			first := serverAllocs(b, t.metrics)
			before[i] = serverAllocs(b, t.metrics)
			scrape[i] = before[i].minus(first)
		}
		polls := 0
		for b.Loop() {
			for i, t := range targets {
				t0 := time.Now()
				if err := poll(t.c)(ctx); err != nil {
					b.Fatal(err)
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
			polls++
		}
		b.ReportMetric(floorConsumers, "consumers")
		for i, t := range targets {
			served := serverAllocs(b, t.metrics).minus(before[i]).minus(scrape[i])
			p50, p99 := lat[i].percentiles()
			name := servers[i].name
			b.ReportMetric(p50, name+"-p50-µs")
			b.ReportMetric(p99, name+"-p99-µs")
			b.ReportMetric(served.bytes/float64(polls), name+"-server-B/poll")
			b.ReportMetric(served.mallocs/float64(polls), name+"-server-allocs/poll")
		}
	})
	b.Run("parallel", func(b *testing.B) {
		rates := make([][]float64, len(targets))
		var ratios []float64
		for b.Loop() {
			var pair [2]float64
			order := []int{0, 1}
			if len(ratios)%2 == 1 {
				order = []int{1, 0}
			}
			for _, i := range order {
				pair[i] = roundRate(b, poll(targets[i].c))
				rates[i] = append(rates[i], pair[i])
			}
			ratios = append(ratios, pair[0]/pair[1])
		}
		for i, s := range servers {
			b.ReportMetric(median(rates[i]), s.name+"-polls/s")
		}
		b.ReportMetric(median(ratios), "ratio-median")
		b.ReportMetric(slices.Min(ratios), "ratio-min")
		b.ReportMetric(slices.Max(ratios), "ratio-max")
		b.ReportMetric(float64(len(ratios)), "pairs")
	})
}

// roundRate is the throughput of floorRoundPolls polls made by 4 callers
// per CPU, in polls per second.
func roundRate(b *testing.B, poll func(context.Context) error) float64 {
	b.Helper()
	ctx := context.Background()
	var left atomic.Int64
	left.Store(floorRoundPolls)
	callers := 4 * runtime.GOMAXPROCS(0)
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	start := time.Now()
	for range callers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := poll(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return floorRoundPolls / elapsed.Seconds()
}

// median is the middle of xs, the mean of the two middle values when
// their number is even.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// startPelwardenProcess runs pelwarden serve on its defaults, logging at
// info as deployed, and returns its gRPC and HTTP addresses.
func startPelwardenProcess(b *testing.B, bin, redisAddr string) (grpcAddr, httpAddr string) {
	b.Helper()
	grpcAddr, httpAddr = freeAddr(b), freeAddr(b)
	cfg := filepath.Join(b.TempDir(), "pelwarden.yaml")
	yml := fmt.Sprintf("grpc: {addr: %q}\nhttp: {addr: %q}\nredis:\n  - {name: default, addr: %q}\n", grpcAddr, httpAddr, redisAddr)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		b.Fatal(err)
	}
	proctest.Start(b, "pelwarden", bin, "serve", "--config", cfg)
	return grpcAddr, httpAddr
}

func dial(b *testing.B, addr string) *grpc.ClientConn {
	b.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return conn
}

// freeAddr is a loopback address with a port the kernel just had free.
func freeAddr(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// allocs are a process's cumulative heap allocations.
type allocs struct{ bytes, mallocs float64 }

func (a allocs) minus(o allocs) allocs { return allocs{a.bytes - o.bytes, a.mallocs - o.mallocs} }

// serverAllocs reads the Go runtime's allocation counters from a /metrics
// page.
func serverAllocs(b *testing.B, url string) allocs {
	b.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var a allocs
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		var dst *float64
		switch {
		case !ok:
			continue
		case name == "go_memstats_alloc_bytes_total":
			dst = &a.bytes
		case name == "go_memstats_mallocs_total":
			dst = &a.mallocs
		default:
			continue
		}
		if *dst, err = strconv.ParseFloat(val, 64); err != nil {
			b.Fatalf("%s: %s: %v", url, name, err)
		}
		found++
	}
	if found != 2 {
		b.Fatalf("%s has no go_memstats_alloc_bytes_total and go_memstats_mallocs_total", url)
	}
	return a
}
