package redisx

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

// TestLeasesHeldInOneBatchDecideEachKeyAsHoldDoes: a batch takes the free
// keys, renews its own and leaves another holder's; it works again after
// Redis lost its script cache, with no grant beyond EVALSHA and EVAL.
func TestLeasesHeldInOneBatchDecideEachKeyAsHoldDoes(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	other := NewHolder("other")
	held, err := Lease{Client: rdb, Key: "b", Holder: other, TTL: time.Minute}.Hold(ctx)
	require.NoError(t, err)
	require.True(t, held)
	keys := []string{"a", "b", "c"}
	me := NewHolder("me")
	got, err := HoldAll(ctx, rdb, keys, me, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true}, got, "b is another holder's")
	require.NoError(t, rdb.ScriptFlush(ctx).Err(), "as after a Redis restart")
	got, err = HoldAll(ctx, rdb, keys, me, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true}, got, "renewed after NOSCRIPT")
	require.NoError(t, ReleaseAll(ctx, rdb, keys, me))
	require.Equal(t, int64(1), rdb.Exists(ctx, "a", "b", "c").Val(), "only another holder's key is left")
	require.Equal(t, other.String(), rdb.Get(ctx, "b").Val())
}

// TestARestartTakesItsOwnLeaseBackAtOnceAndNoOtherReplicaDoes: the lease
// of a run that stopped without giving it up (a crash) goes at once to the
// next run under the same identity, not to another identity, and not
// back to the earlier run; a lease written by an older pelwarden, without
// a start time, waits out its TTL.
func TestARestartTakesItsOwnLeaseBackAtOnceAndNoOtherReplicaDoes(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	lease := func(h Holder) Lease { return Lease{Client: rdb, Key: "lease", Holder: h, TTL: time.Hour} }
	crashed, other := NewHolder("pelwarden-0"), NewHolder("pelwarden-1")
	held, err := lease(crashed).Hold(ctx)
	require.NoError(t, err)
	require.True(t, held)

	held, err = lease(other).Hold(ctx)
	require.NoError(t, err)
	require.False(t, held, "another replica waits out the TTL")
	restarted := NewHolder("pelwarden-0")
	got, err := HoldAll(ctx, rdb, []string{"lease"}, restarted, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []bool{true}, got, "the same identity, started later, takes it at once")
	require.Equal(t, restarted.String(), rdb.Get(ctx, "lease").Val())
	held, err = lease(crashed).Hold(ctx)
	require.NoError(t, err)
	require.False(t, held, "an earlier run of the identity still alive does not take it back")
	require.Equal(t, "pelwarden-0", LeaseIdentity(rdb.Get(ctx, "lease").Val()))

	require.NoError(t, rdb.Set(ctx, "lease", "pelwarden-0", time.Hour).Err(), "as an older pelwarden wrote it")
	held, err = lease(NewHolder("pelwarden-0")).Hold(ctx)
	require.NoError(t, err)
	require.False(t, held, "a value without a start time is not known to be an earlier run")
	require.Equal(t, "pelwarden-0", LeaseIdentity("pelwarden-0"))
	require.Equal(t, "a@b", LeaseIdentity(Holder{Identity: "a@b", Started: time.UnixMilli(5), PID: 7}.String()))
}
