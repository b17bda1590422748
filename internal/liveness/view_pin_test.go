package liveness

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAPinnedTargetDoesNotExpireAndGoesOnceUnpinned: a pin keeps a target
// nobody asks about, like a subscription; once every pin ends, the target
// expires after Expiry as any other.
func TestAPinnedTargetDoesNotExpireAndGoesOnceUnpinned(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	var expired []string
	v := NewView(func(context.Context, Target, []string) (Observation, error) { return Observation{}, nil }, ViewOptions{
		Freshness: time.Second, Expiry: time.Minute, MaxTargets: 1,
		Now: func() time.Time { return now }, OnExpire: func(t Target) { expired = append(expired, t.Stream) },
	})
	tg := Target{GroupRef: GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}}
	unpinA, err := v.Pin(&tg)
	require.NoError(t, err)
	unpinB, err := v.Pin(&tg)
	require.NoError(t, err)
	_, err = v.Pin(&Target{GroupRef: GroupRef{Conn: "default", Stream: "other", Group: "workers"}})
	require.ErrorIs(t, err, ErrTooManyTargets, "a pin registers, within MaxTargets")

	now = now.Add(time.Hour)
	v.expire(now)
	require.Empty(t, expired, "pinned: kept with nobody asking")
	unpinA()
	unpinA() // once only: the other pin still holds
	now = now.Add(time.Hour)
	v.expire(now)
	require.Empty(t, expired, "one pin left")
	unpinB()
	v.expire(now.Add(30 * time.Second))
	require.Empty(t, expired, "unpinned just now: Expiry counts from the unpin")
	v.expire(now.Add(2 * time.Minute))
	require.Equal(t, []string{"jobs"}, expired)
}

// TestTargetsOfOneGroupAreKeptApartAndExpireAlone: two targets judge one
// group by different rules; each has its own snapshot, and the one nobody
// asks about expires while the other stays.
func TestTargetsOfOneGroupAreKeptApartAndExpireAlone(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	var expired []time.Duration
	v := NewView(func(context.Context, Target, []string) (Observation, error) {
		return idleFor(10 * time.Second), nil
	}, ViewOptions{
		Freshness: time.Second, Expiry: time.Minute, MaxTargets: 3,
		Now: func() time.Time { return now }, OnExpire: func(t Target) { expired = append(expired, t.Spec.GhostIdle) },
	})
	group := GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}
	quick := Target{GroupRef: group, Spec: Spec{Idle: true, GhostIdle: time.Second}}
	slow := Target{GroupRef: group, Spec: Spec{Idle: true, GhostIdle: time.Hour}}
	ctx := context.Background()
	a, err := v.Snapshot(ctx, quick)
	require.NoError(t, err)
	b, err := v.Snapshot(ctx, slow)
	require.NoError(t, err)
	require.Equal(t, []Verdict{Ghost, Alive}, []Verdict{a.Consumers[0].Verdict, b.Consumers[0].Verdict}, "each target judged apart")
	require.Equal(t, 2, v.Len())

	now = now.Add(30 * time.Second)
	_, err = v.Snapshot(ctx, slow) // only slow is asked about
	require.NoError(t, err)
	now = now.Add(45 * time.Second)
	v.expire(now)
	require.Equal(t, []time.Duration{time.Second}, expired, "the one nobody asked about went")
	require.Equal(t, 1, v.Len())
	_, ok := v.Peek(quick)
	require.False(t, ok)
	s, ok := v.Peek(slow)
	require.True(t, ok)
	require.Equal(t, Alive, s.Consumers[0].Verdict)

	now = now.Add(2 * time.Minute)
	v.expire(now)
	require.Zero(t, v.Len(), "then the other, and the group with it")
	_, err = v.Snapshot(ctx, quick)
	require.NoError(t, err, "a target registers again after its group emptied")
}

// idleFor is a read of one consumer w, holding two entries, that last
// read (and was read from) d ago.
func idleFor(d time.Duration) Observation {
	return Observation{LagValid: true, Consumers: []ConsumerObs{{Name: "w", Pending: 2, Idle: d, Inactive: d}},
		PendingByConsumer: map[string]int64{"w": 2}}
}

// TestSnapshotsListsEveryTargetReadAndNoneNotYetRead: the metrics page's
// list holds the latest snapshot of each target of every group that has
// one, as Latest does, and leaves out a target not read yet.
func TestSnapshotsListsEveryTargetReadAndNoneNotYetRead(t *testing.T) {
	t.Parallel()
	v := NewView(func(context.Context, Target, []string) (Observation, error) {
		return idleFor(10 * time.Second), nil
	}, ViewOptions{Freshness: time.Second, Expiry: time.Minute, MaxTargets: 4})
	group := GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}
	quick := Target{GroupRef: group, Spec: Spec{Idle: true, GhostIdle: time.Second}}
	slow := Target{GroupRef: group, Spec: Spec{Idle: true, GhostIdle: time.Hour}}
	other := Target{GroupRef: GroupRef{Conn: "default", Stream: "other", Group: "workers"}}
	unread := Target{GroupRef: GroupRef{Conn: "default", Stream: "unread", Group: "workers"}}
	var want []*Snapshot
	for _, tg := range []Target{quick, slow, other} {
		s, err := v.Refresh(context.Background(), tg)
		require.NoError(t, err)
		want = append(want, s)
	}
	_, err := v.Pin(&unread)
	require.NoError(t, err)
	require.ElementsMatch(t, want, v.Snapshots())
	require.Len(t, v.Latest(), 4, "the unread one is registered")
}

// TestAPinnedTargetIsTheHoldersNotACopy: the view keeps the target a pin
// registered, so the hygiene loop's target and the view's are one value,
// and every snapshot judged for it points to it; a target another caller
// registers first stays that caller's copy.
func TestAPinnedTargetIsTheHoldersNotACopy(t *testing.T) {
	t.Parallel()
	v := NewView(func(context.Context, Target, []string) (Observation, error) {
		return idleFor(10 * time.Second), nil
	}, ViewOptions{Freshness: time.Second, Expiry: time.Minute, MaxTargets: 2})
	pinned := &Target{GroupRef: GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}, Spec: Spec{Idle: true, GhostIdle: time.Second}}
	_, err := v.Pin(pinned)
	require.NoError(t, err)
	s, err := v.Refresh(context.Background(), *pinned)
	require.NoError(t, err)
	require.Same(t, pinned, s.Target)

	polled := Target{GroupRef: GroupRef{Conn: "default", Stream: "other", Group: "workers"}, Spec: pinned.Spec}
	s, err = v.Refresh(context.Background(), polled)
	require.NoError(t, err)
	again := polled
	_, err = v.Pin(&again)
	require.NoError(t, err)
	require.NotSame(t, &again, s.Target, "registered by a poll first: the view's own copy")
	require.Equal(t, polled, *s.Target)
}
