package redisx

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// getCalls is how many GETs a server has run (INFO commandstats).
func getCalls(ctx context.Context, t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_get:calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// TestReplicaReadsReachOnlyTheDiagnosticsClient: with replica reads on, the
// diagnostics client reads a replica, and the client the scaler, the view
// and hygiene use still reads the master.
func TestReplicaReadsReachOnlyTheDiagnosticsClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type setup struct {
		conn            config.Redis
		master, replica *redis.Client
		key             string
	}
	tests := map[string]func(t *testing.T) setup{
		"sentinel with replicaReads": func(t *testing.T) setup {
			s := redistest.StartSentinel(t, redistest.SentinelOptions{})
			r := config.DefaultRedis("default", "")
			r.Mode = config.RedisSentinel
			r.Sentinel = config.RedisSentinelConfig{MasterName: s.MasterName(), Addrs: s.SentinelAddrs(), ReplicaReads: true}
			m := s.Master(t)
			var replica *redistest.Server
			for _, n := range s.Nodes() {
				if n != m {
					replica = n
				}
			}
			return setup{conn: r, master: m.Client(t), replica: replica.Client(t), key: "k"}
		},
		"cluster with readOnly": func(t *testing.T) setup {
			c := redistest.StartCluster(t, redistest.ClusterOptions{ReplicasPerMaster: 1})
			r := config.DefaultRedis("default", "")
			r.Mode, r.Cluster = config.RedisCluster, config.RedisClusterConfig{Addrs: c.Addrs(), ReadOnly: true}
			m := c.MasterForKey(t, "{k}")
			return setup{conn: r, master: m.Client(t), replica: c.ReplicaOf(t, m).Client(t), key: "{k}"}
		},
	}
	for name, start := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := start(t)
			require.NoError(t, s.master.Set(ctx, s.key, "v", 0).Err())
			redistest.WaitReplicated(t, s.master) //nolint:contextcheck // the wait ends with the test, as ctx does
			conns, err := Open([]config.Redis{s.conn})
			require.NoError(t, err)
			t.Cleanup(func() { _ = conns.Close() })
			primary, _ := conns.Get("default")
			diagnostics, _ := conns.Diagnostics("default")

			masterBefore, replicaBefore := getCalls(ctx, t, s.master), getCalls(ctx, t, s.replica)
			for range 5 {
				require.NoError(t, primary.Get(ctx, s.key).Err())
			}
			require.Equal(t, masterBefore+5, getCalls(ctx, t, s.master), "the judging client reads the master")
			require.Equal(t, replicaBefore, getCalls(ctx, t, s.replica), "the judging client never reads a replica")

			masterBefore = getCalls(ctx, t, s.master)
			for range 5 {
				require.NoError(t, diagnostics.Get(ctx, s.key).Err())
			}
			require.Equal(t, replicaBefore+5, getCalls(ctx, t, s.replica), "the diagnostics client reads the replica")
			require.Equal(t, masterBefore, getCalls(ctx, t, s.master), "and leaves the master alone")
		})
	}
}
