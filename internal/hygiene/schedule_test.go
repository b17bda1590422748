package hygiene

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// clock is a test clock that moves only when told, safe to read from the
// loop's goroutines.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

func TestTargetsComeUpInTheOrderTheyAreDue(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var c clock
	l := newLoopOn(t, srv.Addr(), time.Second, nil, prometheus.NewRegistry(), func(o *Options) { o.Now = c.now })
	for _, s := range []string{"c", "a", "b"} {
		require.NoError(t, l.Add(target(t, "stream", s), false))
		c.advance(time.Second)
	}
	var order []string
	for {
		r, wait := l.next(c.now())
		if r == nil {
			require.Equal(t, idleWait, wait, "nothing left queued")
			break
		}
		order = append(order, r.t.Target.Stream)
	}
	require.Equal(t, []string{"c", "a", "b"}, order, "first added, first due")

	r := l.targets[target(t, "stream", "a").Target.GroupRef]
	r.scanning = false
	r.due = c.now().Add(time.Minute)
	l.mu.Lock()
	l.queue.Push(r)
	l.mu.Unlock()
	got, wait := l.next(c.now())
	require.Nil(t, got, "not due for a minute")
	require.InDelta(t, time.Minute, wait, float64(time.Second))
}

func TestRequestsPastTheCapAreRefusedAndTargetsFromConfigurationAlwaysAccepted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	reg := prometheus.NewRegistry()
	l := newLoopOn(t, srv.Addr(), time.Second, nil, reg, func(o *Options) { o.MaxTargets = 3 })
	for i := range 3 {
		require.NoError(t, l.Add(target(t, "stream", fmt.Sprint("s", i)), false))
	}
	err := l.Add(target(t, "stream", "one-too-many"), false)
	require.ErrorIs(t, err, ErrFull)
	require.Contains(t, err.Error(), "hygiene.maxTargets is 3")
	_, ok := l.Lookup("default", "one-too-many", "workers")
	require.False(t, ok, "a refused request enrolls nothing")

	require.NoError(t, l.Add(target(t, "stream", "s0", "dryRun", "true"), false), "a target already enrolled is seen again past the cap")
	require.NoError(t, l.Add(target(t, "stream", "configured"), true), "configuration is not bound by the cap")
	require.Equal(t, 4, targetCount(l))
	require.InDelta(t, 1, testutil.ToFloat64(l.metrics.refused), 0, "the refusal is counted")
	n, err := testutil.GatherAndCount(reg, "pelwarden_hygiene_targets")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.InDelta(t, 4, gaugeValue(t, reg, "pelwarden_hygiene_targets"), 0)
}

// TestScansRunOnTheWorkerPoolNotAGoroutinePerTarget: 300 targets, scanned
// every 20ms by 2 workers: the goroutines stay within the pool, the
// dispatcher, the lease keeper and one view read per worker.
func TestScansRunOnTheWorkerPoolNotAGoroutinePerTarget(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const n, workers = 300, 2
	l := newLoopOn(t, srv.Addr(), time.Hour, nil, prometheus.NewRegistry(), func(o *Options) {
		o.Workers, o.ScanInterval = workers, 20*time.Millisecond
	})
	for i := range n {
		stream := fmt.Sprint("s", i)
		redistest.CreateGroup(t, rdb, stream, "workers")
		require.NoError(t, l.Add(target(t, "stream", stream), false))
	}
	runtime.GC()
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { l.Run(ctx) })
	most := 0
	for range 50 {
		most = max(most, runtime.NumGoroutine())
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	require.LessOrEqual(t, most-base, 2*workers+2+2, "workers, their view reads, the dispatcher, the lease keeper, and the wait group's own")
	left, err := srv.Client(t).Exists(context.Background(), leaseKey(target(t, "stream", "s0").Target)).Result()
	require.NoError(t, err)
	require.Zero(t, left, "the leases are given up at shutdown")
}

// TestLeasesOfAConnectionAreRenewedInOneRoundTrip: one pipeline holds the
// leases of every target on the connection; a second replica finds them
// all held, and takes them once the first gives them up.
func TestLeasesOfAConnectionAreRenewedInOneRoundTrip(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := newLoop(t, srv.Addr())
	b := newLoopOn(t, srv.Addr(), time.Second, nil, prometheus.NewRegistry(), func(o *Options) { o.Identity = "other" })
	for i := range 50 {
		tg := target(t, "stream", fmt.Sprint("s", i))
		require.NoError(t, a.Add(tg, false))
		require.NoError(t, b.Add(tg, false))
	}
	for _, l := range []*Loop{a, b} {
		for _, r := range l.targets {
			r.busy = true // each had work at its last turn
		}
	}
	ctx := context.Background()
	a.renewAll(ctx) // loads the script into Redis's cache
	c, _ := a.conns.Get("default")
	var trips roundTrips
	c.AddHook(&trips)
	a.renewAll(ctx)
	require.Equal(t, int64(1), trips.pipelines.Load(), "one round trip for the connection")
	require.Zero(t, trips.single.Load())
	b.renewAll(ctx)
	for _, l := range []*Loop{a, b} {
		for _, r := range l.targets {
			require.Equal(t, l == a, r.leader, "%s: a took every lease first", r.t.Target.Stream)
		}
	}
	a.releaseAll(ctx)
	b.renewAll(ctx)
	for _, r := range b.targets {
		require.True(t, r.leader, "%s: released, so b has it", r.t.Target.Stream)
	}
}

// TestAnExpiredTargetLeavesNoSeriesNorLeaseBehind: a target scanned is
// expired while the loop runs; its series, its lease
// and its error log state go with it.
func TestAnExpiredTargetLeavesNoSeriesNorLeaseBehind(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "ghost", "x", 5)
	redistest.CreateGroup(t, rdb, "kept", "workers")
	time.Sleep(300 * time.Millisecond)
	var c clock
	reg := prometheus.NewRegistry()
	l := newLoopOn(t, srv.Addr(), time.Hour, nil, reg, func(o *Options) { o.Now, o.Expiry = c.now, time.Minute })
	// A dry run: the ghost keeps its entries, so every turn has work and
	// holds the lease.
	require.NoError(t, l.Add(target(t, "dryRun", "true"), false))
	require.NoError(t, l.Add(target(t, "stream", "kept"), true))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { l.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	require.Eventually(t, func() bool {
		return strings.Contains(seriesText(t, reg, l), `stream="jobs"`) && rdb.Exists(ctx, leaseKey(target(t).Target)).Val() == 1
	}, 5*time.Second, 10*time.Millisecond, "the scans left series, and the lease is held")

	c.advance(2 * time.Minute)
	require.Eventually(t, func() bool { return targetCount(l) == 1 }, 5*time.Second, 10*time.Millisecond, "the request's target expired")
	require.Eventually(t, func() bool { return rdb.Exists(ctx, leaseKey(target(t).Target)).Val() == 0 }, 5*time.Second, 10*time.Millisecond, "its lease is given up")
	require.NotContains(t, seriesText(t, reg, l), `stream="jobs"`)
	_, kept := l.Lookup("default", "kept", "workers")
	require.True(t, kept, "the target from configuration stays")
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

func targetCount(l *Loop) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.targets)
}

// seriesText lists the registry's series and the loop's per-group ones,
// one a line, with their labels.
func seriesText(t *testing.T, reg *prometheus.Registry, l *Loop) string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var b strings.Builder
	for _, s := range l.Series() {
		fmt.Fprintf(&b, "group=%q redis=%q stream=%q pelwarden_hygiene_leader\n", s.Group.Group, s.Group.Conn, s.Group.Stream)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				fmt.Fprintf(&b, "%s=%q ", lp.GetName(), lp.GetValue())
			}
			b.WriteString(mf.GetName() + "\n")
		}
	}
	return b.String()
}

// roundTrips counts the commands a client sends alone and the pipelines.
type roundTrips struct{ single, pipelines atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.single.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		return next(ctx, cmds)
	}
}

// TestAnIdleGroupIsNotScannedWhileTheViewShowsNothingToDo: the view reads
// both groups every 20ms, the scan interval is 300ms; only the one with a
// ghost holding entries is scanned every interval, the idle one costs no
// scan. (A view read late by a whole interval, on a machine that busy,
// would let one scan of the idle group through.)
func TestAnIdleGroupIsNotScannedWhileTheViewShowsNothingToDo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "ghost", "x", 3)
	redistest.CreateGroup(t, rdb, "idle", "workers")
	reg := prometheus.NewRegistry()
	l := newLoopOn(t, srv.Addr(), 20*time.Millisecond, nil, reg, func(o *Options) { o.ScanInterval = 300 * time.Millisecond })
	require.NoError(t, l.Add(target(t, "dryRun", "true"), false))
	require.NoError(t, l.Add(target(t, "stream", "idle"), false))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = l.view.Run(ctx) })
	wg.Go(func() { l.Run(ctx) })
	time.Sleep(1500 * time.Millisecond) // five intervals
	cancel()
	wg.Wait()
	count := func(stream string) float64 {
		for _, s := range l.Series() {
			if s.Group.Stream == stream {
				return float64(s.Scans)
			}
		}
		return 0
	}
	require.GreaterOrEqual(t, count("jobs"), 3.0, "the group with a ghost is scanned every interval")
	require.LessOrEqual(t, count("idle"), 1.0, "the idle group at most once, before the view had read it")
}

// TestAGhostSeenWhileATurnRunsIsScannedAtOnce: a turn's scan reads the
// group while its consumer is still alive; before the turn ends, a newer
// read shows that consumer turned Ghost. The target must be due at once,
// not an interval later, and the next turn gives the entries back.
func TestAGhostSeenWhileATurnRunsIsScannedAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "slow", "x", 3)
	tg := target(t) // ghostIdle 0.2s: slow is alive now, a ghost soon
	read := make(chan liveness.Observation, 1)
	release := make(chan struct{})
	var block atomic.Bool
	block.Store(true)
	l := newLoopFetching(t, srv.Addr(), time.Hour, nil, prometheus.NewRegistry(), func(o *Options) { o.ScanInterval = time.Hour },
		func(next liveness.Fetcher) liveness.Fetcher {
			return func(ctx context.Context, t liveness.Target, known []string) (liveness.Observation, error) {
				obs, err := next(ctx, t, known)
				if block.CompareAndSwap(true, false) { // the turn's own read: hold it until told
					read <- obs
					<-release
				}
				return obs, err
			}
		})
	require.NoError(t, l.Add(tg, false))
	r, _ := l.next(time.Now())
	require.NotNil(t, r, "a new target is due at once")

	turn := make(chan struct{})
	go func() { l.scanRunner(context.Background(), r); close(turn) }()
	obs := <-read
	require.Equal(t, liveness.Alive, liveness.Build(&tg.Target, obs, nil, time.Now()).Consumers[0].Verdict, "the turn decides on a read where slow is alive")

	time.Sleep(300 * time.Millisecond) // slow passes ghostIdle
	later, err := (&redisx.Reader{Conns: l.conns, LagEstimateCap: 1000}).Fetch(context.Background(), tg.Target, nil)
	require.NoError(t, err)
	snap := liveness.Build(&tg.Target, later, nil, time.Now())
	require.Equal(t, liveness.Ghost, snap.Consumers[0].Verdict)
	l.Observe(tg.Target, snap) // the newer read lands while the turn runs
	close(release)
	<-turn

	require.Equal(t, int64(3), pendingOf(t, rdb)["slow"], "the turn decided on the older read and gave nothing back")
	again, wait := l.next(time.Now())
	require.NotNil(t, again, "the ghost seen during the turn brings the next turn to now (it waits %s otherwise)", wait)
	// The read Observe was given stands for one of the view's own, which
	// the view holds as its latest: bring the view there too.
	_, err = l.view.Refresh(context.Background(), tg.Target)
	require.NoError(t, err)
	l.scanRunner(context.Background(), again)
	require.Zero(t, pendingOf(t, rdb)["slow"], "the next turn gives back what slow held")
	copies := jobsInStream(t, rdb)
	require.Equal(t, map[string]int{"x0": 2, "x1": 2, "x2": 2}, copies, "each job: the original and one copy")
	_, wait = l.next(time.Now())
	require.Greater(t, wait, time.Minute, "then the target waits its interval: no turn after turn")
}

// TestAGivenUpLeaseIsReleasedUnlessItsGroupHoldsItAgain: the lease keeper
// releases the keys of groups that gave theirs up, but keeps the key of a
// group that took its lease again before the round trip.
func TestAGivenUpLeaseIsReleasedUnlessItsGroupHoldsItAgain(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	l := newLoopOn(t, srv.Addr(), time.Hour, nil, prometheus.NewRegistry(), nil)
	again, idle := target(t, "stream", "again"), target(t, "stream", "idle")
	for _, tg := range []Target{again, idle} {
		require.NoError(t, l.Add(tg, false))
		require.NoError(t, rdb.Set(ctx, leaseKey(tg.Target), l.holder.String(), time.Minute).Err())
	}
	l.mu.Lock()
	for _, tg := range []Target{again, idle} {
		l.dropLease(l.targets[tg.Target.GroupRef])
	}
	l.targets[again.Target.GroupRef].leader = true // took it again meanwhile
	l.mu.Unlock()
	l.releaseRemoved(ctx)
	require.Equal(t, int64(1), rdb.Exists(ctx, leaseKey(again.Target)).Val(), "the group holding its lease again keeps the key")
	require.Equal(t, int64(0), rdb.Exists(ctx, leaseKey(idle.Target)).Val(), "the idle group's key is released")
	l.mu.Lock()
	require.Empty(t, l.release, "a round trip takes every pending release")
	l.mu.Unlock()
}

// TestAWarmingTargetComesUpOnlyWhenItsWarmUpEnds: a target whose ActFrom
// lies ahead is not handed to a worker, however often a ghost moves it
// forward, and comes up at its ActFrom; moving ActFrom later puts it back.
func TestAWarmingTargetComesUpOnlyWhenItsWarmUpEnds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var c clock
	l := newLoopOn(t, srv.Addr(), time.Second, nil, prometheus.NewRegistry(), func(o *Options) { o.Now = c.now })
	warming := target(t)
	warming.ActFrom, warming.WarmUp = c.now().Add(time.Minute), reason("trigger jobs/a joined")
	require.NoError(t, l.Add(warming, false))
	require.NoError(t, l.Add(target(t, "stream", "configured"), true))

	r, _ := l.next(c.now())
	require.Equal(t, "configured", r.t.Target.Stream, "a target with no warm-up comes up at once")
	got, wait := l.next(c.now())
	require.Nil(t, got, "the warming target waits")
	require.InDelta(t, time.Minute, wait, float64(time.Second), "until its ActFrom")

	w := l.targets[warming.Target.GroupRef]
	l.mu.Lock()
	w.due = c.now() // as Observe does for a new ghost
	heap.Fix(&l.queue, w.index)
	l.mu.Unlock()
	got, _ = l.next(c.now())
	require.Nil(t, got, "a ghost does not cut the warm-up short")

	c.advance(30 * time.Second)
	later := warming
	later.ActFrom = c.now().Add(time.Minute) // another trigger joined
	require.NoError(t, l.Add(later, false))
	c.advance(31 * time.Second)
	got, _ = l.next(c.now())
	require.Nil(t, got, "the warm-up started again when the group changed")
	c.advance(30 * time.Second)
	got, _ = l.next(c.now())
	require.NotNil(t, got, "and ends a minute after the change")
	require.Equal(t, "jobs", got.t.Target.Stream)
	ht, ok := l.Lookup("default", "jobs", "workers")
	require.True(t, ok)
	require.Equal(t, "trigger jobs/a joined", ht.Why(), "Lookup shows why it waited")
	require.Empty(t, Target{}.Why(), "a target that never waited says nothing")
}

// reason is a warm-up's why as the registry's *WarmUp gives it.
type reason string

func (r reason) String() string { return string(r) }

// TestATurnRedisDidNotAnswerIsRetriedSoonBackingOff: a turn whose read
// fails is due again a quarter second on, then half a second, not a scan
// interval (an hour here) later; the first turn Redis answers gives the
// ghost's entries back, and the target then waits its interval again.
func TestATurnRedisDidNotAnswerIsRetriedSoonBackingOff(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "gone", "x", 2)
	time.Sleep(300 * time.Millisecond) // gone passes ghostIdle, its entries entryStale
	var fail atomic.Bool
	fail.Store(true)
	l := newLoopFetching(t, srv.Addr(), time.Hour, nil, prometheus.NewRegistry(), func(o *Options) { o.ScanInterval = time.Hour },
		func(next liveness.Fetcher) liveness.Fetcher {
			return func(ctx context.Context, t liveness.Target, known []string) (liveness.Observation, error) {
				if fail.Load() {
					return liveness.Observation{}, errors.New("connection refused")
				}
				return next(ctx, t, known)
			}
		})
	require.NoError(t, l.Add(target(t), false))
	r, _ := l.next(time.Now())
	require.NotNil(t, r, "a new target is due at once")

	for _, want := range []time.Duration{retryFirst, 2 * retryFirst} {
		l.scanRunner(context.Background(), r)
		_, wait := l.next(time.Now())
		require.LessOrEqual(t, wait, want, "a failed turn is retried within %s", want)
		require.Greater(t, wait, want/2, "the retries back off")
		time.Sleep(wait)
		r, _ = l.next(time.Now())
		require.NotNil(t, r, "the retry is due")
	}
	require.Equal(t, int64(2), pendingOf(t, rdb)["gone"], "no failed turn gave anything back")

	fail.Store(false)
	l.scanRunner(context.Background(), r)
	require.Zero(t, pendingOf(t, rdb)["gone"], "the turn Redis answered gives the ghost's entries back")
	_, wait := l.next(time.Now())
	require.Greater(t, wait, time.Minute, "then the target waits its interval again")
}
