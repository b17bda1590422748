package redisx

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// These tests pin down where Redis versions differ in what pelwarden reads.
// Each one asks the server for its version and states which behavior it
// expects of it, so `make compat` shows a difference rather than a test
// loose enough to pass on either. (Valkey 8.0 reports redis_version 7.2.4
// and behaves as Redis 7.2 here.)

// versionedGroup starts a server with an empty stream "jobs" and its group
// "workers", and returns the server's version.
func versionedGroup(t *testing.T) (*redistest.Server, redistest.Version, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	require.NoError(t, rdb.XGroupCreateMkStream(context.Background(), "jobs", "workers", "$").Err())
	return srv, srv.Version(t), rdb
}

// fetchOne reads target through a Reader on srv.
func fetchOne(t *testing.T, srv *redistest.Server, target liveness.Target) liveness.Observation {
	t.Helper()
	conns, err := Open([]config.Redis{config.DefaultRedis(target.Conn, srv.Addr())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	obs, err := (&Reader{Conns: conns, LagEstimateCap: 100}).Fetch(context.Background(), target, nil)
	require.NoError(t, err)
	return obs
}

func consumerObs(t *testing.T, obs liveness.Observation, name string) (liveness.ConsumerObs, bool) {
	t.Helper()
	for _, c := range obs.Consumers {
		if c.Name == name {
			return c, true
		}
	}
	return liveness.ConsumerObs{}, false
}

// From Redis 7.2 XINFO CONSUMERS reports `inactive` (since the last read
// that delivered entries) and `idle` counts from the last read attempt, so
// an empty XREADGROUP resets idle. Before 7.2 idle counts from the last
// read that delivered, an empty read leaves it alone, and there is no
// inactive: pelwarden reads it as -1, unknown.
func TestIdleAndInactiveFollowTheServerVersion(t *testing.T) {
	t.Parallel()
	srv, version, rdb := versionedGroup(t)
	ctx := context.Background()
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", "1"}}).Err())
	read := func() int {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "w1", Streams: []string{"jobs", ">"}, Count: 1, Block: -1}).Result()
		if errors.Is(err, redis.Nil) {
			return 0
		}
		require.NoError(t, err)
		return len(res[0].Messages)
	}
	require.Equal(t, 1, read(), "the first read delivers the entry")
	const quiet = 1200 * time.Millisecond
	time.Sleep(quiet)
	require.Equal(t, 0, read(), "the second read finds nothing new")

	c, ok := consumerObs(t, fetchOne(t, srv, liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}}), "w1")
	require.True(t, ok, "w1 read an entry, so every version lists it")
	if version.AtLeast(7, 2) {
		t.Logf("%s: idle counts from the last read attempt, inactive from the last read that delivered", version)
		require.Less(t, c.Idle, quiet/2, "%s: the empty read reset idle", version)
		require.GreaterOrEqual(t, c.Inactive, quiet, "%s: inactive counts from the read that delivered", version)
		return
	}
	t.Logf("%s: idle counts from the last read that delivered; there is no inactive", version)
	require.GreaterOrEqual(t, c.Idle, quiet, "%s: an empty read does not reset idle before 7.2", version)
	require.Equal(t, time.Duration(-1), c.Inactive, "%s: no inactive field before 7.2; pelwarden reads it as unknown (-1)", version)
}

// A consumer whose reads have delivered nothing yet: from 7.2 its first
// XREADGROUP creates it (inactive -1, never delivered); before 7.2 it does
// not exist in the group until a read delivers an entry, so a starting
// worker on an empty stream is invisible to XINFO CONSUMERS there.
func TestAConsumerThatNeverReceivedAnEntryIsListedFrom72(t *testing.T) {
	t.Parallel()
	srv, version, rdb := versionedGroup(t)
	ctx := context.Background()
	err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "starting", Streams: []string{"jobs", ">"}, Count: 1, Block: -1}).Err()
	require.ErrorIs(t, err, redis.Nil, "the stream is empty")

	c, listed := consumerObs(t, fetchOne(t, srv, liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}}), "starting")
	if version.AtLeast(7, 2) {
		t.Logf("%s: a read that delivers nothing creates the consumer", version)
		require.True(t, listed, "%s: an empty read creates the consumer", version)
		require.Equal(t, time.Duration(-1), c.Inactive, "%s: inactive is -1 until a read delivers", version)
		return
	}
	t.Logf("%s: a consumer exists only once a read delivered an entry", version)
	require.False(t, listed, "%s: a consumer exists only once a read delivered an entry", version)
}

// An XDEL inside the group's unread range makes XINFO GROUPS answer a NULL
// lag on every version pelwarden supports (7.0 to 8.0, Valkey 8.0);
// pelwarden then counts the entries after last-delivered-id itself.
func TestNullLagIsEstimatedOnEveryVersion(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	version := srv.Version(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	var ids []string
	for i := range 6 {
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", i}}).Result()
		require.NoError(t, err)
		ids = append(ids, id)
	}
	require.NoError(t, rdb.XGroupCreate(ctx, "jobs", "workers", "0").Err())
	require.NoError(t, rdb.XDel(ctx, "jobs", ids[2]).Err())

	obs := fetchOne(t, srv, liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}})

	require.False(t, obs.LagValid, "%s: the lag is NULL after a deletion in the unread range", version)
	require.Equal(t, int64(5), obs.LagEstimate, "%s: six added, one deleted, none delivered", version)
	require.False(t, obs.LagEstimateCapped)
}

// The connection reads each server's version from INFO server and says idle
// counts delivering reads only exactly on Redis before 7.2 (Valkey 8.0
// reports redis_version 7.2.4 and counts as 7.2 does); every read of a
// target carries it to the judge.
func TestIdleFromDeliveriesIsReadFromTheServersVersion(t *testing.T) {
	t.Parallel()
	srv, version, _ := versionedGroup(t)
	obs := fetchOne(t, srv, liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}})
	require.Equal(t, !version.AtLeast(7, 2), obs.IdleFromDeliveries, "%s", version)
}

// At start each connection's server is logged, with a warning where idle
// counts delivering reads only, and the stream commands it knows; reading
// it again logs nothing new.
func TestStartLogsEachServerAndWarnsWhereIdleCountsDeliveriesOnly(t *testing.T) {
	t.Parallel()
	srv, version, _ := versionedGroup(t)
	conns, err := Open([]config.Redis{config.DefaultRedis("default", srv.Addr())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	var out strings.Builder
	conns.SetVersionLog(slog.New(slog.NewTextHandler(&out, nil)))
	conns.ReadVersions(t.Context())
	conns.ReadVersions(t.Context())
	log := out.String()
	require.Equal(t, 2, strings.Count(log, "\n"), "a line of the server and one of its stream commands: %s", log)
	require.Contains(t, log, "node="+srv.Addr())
	require.Contains(t, log, `msg="redis stream commands"`)
	if version.AtLeast(7, 2) {
		require.Contains(t, log, "level=INFO", "%s", version)
		return
	}
	require.Contains(t, log, "level=WARN", "%s", version)
	require.Contains(t, log, "last read that delivered entries", "%s", version)
}

// After a trim or a deletion past the group's last-delivered id, servers
// answer different lags (docs/compatibility.md lists them): pelwarden
// reports the server's own lag where it gives one, as KEDA's scaler does,
// and where it answers NULL counts the entries after last-delivered-id,
// which must be the true count on every server.
func TestLagAfterATrimIsTheServersOwnOrAnExactCount(t *testing.T) {
	t.Parallel()
	target := liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}}
	cases := map[string]func(ctx context.Context, rdb *redis.Client, ids []string) error{
		"trimmed to the newest entry": func(ctx context.Context, rdb *redis.Client, _ []string) error {
			return rdb.XTrimMaxLen(ctx, "jobs", 1).Err()
		},
		"the newest entry deleted": func(ctx context.Context, rdb *redis.Client, ids []string) error {
			return rdb.XDel(ctx, "jobs", ids[4]).Err()
		},
	}
	for name, cut := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, version, rdb := versionedGroup(t)
			ids := redistest.AddJobs(t, rdb, "jobs", "job-", 5)
			redistest.Read(t, rdb, "jobs", "workers", "w1", 1)
			ctx := context.Background()
			require.NoError(t, cut(ctx, rdb, ids))
			for read := range 2 {
				obs := fetchOne(t, srv, target)
				groups, err := rdb.XInfoGroups(ctx, "jobs").Result()
				require.NoError(t, err)
				after, err := rdb.XRange(ctx, "jobs", "("+groups[0].LastDeliveredID, "+").Result()
				require.NoError(t, err)
				if groups[0].Lag < 0 {
					require.False(t, obs.LagValid, "%s, read %d: NULL lag", version, read)
					require.Equal(t, int64(len(after)), obs.LagEstimate, "%s, read %d: the estimate is the entries after last-delivered-id", version, read)
				} else {
					require.True(t, obs.LagValid)
					require.Equal(t, groups[0].Lag, obs.Lag, "%s, read %d: the server's own lag", version, read)
				}
				t.Logf("%s, read %d: server lag %d, entries after last-delivered-id %d", version, read, groups[0].Lag, len(after))
				_ = rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "w1", Streams: []string{"jobs", ">"}, Count: 1, Block: -1}).Err()
			}
		})
	}
}
