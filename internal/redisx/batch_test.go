package redisx

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// TestFetchBatchReadsEachGroupAsFetchDoes: groups of every kind read in
// one batch (a missing stream, a missing group, a NULL lag, heartbeats of
// consumers the batch could not know of, and known ones) come back as a
// read of each alone would, in order, and a batch whose Redis is gone
// fails every read with an error naming its group.
func TestFetchBatchReadsEachGroupAsFetchDoes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.Hold(t, rdb, "jobs", "workers", "w1", "", 2)
	redistest.Hold(t, rdb, "jobs", "workers", "w2", "", 1)
	require.NoError(t, rdb.Set(ctx, "hb:w1", "1700000000000", 0).Err())
	redistest.Hold(t, rdb, "deleted", "workers", "w1", "", 3)
	require.NoError(t, rdb.XDel(ctx, "deleted", redistest.AddJobs(t, rdb, "deleted", "", 2)[0]).Err()) // lag NULL
	redistest.CreateGroup(t, rdb, "other", "readers")
	conns, err := Open([]config.Redis{config.DefaultRedis("default", srv.Addr())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	r := &Reader{Conns: conns, LagEstimateCap: 10}

	beats := liveness.Spec{Heartbeat: true, HeartbeatKey: "hb:{consumer}"}
	target := func(stream, group string, spec liveness.Spec) liveness.Target {
		return liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: stream, Group: group}, Spec: spec}
	}
	reads := []liveness.Read{
		{Target: target("jobs", "workers", beats)},
		{Target: target("jobs", "workers", beats), Known: []string{"w1"}},
		{Target: target("nope", "workers", liveness.Spec{})},
		{Target: target("other", "workers", liveness.Spec{})},
		{Target: target("deleted", "workers", liveness.Spec{})},
		{Target: target("jobs", "workers", beats), Known: []string{"w1", "w2"}},
	}
	got := r.FetchBatch(ctx, reads)
	require.Len(t, got, len(reads))
	for i, rd := range reads {
		want, err := r.Fetch(ctx, rd.Target, rd.Known)
		require.NoError(t, err)
		require.NoError(t, got[i].Err, "read %d", i)
		require.Equal(t, timeless(want), timeless(got[i].Obs), "read %d of %s, known %v", i, rd.Target, rd.Known)
		require.False(t, got[i].Obs.ServerTime.IsZero())
	}
	require.True(t, got[2].Obs.StreamMissing)
	require.True(t, got[3].Obs.GroupMissing)
	require.True(t, got[4].Obs.LagEstimate > 0 && !got[4].Obs.LagValid, "the NULL lag is estimated: %+v", got[4].Obs)
	w1, w2 := got[0].Obs.Heartbeats["hb:w1"], got[0].Obs.Heartbeats["hb:w2"]
	require.True(t, w1.Exists && w1.Value == "1700000000000", "a consumer the read did not know of has its heartbeat read: %+v", w1)
	_, read := got[0].Obs.Heartbeats["hb:w2"]
	require.True(t, read && !w2.Exists && w2.Err == nil, "and a missing one is read as missing: %+v", w2)
	for _, i := range []int{1, 5} {
		require.Len(t, got[i].Obs.Heartbeats, 2, "read %d, known %v: every consumer's key is read, in the first round trip or the second", i, reads[i].Known)
		require.True(t, got[i].Obs.Heartbeats["hb:w1"].Exists, "read %d", i)
	}

	srv.Kill()
	for i, res := range r.FetchBatch(ctx, reads) {
		require.Error(t, res.Err, "read %d with Redis gone", i)
		require.ErrorContains(t, res.Err, reads[i].Target.String())
	}
}

// timeless is obs without what the clocks change between two reads.
func timeless(obs liveness.Observation) liveness.Observation {
	obs.ServerTime, obs.ReadAt = time.Time{}, time.Time{}
	cs := make([]liveness.ConsumerObs, len(obs.Consumers))
	for i, c := range obs.Consumers {
		// Before Redis 7.2 whether inactive is known hangs on idle being
		// 0, which a millisecond between the reads changes.
		c.Idle, c.Inactive = 0, 0
		cs[i] = c
	}
	obs.Consumers = cs
	return obs
}
