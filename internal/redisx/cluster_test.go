package redisx

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// roundTrips counts, per node address, the round trips a cluster client
// makes (one per pipeline sent to a node, one per lone command) and the
// commands they carry.
type roundTrips struct {
	mu       sync.Mutex
	trips    map[string]int
	commands map[string]int
	// samples counts apart the samples of a node's writes (writes.go),
	// a round trip of their own in a cluster, at most one every sampleEvery.
	samples map[string]int
}

func (r *roundTrips) hook(addr string) redis.Hook { return tripHook{r: r, addr: addr} }

func (r *roundTrips) add(addr string, cmds int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trips[addr]++
	r.commands[addr] += cmds
}

func (r *roundTrips) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trips, r.commands, r.samples = map[string]int{}, map[string]int{}, map[string]int{}
}

type tripHook struct {
	r    *roundTrips
	addr string
}

func (h tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.r.add(h.addr, 1)
		return next(ctx, cmd)
	}
}

func (h tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "info" {
			h.r.mu.Lock()
			h.r.samples[h.addr]++
			h.r.mu.Unlock()
			return next(ctx, cmds)
		}
		h.r.add(h.addr, len(cmds))
		return next(ctx, cmds)
	}
}

func clusterConns(t *testing.T, c *redistest.Cluster) *Conns {
	t.Helper()
	r := config.DefaultRedis("default", "")
	r.Mode, r.Cluster.Addrs = config.RedisCluster, c.Addrs()
	conns, err := Open([]config.Redis{r})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	return conns
}

// TestClusterFetchIsOneRoundTripPerNodeInvolved: the stream's commands go
// to its master and the heartbeat GETs to the masters of their own slots,
// each node once per read, not once per key.
func TestClusterFetchIsOneRoundTripPerNodeInvolved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.StartCluster(t, redistest.ClusterOptions{})
	rdb := c.Client(t)
	conns := clusterConns(t, c)
	primary, _ := conns.Get("default")
	cluster, ok := primary.(*redis.ClusterClient)
	require.True(t, ok, "a cluster connection's client is a ClusterClient, got %T", primary)
	trips := &roundTrips{}
	trips.reset()
	cluster.OnNewNode(func(n *redis.Client) { n.AddHook(trips.hook(n.Options().Addr)) })

	const stream, consumers = "{r}jobs", 12
	names := make([]string, consumers)
	hbNodes := map[string]int{}
	for i := range names {
		names[i] = fmt.Sprintf("w-%d", i)
		redistest.Hold(t, rdb, stream, "workers", names[i], "", 1)
		require.NoError(t, rdb.Set(ctx, "hb:"+names[i], time.Now().UnixMilli(), 0).Err())
		hbNodes[c.MasterForKey(t, "hb:"+names[i]).Addr()]++
	}
	require.Len(t, hbNodes, 3, "12 heartbeat keys spread over the 3 masters")
	req, err := metadata.Parse(map[string]string{
		"stream": stream, "consumerGroup": "workers", "liveness": "heartbeat", "heartbeatKey": "hb:{consumer}",
	}, metadata.Env{Conns: []string{"default"}})
	require.NoError(t, err)
	reader := &Reader{Conns: conns, LagEstimateCap: 10}
	_, err = reader.Fetch(ctx, req.Target, nil) // learns the consumers and the slot map
	require.NoError(t, err)

	trips.reset()
	obs, err := reader.Fetch(ctx, req.Target, names)
	require.NoError(t, err)

	require.Len(t, obs.Heartbeats, consumers, "every heartbeat read")
	for _, hb := range obs.Heartbeats {
		require.True(t, hb.Exists, "heartbeat read from its own slot's master")
	}
	streamNode := c.MasterForKey(t, stream).Addr()
	total := 0
	for addr, n := range trips.trips {
		require.Equal(t, 1, n, "node %s: one round trip per read (all trips: %v)", addr, trips.trips)
		total += trips.commands[addr]
	}
	for addr, keys := range hbNodes {
		require.GreaterOrEqual(t, trips.commands[addr], keys, "node %s got its %d heartbeat GETs", addr, keys)
	}
	require.GreaterOrEqual(t, trips.commands[streamNode], 2, "XINFO GROUPS and XINFO CONSUMERS on the stream's master")
	require.Equal(t, 3+consumers, total, "TIME, 2 stream commands and one GET per heartbeat key, nothing repeated")
	for addr, n := range trips.samples {
		require.LessOrEqual(t, n, 1, "node %s: its writes sampled at most once every sampleEvery", addr)
	}
	t.Logf("round trips per node: %v; commands per node: %v; samples of writes: %v", trips.trips, trips.commands, trips.samples)
}

// TestClusterWakerFollowsItsSlotAcrossAMoveAndAFailover: the waker's
// blocking read for a stream re-homes when the stream's slot moves to
// another master and when its master fails over, and still fires on XADD.
func TestClusterWakerFollowsItsSlotAcrossAMoveAndAFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
	rdb := c.Client(t)
	conns := clusterConns(t, c)
	primary, _ := conns.Get("default")
	w := NewWaker(primary, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	streams := []string{"{a}s", "{b}s", "{c}s", "{d}s"}
	requireFires := func(what string) {
		t.Helper()
		for _, s := range streams {
			wake, err := w.Arm(ctx, s)
			require.NoError(t, err, "%s: arm %s", what, s)
			time.Sleep(20 * time.Millisecond) // let the loop block first
			require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []string{"f", "v"}}).Err())
			select {
			case <-wake.C():
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no wake for %s within 10s of its XADD", what, s)
			}
			wake.Stop()
		}
	}
	requireFires("before any change")

	// Armed but not yet fired while its slot moves.
	moving := streams[0]
	wake, err := w.Arm(ctx, moving)
	require.NoError(t, err)
	defer wake.Stop()
	from := c.MasterForKey(t, moving)
	var to *redistest.ClusterNode
	for _, m := range c.Masters(t) {
		if m != from {
			to = m
			break
		}
	}
	require.True(t, c.MoveSlot(t, c.Slot(t, moving), to))
	require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: moving, Values: []string{"f", "v"}}).Err())
	select {
	case <-wake.C():
	case <-time.After(10 * time.Second):
		t.Fatalf("no wake for %s within 10s after its slot moved from %s to %s", moving, from.Addr(), to.Addr())
	}

	c.Failover(t, c.MasterForKey(t, streams[1]))
	requireFires("after a failover")
}

// TestScriptsLoadAgainOnAPromotedReplica: a replica does not share its
// master's script cache, so after a failover EVALSHA answers NOSCRIPT; the
// scripts run through Script.Run, which falls back to EVAL.
func TestScriptsLoadAgainOnAPromotedReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
	rdb := c.Client(t)
	conns := clusterConns(t, c)
	primary, _ := conns.Get("default")
	const stream = "{scripts}jobs"
	redistest.CreateGroup(t, rdb, stream, "workers")
	require.NoError(t, rdb.XGroupCreateConsumer(ctx, stream, "workers", "gone").Err())
	got, err := DeleteConsumer(ctx, primary, stream, "workers", "gone", 0, true)
	require.NoError(t, err, "a dry run loads the script on the master")
	require.Equal(t, ConsumerDeleted, got)
	master := c.MasterForKey(t, stream)
	redistest.WaitReplicated(t, master.Client(t))

	promoted := c.Failover(t, master)
	exists, err := promoted.Client(t).ScriptExists(ctx, delConsumerScript.Hash()).Result()
	require.NoError(t, err)
	require.Equal(t, []bool{false}, exists, "the promoted replica has not loaded the script")

	got, err = DeleteConsumer(ctx, primary, stream, "workers", "gone", 0, false)
	require.NoError(t, err, "EVALSHA's NOSCRIPT falls back to EVAL")
	require.Equal(t, ConsumerDeleted, got)
	consumers, err := rdb.XInfoConsumers(ctx, stream, "workers").Result()
	require.NoError(t, err)
	require.Empty(t, consumers, "the consumer is deleted on the new master")
}
