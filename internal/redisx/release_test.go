package redisx

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// pel is the group's pending entries by id: owner ("" once released) and
// delivery count.
func pel(t *testing.T, rdb *redis.Client) map[string]PendingEntry {
	t.Helper()
	rows, err := PendingPage(context.Background(), rdb, "jobs", "workers", "", 0, "", 1000)
	require.NoError(t, err)
	out := make(map[string]PendingEntry, len(rows))
	for _, r := range rows {
		out[r.ID] = r
	}
	return out
}

// Every server is asked, not looked up by version: the answer must be what
// the server's own command table says (COMMAND DOCS, read another way).
func TestCapabilitiesAreWhatTheServerKnows(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	conns, err := Open([]config.Redis{config.DefaultRedis("default", srv.Addr())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	caps, err := conns.Capabilities(context.Background(), "default", "jobs")
	require.NoError(t, err)
	require.Equal(t, Capabilities{Release: srv.Knows(t, redistest.XNack), AckDel: srv.Knows(t, redistest.XAckDel)}, caps,
		"on %s", srv.Version(t))
	again, err := conns.Capabilities(context.Background(), "default", "other-stream")
	require.NoError(t, err)
	require.Equal(t, caps, again, "one server, one answer")
}

func TestReleaseGivesTheGhostsEntriesBackUnderTheirOwnIDsOnRedis8(t *testing.T) {
	t.Parallel()
	rdb := redistest.StartWith(t, redistest.Options{}, redistest.XNack).Client(t)
	ctx := context.Background()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 4)
	redistest.Age(t, rdb, "jobs", "workers", "ghost", time.Hour, ids...)
	r := Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", MinIdle: time.Minute, Release: true, IDs: ids}
	outs, err := reclaimIDs(ctx, rdb, r)
	require.NoError(t, err)
	require.Equal(t, []Outcome{Released, Released, Released, Released}, results(outs))
	for id, e := range pel(t, rdb) {
		require.Empty(t, e.Consumer, "%s has no owner", id)
		require.Equal(t, int64(1), e.Deliveries, "%s: the ghost's delivery counts as a failed one (XNACK FAIL)", id)
	}
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(4), n, "no copy: each entry keeps its id")

	again, err := reclaimIDs(ctx, rdb, r)
	require.NoError(t, err)
	require.Equal(t, []Outcome{OwnerChanged, OwnerChanged, OwnerChanged, OwnerChanged}, results(again),
		"a retry, or a second pelwarden, finds them no longer the ghost's and releases nothing twice")
}

func TestPagedReleaseLeavesReleasedAndClaimedEntriesAloneOnRedis8(t *testing.T) {
	t.Parallel()
	rdb := redistest.StartWith(t, redistest.Options{}, redistest.XNack, redistest.ReadClaim).Client(t)
	ctx := context.Background()
	ghost := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 6)
	redistest.Age(t, rdb, "jobs", "workers", "ghost", time.Hour, ghost...)
	// A worker released two of its own on the way out; a reader that claims
	// took one of the ghost's first.
	mine := redistest.Hold(t, rdb, "jobs", "workers", "leaving", "", 2)
	redistest.Nack(t, rdb, "jobs", "workers", "SILENT", mine...)
	taken := redistest.ReadClaiming(t, rdb, "jobs", "workers", "reader", time.Minute, 3)
	require.Len(t, taken, 3, "the two released entries, then one of the ghost's idle past the reader's min-idle")
	before := pel(t, rdb)

	res, err := RunReclaim(ctx, rdb, Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", MinIdle: time.Minute, Release: true, Count: 100})
	require.NoError(t, err)
	require.Equal(t, map[Outcome]int64{Released: 5}, res.Counts, "the ghost's five left, each once")
	after := pel(t, rdb)
	for _, id := range taken {
		require.Equal(t, "reader", after[id].Consumer, "%s, the reader's, is left to it", id)
		require.Equal(t, before[id].Deliveries, after[id].Deliveries, "%s is untouched", id)
	}
	for _, id := range ghost {
		if e := after[id]; e.Consumer != "reader" {
			require.Empty(t, e.Consumer, "%s is released", id)
		}
	}
}

func TestReleasedEntriesArePendingThatNoConsumerHoldsOnRedis8(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{}, redistest.XNack)
	rdb := srv.Client(t)
	ids := redistest.Hold(t, rdb, "jobs", "workers", "w1", "", 8)
	redistest.AddJobs(t, rdb, "jobs", "more-", 2)
	redistest.Nack(t, rdb, "jobs", "workers", "SILENT", ids[:5]...)

	obs := fetchOne(t, srv, liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}})
	require.Equal(t, int64(8), obs.PendingTotal, "the group's PEL has every pending entry")
	require.Equal(t, map[string]int64{"w1": 3}, obs.PendingByConsumer, "the consumers' counts leave the released ones out")
	spec := liveness.Spec{Idle: true, GhostIdle: time.Hour}
	snap := liveness.Build(&liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}, Spec: spec}, obs, nil, time.Now())
	require.Equal(t, int64(5), snap.ReleasedPending)
	require.Equal(t, int64(3), snap.LivePending)
	require.Equal(t, int64(2), snap.Lag)
}

// A user allowed XACKDEL gets one command; one that is not gets XACK and
// XDEL in the same script, and is told so: the originals are acknowledged
// and deleted either way.
func TestDeleteOriginalUsesXAckDelWhereTheUserMayOnRedis8(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWith(t, redistest.Options{}, redistest.XAckDel)
	admin := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "narrow", "on", ">pw", "~*", "+@all", "-xackdel").Err())
	narrow := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "narrow", Password: "pw"})
	t.Cleanup(func() { _ = narrow.Close() })
	for _, tc := range []struct {
		name    string
		rdb     *redis.Client
		refused bool
	}{{"allowed", admin, false}, {"refused", narrow, true}} {
		stream := "jobs-" + tc.name
		ids := redistest.Hold(t, admin, stream, "workers", "ghost", "", 3)
		before := redistest.CommandCalls(t, admin)
		res, err := RunReclaim(ctx, tc.rdb, Reclaim{Stream: stream, Group: "workers", Consumer: "ghost", DeleteOriginal: true, AckDel: true, Count: 10})
		require.NoError(t, err, tc.name)
		require.Equal(t, map[Outcome]int64{Requeued: 3}, res.Counts, tc.name)
		require.Equal(t, tc.refused, res.AckDelRefused, tc.name)
		by, _ := redistest.CallsSince(before, redistest.CommandCalls(t, admin))
		if tc.refused {
			require.Equal(t, int64(1), by["xack"], "%s: one XACK for the page", tc.name)
		} else {
			require.Equal(t, int64(1), by["xackdel"], "%s: one XACKDEL for the page", tc.name)
			require.Zero(t, by["xack"]+by["xdel"], tc.name)
		}
		left, err := admin.XRange(ctx, stream, ids[0], ids[len(ids)-1]).Result()
		require.NoError(t, err)
		require.Empty(t, left, "%s: the originals are deleted", tc.name)
		p, err := admin.XPending(ctx, stream, "workers").Result()
		require.NoError(t, err)
		require.Zero(t, p.Count, "%s: and acknowledged", tc.name)
	}
}
