package e2e

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// The outage suites, with the numbers of issue 22: workers heartbeat every
// 200 ms with a max age of 3 s, retry 2.5 s after a failed write, and Redis
// is out of reach for longer than the max age. When it returns every heartbeat is older than the max
// age, although every worker but one is alive.
// fiveLive are the workers alive throughout: one may write before
// pelwarden's first judgement after the outage, not all five.
var fiveLive = []string{"w-0", "w-1", "w-2", "w-3", "w-4"}

const (
	outageMaxAge  = 3 * time.Second
	workerBackoff = 2500 * time.Millisecond
	heldPerWorker = 3
)

// outageGroup is a group whose workers each hold entries and heartbeat
// from a loop of their own, and one of which, the doomed, dies with the
// outage: the one ghost whose entries must come back after it.
type outageGroup struct {
	rdb redis.UniversalClient
	// workers is the workers' client: it fails fast, without retries of
	// its own, so a worker waits out its backoff after a failed write.
	workers redis.UniversalClient
	stream  string
	live    []string
	doomed  string
	held    map[string][]string
	jobs    int64
	// dead stops the doomed worker's loop.
	dead atomic.Bool
	// quiet is when the workers may write again, in Unix nanoseconds:
	// from the outage on, a worker's next write is as late as its backoff
	// allows, a backoff after Redis is back (a write that failed just
	// before it came back).
	quiet atomic.Int64
	// skew is how far the workers' clocks are off Redis's: the time each
	// heartbeat claims is the worker's clock.
	skew time.Duration
}

// newOutageGroup creates the group on rdb: each consumer reads its
// entries, the doomed one last, and starts to heartbeat through workers.
func newOutageGroup(t *testing.T, rdb, workers redis.UniversalClient, stream string, live []string, doomed string) *outageGroup {
	t.Helper()
	return newSkewedGroup(t, rdb, workers, stream, live, doomed, 0)
}

// newSkewedGroup is newOutageGroup with the workers' clocks off Redis's
// by skew.
func newSkewedGroup(t *testing.T, rdb, workers redis.UniversalClient, stream string, live []string, doomed string, skew time.Duration) *outageGroup {
	t.Helper()
	t.Cleanup(func() { _ = workers.Close() })
	g := &outageGroup{rdb: rdb, workers: workers, stream: stream, live: live, doomed: doomed, held: map[string][]string{}, skew: skew}
	redistest.CreateGroup(t, rdb, stream, "workers")
	all := append(slices.Clone(live), doomed)
	g.jobs = int64(len(all) * heldPerWorker)
	redistest.AddJobs(t, rdb, stream, "", int(g.jobs))
	for _, c := range all {
		g.held[c] = redistest.Read(t, rdb, stream, "workers", c, heldPerWorker)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Go(func() { g.beat(ctx, c) })
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	for _, c := range all {
		eventually(t, 5*time.Second, func() error { return rdb.Get(context.Background(), "hb:"+c).Err() })
	}
	return g
}

// beat is one worker: a heartbeat every 200 ms, and after a failed write a
// backoff, as examples/worker and the chaos workers do.
func (g *outageGroup) beat(ctx context.Context, consumer string) {
	for ctx.Err() == nil && (consumer != g.doomed || !g.dead.Load()) {
		wait := 200 * time.Millisecond
		switch {
		case time.Now().UnixNano() < g.quiet.Load():
			wait = 20 * time.Millisecond
		case g.workers.Set(ctx, "hb:"+consumer, strconv.FormatInt(time.Now().Add(g.skew).UnixMilli(), 10), 0).Err() != nil:
			wait = workerBackoff
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// outage starts the outage for the workers: the doomed one dies, the
// others fail to write until recovered.
func (g *outageGroup) outage() {
	g.dead.Store(true)
	g.quiet.Store(math.MaxInt64)
}

// recovered says Redis is back; the workers write again a backoff later.
func (g *outageGroup) recovered() time.Time {
	now := time.Now()
	g.quiet.Store(now.Add(workerBackoff).UnixNano())
	return now
}

// recoverWhen calls recovered the first time served says Redis serves
// again, looking every 10 ms, and sends its time: the moment a worker could
// first reach Redis, where a harness's wait for the whole setup to be
// healthy (every sentinel agreed, every replica in sync) may end seconds
// later, when a worker that came back a backoff after it is rightly late.
func (g *outageGroup) recoverWhen(t *testing.T, served func(context.Context) bool) <-chan time.Time {
	back := make(chan time.Time, 1)
	ctx := t.Context()
	go func() {
		for !served(ctx) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		back <- g.recovered()
	}()
	return back
}

// metadata is the trigger: the metric counts what the live workers hold.
func (g *outageGroup) metadata() map[string]string {
	return map[string]string{"stream": g.stream, "consumerGroup": "workers", "liveness": "heartbeat",
		"heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": strconv.FormatFloat(outageMaxAge.Seconds(), 'f', -1, 64)}
}

// tune makes the group a hygiene target that requeues entries idle 0.5 s.
// The disruption breaker is off, so that the outage rule alone guards.
func (g *outageGroup) tune(c *config.Config) {
	c.Scaler.BreakerMinConsumers = 1000
	c.Hygiene.ScanInterval, c.Hygiene.LeaseTTL = 300*time.Millisecond, 5*time.Second
	c.Hygiene.Targets = []map[string]string{cloneWith(g.metadata(), "reclaim", "requeue", "entryStaleSeconds", "0.5")}
}

// livePending is what the live workers hold: the least a right answer is.
func (g *outageGroup) livePending() int64 { return int64(len(g.live) * heldPerWorker) }

// poller calls GetMetrics every 50 ms, as KEDA would, and keeps what it got.
type poller struct {
	mu      sync.Mutex
	answers map[string]int
	wrong   []string
	stop    chan struct{}
	done    chan struct{}
}

// pollMetrics polls p for md until stopped; an answer below floor is
// wrong: the live workers' entries are pending throughout.
func pollMetrics(p *pelwarden, md map[string]string, floor int64) *poller {
	return pollAbove(p, md, func() int64 { return floor })
}

// pollAbove is pollMetrics with the live work as of each poll's start.
func pollAbove(p *pelwarden, md map[string]string, live func() int64) *poller {
	pl := &poller{answers: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(pl.done)
		for {
			floor := live()
			res, err := p.client.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(md), MetricName: "s0-pelwarden"})
			pl.mu.Lock()
			switch {
			case err != nil:
				pl.answers[status.Code(err).String()]++
			case len(res.GetMetricValues()) == 1 && res.GetMetricValues()[0].GetMetricValue() >= floor:
				pl.answers["at least the live work"]++
			default:
				pl.answers["wrong"]++
				pl.wrong = append(pl.wrong, fmt.Sprint(res.GetMetricValues()))
			}
			pl.mu.Unlock()
			select {
			case <-pl.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return pl
}

// finish stops polling and requires that no answer was below the live
// work, and that answers came.
func (pl *poller) finish(t *testing.T) {
	t.Helper()
	close(pl.stop)
	<-pl.done
	t.Logf("GetMetrics answers: %v", pl.answers)
	require.Empty(t, pl.wrong, "GetMetrics answered below the live workers' pending entries (0 is the issue's wrong zero)")
	require.Positive(t, pl.answers["at least the live work"])
}

// requireRecovered waits for the doomed worker's entries to come back,
// logs the time from recovery to that first action, and checks the books:
// every live worker still holds exactly its entries, delivered once, and
// the stream grew by the doomed worker's entries alone.
func (g *outageGroup) requireRecovered(t *testing.T, recovered time.Time) {
	t.Helper()
	ctx := context.Background()
	// A loaded machine's timeouts are breaks too, each starting the wait
	// again: the bound is generous, the books below are exact.
	eventually(t, 45*time.Second, func() error {
		p, err := g.rdb.XPending(ctx, g.stream, "workers").Result()
		if err != nil {
			return err
		}
		if n := p.Consumers[g.doomed]; n > 0 {
			return fmt.Errorf("the dead worker %s still holds %d entries", g.doomed, n)
		}
		return nil
	})
	t.Logf("from recovery to the dead worker's entries given back: %s (heartbeat max age %s)", time.Since(recovered).Round(10*time.Millisecond), outageMaxAge)
	for _, c := range g.live {
		ext, err := g.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: g.stream, Group: "workers", Start: "-", End: "+", Count: 100, Consumer: c}).Result()
		require.NoError(t, err)
		var ids []string
		for _, e := range ext {
			ids = append(ids, e.ID)
			require.Equal(t, int64(1), e.RetryCount, "%s's entry %s was delivered again: a live worker's entry was touched", c, e.ID)
		}
		require.Equal(t, g.held[c], ids, "live worker %s still holds its entries", c)
	}
	n, err := g.rdb.XLen(ctx, g.stream).Result()
	require.NoError(t, err)
	require.Equal(t, g.jobs+heldPerWorker, n, "only the dead worker's entries were requeued")
}

// TestASingleServerDownLongerThanTheMaxAgeTakesNoLiveWorkersEntries kills
// a redis-server (its data on AOF) for 6 s, two max ages,
// while its workers retry: no answer is a wrong 0, no live worker's entry
// is touched, and the worker that died meanwhile is given back.
func TestASingleServerDownLongerThanTheMaxAgeTakesNoLiveWorkersEntries(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	g := newOutageGroup(t, srv.Client(t), failFast(&redis.Options{Addr: srv.Addr()}), "jobs", fiveLive, "doomed")
	p := startPelwarden(t, srv.Addr(), g.tune)
	requireMetric(t, p, g.metadata(), g.jobs)
	pl := pollMetrics(p, g.metadata(), g.livePending())

	g.outage()
	srv.Kill()
	time.Sleep(6 * time.Second)
	srv.Restart(t)
	g.requireRecovered(t, g.recovered())
	pl.finish(t)
}

// TestPelwardenStartedDuringAnOutageJudgesNoStaleHeartbeatBeforeTheMaxAge
// starts pelwarden while Redis is down: its first read comes after the
// outage, when every heartbeat is stale.
func TestPelwardenStartedDuringAnOutageJudgesNoStaleHeartbeatBeforeTheMaxAge(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	g := newOutageGroup(t, srv.Client(t), failFast(&redis.Options{Addr: srv.Addr()}), "jobs", fiveLive, "doomed")
	g.outage()
	srv.Kill()
	p := startPelwarden(t, srv.Addr(), g.tune)
	pl := pollMetrics(p, g.metadata(), g.livePending())
	time.Sleep(6 * time.Second)
	srv.Restart(t)
	g.requireRecovered(t, g.recovered())
	pl.finish(t)
}

// TestASentinelFailoverSlowerThanTheMaxAgeTakesNoLiveWorkersEntries kills
// the master of a sentinel set whose down-after is longer than the max
// age: by the promotion every heartbeat is stale.
func TestASentinelFailoverSlowerThanTheMaxAgeTakesNoLiveWorkersEntries(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, redistest.SentinelOptions{DownAfter: 4 * time.Second})
	fo := s.FailoverOptions()
	fo.MaxRetries, fo.DialTimeout, fo.ReadTimeout, fo.WriteTimeout = -1, 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	g := newOutageGroup(t, s.Client(t), redis.NewFailoverClient(fo), "jobs", fiveLive, "doomed")
	p := startPelwardenOn(t, func(r *config.Redis) {
		r.Mode, r.Addr = config.RedisSentinel, ""
		r.Sentinel = config.RedisSentinelConfig{MasterName: s.MasterName(), Addrs: s.SentinelAddrs()}
	}, g.tune)
	requireMetric(t, p, g.metadata(), g.jobs)
	redistest.WaitReplicated(t, s.Master(t).Client(t))
	pl := pollMetrics(p, g.metadata(), g.livePending())

	old := s.Master(t).Addr()
	sentinels := make([]*redis.Client, 0, len(s.SentinelAddrs()))
	for _, addr := range s.SentinelAddrs() {
		sentinels = append(sentinels, failFast(&redis.Options{Addr: addr}))
	}
	back := g.recoverWhen(t, func(ctx context.Context) bool {
		for _, sn := range sentinels {
			addr, err := sn.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName()).StringSlice()
			if err == nil && len(addr) == 2 && addr[0]+":"+addr[1] != old {
				return true
			}
		}
		return false
	})
	g.outage()
	// The books are read from the promoted master itself: a client that
	// knew the killed one may dial its address again, which another
	// test's server can have taken by then.
	g.rdb = s.KillMaster(t).Client(t)
	g.requireRecovered(t, <-back)
	pl.finish(t)
}

// TestAClusterNodeHoldingHeartbeatsKilledTakesNoLiveWorkersEntries kills
// the master holding live workers' heartbeat keys, with a node timeout
// longer than the max age: once its replica serves, those keys' stale
// heartbeats wait a max age, while the stream's own node never failed.
func TestAClusterNodeHoldingHeartbeatsKilledTakesNoLiveWorkersEntries(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1, NodeTimeout: 4 * time.Second})
	rdb := c.Client(t)
	const stream = "{outage}:jobs"
	// Workers, the doomed one too, whose keys sit on one master other than
	// the stream's.
	var victim *redistest.ClusterNode
	var names []string
	for i := 0; len(names) <= len(fiveLive); i++ {
		name := "w-" + strconv.Itoa(i)
		m := c.MasterForKey(t, "hb:"+name)
		if m == c.MasterForKey(t, stream) || (victim != nil && m != victim) {
			continue
		}
		victim = m
		names = append(names, name)
	}
	// The workers follow MOVED (a worker must, to write after a failover)
	// and fail fast otherwise.
	co := c.Options()
	co.DialTimeout, co.ReadTimeout, co.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	co.DialerRetryTimeout = time.Millisecond
	g := newOutageGroup(t, rdb, redis.NewClusterClient(co), stream, names[1:], names[0])
	p := startPelwardenOn(t, func(r *config.Redis) {
		r.Mode, r.Addr = config.RedisCluster, ""
		r.Cluster = config.RedisClusterConfig{Addrs: c.Addrs()}
	}, g.tune)
	requireMetric(t, p, g.metadata(), g.jobs)
	redistest.WaitReplicated(t, victim.Client(t))
	pl := pollMetrics(p, g.metadata(), g.livePending())

	replica := c.ReplicaOf(t, victim).Client(t)
	back := g.recoverWhen(t, func(ctx context.Context) bool {
		repl, err := replica.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(repl, "role:master")
	})
	g.outage()
	require.NotNil(t, c.KillMaster(t, victim), "the replica takes over")
	g.requireRecovered(t, <-back)
	pl.finish(t)
}

// failFast is a client for o's server that gives up on the first error.
func failFast(o *redis.Options) *redis.Client {
	o.MaxRetries, o.DialTimeout, o.ReadTimeout, o.WriteTimeout = -1, 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	// go-redis dials again 5 times 100 ms apart before a command fails;
	// 1 ms apart, a refused dial fails the write at once.
	o.DialerRetryTimeout = time.Millisecond
	return redis.NewClient(o)
}

// requireMetric waits until GetMetrics answers want.
func requireMetric(t *testing.T, p *pelwarden, md map[string]string, want int64) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		got, err := metric(context.Background(), t, p.client, md)
		if err == nil && got != want {
			err = fmt.Errorf("GetMetrics answers %d, want %d", got, want)
		}
		return err
	})
}
