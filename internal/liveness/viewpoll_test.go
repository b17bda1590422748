package liveness

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPollClockExpectsTheNextPollFromTheRhythmOfThePolls: the calls of a
// target, as offsets from the first, and when the next poll is expected
// after them (none: no rhythm shows).
func TestPollClockExpectsTheNextPollFromTheRhythmOfThePolls(t *testing.T) {
	t.Parallel()
	const same, tol = 100 * time.Millisecond, 125 * time.Millisecond
	s := time.Second
	tests := map[string]struct {
		calls []time.Duration
		want  time.Duration // from the first call; 0: none expected
	}{
		"one poll shows no rhythm":                  {calls: []time.Duration{0}},
		"two polls: the next comes as far again":    {calls: []time.Duration{0, 30 * s}, want: 60 * s},
		"KEDA's IsActive after GetMetrics is one":   {calls: []time.Duration{0, 3 * time.Millisecond, 30 * s, 30*s + 2*time.Millisecond}, want: 60 * s},
		"a late poll moves the next one on":         {calls: []time.Duration{0, 30 * s, 60*s + 80*time.Millisecond}, want: 90*s + 160*time.Millisecond},
		"the HPA's polls between KEDA's (period 3)": {calls: []time.Duration{0, 4 * s, 19 * s, 30 * s, 34 * s, 49 * s, 60 * s}, want: 64 * s},
		"alternating gaps (period 2)":               {calls: []time.Duration{0, 10 * s, 15 * s, 25 * s, 30 * s}, want: 40 * s},
		"polls at random show no rhythm":            {calls: []time.Duration{0, 7 * s, 9 * s, 30 * s, 31 * s}},
		"a changed interval shows at its second":    {calls: []time.Duration{0, 30 * s, 60 * s, 65 * s, 70 * s}, want: 75 * s},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Unix(1_700_000_000, 0)
			var c pollClock
			for _, d := range tt.calls {
				c.observe(t0.Add(d), same)
			}
			next, ok := c.next(tol)
			if tt.want == 0 {
				require.False(t, ok, "no poll expected, got one at +%s", next.Sub(t0))
				return
			}
			require.True(t, ok, "a poll expected at +%s", tt.want)
			require.Equal(t, tt.want, next.Sub(t0))
		})
	}
}

// TestPollClockKeepsNoMoreThanItsRing: a target polled for a day keeps
// pollGaps gaps, and its rhythm is that of the latest ones.
func TestPollClockKeepsNoMoreThanItsRing(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)
	var c pollClock
	at := t0
	for i := range 24 * 60 * 2 {
		gap := 30 * time.Second
		if i > 2000 {
			gap = 5 * time.Second
		}
		at = at.Add(gap)
		c.observe(at, 100*time.Millisecond)
	}
	next, ok := c.next(125 * time.Millisecond)
	require.True(t, ok)
	require.Equal(t, 5*time.Second, next.Sub(at))
}

// TestAReadAheadIsAimedALeadBeforeThePollUnlessTheLatestReadServesIt:
// with a freshness of 1s, a read ahead is aimed 250ms before the poll,
// unless the latest read began no more than 750ms before it.
func TestAReadAheadIsAimedALeadBeforeThePollUnlessTheLatestReadServesIt(t *testing.T) {
	t.Parallel()
	poll := time.Unix(1_700_000_030, 0)
	tests := map[string]struct {
		read time.Time
		want time.Time
	}{
		"no read yet":                  {read: time.Time{}, want: poll.Add(-250 * time.Millisecond)},
		"a read a poll interval old":   {read: poll.Add(-30 * time.Second), want: poll.Add(-250 * time.Millisecond)},
		"a read 751ms before the poll": {read: poll.Add(-751 * time.Millisecond), want: poll.Add(-250 * time.Millisecond)},
		"a read 750ms before the poll": {read: poll.Add(-750 * time.Millisecond)},
		"a read just now":              {read: poll.Add(-100 * time.Millisecond)},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, aheadAt(poll, tt.read, time.Second))
		})
	}
}

// TestAReadAheadDueTakesAtMostABatchAlong: three batches of reads ahead
// aimed a millisecond apart, within one window of the first. The first,
// due, takes the next ones along up to aheadBatch in all; the others go
// at their own aims, a batch at a time, so a dense schedule reads in
// small batches spread over the window rather than in one burst.
func TestAReadAheadDueTakesAtMostABatchAlong(t *testing.T) {
	t.Parallel()
	s := schedule{wake: make(chan struct{}, 1)}
	now := time.Unix(1_700_000_000, 0)
	es := make([]*entry, 3*aheadBatch)
	for i := range es {
		es[i] = newEntry(nil, nil, now)
		s.set(es[i], kindAhead, now.Add(time.Duration(i)*time.Millisecond))
	}
	window := time.Second
	for b := range 3 {
		looks, ahead, wait := s.due(now, window)
		require.Empty(t, looks)
		require.Equal(t, es[b*aheadBatch:(b+1)*aheadBatch], ahead, "batch %d", b)
		if b < 2 {
			require.Equal(t, time.Duration(aheadBatch)*time.Millisecond, wait, "the next batch waits for its first aim")
		}
		now = now.Add(time.Duration(aheadBatch) * time.Millisecond)
	}
	_, ahead, wait := s.due(now, window)
	require.Empty(t, ahead)
	require.Equal(t, idleLook, wait)
}

// TestAReadAheadIsJudgedWhenItEnds: a read ahead of a target's poll is
// judged in its batch's goroutine as it ends, so the poll that follows
// takes a ready snapshot instead of judging the read on its own path.
func TestAReadAheadIsJudgedWhenItEnds(t *testing.T) {
	t.Parallel()
	var refreshed atomic.Int64
	v := NewView(func(context.Context, Target, []string) (Observation, error) { return idleFor(time.Second), nil },
		ViewOptions{Freshness: time.Second, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1,
			OnRefresh: func(Target, *Snapshot, error, time.Duration) { refreshed.Add(1) }})
	ctx := context.Background()
	first, err := v.PollWait(ctx, demandTarget)
	require.NoError(t, err)
	require.Equal(t, int64(1), refreshed.Load())

	v.mu.Lock()
	r := v.groups[demandTarget.GroupRef][0]
	v.mu.Unlock()
	v.readScheduled(ctx, []*reader{r}, func(*reader) bool { return true }, ReadAhead)
	r.mu.Lock()
	c := r.inflight
	r.mu.Unlock()
	require.NotNil(t, c, "the read ahead is out")
	<-c.done
	require.Eventually(t, func() bool { return refreshed.Load() == 2 }, 5*time.Second, time.Millisecond,
		"the read ahead is judged before any poll takes it")

	snap, ok, err := v.Poll(demandTarget)
	require.NoError(t, err)
	require.True(t, ok)
	require.NotSame(t, first, snap, "the poll is answered from the read ahead")
	require.Equal(t, int64(2), refreshed.Load(), "and does not judge it again")
}
