package liveness

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// beatingFetch is one worker holding entries whose heartbeat is read from
// beat (Unix ms), and the reads counted.
type beatingFetch struct {
	beat  atomic.Int64
	reads atomic.Int64
	// since, when set (Unix ns), is w1's last read attempt: its idle
	// grows from it; else w1 has just read.
	since atomic.Int64
}

func (f *beatingFetch) fetch(context.Context, Target, []string) (Observation, error) {
	f.reads.Add(1)
	now := time.Now()
	var idle time.Duration
	if s := f.since.Load(); s != 0 {
		idle = now.Sub(time.Unix(0, s))
	}
	return Observation{
		ServerTime: now, ReadAt: now,
		Consumers:         []ConsumerObs{{Name: "w1", Pending: 3, Idle: idle, Inactive: -1}},
		PendingByConsumer: map[string]int64{"w1": 3},
		Heartbeats:        map[string]HeartbeatObs{"hb:w1": {Value: strconv.FormatInt(f.beat.Load(), 10), Exists: true}},
	}, nil
}

// deadlineView runs a view over f that nothing polls: only a look at a
// deadline can read again.
func deadlineView(t *testing.T, f *beatingFetch) (*View, Target, <-chan struct{}) {
	t.Helper()
	v := NewView(f.fetch, ViewOptions{Freshness: time.Hour, FetchTimeout: 5 * time.Second, Expiry: time.Hour, MaxTargets: 4})
	tg := Target{GroupRef: GroupRef{Conn: "default", Stream: "jobs", Group: "workers"},
		Spec: Spec{Heartbeat: true, HeartbeatKey: "hb:{consumer}", HeartbeatMaxAge: 2 * time.Second, StartGrace: time.Second}}
	ch, stop, err := v.Subscribe(tg)
	require.NoError(t, err)
	t.Cleanup(stop)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = v.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return v, tg, ch
}

// nextJudged waits for the next judgement of the subscribed target.
func nextJudged(t *testing.T, v *View, tg Target, ch <-chan struct{}) ConsumerView {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatal("no read came: the deadline was not looked at")
	}
	s, ok := v.Peek(tg)
	require.True(t, ok)
	require.Len(t, s.Consumers, 1)
	return s.Consumers[0]
}

// TestAHeartbeatThatLapsesIsReadAgainAtItsDeadline: with a refresh
// interval of an hour, the view reads the group again when the heartbeat
// passes its max age, and the worker turns Ghost then.
func TestAHeartbeatThatLapsesIsReadAgainAtItsDeadline(t *testing.T) {
	t.Parallel()
	f := &beatingFetch{}
	f.beat.Store(time.Now().Add(-1700 * time.Millisecond).UnixMilli())
	v, tg, ch := deadlineView(t, f)
	first, err := v.Snapshot(context.Background(), tg)
	require.NoError(t, err)
	require.Equal(t, Alive, first.Consumers[0].Verdict)
	require.False(t, first.NextChange().IsZero(), "a fresh heartbeat of a worker holding entries has a deadline")
	<-ch // the first read's own signal
	require.Equal(t, Ghost, nextJudged(t, v, tg, ch).Verdict, "read again at the deadline, the heartbeat is stale")
	require.Equal(t, int64(2), f.reads.Load())
}

// TestAWorkerThatBeatsAgainBeforeItsDeadlineCostsOneRead: the look at
// the deadline finds the new beat, keeps the worker Alive, and was the
// only read.
func TestAWorkerThatBeatsAgainBeforeItsDeadlineCostsOneRead(t *testing.T) {
	t.Parallel()
	f := &beatingFetch{}
	f.beat.Store(time.Now().Add(-1700 * time.Millisecond).UnixMilli())
	v, tg, ch := deadlineView(t, f)
	_, err := v.Snapshot(context.Background(), tg)
	require.NoError(t, err)
	<-ch
	f.beat.Store(time.Now().UnixMilli())
	require.Equal(t, Alive, nextJudged(t, v, tg, ch).Verdict)
	require.Equal(t, int64(2), f.reads.Load(), "one read at the deadline, none before it")
}

// TestChangeInMirrorsJudge: each "still within" case of Judge has its
// crossing, and a verdict only new evidence changes has none.
func TestChangeInMirrorsJudge(t *testing.T) {
	t.Parallel()
	hb := Spec{Heartbeat: true, HeartbeatMaxAge: 10 * time.Second, StartGrace: 5 * time.Second}
	idle := Spec{Idle: true, GhostIdle: 30 * time.Second}
	pods := Spec{Idle: true, GhostIdle: 30 * time.Second, Kubernetes: true, PodGrace: 8 * time.Second}
	cases := map[string]struct {
		spec Spec
		ev   Evidence
		want time.Duration
		ok   bool
	}{
		"fresh heartbeat turns stale past its max age": {hb, Evidence{Listed: true, Heartbeat: Heartbeat{State: HeartbeatFresh, Age: 4 * time.Second}}, 6*time.Second + time.Nanosecond, true},
		"stale heartbeat changes only on a new beat":   {hb, Evidence{Listed: true, Heartbeat: Heartbeat{State: HeartbeatStale, Age: 40 * time.Second}}, 0, false},
		"starting worker's grace ends":                 {hb, Evidence{Listed: true, Known: 2 * time.Second, Seen: time.Second, Heartbeat: Heartbeat{State: HeartbeatMissing}}, 3 * time.Second, true},
		"outage hold ends":                             {hb, Evidence{Listed: true, Known: time.Minute, Seen: time.Minute, Heartbeat: Heartbeat{State: HeartbeatStale, Age: time.Minute, Recovering: 7 * time.Second}}, 7 * time.Second, true},
		"idle crosses ghostIdle":                       {idle, Evidence{Listed: true, Seen: 12 * time.Second}, 18 * time.Second, true},
		"idle past ghostIdle changes only on a read":   {idle, Evidence{Listed: true, Seen: 40 * time.Second}, 0, false},
		"a running pod keeps an idle worker":           {pods, Evidence{Listed: true, Seen: 12 * time.Second, Pod: Pod{State: PodRunning}}, 0, false},
		"a gone pod's grace ends":                      {pods, Evidence{Listed: true, Seen: 40 * time.Second, Pod: Pod{State: PodGone, GoneFor: 3 * time.Second}}, 5 * time.Second, true},
		"unlisted consumer has none":                   {idle, Evidence{}, 0, false},
	}
	for name, c := range cases {
		d, ok := changeIn(c.spec, c.ev)
		require.Equal(t, c.ok, ok, name)
		require.Equal(t, c.want, d, name)
	}
}
