package redisx

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// TestAReadOfHeartbeatsSaysWhenTheirNodeRefusesWrites causes each fault
// on a real server: the read that samples the node says its keys' node
// refuses writes, and WritesRefused says so without a command; once the
// server accepts writes again, a read a second later says since when.
func TestAReadOfHeartbeatsSaysWhenTheirNodeRefusesWrites(t *testing.T) {
	t.Parallel()
	want := map[redistest.Fault]liveness.Refusal{
		redistest.FaultOOM: liveness.RefusalOOM, redistest.FaultMisconf: liveness.RefusalMisconf,
		redistest.FaultReadonly: liveness.RefusalReadonly, redistest.FaultNoReplicas: liveness.RefusalNoReplicas,
	}
	for _, f := range redistest.Faults {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.FaultOptions(t, f))
			if ok, why := srv.CanCause(t, f); !ok {
				t.Skipf("%s cannot cause %s: %s", srv.Version(t), f, why)
			}
			ctx := context.Background()
			redistest.CreateGroup(t, srv.Client(t), "jobs", "workers")
			conns, err := Open([]config.Redis{config.DefaultRedis("default", srv.Addr())})
			require.NoError(t, err)
			t.Cleanup(func() { _ = conns.Close() })
			r := &Reader{Conns: conns, LagEstimateCap: 10}
			target := heartbeatTarget("jobs")

			obs := fetch(t, r, target, "w-0")
			require.Equal(t, liveness.RefusalNone, obs.Heartbeats["hb:w-0"].Health().Refused, "writes are accepted")
			undo := srv.Cause(t, f)
			time.Sleep(sampleEvery)
			obs = fetch(t, r, target, "w-0")
			h := obs.Heartbeats["hb:w-0"].Health()
			require.Equal(t, want[f], h.Refused)
			require.True(t, h.WritableSince.IsZero(), "refused now")
			require.Equal(t, want[f], obs.StreamRefused)
			refused := conns.WritesRefused(ctx, "default", "jobs")
			require.NotNil(t, refused)
			require.Equal(t, want[f], refused.Refusal)
			require.Equal(t, want[f], conns.Refusing("default"))

			undo()
			accepted := time.Now()
			time.Sleep(sampleEvery)
			obs = fetch(t, r, target, "w-0")
			h = obs.Heartbeats["hb:w-0"].Health()
			require.Equal(t, want[f], h.Refused, "the last refusal")
			require.WithinRange(t, h.WritableSince, accepted, obs.ReadAt, "accepted again since the sample that found no cause")
			require.Nil(t, conns.WritesRefused(ctx, "default", "jobs"))
		})
	}
}

// TestAWriteRefusedInAReplyStartsARefusalAtOnce: no sample is due, and a
// write pelwarden sends is answered OOM: the node refuses writes from
// that reply on.
func TestAWriteRefusedInAReplyStartsARefusalAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	conns, err := Open([]config.Redis{config.DefaultRedis("default", srv.Addr())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	srv.Cause(t, redistest.FaultOOM)
	c, _ := conns.Get("default")
	require.Error(t, c.Set(ctx, "pelwarden:lease:x", "1", time.Second).Err())
	refused := conns.WritesRefused(ctx, "default", "jobs")
	require.NotNil(t, refused, "the reply's OOM is seen by the connection's hook")
	require.Equal(t, liveness.RefusalOOM, refused.Refusal)

	conns.NoteRefused(ctx, "default", "jobs", liveness.RefusalMisconf)
	require.Equal(t, liveness.RefusalMisconf, conns.Refusing("default"), "a script's caught refusal, noted")
}

// TestAReadSaysWhenTheNodeLastEvictedKeys: evicted_keys rising between
// two samples is an eviction.
func TestAReadSaysWhenTheNodeLastEvictedKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	conns, err := Open([]config.Redis{config.DefaultRedis("default", srv.Addr())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	r := &Reader{Conns: conns, LagEstimateCap: 10}
	target := heartbeatTarget("jobs")
	obs := fetch(t, r, target, "w-0")
	require.True(t, obs.Heartbeats["hb:w-0"].Health().EvictedAt.IsZero(), "no eviction seen, and none may happen (maxmemory 0)")

	require.NoError(t, rdb.Set(ctx, "victim", string(make([]byte, 100<<10)), time.Hour).Err())
	used, err := rdb.Info(ctx, "memory").Result()
	require.NoError(t, err)
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err())
	n, err := strconv.ParseInt(infoField(used, "used_memory"), 10, 64)
	require.NoError(t, err)
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(n-50<<10, 10)).Err())
	require.NoError(t, rdb.Set(ctx, "x", "1", 0).Err(), "the write evicts the key with a TTL")
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "0").Err())
	time.Sleep(sampleEvery)
	before := time.Now()
	obs = fetch(t, r, target, "w-0")
	require.WithinRange(t, obs.Heartbeats["hb:w-0"].Health().EvictedAt, before, obs.ReadAt, "the sample that saw evicted_keys rise")
}

// TestARefusedPingIsAnAnswer: MISCONF refuses PING too, but Redis
// answered it, and serves reads: pelwarden stays ready.
func TestARefusedPingIsAnAnswer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.FaultOptions(t, redistest.FaultMisconf))
	if ok, why := srv.CanCause(t, redistest.FaultMisconf); !ok {
		t.Skipf("%s cannot cause MISCONF: %s", srv.Version(t), why)
	}
	conns, err := Open([]config.Redis{config.DefaultRedis("default", srv.Addr())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	srv.Cause(t, redistest.FaultMisconf)
	c, _ := conns.Get("default")
	require.Error(t, c.Ping(context.Background()).Err(), "MISCONF refuses PING")
	require.NoError(t, conns.Ping(context.Background()))
}
