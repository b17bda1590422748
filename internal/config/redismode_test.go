package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
)

func TestQuickStartFlagsAndVariablesPickTheConnectionMode(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		env  map[string]string
		args []string
		want config.Redis
	}{
		"--redis-addr is standalone": {
			args: []string{"--redis-addr", "r:6379"},
			want: config.Redis{Mode: config.RedisStandalone, Addr: "r:6379"},
		},
		"--redis-cluster-addrs is cluster": {
			args: []string{"--redis-cluster-addrs", "a:7000, b:7001,c:7002"},
			want: config.Redis{Mode: config.RedisCluster, Cluster: config.RedisClusterConfig{Addrs: []string{"a:7000", "b:7001", "c:7002"}}},
		},
		"PELWARDEN_REDIS_CLUSTER_ADDRS is cluster": {
			env:  map[string]string{"PELWARDEN_REDIS_CLUSTER_ADDRS": "a:7000"},
			want: config.Redis{Mode: config.RedisCluster, Cluster: config.RedisClusterConfig{Addrs: []string{"a:7000"}}},
		},
		"--redis-sentinel-addrs with --redis-sentinel-master is sentinel": {
			args: []string{"--redis-sentinel-addrs", "s1:26379,s2:26379", "--redis-sentinel-master", "mymaster", "--redis-sentinel-username", "watcher"},
			want: config.Redis{Mode: config.RedisSentinel, Sentinel: config.RedisSentinelConfig{
				MasterName: "mymaster", Addrs: []string{"s1:26379", "s2:26379"}, Username: "watcher",
			}},
		},
		"sentinel variables, password included": {
			env: map[string]string{
				"PELWARDEN_REDIS_SENTINEL_ADDRS": "s1:26379", "PELWARDEN_REDIS_SENTINEL_MASTER": "mymaster",
				"PELWARDEN_REDIS_SENTINEL_PASSWORD": "sentinel-secret",
			},
			want: config.Redis{Mode: config.RedisSentinel, Sentinel: config.RedisSentinelConfig{
				MasterName: "mymaster", Addrs: []string{"s1:26379"},
				Password: "sentinel-secret", PasswordEnv: "PELWARDEN_REDIS_SENTINEL_PASSWORD",
			}},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Load(sources(tt.env, nil), parseFlags(t, tt.args...))
			require.NoError(t, err)
			got := connection(t, cfg, "default")
			require.Equal(t, tt.want.Mode, got.Mode, "mode")
			require.Equal(t, tt.want.Addr, got.Addr, "addr")
			require.Equal(t, tt.want.Cluster, got.Cluster, "cluster block")
			require.Equal(t, tt.want.Sentinel, got.Sentinel, "sentinel block")
		})
	}
}

func TestConnectionModesLoadFromYAML(t *testing.T) {
	t.Parallel()
	const file = `
redis:
  - name: default
    mode: sentinel
    username: pelwarden
    sentinel:
      masterName: mymaster
      addrs: ["s1:26379", "s2:26379", "s3:26379"]
      passwordFile: /secret/sentinel
      replicaReads: true
  - name: orders
    mode: cluster
    tls: {enabled: true}
    cluster:
      addrs: ["n1:6379"]
      routeByLatency: true
`
	files := map[string]string{"/c.yaml": file, "/secret/sentinel": "s3cret\n"}
	cfg, err := config.Load(sources(nil, files), parseFlags(t, "--config=/c.yaml"))
	require.NoError(t, err)

	def := connection(t, cfg, "default")
	require.Equal(t, config.RedisSentinel, def.Mode)
	require.Equal(t, "s3cret", def.Sentinel.Password, "the sentinel password comes from its file, newline trimmed")
	require.True(t, def.ReplicaReads(), "replicaReads: true lets diagnostics read replicas")
	require.Equal(t, []string{"s1:26379", "s2:26379", "s3:26379"}, def.Seeds())

	orders := connection(t, cfg, "orders")
	require.Equal(t, config.RedisCluster, orders.Mode)
	require.True(t, orders.ReplicaReads(), "routeByLatency implies reading replicas")
	require.True(t, orders.TLS.Enabled, "TLS applies in cluster mode")
}

func TestConnectionModeProblemsNameTheField(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		mutate func(r *config.Redis)
		want   string
	}{
		"unknown mode": {
			func(r *config.Redis) { r.Mode = "replicated" },
			`redis[0].mode: must be one of standalone, sentinel, cluster, got "replicated"`,
		},
		"sentinel without master name": {
			func(r *config.Redis) {
				r.Mode, r.Addr, r.Sentinel.Addrs = config.RedisSentinel, "", []string{"s:26379"}
			},
			`redis[0].sentinel.masterName: is required in mode sentinel`,
		},
		"sentinel without addresses": {
			func(r *config.Redis) { r.Mode, r.Addr, r.Sentinel.MasterName = config.RedisSentinel, "", "m" },
			`redis[0].sentinel.addrs: needs at least one host:port, such as "redis-0:6379" (--redis-sentinel-addrs for the default connection)`,
		},
		"sentinel address without port": {
			func(r *config.Redis) {
				r.Mode, r.Addr, r.Sentinel.MasterName, r.Sentinel.Addrs = config.RedisSentinel, "", "m", []string{"s:26379", "s"}
			},
			`redis[0].sentinel.addrs[1]: must be host:port with a host and a numeric port 1-65535`,
		},
		"both sentinel password sources": {
			func(r *config.Redis) {
				r.Mode, r.Addr, r.Sentinel.MasterName, r.Sentinel.Addrs = config.RedisSentinel, "", "m", []string{"s:26379"}
				r.Sentinel.PasswordEnv, r.Sentinel.PasswordFile = "PW", "/pw"
			},
			`redis[0].sentinel.passwordEnv: is mutually exclusive with sentinel.passwordFile`,
		},
		"cluster without seeds": {
			func(r *config.Redis) { r.Mode, r.Addr = config.RedisCluster, "" },
			`redis[0].cluster.addrs: needs at least one host:port`,
		},
		"cluster with a database": {
			func(r *config.Redis) {
				r.Mode, r.Addr, r.Cluster.Addrs, r.DB = config.RedisCluster, "", []string{"n:6379"}, 2
			},
			`redis[0].db: must be 0 in mode cluster: Redis Cluster has only database 0, got 2`,
		},
		"addr in cluster mode": {
			func(r *config.Redis) { r.Mode, r.Cluster.Addrs = config.RedisCluster, []string{"n:6379"} },
			`redis[0].addr: is for mode standalone; in mode cluster set redis[0].cluster.addrs instead`,
		},
		"cluster options in standalone mode": {
			func(r *config.Redis) { r.Cluster.ReadOnly, r.Cluster.Addrs = true, []string{"n:6379"} },
			`redis[0].cluster.addrs: is for mode cluster; this connection's mode is standalone (set mode: cluster, or remove cluster.addrs, readOnly)`,
		},
		"sentinel options in cluster mode": {
			func(r *config.Redis) {
				r.Mode, r.Addr, r.Cluster.Addrs, r.Sentinel.MasterName = config.RedisCluster, "", []string{"n:6379"}, "m"
			},
			`redis[0].sentinel.masterName: is for mode sentinel; this connection's mode is cluster`,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tt.mutate(&c.Redis[0])
			err := c.Validate()
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestSentinelPasswordFileProblemsNameTheField(t *testing.T) {
	t.Parallel()
	const file = "redis: [{name: default, mode: sentinel, sentinel: {masterName: m, addrs: ['s:1'], passwordFile: /missing}}]"
	_, err := config.Load(sources(nil, map[string]string{"/c.yaml": file}), parseFlags(t, "--config=/c.yaml"))
	require.ErrorContains(t, err, `redis[0].sentinel.passwordFile: must name a readable file: "/missing"`)
}
