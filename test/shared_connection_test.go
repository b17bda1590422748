//go:build !race

package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pelwarden/pelwarden/internal/kedatest"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// TestBrokenScaledObjectsOnKEDAsConnectionNeverStallAnotherTrigger: KEDA's
// operator sends every ScaledObject's calls over one connection. One
// tenant's 1000 broken ScaledObjects (pendingEntriesCount: notanumber)
// poll every second, and 20 more with 900 KB of metadata, all on that
// connection, as KEDA's scale loop polls them; a served trigger polls
// every 100 ms beside them, of another namespace or of the same one. No
// poll of the served trigger fails or takes over a second, and each is
// answered with its number. (A hold of the connection put back, the
// broken triggers' refusals hold every trigger on it for seconds.) Its
// latency beside the quiet one, and the refusals a second, are logged;
// make bench puts them side by side.
//
// Built without the race detector, which make test runs it without: its
// bound is on pelwarden as deployed, and under the detector the attack's
// two thousand calls a second take a core of instrumentation themselves.
func TestBrokenScaledObjectsOnKEDAsConnectionNeverStallAnotherTrigger(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 10)
	redistest.Read(t, rdb, "jobs", "workers", "w1", 4)
	p := runPelwardenLogging(t, testConfig(srv.Addr()), insecure.NewCredentials(), slog.LevelInfo)
	for _, legitNS := range []string{"tenant-b", "tenant-a"} {
		t.Run("served trigger in "+legitNS, func(t *testing.T) {
			conn, err := kedatest.Dial(p.app.GRPCAddr(), insecure.NewCredentials())
			require.NoError(t, err)
			t.Cleanup(func() { _ = conn.Close() })
			keda := externalscaler.NewExternalScalerClient(conn)
			served := &externalscaler.ScaledObjectRef{Namespace: legitNS, Name: "served", ScalerMetadata: map[string]string{
				"stream": "jobs", "consumerGroup": "workers", "pendingEntriesCount": "5"}}
			quiet := pollEvery(t, keda, served, 100*time.Millisecond, 4*time.Second)

			a := kedatest.StartTenant(keda, "tenant-a", 1000, 20, time.Second)
			time.Sleep(3 * time.Second) // every broken trigger has polled, and its refusal is known
			before := a.Refused()
			attacked := pollEvery(t, keda, served, 100*time.Millisecond, 8*time.Second)
			perSecond := float64(a.Refused()-before) / 8
			a.Stop()

			q, l := quiet.summary(), attacked.summary()
			t.Logf("served poll, quiet: %s; beside 1000 broken and 20 of 900 KB: %s (p99 %.1fx quiet); %.0f refused calls/s",
				q, l, l.p99.Seconds()/q.p99.Seconds(), perSecond)
			require.Greater(t, perSecond, 500.0, "the broken triggers were polled and refused")
			require.Less(t, l.max, time.Second, "no poll of the served trigger took a second")
		})
	}
}

// latencies are the durations of a served trigger's polls.
type latencies []time.Duration

type latencySummary struct{ p50, p99, max time.Duration }

func (s latencySummary) String() string {
	return fmt.Sprintf("p50 %v, p99 %v, max %v", s.p50.Round(10*time.Microsecond), s.p99.Round(10*time.Microsecond), s.max.Round(10*time.Microsecond))
}

func (l latencies) summary() latencySummary {
	s := slices.Clone(l)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return latencySummary{p50: at(0.50), p99: at(0.99), max: s[len(s)-1]}
}

// pollEvery polls ref as KEDA's scale loop does, every interval for d,
// requiring each poll to succeed with 4 (the entries w1 holds), and
// returns the polls' durations.
func pollEvery(t *testing.T, c externalscaler.ExternalScalerClient, ref *externalscaler.ScaledObjectRef, interval, d time.Duration) latencies {
	t.Helper()
	var out latencies
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		start := time.Now()
		v, _, err := kedatest.Poll(context.Background(), c, ref)
		out = append(out, time.Since(start))
		require.NoError(t, err, "poll %d of the served trigger", len(out))
		require.Equal(t, int64(4), v, "poll %d of the served trigger", len(out))
	}
	return out
}
