package hygiene

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// newLoop builds a hygiene loop over a real Redis with its own view.
func newLoop(t *testing.T, addr string) *Loop {
	t.Helper()
	return newLoopRefreshing(t, addr, time.Second, nil)
}

// newLoopRefreshing is newLoop with the view answering from reads within
// fresh, and its engine publishing to bus.
func newLoopRefreshing(t *testing.T, addr string, fresh time.Duration, bus *events.Bus) *Loop {
	t.Helper()
	return newLoopOn(t, addr, fresh, bus, prometheus.NewRegistry(), nil)
}

// newLoopOn is newLoopRefreshing with its metrics on reg and its options
// tuned.
func newLoopOn(t *testing.T, addr string, fresh time.Duration, bus *events.Bus, reg *prometheus.Registry, tune func(*Options)) *Loop {
	t.Helper()
	return newLoopFetching(t, addr, fresh, bus, reg, tune, nil)
}

// newLoopFetching is newLoopOn with the view's reads passed through wrap,
// when not nil.
func newLoopFetching(t *testing.T, addr string, fresh time.Duration, bus *events.Bus, reg *prometheus.Registry, tune func(*Options), wrap func(liveness.Fetcher) liveness.Fetcher) *Loop {
	t.Helper()
	r := config.DefaultRedis("default", addr)
	r.IdleBefore72 = config.IdleGhost // idle-only ghosts on Redis 7.0 too
	conns, err := redisx.Open([]config.Redis{r})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	reader := &redisx.Reader{Conns: conns, LagEstimateCap: 1000}
	fetch := liveness.Fetcher(reader.Fetch)
	if wrap != nil {
		fetch = wrap(fetch)
	}
	var l *Loop
	view := liveness.NewView(fetch, liveness.ViewOptions{
		Freshness: fresh, FetchTimeout: 5 * time.Second, Expiry: time.Hour, MaxTargets: 1000,
		OnRefresh: func(t liveness.Target, s *liveness.Snapshot, err error, _ time.Duration) {
			if err == nil {
				l.Observe(t, s)
			}
		},
	})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine, err := reclaim.New(reclaim.Options{View: view, Events: bus, BatchSize: 100, Log: log}, reg)
	require.NoError(t, err)
	opts := Options{
		ScanInterval: 50 * time.Millisecond, LeaseTTL: time.Second, Identity: t.Name(),
		Expiry: time.Hour, Log: log, Engine: engine,
	}
	if tune != nil {
		tune(&opts)
	}
	l = New(view, conns, opts, reg)
	return l
}

func target(t *testing.T, kv ...string) Target {
	t.Helper()
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "reclaim": "requeue", "entryStaleSeconds": "0.05",
		"ghostIdleSeconds": "0.2"}
	for i := 0; i+1 < len(kv); i += 2 {
		md[kv[i]] = kv[i+1]
	}
	r, err := metadata.Parse(md, metadata.Env{Conns: []string{"default"}})
	require.NoError(t, err)
	return Target{Target: r.Target, Hygiene: r.Hygiene}
}

// jobsInStream counts the stream's entries per job field.
func jobsInStream(t *testing.T, rdb *redis.Client) map[string]int {
	t.Helper()
	all, err := rdb.XRange(context.Background(), "jobs", "-", "+").Result()
	require.NoError(t, err)
	out := map[string]int{}
	for _, e := range all {
		out[e.Values["job"].(string)]++
	}
	return out
}

func pendingOf(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	p, err := rdb.XPending(context.Background(), "jobs", "workers").Result()
	require.NoError(t, err)
	return p.Consumers
}

func TestScanRequeuesAGhostsWholePELThenDeletesTheGhost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "ghost", "g", 250) // more than two pages of 100
	time.Sleep(300 * time.Millisecond)
	l := newLoop(t, srv.Addr())
	tg := target(t)

	rep, err := l.Scan(context.Background(), tg)
	require.NoError(t, err)
	require.Equal(t, int64(250), rep.Counts()[redisx.Requeued])
	require.Empty(t, pendingOf(t, rdb), "nothing is left in the ghost's PEL")
	for job, n := range jobsInStream(t, rdb) {
		require.Equal(t, 2, n, "job %s: the original and exactly one copy", job)
	}

	time.Sleep(100 * time.Millisecond)
	rep, err = l.Scan(context.Background(), tg)
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Counts()[redisx.ConsumerDeleted], "the ghost goes once its PEL is empty")
	consumers, err := rdb.XInfoConsumers(context.Background(), "jobs", "workers").Result()
	require.NoError(t, err)
	require.Empty(t, consumers)
}

// TestSlowLiveConsumerIsNeverReclaimed: a worker with a fresh heartbeat
// holds an entry ten times the stale threshold (a long job).
func TestSlowLiveConsumerIsNeverReclaimed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ids := redistest.Hold(t, rdb, "jobs", "workers", "slow", "s", 1)
	l := newLoop(t, srv.Addr())
	tg := target(t, "liveness", "heartbeat", "heartbeatKey", "hb:{consumer}", "heartbeatMaxAgeSeconds", "0.3", "entryStaleSeconds", "0.1")
	ctx := context.Background()
	deadline := time.Now().Add(10 * tg.Hygiene.EntryStale).Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		require.NoError(t, rdb.Set(ctx, "hb:slow", time.Now().UnixMilli(), 0).Err())
		_, err := l.Scan(ctx, tg)
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond)
	}
	ext, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err)
	require.Len(t, ext, 1)
	require.Equal(t, ids[0], ext[0].ID)
	require.Equal(t, "slow", ext[0].Consumer)
	require.Greater(t, ext[0].Idle, 10*tg.Hygiene.EntryStale, "held ten times the stale threshold")
	require.Equal(t, map[string]int{"s0": 1}, jobsInStream(t, rdb), "no copy was made")

	// The same worker with its heartbeat gone stale is a ghost: the test
	// would pass vacuously if the scan could not reclaim at all.
	time.Sleep(400 * time.Millisecond)
	rep, err := l.Scan(ctx, tg)
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Counts()[redisx.Requeued])
}

// TestUnknownOwnerLeadsToNoAction: the owner's heartbeat cannot be read.
func TestUnknownOwnerLeadsToNoAction(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "unreadable", "u", 5)
	require.NoError(t, rdb.HSet(context.Background(), "hb:unreadable", "at", "yesterday").Err())
	time.Sleep(500 * time.Millisecond)
	l := newLoop(t, srv.Addr())
	tg := target(t, "liveness", "heartbeat", "heartbeatKey", "hb:{consumer}", "heartbeatMaxAgeSeconds", "0.1", "hardTimeoutSeconds", "0.1")
	rep, err := l.Scan(context.Background(), tg)
	require.NoError(t, err)
	require.Equal(t, int64(5), rep.Counts()[redisx.OwnerUnknown])
	require.Zero(t, rep.Counts()[redisx.Requeued])
	require.Equal(t, map[string]int64{"unreadable": 5}, pendingOf(t, rdb))
	require.Len(t, jobsInStream(t, rdb), 5)
	for _, n := range jobsInStream(t, rdb) {
		require.Equal(t, 1, n)
	}
}

// TestTwoHygieneInstancesActOnEachEntryOnce: two loops with their own
// views (two replicas; the lease deliberately bypassed) scan the same ghost
// at once. Counting copies in the stream shows each entry acted on once.
func TestTwoHygieneInstancesActOnEachEntryOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const n = 3000
	redistest.Hold(t, rdb, "jobs", "workers", "ghost", "j", n)
	time.Sleep(300 * time.Millisecond)
	loops := []*Loop{newLoop(t, srv.Addr()), newLoop(t, srv.Addr())}
	tg := target(t)
	reps := make([]reclaim.Report, 2)
	var wg sync.WaitGroup
	for i, l := range loops {
		wg.Go(func() {
			rep, err := l.Scan(context.Background(), tg)
			if err != nil {
				t.Error(err)
			}
			reps[i] = rep
		})
	}
	wg.Wait()
	require.Equal(t, int64(n), reps[0].Counts()[redisx.Requeued]+reps[1].Counts()[redisx.Requeued], "requeued once in total")
	jobs := jobsInStream(t, rdb)
	require.Len(t, jobs, n)
	for job, c := range jobs {
		require.Equal(t, 2, c, "job %s: the original and one copy", job)
	}
	require.Empty(t, pendingOf(t, rdb))
}

func TestDeletedPendingEntryIsATombstoneNotRequeued(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "t", 3)
	require.NoError(t, rdb.XDel(context.Background(), "jobs", ids[1]).Err())
	time.Sleep(300 * time.Millisecond)
	rep, err := newLoop(t, srv.Addr()).Scan(context.Background(), target(t))
	require.NoError(t, err)
	require.Equal(t, int64(1), rep.Counts()[redisx.Tombstoned])
	require.Equal(t, int64(2), rep.Counts()[redisx.Requeued])
	require.Equal(t, map[string]int{"t0": 2, "t2": 2}, jobsInStream(t, rdb), "no copy of the deleted entry")
	require.Empty(t, pendingOf(t, rdb))
}

func TestDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "ghost", "d", 120)
	time.Sleep(300 * time.Millisecond)
	rep, err := newLoop(t, srv.Addr()).Scan(context.Background(), target(t, "dryRun", "true"))
	require.NoError(t, err)
	require.True(t, rep.DryRun)
	require.Equal(t, int64(120), rep.Counts()[redisx.Requeued], "reports what it would do")
	require.Equal(t, map[string]int64{"ghost": 120}, pendingOf(t, rdb))
	require.Len(t, jobsInStream(t, rdb), 120)
}

func TestClaimModeHandsEntriesToTheLiveConsumer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "ghost", "c", 4)
	time.Sleep(300 * time.Millisecond)
	redistest.Hold(t, rdb, "jobs", "workers", "live", "l", 1) // read just now: Alive under the idle source
	rep, err := newLoop(t, srv.Addr()).Scan(context.Background(), target(t, "reclaim", "claim", "ghostIdleSeconds", "0.25"))
	require.NoError(t, err)
	require.Equal(t, int64(4), rep.Counts()[redisx.Claimed])
	require.Equal(t, map[string]int64{"live": 5}, pendingOf(t, rdb))
}

// TestANewGhostIsReclaimedWithoutWaitingForTheScan: the scan interval is an
// hour; a poll's read shows a new consumer holding entries, and the loop
// acts because the view looked again at the instant it turned Ghost.
// runLoop runs l and its view until the test ends.
func runLoop(t *testing.T, l *Loop) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = l.view.Run(ctx) })
	wg.Go(func() { l.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func TestANewGhostIsReclaimedWithoutWaitingForTheScan(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	l := newLoopRefreshing(t, srv.Addr(), 50*time.Millisecond, nil)
	l.opts.ScanInterval = time.Hour
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	require.NoError(t, l.Add(target(t, "ghostIdleSeconds", "0.3"), true))
	runLoop(t, l)

	time.Sleep(200 * time.Millisecond) // the first scan has run and found nothing
	redistest.Hold(t, rdb, "jobs", "workers", "ghost", "n", 10)
	_, err := l.view.Snapshot(context.Background(), target(t, "ghostIdleSeconds", "0.3").Target) // a poll
	require.NoError(t, err)
	deadline := time.Now().Add(5 * time.Second)
	for len(pendingOf(t, rdb)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.Empty(t, pendingOf(t, rdb), "requeued once the ghost was seen, not an hour later")
	for job, n := range jobsInStream(t, rdb) {
		require.Equal(t, 2, n, "job %s", job)
	}
}

func TestOneScannerPerGroupWhoseSettingsFollowTheLatestRequest(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l := newLoop(t, srv.Addr())
	require.NoError(t, l.Add(target(t), false))
	require.NoError(t, l.Add(target(t, "dryRun", "true"), false))
	require.Len(t, l.targets, 1, "one scanner per group")
	for _, r := range l.targets {
		require.True(t, r.t.Hygiene.DryRun, "the latest settings win")
	}
	require.NoError(t, l.Add(target(t, "reclaim", "off"), false))
	require.Len(t, l.targets, 1, "another ScaledObject on the group with reclaim off does not stop hygiene")
	require.NoError(t, l.Add(target(t, "liveness", "heartbeat", "heartbeatKey", "hb:{consumer}"), false))
	require.Len(t, l.targets, 1, "new liveness settings replace the scanner")
	l.opts.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	l.next(l.opts.Now())
	require.Empty(t, l.targets, "a group no request asks to reclaim expires")
	l.opts.Now = time.Now

	require.NoError(t, l.Add(target(t, "maxDeliveries", "3"), true))
	require.NoError(t, l.Add(target(t, "reclaim", "off"), false))
	require.Len(t, l.targets, 1, "a request cannot remove a target from configuration")
	for _, r := range l.targets {
		require.Equal(t, int64(3), r.t.Hygiene.MaxDeliveries)
	}
}

// TestScanPublishesOneEventPerBatchOutcomeAndPerDeletion: 250 entries in
// pages of 100 are three requeue events; the deletion is a fourth.
func TestScanPublishesOneEventPerBatchOutcomeAndPerDeletion(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "ghost", "e", 250)
	time.Sleep(300 * time.Millisecond)
	bus := events.NewBus(events.Options{}, prometheus.NewRegistry())
	l := newLoopRefreshing(t, srv.Addr(), time.Second, bus)
	watch, stop, err := bus.Subscribe(nil)
	require.NoError(t, err)
	defer stop()
	tg := target(t)
	_, err = l.Scan(context.Background(), tg)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	_, err = l.Scan(context.Background(), tg)
	require.NoError(t, err)

	recent := bus.Recent(tg.Target.GroupRef)
	type seen struct {
		action  redisx.Outcome
		entries int64
	}
	got := make([]seen, 0, len(recent))
	for _, e := range recent {
		require.Equal(t, events.SourceHygiene, e.Source)
		require.Equal(t, "ghost", e.Consumer)
		got = append(got, seen{e.Action, e.Entries})
	}
	require.Equal(t, []seen{{redisx.ConsumerDeleted, 1}, {redisx.Requeued, 50}, {redisx.Requeued, 100}, {redisx.Requeued, 100}}, got, "newest first")
	require.Equal(t, redisx.Requeued, (<-watch).Action, "a subscriber sees them as they happen")
}
