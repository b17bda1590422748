package bench

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pelwarden/pelwarden/internal/kedatest"
	"github.com/pelwarden/pelwarden/internal/proctest"
)

// sharedConnWindow is each of the quiet and the attacked windows of
// BenchmarkSharedConnection.
const sharedConnWindow = 30 * time.Second

// BenchmarkSharedConnection: KEDA's operator sends every ScaledObject's
// calls over one connection. pelwarden serve runs in a process of its own
// on its defaults, with Redis, on the first CPU; this process is KEDA, on
// the second, with one connection as KEDA's pool dials it. A served
// trigger polls every 100 ms (GetMetricSpec, GetMetrics, IsActive), first
// alone, then beside one tenant's 1000 broken ScaledObjects
// (pendingEntriesCount: notanumber) and 20 with 900 KB of metadata, each
// polled every second on the same connection; the served trigger is of
// another namespace, or of the same one. Reported: the served poll's p50,
// p99 and max both ways, pelwarden's share of a CPU both ways, and the
// broken polls refused a second, and the share of its own CPU the KEDA
// side (this process: the served poll and the broken ones) used. Goal:
// p99 within 2x the quiet one, no poll over a second.
func BenchmarkSharedConnection(b *testing.B) {
	bin := proctest.Build(b, "../cmd/pelwarden")[0]
	for _, ns := range []string{"another-namespace", "same-namespace"} {
		b.Run(ns, func(b *testing.B) { benchSharedConnection(b, bin, ns == "same-namespace") })
	}
}

func benchSharedConnection(b *testing.B, bin string, sameNamespace bool) {
	cpus := pinFlood(b)
	var quiet, attacked latencies
	var quietCPU, attackedCPU, kedaCPU, refusedPerSec float64
	for b.Loop() {
		r := startFlood(b, bin, floodClass{name: "shared-connection"}, nil, cpus)
		if cpus.attacker >= 0 {
			restore, err := pinProcess(cpus.attacker) // KEDA's side: pelwarden and Redis keep the first CPU
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = restore() })
		}
		conn, err := kedatest.Dial(r.grpc, insecure.NewCredentials())
		if err != nil {
			b.Fatal(err)
		}
		keda := externalscaler.NewExternalScalerClient(conn)
		ns := "tenant-b"
		if sameNamespace {
			ns = "tenant-a"
		}
		served := &externalscaler.ScaledObjectRef{Namespace: ns, Name: "served", ScalerMetadata: md}
		cpu0, t0 := procCPU(b, r.pid), time.Now()
		quiet = kedaPolls(b, keda, served)
		quietCPU = (procCPU(b, r.pid) - cpu0).Seconds() / time.Since(t0).Seconds()

		tenant := kedatest.StartTenant(keda, "tenant-a", 1000, 20, time.Second)
		time.Sleep(3 * time.Second) // every broken ScaledObject has polled once
		refused0, cpu0, kedaCPU0, t0 := tenant.Refused(), procCPU(b, r.pid), procCPU(b, os.Getpid()), time.Now()
		attacked = kedaPolls(b, keda, served)
		elapsed := time.Since(t0).Seconds()
		attackedCPU = (procCPU(b, r.pid) - cpu0).Seconds() / elapsed
		kedaCPU = (procCPU(b, os.Getpid()) - kedaCPU0).Seconds() / elapsed
		refusedPerSec = float64(tenant.Refused()-refused0) / elapsed
		tenant.Stop()
		_ = conn.Close()
	}
	qp50, qp99 := quiet.percentiles()
	ap50, ap99 := attacked.percentiles()
	b.ReportMetric(qp50, "poll-p50-µs-quiet")
	b.ReportMetric(qp99, "poll-p99-µs-quiet")
	b.ReportMetric(float64(slices.Max(quiet).Microseconds()), "poll-max-µs-quiet")
	b.ReportMetric(ap50, "poll-p50-µs-attacked")
	b.ReportMetric(ap99, "poll-p99-µs-attacked")
	b.ReportMetric(float64(slices.Max(attacked).Microseconds()), "poll-max-µs-attacked")
	b.ReportMetric(ap99/qp99, "p99-ratio")
	b.ReportMetric(quietCPU, "pelwarden-cpu-quiet")
	b.ReportMetric(attackedCPU, "pelwarden-cpu-attacked")
	b.ReportMetric(refusedPerSec, "refused/s")
	b.ReportMetric(kedaCPU, "keda-cpu-attacked")
	if slices.Max(attacked) > time.Second {
		b.Errorf("a served poll took %v beside the broken ScaledObjects", slices.Max(attacked))
	}
}

// kedaPolls polls ref every 100 ms for sharedConnWindow as KEDA's scale
// loop does, and returns each poll's duration; a failed poll fails b.
func kedaPolls(b *testing.B, c externalscaler.ExternalScalerClient, ref *externalscaler.ScaledObjectRef) latencies {
	b.Helper()
	var out latencies
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(sharedConnWindow); time.Now().Before(end); <-tick.C {
		start := time.Now()
		if _, _, err := kedatest.Poll(context.Background(), c, ref); err != nil {
			b.Fatalf("a served poll failed: %v", err)
		}
		out = append(out, time.Since(start))
	}
	return out
}
