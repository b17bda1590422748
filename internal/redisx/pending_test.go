package redisx

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

func TestEachPendingPageVisitsEveryMatchingEntryOnce(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	old := ghostHolding(t, rdb, "ghost", 23)
	others := ghostHoldingMore(t, rdb, "other", 4)
	time.Sleep(60 * time.Millisecond)
	fresh := ghostHoldingMore(t, rdb, "ghost", 2)

	tests := map[string]struct {
		consumer string
		minIdle  time.Duration
		want     int
	}{
		"one consumer, idle enough": {"ghost", 50 * time.Millisecond, len(old)},
		"one consumer, any idle":    {"ghost", 0, len(old) + len(fresh)},
		"the whole group":           {"", 0, len(old) + len(others) + len(fresh)},
		"nobody":                    {"nobody", 0, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			seen := map[string]int{}
			pages := 0
			err := EachPendingPage(ctx, rdb, "jobs", "workers", tc.consumer, tc.minIdle, 5, func(page []redis.XPendingExt) error {
				pages++
				require.LessOrEqual(t, len(page), 5)
				for _, e := range page {
					seen[e.ID]++
				}
				return nil
			})
			require.NoError(t, err)
			require.Len(t, seen, tc.want)
			for id, n := range seen {
				require.Equal(t, 1, n, "entry %s seen once", id)
			}
			require.Equal(t, (tc.want+4)/5, pages, "fn sees full pages, then a short last one, never an empty one")
		})
	}
}

func TestPendingEntriesAreAlignedWithTheIDs(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := ghostHolding(t, rdb, "ghost", 3)
	require.NoError(t, rdb.XAck(ctx, "jobs", "workers", ids[1]).Err())
	got, err := PendingEntries(ctx, rdb, "jobs", "workers", []string{ids[2], ids[1], ids[0], "0-1"})
	require.NoError(t, err)
	require.Len(t, got, 4)
	require.Equal(t, ids[2], got[0].ID)
	require.Equal(t, "ghost", got[0].Consumer)
	require.Nil(t, got[1], "acknowledged")
	require.Equal(t, ids[0], got[2].ID)
	require.Nil(t, got[3], "never added")
}

func TestAMissingGroupIsToldApartFromOtherErrors(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	_, err := PendingPage(ctx, rdb, "nostream", "workers", "", 0, "", 10)
	require.True(t, IsGroupMissing(err), "a missing stream: %v", err)
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, "jobs", "workers", "$").Err())
	_, err = DeleteConsumer(ctx, rdb, "jobs", "nogroup", "c", 0)
	require.True(t, IsGroupMissing(err), "a missing group, from a script: %v", err)
	_, err = PendingEntries(ctx, rdb, "jobs", "nogroup", []string{"1-1"})
	require.True(t, IsGroupMissing(err), "a missing group, from a pipeline: %v", err)
	require.False(t, IsGroupMissing(context.DeadlineExceeded))
}
