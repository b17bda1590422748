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
	held, err := Lease{Client: rdb, Key: "b", Holder: "other", TTL: time.Minute}.Hold(ctx)
	require.NoError(t, err)
	require.True(t, held)
	keys := []string{"a", "b", "c"}
	got, err := HoldAll(ctx, rdb, keys, "me", time.Minute)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true}, got, "b is another holder's")
	require.NoError(t, rdb.ScriptFlush(ctx).Err(), "as after a Redis restart")
	got, err = HoldAll(ctx, rdb, keys, "me", time.Minute)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true}, got, "renewed after NOSCRIPT")
	require.NoError(t, ReleaseAll(ctx, rdb, keys, "me"))
	require.Equal(t, int64(1), rdb.Exists(ctx, "a", "b", "c").Val(), "only another holder's key is left")
	require.Equal(t, "other", rdb.Get(ctx, "b").Val())
}
