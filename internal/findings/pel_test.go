package findings

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

// redeliver reads consumer's whole PEL again from id 0: each entry counts
// one more delivery.
func redeliver(t *testing.T, rdb *redis.Client, consumer string) {
	t.Helper()
	err := rdb.XReadGroup(context.Background(), &redis.XReadGroupArgs{
		Group: group, Consumer: consumer, Streams: []string{stream, "0"}, Block: -1,
	}).Err()
	require.NoError(t, err)
}

// addMany appends n entries in one pipeline, creating the group first.
func addMany(t *testing.T, rdb *redis.Client, n int) {
	t.Helper()
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, stream, group)
	pipe := rdb.Pipeline()
	for i := range n {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"job", strconv.Itoa(i)}})
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
}

func TestBouncingListsAtMostMaxIDsAndCountsThemAll(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	addMany(t, rdb, 150)
	ids := redistest.Read(t, rdb, stream, group, "a", 150)
	redeliver(t, rdb, "a")

	got, err := Detect(context.Background(), Input{Snapshot: snapshot(t, srv.Addr(), target(t), nil), Client: rdb, MinDeliveries: 2, MaxScan: DefaultMaxScan})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, Bouncing, got[0].Kind)
	require.Equal(t, ids[:MaxIDs], got[0].IDs, "the oldest entries, in id order")
	require.Contains(t, got[0].Detail, "150 pending entries delivered at least 2 times")
	require.Contains(t, got[0].Detail, "the first 100 ids are listed")
	require.Equal(t, int64(150), got[0].Entries, "the count agrees with the detail, not with the ids listed")
}

func TestScanStopsAtMaxScanAndSaysSo(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		maxScan   int64
		wantIDs   int
		truncated bool
	}{
		"a bound below the PEL":     {maxScan: 10, wantIDs: 10, truncated: true},
		"a bound equal to the PEL":  {maxScan: 30, wantIDs: 30},
		"a bound above the PEL":     {maxScan: 31, wantIDs: 30},
		"a bound of a single entry": {maxScan: 1, wantIDs: 1, truncated: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			addMany(t, rdb, 30)
			ids := redistest.Read(t, rdb, stream, group, "a", 30)
			redeliver(t, rdb, "a")

			got, err := Detect(context.Background(), Input{Snapshot: snapshot(t, srv.Addr(), target(t), nil), Client: rdb, MinDeliveries: 2, MaxScan: tc.maxScan})
			require.NoError(t, err)
			require.Len(t, got, 1)
			require.Equal(t, ids[:tc.wantIDs], got[0].IDs)
			if tc.truncated {
				require.Contains(t, got[0].Detail, "only the oldest "+strconv.FormatInt(tc.maxScan, 10)+" pending entries")
			} else {
				require.NotContains(t, got[0].Detail, "maxScan")
			}
		})
	}
}

func TestTombstonesArePagedPastTheFirstPage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	addMany(t, rdb, pageSize+200)
	ids := redistest.Read(t, rdb, stream, group, "a", pageSize+200)
	ctx := context.Background()
	deleted := []string{ids[0], ids[pageSize-1], ids[pageSize], ids[pageSize+199]}
	require.NoError(t, rdb.XDel(ctx, stream, deleted...).Err())
	before := stateOf(t, rdb)

	got, err := Detect(ctx, Input{Snapshot: snapshot(t, srv.Addr(), target(t), nil), Client: rdb, MinDeliveries: 2, MaxScan: DefaultMaxScan})
	require.NoError(t, err)
	require.Equal(t, []brief{{Tombstone, "a", deleted}}, briefs(got))
	require.Contains(t, got[0].Detail, "4 pending entries whose stream entry was deleted")
	require.Equal(t, before, stateOf(t, rdb), "Detect acknowledged nothing")
}

func TestAGroupWithoutBouncingOrTombstonesHasNoPELFindings(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	addMany(t, rdb, 50)
	redistest.Read(t, rdb, stream, group, "a", 25)
	redistest.Read(t, rdb, stream, group, "b", 25)
	got, err := Detect(context.Background(), Input{Snapshot: snapshot(t, srv.Addr(), target(t), nil), Client: rdb, MinDeliveries: 2, MaxScan: 20})
	require.NoError(t, err)
	require.Empty(t, got, "every entry was delivered once and still exists")
}
