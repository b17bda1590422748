package config_test

import (
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// sources serves env and files from maps, so tests never touch the process.
func sources(env, files map[string]string) config.Sources {
	return config.Sources{
		Env: func(name string) (string, bool) {
			v, ok := env[name]
			return v, ok
		},
		ReadFile: func(path string) ([]byte, error) {
			content, ok := files[path]
			if !ok {
				return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
			}
			return []byte(content), nil
		},
	}
}

// connection returns the Redis connection named name, failing the test
// when there is none.
func connection(t *testing.T, cfg config.Config, name string) config.Redis {
	t.Helper()
	i := slices.IndexFunc(cfg.Redis, func(r config.Redis) bool { return r.Name == name })
	require.NotEqual(t, -1, i, "connection %s should be configured", name)
	return cfg.Redis[i]
}

// parseFlags registers pelwarden's flags and parses args.
func parseFlags(t *testing.T, args ...string) *config.Flags {
	t.Helper()
	set := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	flags := config.NewFlags(set)
	require.NoError(t, set.Parse(args))
	return flags
}

func TestZeroConfigStartNeedsOnlyARedisAddress(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(sources(nil, nil), parseFlags(t, "--redis-addr", "127.0.0.1:6379"))
	require.NoError(t, err)

	want := config.Default()
	want.Redis = []config.Redis{config.DefaultRedis("default", "127.0.0.1:6379")}
	require.Equal(t, want, cfg)
}

func TestLoadPrecedenceIsFileThenEnvThenFlag(t *testing.T) {
	t.Parallel()
	const file = `
grpc:
  addr: ":1001"
scaler:
  freshness: 1s
redis:
  - name: default
    addr: file:6379
`
	tests := map[string]struct {
		env       map[string]string
		args      []string
		grpcAddr  string
		refresh   time.Duration
		redisAddr string
	}{
		"file alone": {
			grpcAddr: ":1001", refresh: time.Second, redisAddr: "file:6379",
		},
		"env over file": {
			env: map[string]string{
				"PELWARDEN_GRPC_ADDR":        ":2002",
				"PELWARDEN_SCALER_FRESHNESS": "2s",
				"PELWARDEN_REDIS_ADDR":       "env:6379",
			},
			grpcAddr: ":2002", refresh: 2 * time.Second, redisAddr: "env:6379",
		},
		"flag over env and file": {
			env: map[string]string{
				"PELWARDEN_GRPC_ADDR":        ":2002",
				"PELWARDEN_SCALER_FRESHNESS": "2s",
				"PELWARDEN_REDIS_ADDR":       "env:6379",
			},
			args:     []string{"--grpc-addr", ":3003", "--freshness", "3s", "--redis-addr", "flag:6379"},
			grpcAddr: ":3003", refresh: 3 * time.Second, redisAddr: "flag:6379",
		},
		"flag over file without env": {
			args:     []string{"--grpc-addr=:3003"},
			grpcAddr: ":3003", refresh: time.Second, redisAddr: "file:6379",
		},
		"empty env counts as unset": {
			env:      map[string]string{"PELWARDEN_GRPC_ADDR": "", "PELWARDEN_REDIS_ADDR": ""},
			grpcAddr: ":1001", refresh: time.Second, redisAddr: "file:6379",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"--config", "/etc/pelwarden.yaml"}, tt.args...)
			cfg, err := config.Load(sources(tt.env, map[string]string{"/etc/pelwarden.yaml": file}), parseFlags(t, args...))
			require.NoError(t, err)
			require.Equal(t, tt.grpcAddr, cfg.GRPC.Addr, "grpc.addr")
			require.Equal(t, tt.refresh, cfg.Scaler.Freshness, "scaler.freshness")
			require.Len(t, cfg.Redis, 1)
			require.Equal(t, tt.redisAddr, cfg.Redis[0].Addr, "redis[0].addr")
		})
	}
}

func TestConfigFlagOverridesConfigEnv(t *testing.T) {
	t.Parallel()
	src := sources(
		map[string]string{"PELWARDEN_CONFIG": "/env.yaml"},
		map[string]string{
			"/env.yaml":  "redis: [{name: default, addr: 'env:6379'}]",
			"/flag.yaml": "redis: [{name: default, addr: 'flag:6379'}]",
		})

	cfg, err := config.Load(src, nil)
	require.NoError(t, err)
	require.Equal(t, "env:6379", cfg.Redis[0].Addr, "PELWARDEN_CONFIG should name the file")

	cfg, err = config.Load(src, parseFlags(t, "--config", "/flag.yaml"))
	require.NoError(t, err)
	require.Equal(t, "flag:6379", cfg.Redis[0].Addr, "--config should win over PELWARDEN_CONFIG")
}

func TestRedisEnvOverridesOnlyTheDefaultConnection(t *testing.T) {
	t.Parallel()
	const file = `
redis:
  - name: orders
    addr: orders:6379
  - name: default
    addr: file:6379
    poolSize: 7
`
	env := map[string]string{"PELWARDEN_REDIS_ADDR": "env:6379", "PELWARDEN_REDIS_DB": "3", "PELWARDEN_REDIS_USERNAME": "scaler"}
	cfg, err := config.Load(sources(env, map[string]string{"/c.yaml": file}), parseFlags(t, "--config=/c.yaml", "--redis-db=4"))
	require.NoError(t, err)

	orders := connection(t, cfg, "orders")
	require.Equal(t, config.DefaultRedis("orders", "orders:6379"), orders, "orders should be untouched")
	def := connection(t, cfg, "default")
	require.Equal(t, "env:6379", def.Addr)
	require.Equal(t, "scaler", def.Username)
	require.Equal(t, 4, def.DB, "--redis-db should win over PELWARDEN_REDIS_DB")
	require.Equal(t, 7, def.PoolSize, "fields the env does not set should keep the file's value")
}

func TestRedisFlagsCreateTheDefaultConnectionWhenTheFileHasNone(t *testing.T) {
	t.Parallel()
	files := map[string]string{"/c.yaml": "redis: [{name: orders, addr: 'orders:6379'}]"}
	cfg, err := config.Load(sources(nil, files), parseFlags(t, "--config=/c.yaml", "--redis-addr=local:6379", "--redis-tls"))
	require.NoError(t, err)

	require.Len(t, cfg.Redis, 2)
	want := config.DefaultRedis("default", "local:6379")
	want.TLS.Enabled = true
	require.Equal(t, want, cfg.Redis[1])
}

func TestLoadReportsAnUnreadableConfigFile(t *testing.T) {
	t.Parallel()
	_, err := config.Load(sources(nil, nil), parseFlags(t, "--config=/nope.yaml"))
	require.ErrorContains(t, err, `config file: must name a readable file: "/nope.yaml": file does not exist`)
}

func TestLoadRejectsBadEnvValuesNamingTheVariable(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		name, value, want string
	}{
		"db not a number":        {"PELWARDEN_REDIS_DB", "abc", `PELWARDEN_REDIS_DB: must be an integer >= 0, got "abc"`},
		"db negative":            {"PELWARDEN_REDIS_DB", "-1", `PELWARDEN_REDIS_DB: must be an integer >= 0, got "-1"`},
		"tls not a bool":         {"PELWARDEN_REDIS_TLS", "yes please", `PELWARDEN_REDIS_TLS: must be true or false, got "yes please"`},
		"duration without unit":  {"PELWARDEN_SCALER_FRESHNESS", "2", `PELWARDEN_SCALER_FRESHNESS: must be a positive duration such as "2s", "500ms" or "10m", got "2"`},
		"negative duration":      {"PELWARDEN_GRPC_SHUTDOWN_TIMEOUT", "-1s", `PELWARDEN_GRPC_SHUTDOWN_TIMEOUT: must be a positive duration`},
		"max targets zero":       {"PELWARDEN_SCALER_MAX_TARGETS", "0", `PELWARDEN_SCALER_MAX_TARGETS: must be an integer >= 1, got "0"`},
		"lag cap not a number":   {"PELWARDEN_SCALER_LAG_ESTIMATE_CAP", "1e3", `PELWARDEN_SCALER_LAG_ESTIMATE_CAP: must be an integer >= 1, got "1e3"`},
		"log level unknown":      {"PELWARDEN_LOG_LEVEL", "verbose", `log.level: must be one of debug, info, warn, error, got "verbose"`},
		"resend interval as int": {"PELWARDEN_SCALER_ACTIVE_RESEND_INTERVAL", "5", `PELWARDEN_SCALER_ACTIVE_RESEND_INTERVAL: must be a positive duration`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"PELWARDEN_REDIS_ADDR": "r:6379", tt.name: tt.value}
			_, err := config.Load(sources(env, nil), nil)
			var cfgErr *config.Error
			require.ErrorAs(t, err, &cfgErr)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestEveryScalerSettingHasAnEnvVariable(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"PELWARDEN_REDIS_ADDR":                              "r:6379",
		"PELWARDEN_HTTP_ADDR":                               ":8181",
		"PELWARDEN_LOG_LEVEL":                               "debug",
		"PELWARDEN_LOG_FORMAT":                              "text",
		"PELWARDEN_SCALER_FRESHNESS":                        "4s",
		"PELWARDEN_SCALER_REQUEST_TIMEOUT":                  "7s",
		"PELWARDEN_SCALER_TARGET_IDLE_EXPIRY":               "1h",
		"PELWARDEN_SCALER_ACTIVE_RESEND_INTERVAL":           "9s",
		"PELWARDEN_SCALER_MAX_TARGETS":                      "12",
		"PELWARDEN_SCALER_MAX_METRICS_TARGETS":              "11",
		"PELWARDEN_SCALER_LAG_ESTIMATE_CAP":                 "34",
		"PELWARDEN_SCALER_MAX_ACTIVE_STREAMS":               "56",
		"PELWARDEN_SCALER_MAX_ACTIVE_STREAMS_PER_NAMESPACE": "7",
		"PELWARDEN_SCALER_MAX_ACTIVE_TARGETS_PER_GROUP":     "8",
		"PELWARDEN_SCALER_BREAKER_PERCENT":                  "80",
		"PELWARDEN_SCALER_BREAKER_MIN_CONSUMERS":            "5",
	}
	cfg, err := config.Load(sources(env, nil), nil)
	require.NoError(t, err)
	require.Equal(t, config.HTTP{Addr: ":8181"}, cfg.HTTP)
	require.Equal(t, config.Log{Level: "debug", Format: "text"}, cfg.Log)
	require.Equal(t, config.Scaler{
		Freshness:            4 * time.Second,
		RequestTimeout:       7 * time.Second,
		TargetIdleExpiry:     time.Hour,
		ActiveResendInterval: 9 * time.Second,
		MaxTargets:           12,
		MaxMetricsTargets:    11,
		LagEstimateCap:       34,

		MaxActiveStreams:             56,
		MaxActiveStreamsPerNamespace: 7,
		MaxActiveTargetsPerGroup:     8,
		BreakerPercent:               80,
		BreakerMinConsumers:          5,
	}, cfg.Scaler)
}

func TestEveryPodWatchBoundHasAnEnvVariable(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"PELWARDEN_REDIS_ADDR":                               "r:6379",
		"PELWARDEN_KUBERNETES_MAX_POD_WATCHES":               "30",
		"PELWARDEN_KUBERNETES_MAX_POD_WATCHES_PER_NAMESPACE": "3",
		"PELWARDEN_KUBERNETES_API_QPS":                       "40",
		"PELWARDEN_KUBERNETES_API_BURST":                     "60",
	}
	cfg, err := config.Load(sources(env, nil), nil)
	require.NoError(t, err)
	require.Equal(t, config.Kubernetes{MaxPodWatches: 30, MaxPodWatchesPerNamespace: 3, APIQPS: 40, APIBurst: 60}, cfg.Kubernetes)
}

func TestMalformedFlagValueFailsAtParseNamingWhatIsAccepted(t *testing.T) {
	t.Parallel()
	set := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	config.NewFlags(set)
	err := set.Parse([]string{"--redis-db", "abc"})
	require.ErrorContains(t, err, `invalid argument "abc" for "--redis-db" flag: must be an integer >= 0`)
}

func TestEnvUsageListsEveryVariable(t *testing.T) {
	t.Parallel()
	usage := config.EnvUsage()
	for _, name := range []string{
		"PELWARDEN_CONFIG", "PELWARDEN_GRPC_ADDR", "PELWARDEN_GRPC_SHUTDOWN_TIMEOUT", "PELWARDEN_HTTP_ADDR",
		"PELWARDEN_GRPC_TLS_CERT_FILE", "PELWARDEN_GRPC_TLS_KEY_FILE", "PELWARDEN_GRPC_TLS_CLIENT_CA_FILE",
		"PELWARDEN_GRPC_TLS_RELOAD_INTERVAL", "PELWARDEN_GRPC_TLS_MIN_VERSION",
		"PELWARDEN_LOG_LEVEL", "PELWARDEN_LOG_FORMAT",
		"PELWARDEN_REDIS_ADDR", "PELWARDEN_REDIS_USERNAME", "PELWARDEN_REDIS_PASSWORD", "PELWARDEN_REDIS_PASSWORD_FILE",
		"PELWARDEN_REDIS_DB", "PELWARDEN_REDIS_TLS", "PELWARDEN_REDIS_TLS_CA", "PELWARDEN_REDIS_TLS_CERT", "PELWARDEN_REDIS_TLS_KEY",
		"PELWARDEN_SCALER_FRESHNESS", "PELWARDEN_SCALER_REQUEST_TIMEOUT",
		"PELWARDEN_SCALER_TARGET_IDLE_EXPIRY", "PELWARDEN_SCALER_ACTIVE_RESEND_INTERVAL",
		"PELWARDEN_SCALER_MAX_TARGETS", "PELWARDEN_SCALER_LAG_ESTIMATE_CAP",
		"PELWARDEN_ADMIN_TOKEN_FILE", "PELWARDEN_ADMIN_ALLOWED_CLIENT_IDENTITIES",
	} {
		require.Contains(t, usage, name+" ")
	}
}

func TestFlagsAndVariablesAreNamedAfterTheirConfigPaths(t *testing.T) {
	t.Parallel()
	// Every flag, with the variable its help names.
	want := map[string]string{
		"grpc-addr":                       "PELWARDEN_GRPC_ADDR",
		"shutdown-timeout":                "PELWARDEN_GRPC_SHUTDOWN_TIMEOUT",
		"grpc-tls-cert":                   "PELWARDEN_GRPC_TLS_CERT_FILE",
		"grpc-tls-key":                    "PELWARDEN_GRPC_TLS_KEY_FILE",
		"grpc-tls-client-ca":              "PELWARDEN_GRPC_TLS_CLIENT_CA_FILE",
		"http-addr":                       "PELWARDEN_HTTP_ADDR",
		"log-level":                       "PELWARDEN_LOG_LEVEL",
		"log-format":                      "PELWARDEN_LOG_FORMAT",
		"freshness":                       "PELWARDEN_SCALER_FRESHNESS",
		"request-timeout":                 "PELWARDEN_SCALER_REQUEST_TIMEOUT",
		"target-idle-expiry":              "PELWARDEN_SCALER_TARGET_IDLE_EXPIRY",
		"kubernetes":                      "PELWARDEN_KUBERNETES_ENABLED",
		"kubeconfig":                      "PELWARDEN_KUBERNETES_KUBECONFIG",
		"admin-token-file":                "PELWARDEN_ADMIN_TOKEN_FILE",
		"admin-worker-token-file":         "PELWARDEN_ADMIN_WORKER_TOKEN_FILE",
		"admin-worker-identity-prefix":    "PELWARDEN_ADMIN_WORKER_IDENTITY_PREFIX",
		"admin-allowed-client-identities": "PELWARDEN_ADMIN_ALLOWED_CLIENT_IDENTITIES",
		"redis-addr":                      "PELWARDEN_REDIS_ADDR",
		"redis-username":                  "PELWARDEN_REDIS_USERNAME",
		"redis-password-file":             "PELWARDEN_REDIS_PASSWORD_FILE",
		"redis-db":                        "PELWARDEN_REDIS_DB",
		"redis-cluster-addrs":             "PELWARDEN_REDIS_CLUSTER_ADDRS",
		"redis-sentinel-addrs":            "PELWARDEN_REDIS_SENTINEL_ADDRS",
		"redis-sentinel-master":           "PELWARDEN_REDIS_SENTINEL_MASTER",
		"redis-sentinel-username":         "PELWARDEN_REDIS_SENTINEL_USERNAME",
		"redis-sentinel-password-file":    "PELWARDEN_REDIS_SENTINEL_PASSWORD_FILE",
		"redis-tls":                       "PELWARDEN_REDIS_TLS",
		"redis-tls-ca":                    "PELWARDEN_REDIS_TLS_CA",
		"redis-tls-cert":                  "PELWARDEN_REDIS_TLS_CERT",
		"redis-tls-key":                   "PELWARDEN_REDIS_TLS_KEY",
		"config":                          "PELWARDEN_CONFIG",
		"triggers-reclaim":                "PELWARDEN_TRIGGERS_RECLAIM",
		"triggers-warm-up":                "PELWARDEN_TRIGGERS_WARM_UP",
	}
	set := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	config.NewFlags(set)
	got := map[string]string{}
	set.VisitAll(func(f *pflag.Flag) {
		env := f.Usage[strings.LastIndex(f.Usage, "(env ")+len("(env "):]
		got[f.Name] = strings.TrimSuffix(env, ")")
	})
	require.Equal(t, want, got)
}

func TestLoadReadsTheTriggerPolicy(t *testing.T) {
	t.Parallel()
	yaml := `
redis: [{name: default, addr: "redis:6379"}, {name: orders, addr: "redis:6380"}]
triggers:
  reclaim: requeue
  floors: {entryStale: 45s}
  quotas: {hygieneTargets: 3}
  rules:
    - {namespaces: [shop], redis: ["ord*"], hygieneStreams: ["orders:*"]}
`
	cfg, err := config.Load(sources(map[string]string{"PELWARDEN_TRIGGERS_FLOORS_GHOST_IDLE": "2m"}, map[string]string{"/c.yaml": yaml}), parseFlags(t, "--config=/c.yaml"))
	require.NoError(t, err)
	p := cfg.Triggers
	require.Equal(t, policy.ReclaimRequeue, p.Reclaim)
	require.Equal(t, 45*time.Second, p.Floors.EntryStale)
	require.Equal(t, 2*time.Minute, p.Floors.GhostIdle, "the variable overrides the file")
	require.Equal(t, 10*time.Second, p.Floors.HeartbeatMaxAge, "a floor the file leaves out keeps its default")
	require.Equal(t, config.TriggerQuotas{ScalerTargets: 1000, HygieneTargets: 3}, p.Quotas)
	require.Equal(t, []config.TriggerRule{{Namespaces: []string{"shop"}, Redis: []string{"ord*"}, HygieneStreams: []string{"orders:*"}}}, p.Rules,
		"the file's rules replace the default rule")
}
