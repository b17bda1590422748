package hygiene

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// TestAnEntryTurningStaleUnderAGhostIsRequeuedAtItsDeadline: the owner's
// heartbeat is an hour old, but pelwarden has only just started reading
// its node, so the owner is Unknown for one max age (the outage rule);
// its entries were delivered just now. With the view's refresh and the
// scan an hour apart, only the deadlines can act within the test: the
// view's at the end of the outage hold (Ghost), then the loop's at the
// instant the entries turn stale.
func TestAnEntryTurningStaleUnderAGhostIsRequeuedAtItsDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, "hb:w1", time.Now().Add(-time.Hour).UnixMilli(), 0).Err())
	redistest.Hold(t, rdb, "jobs", "workers", "w1", "j", 5)
	l := newLoopRefreshing(t, srv.Addr(), time.Hour, nil)
	l.opts.ScanInterval = time.Hour
	tg := target(t, "liveness", "heartbeat", "heartbeatKey", "hb:{consumer}", "heartbeatMaxAgeSeconds", "0.5", "entryStaleSeconds", "1.5")
	require.NoError(t, l.Add(tg, true))
	runLoop(t, l)

	wait := time.Now().Add(time.Minute) // far past both deadlines, far short of an interval
	for len(pendingOf(t, rdb)) > 0 && time.Now().Before(wait) {
		time.Sleep(20 * time.Millisecond)
	}
	require.Empty(t, pendingOf(t, rdb), "requeued at the entries' deadline, not at the next scan an hour on")
	for job, n := range jobsInStream(t, rdb) {
		require.Equal(t, 2, n, "job %s: the original and exactly one copy", job)
	}
}

func TestEntryTurnsAtTheInstantItsOwnersThresholdAllows(t *testing.T) {
	t.Parallel()
	h := policy.Hygiene{Mode: policy.ReclaimRequeue, EntryStale: 10 * time.Second}
	ghost := func(idle time.Duration) reclaim.Step {
		return reclaim.Step{Owner: liveness.ConsumerView{Name: "w", Verdict: liveness.Ghost, Idle: idle}, Action: reclaim.Requeue, MinIdle: h.EntryStale}
	}
	gone := ghost(time.Minute)
	gone.Owner.GoneAt, gone.MinIdle = time.Now().Add(-2*time.Second), 2*time.Second
	const ran = 50 * time.Millisecond // the turn began this long before the oldest entries were read
	cases := map[string]struct {
		st     reclaim.Step
		oldest *redisx.PendingEntry
		want   time.Duration
		ok     bool
	}{
		"an entry left turns stale":                         {ghost(time.Second), &redisx.PendingEntry{Idle: 4 * time.Second}, 6 * time.Second, true},
		"none left, but the name is still read":             {ghost(time.Second), nil, 10 * time.Second, true},
		"none left, and nobody read the name since":         {ghost(time.Minute), nil, 0, false},
		"an entry the engine left past its threshold":       {ghost(time.Second), &redisx.PendingEntry{Idle: time.Minute}, 0, false},
		"an entry past it by as long as the turn ran":       {ghost(time.Second), &redisx.PendingEntry{Idle: h.EntryStale + ran}, 0, false},
		"an entry that turned while the turn ran":           {ghost(time.Second), &redisx.PendingEntry{Idle: h.EntryStale + ran/2}, 0, true},
		"after its pod went, a later entry waits for stale": {gone, &redisx.PendingEntry{Idle: time.Second}, 9 * time.Second, true},
	}
	for name, c := range cases {
		d, ok := entryTurns(c.st, c.oldest, h, ran)
		require.Equal(t, c.ok, ok, name)
		require.Equal(t, c.want, d, name)
	}
}

// TestAnEntryThatTurnsStaleWhileATurnRunsIsLookedAtAgainAtOnce: the turn's
// script may have looked at the entry a hair short of its threshold, and
// the read of the oldest entries that follows finds it past: unless the
// entry was past it before the turn began, which is the engine leaving it
// for its own reason, the next look is now, not at the next scan.
func TestAnEntryThatTurnsStaleWhileATurnRunsIsLookedAtAgainAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "w1", "j", 1)
	l := newLoopRefreshing(t, srv.Addr(), time.Hour, nil)
	tg := target(t, "entryStaleSeconds", "1")
	stale := tg.Hygiene.EntryStale
	// Time passes in Redis: the entry is past its threshold by 10ms.
	require.NoError(t, rdb.Do(ctx, "XCLAIM", "jobs", "workers", "w1", 0, ids[0], "IDLE", (stale+10*time.Millisecond).Milliseconds(), "JUSTID").Err())
	steps := []reclaim.Step{{Owner: liveness.ConsumerView{Name: "w1", Verdict: liveness.Ghost, Pending: 1}, Action: reclaim.Requeue, MinIdle: stale}}

	before := time.Now()
	at, failed := l.entryDeadline(ctx, tg, steps, before.Add(-200*time.Millisecond))
	require.False(t, failed)
	require.False(t, at.IsZero(), "an entry that turned while the turn ran is looked at again")
	require.True(t, at.Before(before.Add(time.Second)), "at once, not at the next scan (due in %s)", at.Sub(before))

	at, failed = l.entryDeadline(ctx, tg, steps, time.Now())
	require.False(t, failed)
	require.True(t, at.IsZero(), "an entry past its threshold before the turn began was left by the engine; due at %s", at)
}

// TestAGhostHoldingNothingWhoseNameIsReadIsLookedAtOneStaleThresholdOn:
// an entry it is handed from now on turns stale no earlier; a ghost
// nobody reads, a live consumer and a dry run get no look.
func TestAGhostHoldingNothingWhoseNameIsReadIsLookedAtOneStaleThresholdOn(t *testing.T) {
	t.Parallel()
	h := policy.Hygiene{Mode: policy.ReclaimRequeue, EntryStale: 10 * time.Second}
	now := time.Now()
	step := func(v liveness.Verdict, idle time.Duration) reclaim.Step {
		return reclaim.Step{Owner: liveness.ConsumerView{Name: "w", Verdict: v, Idle: idle}, Action: reclaim.None}
	}
	require.Equal(t, now.Add(h.EntryStale), quietDeadline([]reclaim.Step{step(liveness.Ghost, time.Second)}, h, now))
	require.Equal(t, now.Add(h.EntryStale), quietDeadline([]reclaim.Step{step(liveness.Degraded, time.Second)}, h, now))
	require.True(t, quietDeadline([]reclaim.Step{step(liveness.Ghost, time.Minute)}, h, now).IsZero(), "nobody reads the name")
	require.True(t, quietDeadline([]reclaim.Step{step(liveness.Alive, time.Second)}, h, now).IsZero(), "a live consumer keeps what it gets")
	require.True(t, quietDeadline([]reclaim.Step{step(liveness.Unknown, time.Second)}, h, now).IsZero(), "Unknown is never acted on")
}

// TestAnEntryHandedToAKnownGhostIsRequeuedWhenItTurnsStale: the ghost's
// first entries were requeued and the turn's read still showed it
// holding them, so a later read showing it holding an entry again shows
// no new ghost; the entry is taken at its own deadline all the same, not
// at the next scan an hour on.
func TestAnEntryHandedToAKnownGhostIsRequeuedWhenItTurnsStale(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, "hb:w1", time.Now().Add(-time.Hour).UnixMilli(), 0).Err())
	redistest.Hold(t, rdb, "jobs", "workers", "w1", "j", 1)
	l := newLoopRefreshing(t, srv.Addr(), time.Hour, nil)
	l.opts.ScanInterval = time.Hour
	tg := target(t, "liveness", "heartbeat", "heartbeatKey", "hb:{consumer}", "heartbeatMaxAgeSeconds", "2", "entryStaleSeconds", "1.5")
	require.NoError(t, l.Add(tg, true))
	runLoop(t, l)
	wait := func(why string) {
		until := time.Now().Add(time.Minute)
		for len(pendingOf(t, rdb)) > 0 && time.Now().Before(until) {
			time.Sleep(20 * time.Millisecond)
		}
		require.Empty(t, pendingOf(t, rdb), why)
	}
	wait("the first entry is requeued once the owner is judged Ghost")

	redistest.Read(t, rdb, "jobs", "workers", "w1", 1) // the ghost's name reads the copy of j0

	_, err := l.view.Refresh(ctx, tg.Target) // the view's next refresh: the ghost holds an entry again
	require.NoError(t, err)
	wait("the entry handed to the ghost is requeued when it turns stale")
	require.Equal(t, map[string]int{"j0": 3}, jobsInStream(t, rdb), "the original, its copy, and one copy of the copy the ghost took")
}

// TestAGhostSeenHoldingEntriesWhileATurnRanArmsItsEntries: a turn
// requeues a ghost's entries; a read that lands while it runs shows the
// ghost holding an entry again (handed over after the turn's read), which
// Observe leaves to the turn. The ghost was in the turn's own read, so it
// is no new ghost, and it had not read within entryStaleSeconds, so the
// turn sets no look of its own: its end looks again one entryStaleSeconds
// after its read, as Observe would have, not at the next scan an hour on.
func TestAGhostSeenHoldingEntriesWhileATurnRanArmsItsEntries(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, "hb:w1", time.Now().Add(-time.Hour).UnixMilli(), 0).Err())
	redistest.Hold(t, rdb, "jobs", "workers", "w1", "j", 1)
	time.Sleep(300 * time.Millisecond) // w1's read and its entry, older than entryStaleSeconds
	l := newLoopOn(t, srv.Addr(), time.Hour, nil, prometheus.NewRegistry(), func(o *Options) { o.ScanInterval = time.Hour })
	tg := target(t, "liveness", "heartbeat", "heartbeatKey", "hb:{consumer}", "heartbeatMaxAgeSeconds", "1", "entryStaleSeconds", "0.1")
	require.NoError(t, l.Add(tg, true))
	_, err := l.view.Refresh(ctx, tg.Target)
	require.NoError(t, err)
	time.Sleep(1100 * time.Millisecond) // a stale heartbeat is Unknown for a max age after pelwarden's first read
	s, err := l.view.Refresh(ctx, tg.Target)
	require.NoError(t, err)
	require.Equal(t, 1, s.GhostConsumers)
	r, _ := l.next(time.Now())
	require.NotNil(t, r, "the new target is due at once")
	// What Observe keeps of a read that lands while the turn runs, made
	// after the read the turn decides on.
	l.mu.Lock()
	r.missed, r.missedAt = map[string]bool{"w1": true}, time.Now().Add(time.Minute)
	l.mu.Unlock()
	l.scanRunner(ctx, r)
	require.Empty(t, pendingOf(t, rdb), "the turn requeued the ghost's entry")
	l.mu.Lock()
	armed, due := r.atDeadline, r.due
	l.mu.Unlock()
	require.True(t, armed, "the turn's end looks at the ghost's entries")
	require.True(t, due.Before(time.Now().Add(time.Minute)), "when they turn stale, not at the next scan (due in %s)", time.Until(due))

	// A read older than the turn's own (it showed the entries the turn
	// took) sets no look.
	r2, _ := l.next(time.Now().Add(time.Minute))
	require.Same(t, r, r2)
	l.mu.Lock()
	r.missed, r.missedAt = map[string]bool{"w1": true}, time.Now().Add(-time.Minute)
	l.mu.Unlock()
	l.scanRunner(ctx, r)
	l.mu.Lock()
	defer l.mu.Unlock()
	require.False(t, r.atDeadline, "an older read's ghosts were the turn's to take")
}
