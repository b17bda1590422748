package redisx

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// withReplica starts a master and one replica of it, in sync.
func withReplica(t *testing.T) (master, replica *redis.Client) {
	t.Helper()
	// No diskless-sync delay: the replica syncs at once.
	m := redistest.Start(t, redistest.Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
	host, port, _ := strings.Cut(m.Addr(), ":")
	r := redistest.Start(t, redistest.Options{Args: []string{"--replicaof", host, port}})
	master, replica = m.Client(t), r.Client(t)
	require.Eventually(t, func() bool {
		info := master.Info(t.Context(), "replication").Val()
		return strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	}, 10*time.Second, 20*time.Millisecond, "the replica syncs")
	return master, replica
}

func TestWaitReplicasReportsAWriteTooFewReplicasAcknowledged(t *testing.T) {
	t.Parallel()
	master, replica := withReplica(t)
	ctx := t.Context()
	redistest.Hold(t, master, "jobs", "workers", "ghost", "", 4)
	r := Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", Count: 2, Wait: Durability{Replicas: 1, Timeout: 2 * time.Second}}

	res, err := RunReclaim(ctx, master, r)
	require.NoError(t, err, "one replica asked, one acknowledged")
	require.Equal(t, int64(2), res.Counts[Requeued])
	require.Equal(t, int64(2), replica.XPending(ctx, "jobs", "workers").Val().Count,
		"WAIT returned only once the replica had the acknowledgements")

	r.Wait.Replicas, r.Wait.Timeout, r.After = 2, 100*time.Millisecond, res.Last
	res, err = RunReclaim(ctx, master, r)
	var behind *ReplicasBehindError
	require.ErrorAs(t, err, &behind)
	require.Equal(t, ReplicasBehindError{Key: "jobs", Want: 2, Got: 1, Timeout: 100 * time.Millisecond}, *behind)
	require.Equal(t, int64(2), res.Counts[Requeued], "the write stands and is reported with the error")
	require.Zero(t, master.XPending(ctx, "jobs", "workers").Val().Count)
}

func TestWaitReplicasCoversEveryStepOfTheTwoStepPath(t *testing.T) {
	t.Parallel()
	master, replica := withReplica(t)
	ctx := t.Context()
	redistest.Hold(t, master, "jobs", "workers", "ghost", "", 3)
	holdPoison(t, master)
	h := held()
	h.Wait = Durability{Replicas: 1, Timeout: 2 * time.Second}
	res, err := FinishHeld(ctx, master, h)
	require.NoError(t, err)
	require.Equal(t, map[Outcome]int64{DeadLettered: 3}, res.Counts)
	require.Equal(t, int64(3), replica.XLen(ctx, "dead").Val(), "the replica has the records")
	require.Zero(t, replica.XPending(ctx, "jobs", "workers").Val().Count, "and the acknowledgements")

	redistest.Hold(t, master, "jobs", "workers", "ghost", "", 1)
	holdPoison(t, master)
	h.Wait.Replicas, h.Wait.Timeout = 2, 50*time.Millisecond
	res, err = FinishHeld(ctx, master, h)
	var behind *ReplicasBehindError
	require.ErrorAs(t, err, &behind)
	require.Equal(t, "dead", behind.Key, "step 2 stops the run before the entry is acknowledged")
	require.Zero(t, res.Total())
	require.Equal(t, int64(1), master.XPending(ctx, "jobs", "workers").Val().Consumers[liveness.DeadLetterHolder], "it stays held for the next run")
	h.Wait = Durability{}
	res, err = FinishHeld(ctx, master, h)
	require.NoError(t, err)
	require.Equal(t, map[Outcome]int64{DeadLettered: 1}, res.Counts, "the next run finds its record and acknowledges it")
	require.Equal(t, int64(4), master.XLen(ctx, "dead").Val(), "one record each")
}
