package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
	"github.com/pelwarden/pelwarden/internal/tlstest"
)

// secureBackend is a backend whose every process speaks TLS only and has a
// "pelwarden" user with exactly the documented commands; servers lists
// every process whose ACL log must stay empty.
type secureBackend struct {
	*backend
	servers []*redistest.Server
}

// modeTLS is a TLS setup for multi-node Redis: clients are not asked for a
// certificate (tls-auth-clients no), and cluster nodes present the
// harness's client pair to each other on the bus.
func modeTLS(t *testing.T) (*redistest.TLS, config.RedisTLS) {
	t.Helper()
	ca := tlstest.NewCA(t, "redis-ca")
	server, node := ca.Server(t), ca.Client(t, "node")
	mount := tlstest.NewSecretDir(t, map[string][]byte{
		"server.crt": server.CertPEM, "server.key": server.KeyPEM, tlstest.CAKey: ca.CertPEM,
		"node.crt": node.CertPEM, "node.key": node.KeyPEM,
	})
	return &redistest.TLS{
			CertFile: mount.Path("server.crt"), KeyFile: mount.Path("server.key"),
			CAFile: mount.Path(tlstest.CAKey), AuthClients: "no",
			ClientCertFile: mount.Path("node.crt"), ClientKeyFile: mount.Path("node.key"),
		}, config.RedisTLS{
			Enabled: true, CAFile: mount.Path(tlstest.CAKey),
		}
}

var nodeUser = "pelwarden on >" + redisPassword + " ~* resetchannels " + redisx.ACLCommands

func startSecureSentinel(t *testing.T) *secureBackend {
	t.Helper()
	serverTLS, clientTLS := modeTLS(t)
	s := redistest.StartSentinel(t, redistest.SentinelOptions{
		Node:          redistest.Options{TLS: serverTLS, Users: []string{nodeUser}},
		SentinelUsers: []string{"pelwarden on >sentinel-" + redisPassword + " " + redisx.SentinelACLChannels + " " + redisx.SentinelACLCommands},
	})
	return &secureBackend{
		backend: &backend{rdb: s.Client(t), connect: func(r *config.Redis) {
			r.Mode, r.Addr, r.TLS = config.RedisSentinel, "", clientTLS
			r.Username, r.Password = "pelwarden", redisPassword
			r.Sentinel = config.RedisSentinelConfig{
				MasterName: s.MasterName(), Addrs: s.SentinelAddrs(),
				Username: "pelwarden", Password: "sentinel-" + redisPassword,
			}
		}},
		servers: append(append([]*redistest.Server{}, s.Nodes()...), s.Sentinels()...),
	}
}

func startSecureCluster(t *testing.T) *secureBackend {
	t.Helper()
	serverTLS, clientTLS := modeTLS(t)
	c := redistest.StartCluster(t, redistest.ClusterOptions{
		Node: redistest.Options{TLS: serverTLS, Users: []string{nodeUser + " " + redisx.ClusterACLCommands}},
	})
	b := &secureBackend{backend: &backend{rdb: c.Client(t), connect: func(r *config.Redis) {
		r.Mode, r.Addr, r.TLS = config.RedisCluster, "", clientTLS
		r.Username, r.Password = "pelwarden", redisPassword
		r.Cluster = config.RedisClusterConfig{Addrs: c.Addrs()}
	}}}
	for _, n := range c.Nodes() {
		b.servers = append(b.servers, n.Server)
	}
	return b
}

// TestSentinelAndClusterRunOverTLSAsTheDocumentedACLUser runs every Redis
// path pelwarden has (the snapshot with heartbeats on other nodes, the
// waker, the hygiene lease and the requeue script) over TLS as a user with
// only the documented commands, on the nodes and on the sentinels, and
// checks that no process's ACL log has an entry.
func TestSentinelAndClusterRunOverTLSAsTheDocumentedACLUser(t *testing.T) {
	t.Parallel()
	for mode, start := range map[config.RedisMode]func(*testing.T) *secureBackend{
		config.RedisSentinel: startSecureSentinel,
		config.RedisCluster:  startSecureCluster,
	} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := start(t)
			ctx := context.Background()
			requireGhostsLeftOut(t, b.backend, "{acl}:")

			const stream = "{acl}:requeue"
			redistest.Hold(t, b.rdb, stream, "workers", "ghost", "", 3)
			redistest.Hold(t, b.rdb, stream, "workers", "live", "", 1)
			beatEvery(t, b.rdb, map[string]func() string{"{acl}:hb:live": msAgo(0)})
			time.Sleep(1100 * time.Millisecond) // the ghost's entries pass the read grace
			target := map[string]string{"stream": stream, "consumerGroup": "workers", "reclaim": "requeue",
				"entryStaleSeconds": "0.1", "liveness": "heartbeat", "heartbeatKey": "{acl}:hb:{consumer}", "heartbeatMaxAgeSeconds": "1"}
			p := startPelwardenOn(t, b.connect, func(c *config.Config) {
				c.Hygiene.ScanInterval, c.Hygiene.LeaseTTL = 200*time.Millisecond, time.Second
				c.Hygiene.Targets = []map[string]string{target}
			})
			requireWakerPushes(t, p, b.rdb, "{acl}:")
			eventually(t, 10*time.Second, func() error {
				pending, err := b.rdb.XPending(ctx, stream, "workers").Result()
				if err == nil && pending.Consumers["ghost"] != 0 {
					err = fmt.Errorf("ghost still holds %d", pending.Consumers["ghost"])
				}
				return err
			})
			p.stop()
			for _, s := range b.servers {
				log, err := s.Client(t).Do(ctx, "ACL", "LOG").Slice()
				require.NoError(t, err, "ACL LOG on %s", s.Addr())
				require.Empty(t, log, "no command pelwarden ran on %s was denied: %v", s.Addr(), log)
			}
		})
	}
}
