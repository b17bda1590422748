package e2e

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// The fault suites: Redis refuses the workers' heartbeats, or evicts one,
// or the workers' clocks are off, while Redis serves pelwarden's reads
// throughout. Each checks the same things: KEDA's answers (through KEDA's
// client) are never below the live work, no live worker's entry is
// touched (Redis is read afterwards), and pelwarden logs at most one line
// per fault per 10 s. The workers are the outage suites' (outage_test.go):
// a heartbeat every 200 ms, max age 3 s, 2.5 s before a write is tried
// again after one failed, and the disruption breaker off, so that each
// fault's own rule alone guards.

// TestARefusedWriteIsNoDeath makes Redis refuse writes for two max ages,
// each way it does in production, while one worker dies: the live
// workers' stale heartbeats are Unknown throughout and a max age after
// writes are accepted again, the refusal is a finding and a metric, and
// the dead worker's entries are given back once writes are accepted.
func TestARefusedWriteIsNoDeath(t *testing.T) {
	t.Parallel()
	for _, f := range redistest.Faults {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.FaultOptions(t, f))
			if ok, why := srv.CanCause(t, f); !ok {
				t.Skipf("%s cannot cause %s: %s", srv.Version(t), f, why)
			}
			g := newOutageGroup(t, srv.Client(t), failFast(&redis.Options{Addr: srv.Addr()}), "jobs", fiveLive, "doomed")
			p := startPelwarden(t, srv.Addr(), g.tune)
			requireMetric(t, p, g.metadata(), g.jobs)
			time.Sleep(outageMaxAge) // past pelwarden's first max age, an outage of evidence of its own
			pl := pollMetrics(p, g.metadata(), g.livePending())

			g.dead.Store(true)
			began := time.Now()
			undo := srv.Cause(t, f)
			time.Sleep(2*outageMaxAge - time.Since(began))
			finding := requireFinding(t, p, pelwardenv1.FindingKind_FINDING_KIND_WRITES_REFUSED, string(f))
			gauge := scraped(t, p, fmt.Sprintf(`pelwarden_redis_writes_refused{redis="default",refusal=%q}`, f))
			undo()
			g.requireRecovered(t, time.Now())
			pl.finish(t)
			require.NoError(t, finding, "while Redis refused writes")
			require.InDelta(t, 1.0, gauge, 0, "pelwarden_redis_writes_refused while Redis refused writes")
			requireFewLines(t, p, began, "refuses writes", "accepts writes")
		})
	}
}

// TestAnEvictedHeartbeatIsNoDeath has Redis evict one of three live
// workers' heartbeat keys as fast as the worker writes it, for two max
// ages: under volatile-ttl with maxmemory just above what Redis holds
// without it, the victim's key, big and the only one with a short expiry,
// is written by a script allowed past maxmemory and evicted before the
// very next command, so pelwarden never reads it. It is Unknown, never Ghost,
// while its siblings' keys survive.
func TestAnEvictedHeartbeatIsNoDeath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	victim := failFast(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = victim.Close() })
	// The beat is padded past 600 kB in Redis itself (SETRANGE): a command
	// as big would sit in Redis's memory, read in part, and a string as
	// big made in Lua would count there until collected, while other
	// clients' writes ask for room (the OOM of TestARefusedWriteIsNoDeath,
	// not an eviction). pelwarden never reads the padded value: Redis
	// evicts it before any other command.
	write := redis.NewScript("#!lua flags=allow-oom\n" +
		"redis.call('SET', KEYS[1], ARGV[1], 'PX', 1000)\nreturn redis.call('SETRANGE', KEYS[1], 600000, ' ')")
	if err := write.Run(ctx, victim, []string{"probe"}, "1").Err(); err != nil {
		t.Skipf("%s cannot cause an eviction this way: it runs no script with flags (%v)", srv.Version(t), err)
	}
	g := newOutageGroup(t, rdb, failFast(&redis.Options{Addr: srv.Addr()}), "jobs", []string{"w-0", "w-1"}, "victim")
	p := startPelwarden(t, srv.Addr(), g.tune)
	requireMetric(t, p, g.metadata(), g.jobs)
	time.Sleep(outageMaxAge)
	pl := pollMetrics(p, g.metadata(), g.jobs) // every worker is alive

	g.dead.Store(true) // the victim beats below instead, big and with the shortest expiry
	time.Sleep(300 * time.Millisecond)
	used, err := rdb.Info(ctx, "memory").Result()
	require.NoError(t, err)
	began := time.Now()
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err())
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(infoInt(t, used, "used_memory")+200000)).Err())
	for time.Since(began) < 2*outageMaxAge {
		require.NoError(t, write.Run(ctx, victim, []string{"hb:victim"}, time.Now().UnixMilli()).Err())
		time.Sleep(200 * time.Millisecond)
	}
	finding := requireFinding(t, p, pelwardenv1.FindingKind_FINDING_KIND_HEARTBEATS_EVICTED, "evicts keys")
	stats, err := rdb.Info(ctx, "stats").Result()
	require.NoError(t, err)
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "0").Err())
	heartbeat(t, rdb, "hb:victim", time.Now())
	time.Sleep(500 * time.Millisecond)
	pl.finish(t)
	for c, ids := range g.held {
		require.Equal(t, int64(len(ids)), pendingCount(ctx, t, rdb, c), "%s's entries are untouched", c)
	}
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, g.jobs, n, "nothing was requeued")
	require.Greater(t, infoInt(t, stats, "evicted_keys"), int64(10), "Redis evicted the victim's key at each beat")
	require.NoError(t, finding, "while Redis evicted it")
	requireFewLines(t, p, began)
}

// TestASkewedClockIsNoDeath runs workers whose clocks are 30 s behind or
// ahead of Redis's, one of which dies. Behind: each value changes at every
// beat, so each is a beat at the read that sees it; the live workers stay
// Alive, the skew is a finding and a metric, and the dead one is given
// back a max age after its last beat was read. Ahead: not trusted, Unknown
// as any heartbeat from the future, its entries counted and never taken.
func TestASkewedClockIsNoDeath(t *testing.T) {
	t.Parallel()
	for name, skew := range map[string]time.Duration{"30s behind": -30 * time.Second, "30s ahead": 30 * time.Second} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			g := newSkewedGroup(t, rdb, failFast(&redis.Options{Addr: srv.Addr()}), "jobs", fiveLive, "doomed", skew)
			p := startPelwarden(t, srv.Addr(), g.tune)
			requireMetric(t, p, g.metadata(), g.jobs)
			began := time.Now()
			pl := pollMetrics(p, g.metadata(), g.livePending())
			time.Sleep(outageMaxAge) // past pelwarden's first max age
			g.dead.Store(true)
			died := time.Now()
			metric := fmt.Sprintf(`pelwarden_heartbeat_clock_skew_seconds{group="workers",liveness=%q,redis="default",stream="jobs"}`, livenessLabel(t, g.metadata()))
			if skew < 0 {
				g.requireRecovered(t, died)
				pl.finish(t)
				require.NoError(t, requireFinding(t, p, pelwardenv1.FindingKind_FINDING_KIND_CLOCK_SKEW, "behind Redis's"))
				require.InDelta(t, -30, scraped(t, p, metric), 1, "the skew, measured between reads")
			} else {
				time.Sleep(2 * outageMaxAge)
				pl.finish(t)
				for c, ids := range g.held {
					require.Equal(t, int64(len(ids)), pendingCount(context.Background(), t, rdb, c), "%s's entries are untouched", c)
				}
				require.NoError(t, requireFinding(t, p, pelwardenv1.FindingKind_FINDING_KIND_HEARTBEAT_IN_FUTURE, "dated in the future"))
				require.Contains(t, scrape(t, p.app.HTTPAddr()), fmt.Sprintf(`pelwarden_heartbeats_in_future{group="workers",liveness=%q,redis="default",stream="jobs"} 6`,
					livenessLabel(t, g.metadata())), "every worker Unknown, the dead one too")
			}
			requireFewLines(t, p, began)
		})
	}
}

// TestAStreamCreatedAfterItsTriggerIsSeenAtTheNextPoll registers a
// trigger for a stream that does not exist yet, then, in one transaction,
// creates it, adds 30 entries and has a worker read them: every poll that
// begins after it answers at least 30.
func TestAStreamCreatedAfterItsTriggerIsSeenAtTheNextPoll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	md := map[string]string{"stream": "late", "consumerGroup": "workers", "liveness": "idle", "ghostIdleSeconds": "60"}
	p := startPelwarden(t, srv.Addr(), nil)
	requireMetric(t, p, md, 0)
	var live atomic.Int64
	pl := pollAbove(p, md, live.Load)
	time.Sleep(300 * time.Millisecond)
	began := time.Now()
	// At once: no read may see the group before its entries were read,
	// whose 0 pending would be right then.
	tx := rdb.TxPipeline()
	tx.XGroupCreateMkStream(ctx, "late", "workers", "$")
	for i := range 30 {
		tx.XAdd(ctx, &redis.XAddArgs{Stream: "late", Values: []any{"job", i}})
	}
	tx.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "w-0", Streams: []string{"late", ">"}, Count: 30, Block: -1})
	_, err := tx.Exec(ctx)
	require.NoError(t, err)
	live.Store(30)
	time.Sleep(time.Second)
	pl.finish(t)
	n, err := rdb.XLen(ctx, "late").Result()
	require.NoError(t, err)
	require.Equal(t, int64(30), n)
	pending, err := rdb.XPending(ctx, "late", "workers").Result()
	require.NoError(t, err)
	require.Equal(t, int64(30), pending.Consumers["w-0"], "untouched")
	requireFewLines(t, p, began)
}

// requireFinding says whether p reports a finding of kind on jobs/workers
// whose detail holds part.
func requireFinding(t *testing.T, p *pelwarden, kind pelwardenv1.FindingKind, part string) error {
	t.Helper()
	res, err := pelwardenv1.NewAdminClient(p.conn).Findings(context.Background(), &pelwardenv1.FindingsRequest{
		Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "workers"}})
	if err != nil {
		return err
	}
	for _, f := range res.GetFindings() {
		if f.GetKind() == kind && strings.Contains(f.GetDetail(), part) {
			return nil
		}
	}
	return fmt.Errorf("no %s finding saying %q: %v", kind, part, res.GetFindings())
}

// requireFewLines checks pelwarden's log from since on: every warning or
// error, and every line holding one of about, is one of at most one per
// 10 s.
func requireFewLines(t *testing.T, p *pelwarden, since time.Time, about ...string) {
	t.Helper()
	var last time.Time
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(p.logs.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		at, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(strings.SplitN(line, " ", 2)[0], "time="))
		if err != nil || at.Before(since) {
			continue
		}
		counted := strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")
		for _, a := range about {
			counted = counted || strings.Contains(line, a)
		}
		if !counted {
			continue
		}
		lines = append(lines, line)
		require.False(t, !last.IsZero() && at.Sub(last) < 10*time.Second, "more than one line about the fault within 10 s:\n%s", strings.Join(lines, "\n"))
		last = at
	}
	t.Logf("pelwarden's lines about the fault: %d", len(lines))
}

func infoInt(t *testing.T, info, field string) int64 {
	t.Helper()
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			var n int64
			_, err := fmt.Sscan(v, &n)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("INFO has no %s", field)
	return 0
}

// scraped is the value of series on p's /metrics.
func scraped(t *testing.T, p *pelwarden, series string) float64 {
	t.Helper()
	for line := range strings.Lines(scrape(t, p.app.HTTPAddr())) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatalf("/metrics has no %s", series)
	return 0
}
