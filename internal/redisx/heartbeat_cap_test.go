package redisx

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// getCalls is how many GET commands the server ran, from INFO commandstats.
func getCalls(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_get:calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

func TestAPrefixOwnerMatchReadsAtMostMaxCandidatesHeartbeatKeysPerConsumer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	// 200 parts: 200 owner candidates without the bound.
	long := strings.Repeat("w-", 199) + "w"
	redistest.Hold(t, rdb, "jobs", "workers", long, "", 1)
	redistest.Hold(t, rdb, "jobs", "workers", "short-0", "", 1)
	owner, err := liveness.ParseOwnerMatch("prefix")
	require.NoError(t, err)
	require.True(t, owner.CandidatesCut(long))
	require.False(t, owner.CandidatesCut("short-0"))
	spec := liveness.Spec{Heartbeat: true, HeartbeatKey: "hb:{owner}", HeartbeatMaxAge: time.Minute, Owner: owner}
	target := liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}, Spec: spec}
	conns, err := Open([]config.Redis{config.DefaultRedis("default", srv.Addr())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })

	require.NoError(t, rdb.ConfigResetStat(ctx).Err())
	obs, err := (&Reader{Conns: conns, LagEstimateCap: 10}).Fetch(ctx, target, nil)
	require.NoError(t, err)
	require.Len(t, obs.Heartbeats, liveness.MaxCandidates+2, "the long name's 16 longest candidates, and short-0's two")
	require.Equal(t, liveness.MaxCandidates+2, getCalls(t, rdb), "Redis was asked for no more keys than that")
	require.Contains(t, obs.Heartbeats, "hb:"+long, "the longest (most specific) candidate is kept")
	require.NotContains(t, obs.Heartbeats, "hb:w", "the shortest prefix is the one left out")
}
