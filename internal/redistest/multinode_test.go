package redistest

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClusterFormsWithEverySlotServedAndKeysSpreadOverMasters(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := StartCluster(t, ClusterOptions{})
	rdb := c.Client(t)

	require.Len(t, c.Masters(t), 3, "a default cluster has 3 masters")
	owners := map[string]bool{}
	for i := range 30 {
		key := "k" + strconv.Itoa(i)
		require.NoError(t, rdb.Set(ctx, key, i, 0).Err(), "SET %s through the cluster client", key)
		owners[c.MasterForKey(t, key).ID()] = true
	}
	require.Len(t, owners, 3, "30 keys should land on all 3 masters")
	for _, n := range c.Nodes() {
		require.Less(t, n.port, 55535, "a node port must leave room for its bus port")
	}
}

func TestClusterFailoverPromotesTheReplicaAndKeepsData(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := StartCluster(t, ClusterOptions{ReplicasPerMaster: 1})
	rdb := c.Client(t)
	require.NoError(t, rdb.Set(ctx, "{f}k", "v", 0).Err(), "SET before the failover")
	old := c.MasterForKey(t, "{f}k")
	replica := c.ReplicaOf(t, old)

	promoted := c.Failover(t, old)

	require.Equal(t, replica, promoted, "CLUSTER FAILOVER promotes the master's replica")
	require.Equal(t, promoted, c.MasterForKey(t, "{f}k"), "the slot follows the promoted replica")
	require.Equal(t, old, c.ReplicaOf(t, promoted), "the old master becomes the new one's replica")
	got, err := rdb.Get(ctx, "{f}k").Result()
	require.NoError(t, err, "GET after the failover through the same client")
	require.Equal(t, "v", got, "the value survives a coordinated failover")
}

func TestClusterKillMasterHasTheReplicaVotedMaster(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := StartCluster(t, ClusterOptions{ReplicasPerMaster: 1})
	rdb := c.Client(t)
	require.NoError(t, rdb.Set(ctx, "{k}k", "v", 0).Err(), "SET before the kill")
	old := c.MasterForKey(t, "{k}k")
	// Let the replica receive the write before the master dies.
	WaitReplicated(t, old.Client(t))

	promoted := c.KillMaster(t, old)

	require.NotNil(t, promoted, "a master with a replica is replaced")
	require.NotEqual(t, old, promoted, "the dead master is not the new one")
	// The client dials the dead master until its slot map reloads.
	require.EventuallyWithT(t, func(t *assert.CollectT) {
		got, err := rdb.Get(ctx, "{k}k").Result()
		require.NoError(t, err, "GET through the cluster client after the kill")
		require.Equal(t, "v", got, "a replicated write survives the master's death")
	}, 10*time.Second, 50*time.Millisecond)

	old.Restart(t)
	c.WaitHealthy(t)
	require.Equal(t, old, c.ReplicaOf(t, promoted), "the restarted master rejoins as a replica")
}

func TestClusterMoveSlotAndReshardCarryKeysToTheNewMaster(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := StartCluster(t, ClusterOptions{})
	rdb := c.Client(t)
	for i := range 250 {
		require.NoError(t, rdb.Set(ctx, "{m}"+strconv.Itoa(i), i, 0).Err(), "SET key %d", i)
	}
	from := c.MasterForKey(t, "{m}")
	var to *ClusterNode
	for _, n := range c.Masters(t) {
		if n != from {
			to = n
		}
	}

	require.True(t, c.MoveSlot(t, c.Slot(t, "{m}"), to), "MoveSlot")

	require.Equal(t, to, c.MasterForKey(t, "{m}"), "the slot is served by its new master")
	n, err := to.Client(t).DBSize(ctx).Result()
	require.NoError(t, err, "DBSIZE on the new master")
	require.Equal(t, int64(250), n, "every key of the slot moved with it")

	// Writes keep going while redis-cli moves slots under them; the client
	// follows ASK and MOVED, so none fails and none is lost.
	stop, written := make(chan struct{}), make(chan []string)
	go func() {
		var keys []string
		for i := 0; ; i++ {
			select {
			case <-stop:
				written <- keys
				return
			default:
			}
			key := "traffic-" + strconv.Itoa(i)
			if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
				key = "failed: " + err.Error()
			}
			keys = append(keys, key)
		}
	}()
	before := c.slotsOf(t, to)
	require.True(t, c.Reshard(t, to, from, 100), "redis-cli --cluster reshard")
	close(stop)
	keys := <-written
	require.Equal(t, before-100, c.slotsOf(t, to), "reshard moved 100 slots away")
	got, err := rdb.Get(ctx, "{m}7").Result()
	require.NoError(t, err, "GET after the reshard")
	require.Equal(t, "7", got, "keys stay readable through the cluster client")
	require.NotEmpty(t, keys, "writes ran during the reshard")
	for i, k := range keys {
		require.NotContains(t, k, "failed", "write %d during the reshard", i)
		n, err := rdb.Exists(ctx, k).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "%s written during the reshard is there after it", k)
	}
	t.Logf("%d writes during the reshard", len(keys))
}

func TestSentinelFailoverAndKillMasterMoveTheMasterTheClientFollows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := StartSentinel(t, SentinelOptions{DownAfter: time.Second})
	rdb := s.Client(t)
	require.Len(t, s.SentinelAddrs(), 3, "3 sentinels by default")
	first := s.Master(t)
	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err(), "SET through the failover client")
	WaitReplicated(t, first.Client(t))

	second := s.Failover(t)
	require.NotEqual(t, first, second, "SENTINEL FAILOVER names another master")
	require.NoError(t, rdb.Set(ctx, "k2", "v2", 0).Err(), "SET after the failover through the same client")
	WaitReplicated(t, second.Client(t))

	third := s.KillMaster(t)
	require.Equal(t, first, third, "with one replica the old master comes back as master")
	got, err := rdb.MGet(ctx, "k", "k2").Result()
	require.NoError(t, err, "MGET after the kill")
	require.Equal(t, []any{"v", "v2"}, got, "replicated writes survive both failovers")
}

func TestMultiNodeProcessesStopWhenTheTestEnds(t *testing.T) {
	t.Parallel()
	var addrs []string
	t.Run("cluster", func(t *testing.T) {
		addrs = append(addrs, StartCluster(t, ClusterOptions{Masters: 1}).Addrs()...)
	})
	t.Run("sentinel", func(t *testing.T) {
		s := StartSentinel(t, SentinelOptions{Sentinels: 1})
		addrs = append(addrs, s.SentinelAddrs()...)
		for _, n := range s.Nodes() {
			addrs = append(addrs, n.Addr())
		}
	})
	require.Len(t, addrs, 4, "one cluster node, one master, one replica, one sentinel")
	for _, a := range addrs {
		_, err := net.DialTimeout("tcp", a, time.Second)
		require.Error(t, err, "nothing should listen on %s after its test ended", a)
	}
}
