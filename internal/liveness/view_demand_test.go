package liveness

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var demandTarget = Target{GroupRef: GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}, Spec: Spec{Idle: true, GhostIdle: time.Hour}}

// fakeClock is a clock a test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestAPollIsNeverAnsweredFromAReadOlderThanFreshness: a poll within
// Freshness of a read is answered from it; one a nanosecond later reads
// again, and when that read fails gets the error, never the snapshot it
// had: KEDA keeps its fallback rather than scale on a stale number.
func TestAPollIsNeverAnsweredFromAReadOlderThanFreshness(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	var reads atomic.Int64
	var down atomic.Bool
	v := NewView(func(context.Context, Target, []string) (Observation, error) {
		reads.Add(1)
		if down.Load() {
			return Observation{}, errors.New("connection refused")
		}
		return idleFor(time.Second), nil
	}, ViewOptions{Freshness: time.Second, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1, Now: clock.Now})
	ctx := context.Background()

	_, ok, err := v.Poll(demandTarget)
	require.NoError(t, err)
	require.False(t, ok, "no read yet")
	first, err := v.PollWait(ctx, demandTarget)
	require.NoError(t, err)

	clock.advance(time.Second)
	snap, ok, err := v.Poll(demandTarget)
	require.NoError(t, err)
	require.True(t, ok, "a read Freshness old still answers")
	require.Same(t, first, snap)

	clock.advance(time.Nanosecond)
	_, ok, err = v.Poll(demandTarget)
	require.NoError(t, err)
	require.False(t, ok, "a read older than Freshness does not answer")
	_, ok, _ = v.Cached(demandTarget)
	require.False(t, ok, "nor does it for a caller that is not a poll")

	down.Store(true)
	snap, err = v.PollWait(ctx, demandTarget)
	require.Error(t, err, "the read's failure, not the stale snapshot")
	require.Nil(t, snap)
	require.Equal(t, int64(2), reads.Load())
	_, ok, err = v.Poll(demandTarget)
	require.False(t, ok, "after a failed read nothing is at hand: %v", err)
}

// TestIsActiveAfterGetMetricsOfOnePollUsesItsRead: KEDA's IsActive right
// after the GetMetrics of the same poll is answered from the read
// GetMetrics waited for, and many callers waiting at once share one read.
func TestIsActiveAfterGetMetricsOfOnePollUsesItsRead(t *testing.T) {
	t.Parallel()
	var reads atomic.Int64
	v := NewView(func(context.Context, Target, []string) (Observation, error) {
		reads.Add(1)
		time.Sleep(20 * time.Millisecond) // the other callers arrive while it runs
		return idleFor(time.Second), nil
	}, ViewOptions{Freshness: time.Second, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1})
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, ok, err := v.Poll(demandTarget); err == nil && !ok {
				_, err = v.PollWait(context.Background(), demandTarget)
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	_, ok, err := v.Poll(demandTarget) // IsActive
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(1), reads.Load(), "one read for every caller of the poll")
}

// TestAReadThatFoundNoGroupServesOnlyItsOwnPoll: KEDA's IsActive right
// after its GetMetrics shares the read that found no group, but the next
// poll, well within Freshness, reads again, so a group created since is
// seen at once; a group that exists serves that poll from the read.
func TestAReadThatFoundNoGroupServesOnlyItsOwnPoll(t *testing.T) {
	t.Parallel()
	for _, missing := range []bool{true, false} {
		clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
		var reads atomic.Int64
		v := NewView(func(context.Context, Target, []string) (Observation, error) {
			reads.Add(1)
			if missing {
				return Observation{GroupMissing: true, Lag: 30, LagValid: true}, nil
			}
			return idleFor(time.Second), nil
		}, ViewOptions{Freshness: time.Second, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1, Now: clock.Now})
		poll := func() {
			t.Helper()
			_, ok, err := v.Poll(demandTarget)
			require.NoError(t, err)
			if !ok {
				snap, err := v.PollWait(context.Background(), demandTarget)
				require.NoError(t, err)
				require.Equal(t, missing, snap.GroupMissing)
			}
		}
		poll() // GetMetrics
		clock.advance(5 * time.Millisecond)
		poll() // IsActive
		require.Equal(t, int64(1), reads.Load(), "missing %v: GetMetrics and IsActive of one poll share a read", missing)
		clock.advance(300 * time.Millisecond)
		poll() // the HPA's GetMetrics
		want := int64(1)
		if missing {
			want = 2
		}
		require.Equal(t, want, reads.Load(), "missing %v: the next poll within Freshness", missing)
	}
}

// TestATargetNobodyPollsIsNotRead: a target read once, whose consumer
// holds entries with no deadline near, is not read again while nobody
// asks: no background refresh.
func TestATargetNobodyPollsIsNotRead(t *testing.T) {
	t.Parallel()
	var reads atomic.Int64
	v := NewView(func(context.Context, Target, []string) (Observation, error) {
		reads.Add(1)
		return idleFor(time.Second), nil
	}, ViewOptions{Freshness: 20 * time.Millisecond, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1})
	unpin, err := v.Pin(&demandTarget)
	require.NoError(t, err)
	defer unpin()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = v.Run(ctx); close(done) }()
	_, err = v.Snapshot(ctx, demandTarget)
	require.NoError(t, err)
	time.Sleep(500 * time.Millisecond)
	cancel()
	<-done
	require.Equal(t, int64(1), reads.Load(), "read once, when asked")
}

// batchRecorder is a BatchFetcher that keeps the connections of each
// batch once on is set.
type batchRecorder struct {
	on      atomic.Bool
	mu      sync.Mutex
	batches [][]string
}

func (b *batchRecorder) fetch(_ context.Context, reads []Read) []ReadResult {
	conns := make([]string, len(reads))
	out := make([]ReadResult, len(reads))
	for i, r := range reads {
		conns[i] = r.Target.Conn
		out[i] = ReadResult{Obs: idleFor(time.Second)}
	}
	if b.on.Load() {
		b.mu.Lock()
		b.batches = append(b.batches, conns)
		b.mu.Unlock()
	}
	return out
}

// TestReadsDueTogetherGoInOneBatchPerConnection: 60 groups on two
// connections, polled together every 100ms: the reads ahead of a round
// go to Redis in a batch per connection, not one round trip per group.
func TestReadsDueTogetherGoInOneBatchPerConnection(t *testing.T) {
	t.Parallel()
	const perConn, rounds = 30, 10
	b := &batchRecorder{}
	var ahead atomic.Int64
	v := NewView(nil, ViewOptions{Freshness: 200 * time.Millisecond, FetchTimeout: time.Second, FetchBatch: b.fetch,
		Expiry: time.Hour, MaxTargets: 2 * perConn, OnRead: func(c ReadCause) {
			if c == ReadAhead {
				ahead.Add(1)
			}
		}})
	var targets []Target
	for _, conn := range []string{"a", "b"} {
		for i := range perConn {
			targets = append(targets, Target{GroupRef: GroupRef{Conn: conn, Stream: "s" + strconv.Itoa(i), Group: "g"}, Spec: Spec{Idle: true, GhostIdle: time.Hour}})
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = v.Run(ctx); close(done) }()
	for round := range rounds {
		for _, tg := range targets {
			if _, ok, err := v.Poll(tg); err == nil && !ok {
				_, err = v.PollWait(ctx, tg)
				require.NoError(t, err)
			}
		}
		if round == 0 {
			b.on.Store(true) // the first round reads each group as it registers it
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	<-done

	b.mu.Lock()
	defer b.mu.Unlock()
	reads := 0
	for _, batch := range b.batches {
		for _, conn := range batch {
			require.Equal(t, batch[0], conn, "a batch reads one connection: %v", batch)
		}
		reads += len(batch)
	}
	require.GreaterOrEqual(t, ahead.Load(), int64((rounds/2-2)*2*perConn), "the groups are read ahead of their polls")
	require.Positive(t, reads)
	require.GreaterOrEqual(t, float64(reads)/float64(len(b.batches)), 10.0,
		"%d reads in %d round trips: the reads due together share one", reads, len(b.batches))
}

// threeBeating is a group of three workers holding entries whose
// heartbeats are read from beat (Unix ms), and the reads of their keys.
type threeBeating struct {
	beat atomic.Int64
}

var threeNames = []string{"w1", "w2", "w3"}

func (f *threeBeating) fetch(context.Context, Target, []string) (Observation, error) {
	now := time.Now()
	obs := Observation{ServerTime: now, ReadAt: now, LagValid: true, PendingByConsumer: map[string]int64{}, Heartbeats: map[string]HeartbeatObs{}}
	for _, n := range threeNames {
		obs.Consumers = append(obs.Consumers, ConsumerObs{Name: n, Pending: 2, Inactive: -1})
		obs.PendingByConsumer[n] = 2
		obs.Heartbeats["hb:"+n] = HeartbeatObs{Value: strconv.FormatInt(f.beat.Load(), 10), Exists: true}
	}
	return obs, nil
}

func (f *threeBeating) confirm(_ context.Context, _ Target, keys []string) (Observation, error) {
	now := time.Now()
	obs := Observation{ServerTime: now, ReadAt: now, Heartbeats: map[string]HeartbeatObs{}}
	for _, k := range keys {
		obs.Heartbeats[k] = HeartbeatObs{Value: strconv.FormatInt(f.beat.Load(), 10), Exists: true}
	}
	return obs, nil
}

// TestTheBreakerHoldsWorkersWhoseBeatsStopTogetherWhileOnlyTheirKeysAreRead:
// nobody polls the group, so between lapses the view reads the three
// workers' heartbeat keys alone; when every beat stops at once, the
// breaker counts them Alive as of those reads, and holds them Unknown,
// as it would with the group read every moment.
func TestTheBreakerHoldsWorkersWhoseBeatsStopTogetherWhileOnlyTheirKeysAreRead(t *testing.T) {
	t.Parallel()
	f := &threeBeating{}
	f.beat.Store(time.Now().UnixMilli())
	var byBeats atomic.Int64
	v := NewView(f.fetch, ViewOptions{Freshness: time.Hour, FetchTimeout: 5 * time.Second, Expiry: time.Hour, MaxTargets: 1,
		Confirm: f.confirm, OnLook: func(b bool) {
			if b {
				byBeats.Add(1)
			}
		}})
	tg := Target{GroupRef: demandTarget.GroupRef, Spec: Spec{Heartbeat: true, HeartbeatKey: "hb:{consumer}", HeartbeatMaxAge: 600 * time.Millisecond, StartGrace: time.Second}}
	ch, stop, err := v.Subscribe(tg)
	require.NoError(t, err)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = v.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	_, err = v.Snapshot(ctx, tg)
	require.NoError(t, err)
	<-ch

	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		time.Sleep(150 * time.Millisecond)
		f.beat.Store(time.Now().UnixMilli())
	}
	require.Positive(t, byBeats.Load(), "the lapses were looked at by the keys alone")
	for {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("the lapse was not looked at")
		}
		s, ok := v.Peek(tg)
		require.True(t, ok)
		if s.Consumers[0].Heartbeat == HeartbeatFresh {
			continue
		}
		require.Equal(t, 3, s.BreakerState().Held, "the three turned Ghost together on their beats alone: held Unknown")
		require.Equal(t, int64(6), s.LivePending)
		return
	}
}

// TestADeadlineIsLookedAtOnlyForATargetAHolderWatches: a consumer holding
// entries turns Ghost 200ms after the read; a target only polled is not
// read at that instant (its next poll reads it), the hygiene loop's
// pinned target is.
func TestADeadlineIsLookedAtOnlyForATargetAHolderWatches(t *testing.T) {
	t.Parallel()
	for name, pin := range map[string]bool{"only polled": false, "pinned": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var reads atomic.Int64
			start := time.Now()
			v := NewView(func(context.Context, Target, []string) (Observation, error) {
				reads.Add(1)
				return idleFor(800*time.Millisecond + time.Since(start)), nil
			}, ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1})
			tg := Target{GroupRef: demandTarget.GroupRef, Spec: Spec{Idle: true, GhostIdle: time.Second}}
			if pin {
				unpin, err := v.Pin(&tg)
				require.NoError(t, err)
				defer unpin()
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = v.Run(ctx); close(done) }()
			_, err := v.PollWait(ctx, tg)
			require.NoError(t, err)
			time.Sleep(600 * time.Millisecond)
			cancel()
			<-done
			want := int64(1)
			if pin {
				want = 2
			}
			require.Equal(t, want, reads.Load())
		})
	}
}
