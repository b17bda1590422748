package liveness

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// beatKeys counts the reads of heartbeat keys alone, answering from f's
// beat, and keeps the keys asked for.
type beatKeys struct {
	f     *beatingFetch
	reads atomic.Int64
	asked atomic.Value // []string
}

func (b *beatKeys) confirm(_ context.Context, _ Target, keys []string) (Observation, error) {
	b.reads.Add(1)
	b.asked.Store(keys)
	now := time.Now()
	obs := Observation{ServerTime: now, ReadAt: now, Heartbeats: map[string]HeartbeatObs{}}
	for _, k := range keys {
		if k == "hb:w1" {
			obs.Heartbeats[k] = HeartbeatObs{Value: strconv.FormatInt(b.f.beat.Load(), 10), Exists: true}
		}
	}
	return obs, nil
}

// confirmView is deadlineView with the view reading heartbeat keys alone
// at a lapse, and its looks counted by what decided them.
func confirmView(t *testing.T, spec Spec) (*View, Target, <-chan struct{}, *beatingFetch, *beatKeys, *[2]atomic.Int64) {
	t.Helper()
	f := &beatingFetch{}
	b := &beatKeys{f: f}
	var looks [2]atomic.Int64 // by group, by beats
	v := NewView(f.fetch, ViewOptions{Freshness: time.Hour, FetchTimeout: 5 * time.Second, Expiry: time.Hour, MaxTargets: 4,
		Confirm: b.confirm, OnLook: func(byBeats bool) {
			if byBeats {
				looks[1].Add(1)
			} else {
				looks[0].Add(1)
			}
		}})
	tg := Target{GroupRef: GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}, Spec: spec}
	ch, stop, err := v.Subscribe(tg)
	require.NoError(t, err)
	t.Cleanup(stop)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = v.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return v, tg, ch, f, b, &looks
}

var beatSpec = Spec{Heartbeat: true, HeartbeatKey: "hb:{consumer}", HeartbeatMaxAge: 2 * time.Second, StartGrace: time.Second}

// TestALookAtABeatThatCameAgainReadsOnlyItsKey: the worker beats again
// before its heartbeat's deadline; the look reads hb:w1 alone, not the
// group, and sets the next look at the new beat's deadline. The worker
// then stops: that look reads the key, finds it stale, reads the group,
// and the worker turns Ghost there.
func TestALookAtABeatThatCameAgainReadsOnlyItsKey(t *testing.T) {
	t.Parallel()
	v, tg, ch, f, b, looks := confirmView(t, beatSpec)
	f.beat.Store(time.Now().Add(-1700 * time.Millisecond).UnixMilli())
	_, err := v.Snapshot(context.Background(), tg)
	require.NoError(t, err)
	<-ch
	f.beat.Store(time.Now().UnixMilli())
	require.Eventually(t, func() bool { return b.reads.Load() >= 1 }, time.Minute, 10*time.Millisecond, "the look at the deadline")
	require.Equal(t, []string{"hb:w1"}, b.asked.Load())
	require.Equal(t, int64(1), f.reads.Load(), "the beat that came again decided the look: the group was not read")
	s, _ := v.Peek(tg)
	require.Equal(t, Alive, s.Consumers[0].Verdict)

	require.Equal(t, Ghost, nextJudged(t, v, tg, ch).Verdict, "at the new beat's deadline, read again, the heartbeat is stale")
	require.Equal(t, int64(2), f.reads.Load(), "one read of the group, at the second deadline")
	require.Equal(t, int64(1), looks[1].Load(), "one look decided by the beat")
	require.Equal(t, int64(1), looks[0].Load(), "one look that read the group")
	require.Equal(t, int64(2), b.reads.Load(), "the second look read the key first")
}

// TestALookAtAnIdleCrossingReadsTheGroup: a deadline no heartbeat
// decides (idle liveness) reads the group at once, never the keys.
func TestALookAtAnIdleCrossingReadsTheGroup(t *testing.T) {
	t.Parallel()
	v, tg, ch, f, b, looks := confirmView(t, Spec{Idle: true, GhostIdle: 300 * time.Millisecond})
	f.since.Store(time.Now().UnixNano()) // w1's last read: idle grows from now
	_, err := v.Snapshot(context.Background(), tg)
	require.NoError(t, err)
	<-ch
	require.Equal(t, Ghost, nextJudged(t, v, tg, ch).Verdict)
	require.Zero(t, b.reads.Load(), "no key decides an idle crossing")
	require.Equal(t, int64(2), f.reads.Load())
	require.Equal(t, int64(1), looks[0].Load())
}

// TestBeatsDueLeavesTheGroupToAnyOtherDeadline: a look whose due
// deadlines include one of another kind (here the breaker's hold, or a
// lapse of a consumer not judged Alive) reads the group; one of lapses
// alone lists their keys.
func TestBeatsDueLeavesTheGroupToAnyOtherDeadline(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tg := &Target{Spec: beatSpec}
	fresh := ConsumerView{Name: "w1", Pending: 2, Verdict: Alive, Heartbeat: HeartbeatFresh, HeartbeatAge: 1900 * time.Millisecond}
	s := &Snapshot{Target: tg, At: now, Consumers: []ConsumerView{fresh}}
	keys, ok := s.beatsDue(now.Add(200 * time.Millisecond))
	require.True(t, ok)
	require.Equal(t, []string{"hb:w1"}, keys)
	_, ok = s.beatsDue(now.Add(50 * time.Millisecond))
	require.False(t, ok, "nothing is due yet")

	s.groupChange = now.Add(100 * time.Millisecond)
	_, ok = s.beatsDue(now.Add(200 * time.Millisecond))
	require.False(t, ok, "a deadline of another kind is due: the group is read")

	held := fresh
	held.Held = true
	s = &Snapshot{Target: tg, At: now, Consumers: []ConsumerView{held}}
	_, ok = s.beatsDue(now.Add(200 * time.Millisecond))
	require.False(t, ok, "a consumer the breaker holds is not decided by its beat")

	degraded := Observation{ReadAt: now, ServerTime: now, Heartbeats: map[string]HeartbeatObs{
		"hb:w1": {Value: `{"time": ` + strconv.FormatInt(now.UnixMilli(), 10) + `, "degraded": true}`, Exists: true}}}
	s = &Snapshot{Target: tg, At: now, Consumers: []ConsumerView{fresh}}
	_, ok = s.afterBeats(now.Add(200*time.Millisecond), degraded)
	require.False(t, ok, "a beat that came again degraded changes the verdict: the group is read")
	beating := Observation{ReadAt: now, ServerTime: now, Heartbeats: map[string]HeartbeatObs{
		"hb:w1": {Value: strconv.FormatInt(now.Add(-500*time.Millisecond).UnixMilli(), 10), Exists: true}}}
	next, ok := s.afterBeats(now.Add(200*time.Millisecond), beating)
	require.True(t, ok)
	require.WithinDuration(t, now.Add(1500*time.Millisecond), next, 2*time.Millisecond, "the next look is at the new beat's deadline")
}

// TestTheGroupsDeadlineLeavesOutOnlyLapsesABeatDecides: of two workers,
// one with a fresh beat and one that has not beaten yet within its start
// grace, the snapshot's next change is the earlier, and the group's own
// deadline is the start grace's: only the fresh beat's lapse is left to
// its key.
func TestTheGroupsDeadlineLeavesOutOnlyLapsesABeatDecides(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tg := &Target{Spec: beatSpec}
	obs := Observation{ServerTime: now, ReadAt: now,
		Consumers:         []ConsumerObs{{Name: "w1", Pending: 1, Inactive: -1}, {Name: "w2", Pending: 1, Inactive: -1}},
		PendingByConsumer: map[string]int64{"w1": 1, "w2": 1},
		Heartbeats: map[string]HeartbeatObs{
			"hb:w1": {Value: strconv.FormatInt(now.Add(-1800*time.Millisecond).UnixMilli(), 10), Exists: true},
			"hb:w2": {},
		}}
	s := Build(tg, obs, nil, now)
	require.WithinDuration(t, now.Add(200*time.Millisecond), s.NextChange(), time.Millisecond, "w1's lapse comes first")
	require.WithinDuration(t, now.Add(time.Second), s.groupChange, time.Millisecond, "w2's start grace is the group's")
	keys, ok := s.beatsDue(now.Add(300 * time.Millisecond))
	require.True(t, ok)
	require.Equal(t, []string{"hb:w1"}, keys)
	_, ok = s.beatsDue(now.Add(1100 * time.Millisecond))
	require.False(t, ok, "once w2's grace is due, the group is read")
}
