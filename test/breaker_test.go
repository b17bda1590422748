package e2e

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/kube"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// TestEveryWorkersHeartbeatGoingStaleAtOnceTripsTheBreakerAndTakesNothing
// stops every worker's heartbeat at one moment while Redis stays up, as a
// broken heartbeat writer or a cut between the workers and Redis would:
// the disruption breaker holds them, the finding and the metric say so,
// nothing is taken and the metric never drops. When the live workers beat
// again it lets go, and the one that really died is given back a max age
// later.
func TestEveryWorkersHeartbeatGoingStaleAtOnceTripsTheBreakerAndTakesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	g := newOutageGroup(t, srv.Client(t), failFast(&redis.Options{Addr: srv.Addr()}), "jobs", []string{"w-0", "w-1", "w-2", "w-3"}, "doomed")
	p := startPelwarden(t, srv.Addr(), func(c *config.Config) {
		g.tune(c)
		c.Scaler.BreakerPercent, c.Scaler.BreakerMinConsumers = 55, 3
	})
	requireMetric(t, p, g.metadata(), g.jobs)
	pl := pollMetrics(p, g.metadata(), g.jobs)

	g.outage() // every write stops, the doomed worker's for good
	admin := pelwardenv1.NewAdminClient(p.conn)
	held := fmt.Sprintf(`pelwarden_breaker_held_consumers{group="workers",liveness=%q,redis="default",stream="jobs"} `, livenessLabel(t, g.metadata()))
	eventually(t, 3*outageMaxAge, func() error {
		res, err := admin.Findings(ctx, &pelwardenv1.FindingsRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "workers"}})
		if err != nil {
			return err
		}
		for _, f := range res.GetFindings() {
			if f.GetKind() == pelwardenv1.FindingKind_FINDING_KIND_DISRUPTION {
				require.Contains(t, f.GetDetail(), "5 of the 5 consumers Alive shortly before turned Ghost together on heartbeat")
				return nil
			}
		}
		return fmt.Errorf("no disruption finding yet: %v", res.GetFindings())
	})
	require.Contains(t, scrape(t, p.app.HTTPAddr()), held+"5")
	tripped := time.Now()
	time.Sleep(2 * outageMaxAge)
	for c, ids := range g.held {
		require.Equal(t, int64(len(ids)), pendingCount(ctx, t, srv.Client(t), c), "%s's entries are held, not taken", c)
	}
	pl.finish(t)
	pl = pollMetrics(p, g.metadata(), g.livePending())

	g.quiet.Store(0) // the live workers write again; the doomed one never does
	back := time.Now()
	g.requireRecovered(t, back)
	t.Logf("held %s after the trip; the dead worker's entries came back %s after the evidence did", back.Sub(tripped).Round(10*time.Millisecond),
		time.Since(back).Round(10*time.Millisecond))
	eventually(t, 2*outageMaxAge, func() error {
		if !strings.Contains(scrape(t, p.app.HTTPAddr()), held+"0") {
			return fmt.Errorf("want %s0 once the breaker's hold is over", held)
		}
		return nil
	})
	pl.finish(t)
}

// TestAMassKillOfPodsStillGivesEveryEntryBack deletes every worker's pod
// at once, their heartbeats stopping with them: corroborated deaths are
// not held by the breaker, and every entry comes back.
func TestAMassKillOfPodsStillGivesEveryEntryBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	g := newOutageGroup(t, rdb, failFast(&redis.Options{Addr: srv.Addr()}), "jobs", []string{"w-0", "w-1", "w-2"}, "w-3")
	pods := fake.NewClientset(workerPod("w-0"), workerPod("w-1"), workerPod("w-2"), workerPod("w-3"))
	md := cloneWith(g.metadata(), "liveness", "heartbeat,kubernetes", "podSelector", "app=worker", "podNamespace", "jobs",
		"podDeletionGraceSeconds", "0.5")
	p := startPelwarden(t, srv.Addr(), func(c *config.Config) {
		g.tune(c)
		c.Kubernetes.Enabled = true
		c.Scaler.BreakerPercent, c.Scaler.BreakerMinConsumers = 55, 3
		c.Hygiene.Targets = []map[string]string{cloneWith(md, "reclaim", "requeue", "entryStaleSeconds", "0.5")}
	}, app.WithKubernetesClient(kube.PodsFrom(pods.CoreV1().Pods)))
	waitPodsRunning(ctx, t, p)
	requireMetric(t, p, md, g.jobs)

	g.dead.Store(true)
	g.quiet.Store(math.MaxInt64)
	time.Sleep(300 * time.Millisecond) // the last heartbeats were written before the pods went
	killed := time.Now()
	for _, c := range []string{"w-0", "w-1", "w-2", "w-3"} {
		require.NoError(t, pods.CoreV1().Pods("jobs").Delete(ctx, c, metav1.DeleteOptions{}))
	}
	eventually(t, 10*time.Second, func() error {
		for _, c := range []string{"w-0", "w-1", "w-2", "w-3"} {
			if err := holdsNothing(ctx, rdb, c); err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("every entry given back %s after the pods went (podDeletionGraceSeconds 0.5)", time.Since(killed).Round(10*time.Millisecond))
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, 2*g.jobs, n, "each entry requeued once")
	got, err := metric(ctx, t, p.client, md)
	require.NoError(t, err)
	require.Zero(t, got, "nothing is pending: every worker is gone")
}
