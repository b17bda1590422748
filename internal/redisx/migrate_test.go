package redisx

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

// TestWaitReplicasFollowsASKAndMOVEDWhileTheStreamsSlotMigrates: with
// waitReplicas the guarded script runs on a connection pinned to the
// stream's master, for WAIT; while the slot migrates that master answers
// ASK, and once it moved, MOVED. Both are followed: the batch runs on the
// node that holds the stream, and WAIT there returns only once that node's
// replica has the acknowledgements.
func TestWaitReplicasFollowsASKAndMOVEDWhileTheStreamsSlotMigrates(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
	rdb := c.Client(t)
	const stream = "{mig}jobs"
	redistest.Hold(t, rdb, stream, "workers", "ghost", "", 300)
	// A client whose slot map is read once and not again on its own: only
	// the redirections can tell it the slot moved.
	opts := c.Options()
	opts.ClusterStateReloadInterval = time.Hour
	pinned := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = pinned.Close() })
	require.NoError(t, pinned.Ping(ctx).Err())

	from := c.MasterForKey(t, stream)
	to := otherMasterThan(t, c, from)
	m := c.BeginMove(t, c.Slot(t, stream), to)
	resetStats(t, from, to)
	r := Reclaim{Stream: stream, Group: "workers", Consumer: "ghost", Count: 1000, Wait: Durability{Replicas: 1, Timeout: 5 * time.Second}}
	res, err := RunReclaim(ctx, pinned, r)
	require.NoError(t, err, "the old master answers ASK for the moved stream: followed, with WAIT on the importing node")
	require.Equal(t, map[Outcome]int64{Requeued: 300}, res.Counts, "every entry given back during the migration window")
	require.Equal(t, 1, calls(t, to, "wait"), "WAIT went to the importing node, which took the write")
	require.Positive(t, calls(t, to, "asking"), "after ASKING")
	require.Zero(t, calls(t, from, "wait"), "not to the old master, which took none")

	m.Finish(t)
	redistest.Hold(t, rdb, stream, "workers", "ghost", "", 5)
	resetStats(t, from, to)
	res, err = RunReclaim(ctx, pinned, r)
	require.NoError(t, err, "the old master answers MOVED: followed to the new one")
	require.Equal(t, map[Outcome]int64{Requeued: 5}, res.Counts)
	require.Equal(t, 1, calls(t, to, "wait"), "WAIT on the new master")
	requireNoPending(t, c.ReplicaOf(t, to), stream, "whose replica has every acknowledgement when WAIT returns")
}

// resetStats zeroes the nodes' command counters.
func resetStats(t *testing.T, nodes ...*redistest.ClusterNode) {
	t.Helper()
	for _, n := range nodes {
		require.NoError(t, n.Client(t).ConfigResetStat(t.Context()).Err())
	}
}

// calls is how often node ran cmd since its counters were reset.
func calls(t *testing.T, node *redistest.ClusterNode, cmd string) int {
	t.Helper()
	info, err := node.Client(t).Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	_, rest, found := strings.Cut(info, "cmdstat_"+cmd+":calls=")
	if !found {
		return 0
	}
	n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
	require.NoError(t, err)
	return n
}

func otherMasterThan(t *testing.T, c *redistest.Cluster, not *redistest.ClusterNode) *redistest.ClusterNode {
	t.Helper()
	for _, m := range c.Masters(t) {
		if m != not {
			return m
		}
	}
	t.Fatal("no other master")
	return nil
}

// requireNoPending reads the group's PEL summary on one replica.
func requireNoPending(t *testing.T, replica *redistest.ClusterNode, stream, why string) {
	t.Helper()
	r := replica.Client(t)
	ctx := t.Context()
	conn := r.Conn()
	defer func() { _ = conn.Close() }()
	require.NoError(t, conn.ReadOnly(ctx).Err())
	p, err := conn.XPending(ctx, stream, "workers").Result()
	require.NoError(t, err)
	require.Zero(t, p.Count, why)
}
