package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// TestGhostsEntriesMoveDuringAndAfterASlotMigrationWithWaitReplicas: with
// waitReplicas 1 every guarded write runs on a connection pinned to the
// stream's master, for WAIT. A ghost's 300 entries are given back while
// the stream's slot is held in migration (the old master answers ASK) and
// a second ghost's right after the slot moved (MOVED), each well before
// the window would have closed. The stalls, from the moment the entries
// were due to the moment the ghost held nothing, are logged.
func TestGhostsEntriesMoveDuringAndAfterASlotMigrationWithWaitReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
	rdb := c.Client(t)
	const stream, window = "{migrate}jobs", 20 * time.Second
	redistest.Hold(t, rdb, stream, "workers", "ghost-ask", "a", 300)
	from := c.MasterForKey(t, stream)
	var to *redistest.ClusterNode
	for _, m := range c.Masters(t) {
		if m != from {
			to = m
		}
	}
	m := c.BeginMove(t, c.Slot(t, stream), to)
	t.Logf("slot of %s migrating from %s to %s; the window stays open up to %s", stream, from.Addr(), to.Addr(), window)

	target := map[string]string{"stream": stream, "consumerGroup": "workers", "reclaim": "requeue",
		"entryStaleSeconds": "0.1", "liveness": "idle", "ghostIdleSeconds": "0.5"}
	due := time.Now().Add(500 * time.Millisecond)
	startPelwardenOn(t, func(r *config.Redis) {
		r.Mode, r.Addr = config.RedisCluster, ""
		r.Cluster = config.RedisClusterConfig{Addrs: c.Addrs()}
		r.WaitReplicas, r.WaitTimeout = 1, 2*time.Second
	}, func(c *config.Config) {
		c.Hygiene.ScanInterval, c.Hygiene.LeaseTTL = 200*time.Millisecond, 2*time.Second
		c.Hygiene.Targets = []map[string]string{target}
	})

	stall, ok := untilGivenBack(ctx, rdb, stream, "ghost-ask", due, window)
	if !ok {
		m.Finish(t)
		closed := time.Now()
		_, ok = untilGivenBack(ctx, rdb, stream, "ghost-ask", closed, window)
		t.Fatalf("the ghost's entries stayed pending for the whole %s migration window (ASK); given back %s after it closed: %v",
			window, time.Since(closed).Round(time.Millisecond), ok)
	}
	t.Logf("ASK: the ghost's 300 entries were given back %s after they were due, in the migration window", stall.Round(time.Millisecond))
	m.Finish(t)
	// A live worker takes the copies, so the second ghost reads new jobs.
	ackAll(t, rdb, stream, redistest.Read(t, rdb, stream, "workers", "worker", 300))

	redistest.Hold(t, rdb, stream, "workers", "ghost-moved", "b", 300)
	due = time.Now().Add(500 * time.Millisecond)
	stall, ok = untilGivenBack(ctx, rdb, stream, "ghost-moved", due, window)
	require.True(t, ok, "the second ghost's entries were given back after the slot moved (MOVED)")
	t.Logf("MOVED: the ghost's 300 entries were given back %s after they were due, on the new master", stall.Round(time.Millisecond))
	requireBooks(t, rdb, stream, 600)
}

// untilGivenBack waits, at most window past due, until consumer holds
// nothing, and returns how long after due that was. It polls through the
// cluster client, which follows ASK itself.
func untilGivenBack(ctx context.Context, rdb *redis.ClusterClient, stream, consumer string, due time.Time, window time.Duration) (time.Duration, bool) {
	for time.Now().Before(due.Add(window)) {
		p, err := rdb.XPending(ctx, stream, "workers").Result()
		if err == nil && p.Consumers[consumer] == 0 {
			return time.Since(due), true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(due), false
}

func ackAll(t *testing.T, rdb *redis.ClusterClient, stream string, ids []string) {
	t.Helper()
	require.NoError(t, rdb.XAck(t.Context(), stream, "workers", ids...).Err())
}

// requireBooks checks that every entry given back was copied once and
// nothing is left pending: each job is in the stream twice, as its
// original (acknowledged, kept) and its one copy.
func requireBooks(t *testing.T, rdb *redis.ClusterClient, stream string, held int) {
	t.Helper()
	ctx := t.Context()
	entries, err := rdb.XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	jobs := map[string]int{}
	for _, e := range entries {
		jobs[fmt.Sprint(e.Values["job"])]++
	}
	require.Len(t, jobs, held, "every job in the stream")
	for job, n := range jobs {
		require.Equal(t, 2, n, "job %s: its original and one copy", job)
	}
	p, err := rdb.XPending(ctx, stream, "workers").Result()
	require.NoError(t, err)
	require.Zero(t, p.Count, "nothing left pending")
}
