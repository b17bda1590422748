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
		RefreshInterval: time.Second, MaxAge: time.Second, Expiry: time.Minute, MaxTargets: 1,
		Now: func() time.Time { return now }, OnExpire: func(t Target) { expired = append(expired, t.Stream) },
	})
	tg := Target{GroupRef: GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}}
	unpinA, err := v.Pin(tg)
	require.NoError(t, err)
	unpinB, err := v.Pin(tg)
	require.NoError(t, err)
	_, err = v.Pin(Target{GroupRef: GroupRef{Conn: "default", Stream: "other", Group: "workers"}})
	require.ErrorIs(t, err, ErrTooManyTargets, "a pin registers, within MaxTargets")

	now = now.Add(time.Hour)
	v.due(now)
	require.Empty(t, expired, "pinned: kept with nobody asking")
	unpinA()
	unpinA() // once only: the other pin still holds
	now = now.Add(time.Hour)
	v.due(now)
	require.Empty(t, expired, "one pin left")
	unpinB()
	v.due(now.Add(30 * time.Second))
	require.Empty(t, expired, "unpinned just now: Expiry counts from the unpin")
	v.due(now.Add(2 * time.Minute))
	require.Equal(t, []string{"jobs"}, expired)
}
