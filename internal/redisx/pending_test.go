package redisx

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

func TestPendingPagesVisitEveryMatchingEntryOnce(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	old := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 23)
	redistest.Age(t, rdb, "jobs", "workers", "ghost", time.Hour, old...)
	others := redistest.Hold(t, rdb, "jobs", "workers", "other", "", 4)
	fresh := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 2)

	tests := map[string]struct {
		consumer string
		minIdle  time.Duration
		want     int
	}{
		"one consumer, idle enough": {"ghost", time.Minute, len(old)},
		"one consumer, any idle":    {"ghost", 0, len(old) + len(fresh)},
		"the whole group":           {"", 0, len(old) + len(others) + len(fresh)},
		"nobody":                    {"nobody", 0, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			seen := map[string]int{}
			pages := 0
			after := ""
			for {
				page, err := PendingPage(ctx, rdb, "jobs", "workers", tc.consumer, tc.minIdle, after, 5)
				require.NoError(t, err)
				if len(page) == 0 {
					break
				}
				pages++
				require.LessOrEqual(t, len(page), 5)
				for _, e := range page {
					seen[e.ID]++
				}
				after = page[len(page)-1].ID
			}
			require.Len(t, seen, tc.want)
			for id, n := range seen {
				require.Equal(t, 1, n, "entry %s seen once", id)
			}
			require.Equal(t, (tc.want+4)/5, pages, "full pages, then a short last one")
		})
	}
}

func TestPendingEntriesAreAlignedWithTheIDs(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 3)
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
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	_, err = DeleteConsumer(ctx, rdb, "jobs", "nogroup", "c", 0, false)
	require.True(t, IsGroupMissing(err), "a missing group, from a script: %v", err)
	_, err = PendingEntries(ctx, rdb, "jobs", "nogroup", []string{"1-1"})
	require.True(t, IsGroupMissing(err), "a missing group, from a pipeline: %v", err)
	require.False(t, IsGroupMissing(context.DeadlineExceeded))
}

func TestValidIDAcceptsOnlyTwoUint64s(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]bool{
		"0-0": true, "1700000000000-5": true, "18446744073709551615-18446744073709551615": true, "05-1": true,
		"18446744073709551616-0": false, "99999999999999999999-0": false, "1-18446744073709551616": false,
		"": false, "1": false, "1-": false, "-1": false, "+1-1": false, "1-+1": false, "1--1": false, "1-1-1": false, "a-1": false, "1_0-1": false,
	} {
		require.Equal(t, want, ValidID(id), "ValidID(%q)", id)
	}
}

// A worker that acknowledges and then deletes its entries must not look
// like a tombstone when the deletion lands between the XPENDING page and
// the existence check.
func TestAnEntryAckedBeforeItsDeletionIsNoTombstone(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "a", "", 3)
	page, err := PendingPage(ctx, rdb, "jobs", "workers", "", 0, "", 10)
	require.NoError(t, err)
	require.Len(t, page, 3)

	require.NoError(t, rdb.XAck(ctx, "jobs", "workers", ids[0]).Err())
	require.NoError(t, rdb.XDel(ctx, "jobs", ids[0], ids[1]).Err())
	gone, err := Tombstones(ctx, rdb, "jobs", "workers", page)
	require.NoError(t, err)
	require.Len(t, gone, 1)
	require.Equal(t, ids[1], gone[ids[1]].ID)
	require.Equal(t, "a", gone[ids[1]].Consumer)
	require.Equal(t, int64(1), gone[ids[1]].Deliveries)
}
