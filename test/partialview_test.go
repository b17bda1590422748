package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// TestClusterHeartbeatNodeDownIsNoEvidenceOfAGhost: in a cluster the
// stream's master can answer while the master holding a consumer's
// heartbeat key is down. That consumer is Unknown, not Ghost: the scaler
// counts its entries as live and hygiene leaves them alone. Once the node
// is back without the key, the consumer is a ghost and its entries are
// requeued, which shows the scan was running all along.
func TestClusterHeartbeatNodeDownIsNoEvidenceOfAGhost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Without full coverage the masters that are up keep serving their
	// slots while one is down, as a cluster without replicas would.
	c := redistest.StartCluster(t, redistest.ClusterOptions{
		Node: redistest.Options{Args: []string{"--cluster-require-full-coverage", "no"}},
	})
	rdb := c.Client(t)
	const stream = "{partial}jobs"
	streamNode := c.MasterForKey(t, stream)
	var ghost string
	var hbNode *redistest.ClusterNode
	for i := 0; hbNode == nil; i++ {
		name := fmt.Sprintf("ghost-%d", i)
		if n := c.MasterForKey(t, "hb:"+name); n != streamNode {
			ghost, hbNode = name, n
		}
	}
	redistest.Hold(t, rdb, stream, "workers", ghost, "", 5) // and never a heartbeat
	// A live worker whose heartbeat stays readable shows the heartbeats
	// work at all; without one, no missing key would be judged.
	live := ""
	for i := 0; live == ""; i++ {
		if name := fmt.Sprintf("live-%d", i); c.MasterForKey(t, "hb:"+name) != hbNode {
			live = name
		}
	}
	redistest.Hold(t, rdb, stream, "workers", live, "", 2)
	beatEvery(t, rdb, map[string]func() string{"hb:" + live: msAgo(0)})
	hbNode.Kill()

	target := map[string]string{
		"stream": stream, "consumerGroup": "workers", "reclaim": "requeue", "entryStaleSeconds": "0.1",
		"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "1",
	}
	p := startPelwardenOn(t, func(r *config.Redis) {
		r.Mode, r.Addr, r.Cluster.Addrs = config.RedisCluster, "", []string{streamNode.Addr()}
	}, func(c *config.Config) {
		c.Hygiene.ScanInterval, c.Hygiene.LeaseTTL = 200*time.Millisecond, time.Second
		c.Hygiene.Targets = []map[string]string{target}
	})
	md := map[string]string{"stream": stream, "consumerGroup": "workers",
		"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "1"}

	// The first reads wait out the request timeout on the dead node,
	// until the cluster client marks it failing and its keys fail at once.
	counted := 0
	for deadline := time.Now().Add(10 * time.Second); counted < 3 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		v, err := metric(ctx, t, p.client, md)
		if err != nil {
			require.Equal(t, codes.Unavailable, status.Code(err), "a failed read is Unavailable: %v", err)
			continue
		}
		require.Equal(t, int64(7), v, "the consumer whose heartbeat cannot be read holds live work, not ghost work")
		counted++
	}
	require.Positive(t, counted, "the stream's master answered while the heartbeat node was down")
	pending, err := rdb.XPending(ctx, stream, "workers").Result()
	require.NoError(t, err)
	require.Equal(t, map[string]int64{ghost: 5, live: 2}, pending.Consumers, "hygiene left the Unknown consumer's entries alone")

	hbNode.Restart(t)
	c.WaitHealthy(t)
	eventually(t, 15*time.Second, func() error {
		pending, err := rdb.XPending(ctx, stream, "workers").Result()
		if err == nil && pending.Consumers[ghost] != 0 {
			err = fmt.Errorf("%d still pending on %s, want them requeued once the ghost is judged", pending.Consumers[ghost], ghost)
		}
		return err
	})
}
