package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// backend is a Redis in one connection mode: a client to set data up with,
// how pelwarden's default connection reaches it, and how its master is
// failed over.
type backend struct {
	rdb     redis.UniversalClient
	connect func(*config.Redis)
	// failover replaces the master holding key, once the replicas have
	// every write, and returns when the new master serves.
	failover func(t *testing.T, key string)
}

func startStandalone(t *testing.T) *backend {
	t.Helper()
	srv := redistest.Start(t)
	return &backend{rdb: srv.Client(t), connect: func(r *config.Redis) { r.Addr = srv.Addr() }}
}

// startSentinel is a master, a replica and 3 sentinels; failover is
// SENTINEL FAILOVER.
func startSentinel(t *testing.T) *backend {
	t.Helper()
	s := redistest.StartSentinel(t, redistest.SentinelOptions{})
	return &backend{
		rdb: s.Client(t),
		connect: func(r *config.Redis) {
			r.Mode, r.Addr = config.RedisSentinel, ""
			r.Sentinel = config.RedisSentinelConfig{MasterName: s.MasterName(), Addrs: s.SentinelAddrs()}
		},
		failover: func(t *testing.T, _ string) {
			t.Helper()
			redistest.WaitReplicated(t, s.Master(t).Client(t))
			s.Failover(t)
		},
	}
}

// startCluster is 3 masters with a replica each; failover kills the master
// of the key's slot, as a crash would, and waits for its replica to win
// the vote.
func startCluster(t *testing.T) *backend {
	t.Helper()
	c := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
	return &backend{
		rdb: c.Client(t),
		connect: func(r *config.Redis) {
			r.Mode, r.Addr = config.RedisCluster, ""
			r.Cluster = config.RedisClusterConfig{Addrs: c.Addrs()}
		},
		failover: func(t *testing.T, key string) {
			t.Helper()
			m := c.MasterForKey(t, key)
			redistest.WaitReplicated(t, m.Client(t))
			require.NotNil(t, c.KillMaster(t, m), "the killed master's replica takes over")
		},
	}
}

// metricPart is how a metric name spells one part of the target.
func metricPart(s string) string {
	return strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, strings.ToLower(s))
}

// TestScalerServesSentinelAndClusterConnections runs the scaler's
// end-to-end scenarios through KEDA's client against a sentinel-watched
// master and against a 3-master cluster: one Redis per mode, shared by the
// scenarios on keys of their own, then a failover of the master mid-test.
func TestScalerServesSentinelAndClusterConnections(t *testing.T) {
	t.Parallel()
	for mode, start := range map[config.RedisMode]func(*testing.T) *backend{
		config.RedisSentinel: startSentinel,
		config.RedisCluster:  startCluster,
	} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := start(t)
			t.Run("scenarios", func(t *testing.T) {
				t.Run("ghost-held entries are left out of pending, lag and backlog", func(t *testing.T) {
					t.Parallel()
					requireGhostsLeftOut(t, b, "{ghosts}:")
				})
				t.Run("StreamIsActive pushes on XADD to streams of any slot", func(t *testing.T) {
					t.Parallel()
					p := startPelwardenOn(t, b.connect, nil)
					requireWakerPushes(t, p, b.rdb, "")
				})
			})
			t.Run("a failover mid-test is Unavailable or the right number, never a wrong 0", func(t *testing.T) {
				requireFailoverNeverWrongZero(t, b)
			})
		})
	}
}

// requireFailoverNeverWrongZero polls GetMetrics while the master of the
// stream fails over: every answer is Unavailable or the right count, the
// right count comes back, and a push still wakes StreamIsActive on the new
// master.
func requireFailoverNeverWrongZero(t *testing.T, b *backend) {
	t.Helper()
	ctx := context.Background()
	const stream = "{failover}:jobs"
	redistest.CreateGroup(t, b.rdb, stream, "workers")
	redistest.AddJobs(t, b.rdb, stream, "", 6)
	redistest.Read(t, b.rdb, stream, "workers", "w-0", 4)
	p := startPelwardenOn(t, b.connect, nil)
	md := map[string]string{"stream": stream, "consumerGroup": "workers"}
	v, err := metric(ctx, t, p.client, md)
	require.NoError(t, err)
	require.Equal(t, int64(4), v, "pending before the failover")

	var mu sync.Mutex
	answers := map[string]int{}
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			// Not metric: its require calls belong to the test's goroutine.
			res, err := p.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(md), MetricName: "s0-pelwarden"})
			mu.Lock()
			switch {
			case err != nil:
				answers[status.Code(err).String()]++
			case len(res.GetMetricValues()) == 1 && res.GetMetricValues()[0].GetMetricValue() == 4:
				answers["right"]++
			default:
				answers["wrong"]++
				t.Errorf("GetMetrics answered %v during the failover, want 4 or an error", res.GetMetricValues())
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	b.failover(t, stream)
	eventually(t, 15*time.Second, func() error {
		got, err := metric(ctx, t, p.client, md)
		if err == nil && got != 4 {
			t.Fatalf("after the failover got %d, want 4", got)
		}
		return err
	})
	close(stop)
	<-polled
	t.Logf("GetMetrics answers during the failover: %v", answers)
	for code := range answers {
		require.Contains(t, []string{"right", codes.Unavailable.String()}, code, "every answer is the right count or Unavailable")
	}
	requireWakerPushes(t, p, b.rdb, "{failover}:")
}
