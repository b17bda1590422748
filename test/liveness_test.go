package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// silentReader is a process alive enough to XREADGROUP one entry every
// 300 ms that never acknowledges any: seed 000's stuck worker.
type silentReader struct {
	stop func()
	mu   sync.Mutex
	jobs map[string]int // times an entry of each job was read
	n    int
}

func startSilentReader(t *testing.T, addr, consumer string) *silentReader {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	ctx, cancel := context.WithCancel(context.Background())
	r := &silentReader{jobs: map[string]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer c.Close()
		for ctx.Err() == nil {
			// Not under ctx: a read cut short by the stop could deliver an
			// entry the count never sees.
			res, err := c.XReadGroup(context.WithoutCancel(ctx), &redis.XReadGroupArgs{Group: "workers", Consumer: consumer, Streams: []string{"jobs", ">"}, Count: 1, Block: -1}).Result()
			if err == nil {
				r.mu.Lock()
				for _, m := range res[0].Messages {
					r.jobs[m.Values["job"].(string)]++
					r.n++
				}
				r.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	r.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(r.stop)
	return r
}

// copiesByJob counts, per job, the requeued copies in the stream.
func copiesByJob(t *testing.T, rdb *redis.Client) map[string]int {
	t.Helper()
	all, err := rdb.XRange(context.Background(), "jobs", "-", "+").Result()
	require.NoError(t, err)
	out := map[string]int{}
	for _, e := range all {
		if _, ok := e.Values["pelwarden-deliveries"]; ok {
			out[e.Values["job"].(string)]++
		}
	}
	return out
}

// TestAReadingConsumerWhoseOwnerWentSilentGivesBackItsStaleEntriesOnce is
// seed 000's case through KEDA's client and the hygiene loop: a process
// keeps reading while its owner's heartbeat is stale (or, written with an
// expiry, gone). Every entry it read is requeued exactly once, counted in
// the stream; the live owner's entries are untouched; the metric leaves
// the silent owner's entries out.
func TestAReadingConsumerWhoseOwnerWentSilentGivesBackItsStaleEntriesOnce(t *testing.T) {
	t.Parallel()
	const silent, live = "agent-a-rig-agent-runtime-0", "agent-b-rig-agent-runtime-0"
	cases := map[string]struct {
		silence func(t *testing.T, rdb *redis.Client)
		// outFromStart says the silent owner is judged from pelwarden's
		// first read; otherwise its key expires (and the start grace
		// passes) while pelwarden watches.
		outFromStart bool
	}{
		"its owner's heartbeat is an hour old": {outFromStart: true, silence: func(t *testing.T, rdb *redis.Client) {
			heartbeat(t, rdb, "hb:agent-a", time.Now().Add(-time.Hour))
		}},
		"its owner's heartbeat was written with SET PX and expired": {silence: func(t *testing.T, rdb *redis.Client) {
			require.NoError(t, rdb.Set(context.Background(), "hb:agent-a", time.Now().UnixMilli(), 1500*time.Millisecond).Err())
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			ctx := context.Background()
			redistest.CreateGroup(t, rdb, "jobs", "workers")
			redistest.AddJobs(t, rdb, "jobs", "", 40)
			redistest.Read(t, rdb, "jobs", "workers", live, 5) // a long job: held, never acknowledged
			liveIDs := pendingIDs(t, rdb, live)
			beatEvery(t, rdb, map[string]func() string{"hb:agent-b": msAgo(0)})
			tc.silence(t, rdb)
			reader := startSilentReader(t, srv.Addr(), silent)
			eventually(t, 2*time.Second, func() error { return holds(t, rdb, silent, 1) })

			profile, md := withProfile("agents", map[string]string{"stream": "jobs", "consumerGroup": "workers", "pendingEntriesCount": "5",
				"liveness": "heartbeat", "heartbeatKey": "hb:{owner}", "ownerMatch": "prefix", "heartbeatMaxAgeSeconds": "2",
				"reclaim": "requeue", "entryStaleSeconds": "1"})
			p := startPelwarden(t, srv.Addr(), tunes(profile, func(c *config.Config) {
				c.Hygiene.ScanInterval, c.Hygiene.LeaseTTL = 200*time.Millisecond, time.Second
			}))
			leftOut := false // the metric has been seen to leave the silent owner's entries out
			// A heartbeat stale before pelwarden's first read is evidence
			// a max age (2 s) after it; until then its owner is Unknown.
			fromStart := time.Now().Add(3 * time.Second)
			deadline := time.Now().Add(7 * time.Second)
			for time.Now().Before(deadline) {
				v, err := metric(ctx, t, p.client, md)
				require.NoError(t, err)
				held, err := rdb.XPending(ctx, "jobs", "workers").Result()
				require.NoError(t, err)
				switch {
				case tc.outFromStart && time.Now().After(fromStart) || leftOut:
					require.Equal(t, int64(len(liveIDs)), v, "the metric counts the live owner's entries only (XPENDING: %v)", held.Consumers)
				case v == int64(len(liveIDs)) && held.Consumers[silent] > 0:
					leftOut = true
				}
				time.Sleep(100 * time.Millisecond)
			}
			require.True(t, tc.outFromStart || leftOut, "once its key expired, the silent owner's entries were left out of the metric")
			reader.stop()
			eventually(t, 5*time.Second, func() error { return holds(t, rdb, silent, 0) })

			require.Equal(t, liveIDs, pendingIDs(t, rdb, live), "the live owner's entries are untouched")
			ext, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 100, Consumer: live}).Result()
			require.NoError(t, err)
			for _, e := range ext {
				require.Equal(t, int64(1), e.RetryCount, "entry %s of the live owner was never delivered again", e.ID)
			}
			reader.mu.Lock()
			read, n := reader.jobs, reader.n
			reader.mu.Unlock()
			require.GreaterOrEqual(t, n, 10, "the silent consumer kept reading")
			require.Equal(t, read, copiesByJob(t, rdb), "each entry the silent consumer read is requeued exactly once: one copy per read, per job")
			length, err := rdb.XLen(ctx, "jobs").Result()
			require.NoError(t, err)
			require.Equal(t, int64(40+n), length, "the stream holds the 40 originals and one copy per entry read")
		})
	}
}

// holds checks that consumer holds want entries (or, for want > 0, at
// least want).
func holds(t *testing.T, rdb *redis.Client, consumer string, want int64) error {
	t.Helper()
	p, err := rdb.XPending(context.Background(), "jobs", "workers").Result()
	if err != nil {
		return err
	}
	got := p.Consumers[consumer]
	if (want == 0 && got != 0) || got < want {
		return fmt.Errorf("%s holds %d entries, want %d", consumer, got, want)
	}
	return nil
}

// redisState is what a scan could change: the stream, who holds what, and
// the consumers.
func redisState(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	ctx := context.Background()
	entries, err := rdb.XRange(ctx, "jobs", "-", "+").Result()
	require.NoError(t, err)
	ext, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 1000}).Result()
	require.NoError(t, err)
	consumers, err := rdb.XInfoConsumers(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	var b strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&b, "entry %s %v\n", e.ID, e.Values)
	}
	for _, e := range ext {
		fmt.Fprintf(&b, "pending %s %s delivered %d\n", e.ID, e.Consumer, e.RetryCount)
	}
	for _, c := range consumers {
		fmt.Fprintf(&b, "consumer %s\n", c.Name)
	}
	return b.String()
}

// TestAMisconfiguredHeartbeatKeyChangesNothingInRedis: the workers beat at
// hb:{consumer}, the target reads beat:{consumer}. No consumer has a
// record, so every one is Unknown, whether it reads or is busy with a long
// job; a finding and a metric say why, and the hygiene loop, which scans
// all along, changes nothing.
func TestAMisconfiguredHeartbeatKeyChangesNothingInRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 12)
	beats := map[string]func() string{}
	for _, w := range []string{"w-0", "w-1", "w-2", "w-busy"} {
		redistest.Read(t, rdb, "jobs", "workers", w, 3)
		beats["hb:"+w] = msAgo(0)
	}
	beatEvery(t, rdb, beats)
	readCtx, stopReading := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range []string{"w-0", "w-1", "w-2"} { // healthy workers blocked on an empty stream
		wg.Go(func() {
			for readCtx.Err() == nil {
				_ = rdb.XReadGroup(readCtx, &redis.XReadGroupArgs{Group: "workers", Consumer: w, Streams: []string{"jobs", ">"}, Count: 1, Block: 100 * time.Millisecond}).Err()
			}
		})
	}
	t.Cleanup(func() { stopReading(); wg.Wait() })
	before := redisState(t, rdb)

	p, admin := startAdmin(t, srv.Addr(), hygieneTarget("liveness", "heartbeat", "heartbeatKey", "beat:{consumer}", "heartbeatMaxAgeSeconds", "1"))
	skipped := `pelwarden_hygiene_skipped_total{group="workers",reason="owner-unknown",redis="default",stream="jobs"}`
	eventually(t, 5*time.Second, func() error {
		if body := scrape(t, p.app.HTTPAddr()); !strings.Contains(body, skipped) {
			return fmt.Errorf("no scan has skipped an Unknown owner yet")
		}
		return nil
	})
	time.Sleep(2 * time.Second) // past the start grace and entryStaleSeconds, many scans over

	require.Equal(t, before, redisState(t, rdb), "nothing in Redis changed")
	res, err := admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	require.True(t, res.GetTarget().GetNoHeartbeatRecords())
	require.Len(t, res.GetTarget().GetConsumers(), 4)
	for _, c := range res.GetTarget().GetConsumers() {
		require.Equal(t, pelwardenv1.Verdict_VERDICT_UNKNOWN, c.GetVerdict(), "%s: %v", c.GetName(), c.GetReasons())
		require.Contains(t, strings.Join(c.GetReasons(), "; "), "pattern is probably wrong")
	}
	require.Equal(t, int64(12), res.GetTarget().GetLivePending(), "Unknown counts as live")
	missing := series(scrape(t, p.app.HTTPAddr()), "pelwarden_heartbeat_records_missing")
	require.Len(t, missing, 1, "one target, one series")
	for labels, v := range missing {
		require.Contains(t, labels, `group="workers"`)
		require.Equal(t, "1", v, "the guard holds")
	}
	found, err := admin.Findings(ctx, &pelwardenv1.FindingsRequest{Target: jobsRef})
	require.NoError(t, err)
	var kinds []pelwardenv1.FindingKind
	for _, f := range found.GetFindings() {
		kinds = append(kinds, f.GetKind())
	}
	require.Contains(t, kinds, pelwardenv1.FindingKind_FINDING_KIND_NO_HEARTBEAT_RECORDS, "findings: %v", found.GetFindings())
}

// TestClaimModeSpreadsOverLiveConsumersFreshestFirst: three live consumers
// that last beat 0, 1.5 and 2.5 s before the scan; a degraded owner and
// two whose heartbeats went stale hold 4 entries each. One scan claims each
// owner's entries to a different live consumer, the freshest first, and
// never to the degraded or stale owners.
func TestClaimModeSpreadsOverLiveConsumersFreshestFirst(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 12)
	owners := []string{"deg", "stale-1", "stale-2"} // the scan's order: by name
	held := map[string][]string{}
	for _, o := range owners {
		redistest.Read(t, rdb, "jobs", "workers", o, 4)
		held[o] = pendingIDs(t, rdb, o)
	}
	for _, c := range []string{"live-a", "live-b", "live-c"} {
		require.NoError(t, rdb.XGroupCreateConsumer(ctx, "jobs", "workers", c).Err())
	}
	// The entries were read now, and are taken once idle 12 s (below):
	// by then live-a has just beaten, live-b last beat 1.5 s before and
	// live-c 2.5 s before, each within the max age; freshness is on
	// Redis's clock, so it is when each last wrote.
	read := time.Now()
	liveUntil := map[string]time.Time{"hb:live-a": read.Add(time.Hour), "hb:live-b": read.Add(10500 * time.Millisecond), "hb:live-c": read.Add(9500 * time.Millisecond)}
	// The owners beat until pelwarden has read Redis for a max age (5 s):
	// a heartbeat stale before then is not yet evidence. Then, in one
	// write, one says it is degraded (and goes on saying so) and two fall
	// silent (a value written anew is a beat, whatever time it claims), so
	// they are stale a max age later; their entries are taken once idle
	// 12 s, past that, so that one scan finds the three.
	owning, turn := make(chan struct{}), make(chan struct{})
	beating, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); <-owning })
	go func() {
		defer close(owning)
		degraded := false
		for {
			now := strconv.FormatInt(time.Now().UnixMilli(), 10)
			for k, until := range liveUntil {
				if time.Now().Before(until) {
					_ = rdb.Set(beating, k, now, 0).Err()
				}
			}
			switch {
			case degraded:
				_ = rdb.Set(beating, "hb:deg", fmt.Sprintf(`{"time":%s,"degraded":true,"degradedReasons":["codex_quota_exhausted_until_%s"]}`,
					now, time.Now().Add(time.Hour).UTC().Format(time.RFC3339)), 0).Err()
			default:
				_ = rdb.MSet(beating, "hb:stale-1", now, "hb:stale-2", now, "hb:deg", now).Err()
			}
			select {
			case <-turn:
				turn, degraded = nil, true
			case <-beating.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	_, admin := startAdmin(t, srv.Addr(), hygieneTarget("reclaim", "claim", "liveness", "heartbeat", "heartbeatKey", "hb:{consumer}",
		"heartbeatMaxAgeSeconds", "5", "entryStaleSeconds", "12"))
	time.Sleep(5500 * time.Millisecond)
	close(turn)
	time.Sleep(6 * time.Second)
	eventually(t, 5*time.Second, func() error {
		for _, o := range owners {
			if err := holds(t, rdb, o, 0); err != nil {
				return err
			}
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // later scans must not move anything

	require.Equal(t, held["deg"], pendingIDs(t, rdb, "live-a"), "the first owner's entries go to the freshest heartbeat")
	require.Equal(t, held["stale-1"], pendingIDs(t, rdb, "live-b"), "the next to the freshest that has none yet")
	require.Equal(t, held["stale-2"], pendingIDs(t, rdb, "live-c"))
	all := pendingIDs(t, rdb, "")
	require.Len(t, all, 12, "every entry is pending, and only under the live consumers")
	length, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(12), length, "claim moves entries; it writes no copies")

	res, err := admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	verdicts := map[string]pelwardenv1.Verdict{}
	for _, c := range res.GetTarget().GetConsumers() {
		verdicts[c.GetName()] = c.GetVerdict()
	}
	require.Equal(t, pelwardenv1.Verdict_VERDICT_DEGRADED, verdicts["deg"], "the degraded owner stays, judged Degraded: it is alive, so never deleted")
	for _, c := range []string{"live-a", "live-b", "live-c"} {
		require.Equal(t, pelwardenv1.Verdict_VERDICT_ALIVE, verdicts[c])
	}
}
