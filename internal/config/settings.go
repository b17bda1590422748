package config

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
)

// EnvConfig names the environment variable that holds the config file path,
// the same as --config.
const EnvConfig = "PELWARDEN_CONFIG"

// Variables for the default connection's password. The password itself has
// no flag: a command line is visible to every process on the host.
const (
	envPassword     = "PELWARDEN_REDIS_PASSWORD"      //nolint:gosec // G101: a variable name, not a credential
	envPasswordFile = "PELWARDEN_REDIS_PASSWORD_FILE" //nolint:gosec // G101: a variable name, not a credential

	envSentinelPassword     = "PELWARDEN_REDIS_SENTINEL_PASSWORD"      //nolint:gosec // G101: a variable name, not a credential
	envSentinelPasswordFile = "PELWARDEN_REDIS_SENTINEL_PASSWORD_FILE" //nolint:gosec // G101: a variable name, not a credential
)

// setting is one value that an environment variable, and usually a flag, can
// set. Names follow the config path: the variable is PELWARDEN_ and the path
// in upper snake case (scaler.requestTimeout is
// PELWARDEN_SCALER_REQUEST_TIMEOUT) and a flag named after its path is the
// path in kebab case (log.level is --log-level). The default connection's
// paths (redis[default].tls.caFile) are long, so its flags have short names
// and its variables follow the flags (--redis-tls-ca is
// PELWARDEN_REDIS_TLS_CA).
type setting struct {
	// path is the config path the setting overrides, for help.
	path string
	// env is the environment variable.
	env string
	// flag is the flag name without dashes; empty when there is no flag.
	flag string
	// usage is the flag's help text.
	usage string
	// typ names the value's type in help ("duration", "int", ...).
	typ string
	// apply parses raw and stores it in c. Its error says what is accepted;
	// the caller prefixes the variable or flag.
	apply func(c *Config, raw string) error
	// show renders the default for help; nil or empty hides it.
	show func(c *Config) string
}

// withFlag gives s the flag named after its path.
func (s setting) withFlag(usage string) setting {
	return s.withFlagNamed(snake(s.path, '-'), usage)
}

// withFlagNamed gives s a flag with a name of its own.
func (s setting) withFlagNamed(flag, usage string) setting {
	s.flag, s.usage = flag, usage
	if strings.HasPrefix(s.path, defaultRedisPath) {
		s.env = "PELWARDEN_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
	}
	return s
}

// defaultRedisPath prefixes the paths of the default connection's fields.
const defaultRedisPath = "redis[default]."

// snake writes a camelCase config path in lower snake case, with sep between
// its parts: grpc.tls.clientCAFile is grpc_tls_client_ca_file for sep '_'.
func snake(path string, sep rune) string {
	var b strings.Builder
	runes := []rune(path)
	for i, r := range runes {
		switch {
		case r == '.':
			b.WriteRune(sep)
			continue
		case i > 0 && unicode.IsUpper(r) && runes[i-1] != '.':
			// A word starts at an upper-case letter after a lower-case one,
			// or at the last capital of an acronym (CA|File).
			prevLower := unicode.IsLower(runes[i-1])
			acronymEnd := unicode.IsUpper(runes[i-1]) && i+1 < len(runes) && unicode.IsLower(runes[i+1])
			if prevLower || acronymEnd {
				b.WriteRune(sep)
			}
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// settings lists every environment variable and flag, in help order.
var settings = []setting{
	stringSetting("grpc.addr", func(c *Config) *string { return &c.GRPC.Addr }).
		withFlag("gRPC listen address (KEDA ExternalScaler and diagnostics)"),
	durationSetting("grpc.shutdownTimeout", func(c *Config) *time.Duration { return &c.GRPC.ShutdownTimeout }).
		withFlagNamed("shutdown-timeout", "how long graceful shutdown may take before open streams are cut"),
	stringSetting("grpc.tls.certFile", func(c *Config) *string { return &c.GRPC.TLS.CertFile }).
		withFlagNamed("grpc-tls-cert", "server certificate (PEM) for the gRPC port; with --grpc-tls-key turns TLS on"),
	stringSetting("grpc.tls.keyFile", func(c *Config) *string { return &c.GRPC.TLS.KeyFile }).
		withFlagNamed("grpc-tls-key", "private key (PEM) of the gRPC server certificate"),
	stringSetting("grpc.tls.clientCAFile", func(c *Config) *string { return &c.GRPC.TLS.ClientCAFile }).
		withFlagNamed("grpc-tls-client-ca", "CA bundle (PEM) that gRPC clients' certificates must chain to (mutual TLS)"),
	durationSetting("grpc.tls.reloadInterval", func(c *Config) *time.Duration { return &c.GRPC.TLS.ReloadInterval }),
	stringSetting("grpc.tls.minVersion", func(c *Config) *string { return &c.GRPC.TLS.MinVersion }),
	intSetting("grpc.maxRecvMsgBytes", minRecvMsgBytes, func(c *Config) *int { return &c.GRPC.MaxRecvMsgBytes }),
	intSetting("grpc.refusedCallsPerSecond", 0, func(c *Config) *int { return &c.GRPC.RefusedCallsPerSecond }),
	stringSetting("http.addr", func(c *Config) *string { return &c.HTTP.Addr }).
		withFlag("HTTP listen address for /metrics, /healthz and /readyz"),
	stringSetting("log.level", func(c *Config) *string { return &c.Log.Level }).
		withFlag("log level: debug, info, warn or error"),
	stringSetting("log.format", func(c *Config) *string { return &c.Log.Format }).
		withFlag("log format: json or text"),

	durationSetting("scaler.freshness", func(c *Config) *time.Duration { return &c.Scaler.Freshness }).
		withFlagNamed("freshness", "the oldest read of a group a poll is answered from"),
	durationSetting("scaler.requestTimeout", func(c *Config) *time.Duration { return &c.Scaler.RequestTimeout }).
		withFlagNamed("request-timeout", "deadline for an RPC that must reach Redis"),
	durationSetting("scaler.targetIdleExpiry", func(c *Config) *time.Duration { return &c.Scaler.TargetIdleExpiry }).
		withFlagNamed("target-idle-expiry", "drop a target that no RPC has asked about for this long"),
	durationSetting("scaler.activeResendInterval", func(c *Config) *time.Duration { return &c.Scaler.ActiveResendInterval }),
	intSetting("scaler.maxTargets", 1, func(c *Config) *int { return &c.Scaler.MaxTargets }),
	intSetting("scaler.maxMetricsTargets", 0, func(c *Config) *int { return &c.Scaler.MaxMetricsTargets }),
	intSetting("scaler.lagEstimateCap", 1, func(c *Config) *int64 { return &c.Scaler.LagEstimateCap }),
	intSetting("scaler.maxActiveStreams", 1, func(c *Config) *int { return &c.Scaler.MaxActiveStreams }),
	intSetting("scaler.maxActiveStreamsPerNamespace", 1, func(c *Config) *int { return &c.Scaler.MaxActiveStreamsPerNamespace }),
	intSetting("scaler.maxActiveTargetsPerGroup", 1, func(c *Config) *int { return &c.Scaler.MaxActiveTargetsPerGroup }),
	intSetting("scaler.breakerPercent", 1, func(c *Config) *int { return &c.Scaler.BreakerPercent }),
	intSetting("scaler.breakerMinConsumers", 1, func(c *Config) *int { return &c.Scaler.BreakerMinConsumers }),

	boolSetting("kubernetes.enabled", func(c *Config) *bool { return &c.Kubernetes.Enabled }).
		withFlagNamed("kubernetes", "watch pods through the Kubernetes API (liveness: kubernetes)"),
	stringSetting("kubernetes.kubeconfig", func(c *Config) *string { return &c.Kubernetes.Kubeconfig }).
		withFlagNamed("kubeconfig", "kubeconfig file for running outside a cluster; empty means in-cluster"),
	intSetting("kubernetes.maxPodWatches", 1, func(c *Config) *int { return &c.Kubernetes.MaxPodWatches }),
	intSetting("kubernetes.maxPodWatchesPerNamespace", 1, func(c *Config) *int { return &c.Kubernetes.MaxPodWatchesPerNamespace }),
	intSetting("kubernetes.apiQPS", 1, func(c *Config) *int { return &c.Kubernetes.APIQPS }),
	intSetting("kubernetes.apiBurst", 1, func(c *Config) *int { return &c.Kubernetes.APIBurst }),

	stringSetting("admin.tokenFile", func(c *Config) *string { return &c.Admin.TokenFile }).
		withFlag("file holding the operator's bearer token: Reclaim, DeleteConsumer, Deregister and Findings samples"),
	listSetting("admin.allowedClientIdentities", func(c *Config) *[]string { return &c.Admin.AllowedClientIdentities }).
		withFlag("comma list of mTLS client identities (CN, DNS or URI SAN) allowed to call the mutating Admin RPCs"),
	stringSetting("admin.workerTokenFile", func(c *Config) *string { return &c.Admin.WorkerTokenFile }).
		withFlag("file holding the workers' bearer token: it allows Deregister and nothing else"),
	stringSetting("admin.workerIdentityPrefix", func(c *Config) *string { return &c.Admin.WorkerIdentityPrefix }).
		withFlag("URI SAN prefix of worker client certificates: <prefix><consumer> may Deregister that consumer only"),

	setting{
		path: "triggers.reclaim", env: "PELWARDEN_TRIGGERS_RECLAIM", typ: "string",
		apply: func(c *Config, raw string) error { c.Triggers.Reclaim = policy.ReclaimMode(raw); return nil },
		show:  func(c *Config) string { return string(c.Triggers.Reclaim) },
	}.withFlag("the most a trigger's metadata may ask for: off (metrics only) or requeue (enroll its group in hygiene within triggers.rules)"),
	durationSetting("triggers.floors.entryStale", func(c *Config) *time.Duration { return &c.Triggers.Floors.EntryStale }),
	durationSetting("triggers.floors.ghostIdle", func(c *Config) *time.Duration { return &c.Triggers.Floors.GhostIdle }),
	durationSetting("triggers.floors.heartbeatMaxAge", func(c *Config) *time.Duration { return &c.Triggers.Floors.HeartbeatMaxAge }),
	durationSetting("triggers.floors.podDeletionGrace", func(c *Config) *time.Duration { return &c.Triggers.Floors.PodDeletionGrace }),
	intSetting("triggers.floors.maxDeliveries", 1, func(c *Config) *int64 { return &c.Triggers.Floors.MaxDeliveries }),
	durationSetting("triggers.warmUp", func(c *Config) *time.Duration { return &c.Triggers.WarmUp }).
		withFlag("how long trigger-driven hygiene waits before acting, after start and after a group's triggers change; longer than KEDA's pollingInterval"),
	intSetting("triggers.quotas.scalerTargets", 1, func(c *Config) *int { return &c.Triggers.Quotas.ScalerTargets }),
	intSetting("triggers.quotas.hygieneTargets", 1, func(c *Config) *int { return &c.Triggers.Quotas.HygieneTargets }),

	stringSetting("redis[default].addr", func(c *Config) *string { return &defaultRedis(c).Addr }).
		withFlagNamed("redis-addr", "address host:port of the Redis connection named default"),
	stringSetting("redis[default].username", func(c *Config) *string { return &defaultRedis(c).Username }).
		withFlagNamed("redis-username", "ACL user of the default Redis connection"),
	{
		path: "redis[default].password", env: envPassword, typ: "string",
		apply: func(c *Config, _ string) error {
			r := defaultRedis(c)
			r.PasswordEnv, r.PasswordFile = envPassword, ""
			return nil
		},
	},
	setting{
		path: "redis[default].passwordFile", typ: "path",
		apply: func(c *Config, raw string) error {
			r := defaultRedis(c)
			r.PasswordEnv, r.PasswordFile = "", raw
			return nil
		},
	}.withFlagNamed("redis-password-file", "file holding the password of the default Redis connection"),
	modeSetting(listSetting("redis[default].cluster.addrs", func(c *Config) *[]string { return &defaultRedis(c).Cluster.Addrs }), RedisCluster).
		withFlagNamed("redis-cluster-addrs", "comma list of seed host:port addresses: the default Redis connection is a Redis Cluster"),
	modeSetting(listSetting("redis[default].sentinel.addrs", func(c *Config) *[]string { return &defaultRedis(c).Sentinel.Addrs }), RedisSentinel).
		withFlagNamed("redis-sentinel-addrs", "comma list of sentinel host:port addresses: the default Redis connection's master is found through them (with --redis-sentinel-master)"),
	stringSetting("redis[default].sentinel.masterName", func(c *Config) *string { return &defaultRedis(c).Sentinel.MasterName }).
		withFlagNamed("redis-sentinel-master", "name the sentinels monitor the default connection's master under"),
	stringSetting("redis[default].sentinel.username", func(c *Config) *string { return &defaultRedis(c).Sentinel.Username }).
		withFlagNamed("redis-sentinel-username", "ACL user on the sentinels of the default Redis connection"),
	{
		path: "redis[default].sentinel.password", env: envSentinelPassword, typ: "string",
		apply: func(c *Config, _ string) error {
			s := &defaultRedis(c).Sentinel
			s.PasswordEnv, s.PasswordFile = envSentinelPassword, ""
			return nil
		},
	},
	setting{
		path: "redis[default].sentinel.passwordFile", typ: "path",
		apply: func(c *Config, raw string) error {
			s := &defaultRedis(c).Sentinel
			s.PasswordEnv, s.PasswordFile = "", raw
			return nil
		},
	}.withFlagNamed("redis-sentinel-password-file", "file holding the password of the default Redis connection's sentinels"),
	intSetting("redis[default].db", 0, func(c *Config) *int { return &defaultRedis(c).DB }).
		withFlagNamed("redis-db", "database number of the default Redis connection"),
	boolSetting("redis[default].tls.enabled", func(c *Config) *bool { return &defaultRedis(c).TLS.Enabled }).
		withFlagNamed("redis-tls", "use TLS for the default Redis connection"),
	stringSetting("redis[default].tls.caFile", func(c *Config) *string { return &defaultRedis(c).TLS.CAFile }).
		withFlagNamed("redis-tls-ca", "CA bundle (PEM) that verifies the default Redis server"),
	stringSetting("redis[default].tls.certFile", func(c *Config) *string { return &defaultRedis(c).TLS.CertFile }).
		withFlagNamed("redis-tls-cert", "client certificate (PEM) for the default Redis connection"),
	stringSetting("redis[default].tls.keyFile", func(c *Config) *string { return &defaultRedis(c).TLS.KeyFile }).
		withFlagNamed("redis-tls-key", "client key (PEM) for the default Redis connection"),
}

// defaultRedis returns the connection named metadata.DefaultConnection, appending one
// with defaults when there is none.
func defaultRedis(c *Config) *Redis {
	for i := range c.Redis {
		if c.Redis[i].Name == metadata.DefaultConnection {
			return &c.Redis[i]
		}
	}
	c.Redis = append(c.Redis, DefaultRedis(metadata.DefaultConnection, ""))
	return &c.Redis[len(c.Redis)-1]
}

// modeSetting makes s also switch the default connection to mode, so a
// list of cluster seeds or sentinels alone says which kind of Redis it is.
func modeSetting(s setting, mode RedisMode) setting {
	apply := s.apply
	s.apply = func(c *Config, raw string) error {
		defaultRedis(c).Mode = mode
		return apply(c, raw)
	}
	return s
}

// newSetting is a setting of path with its variable and no flag.
func newSetting(path, typ string) setting {
	return setting{path: path, env: "PELWARDEN_" + strings.ToUpper(snake(path, '_')), typ: typ}
}

func stringSetting(path string, field func(*Config) *string) setting {
	s := newSetting(path, "string")
	s.apply = func(c *Config, raw string) error { *field(c) = raw; return nil }
	s.show = func(c *Config) string { return *field(c) }
	return s
}

// listSetting reads a comma list; spaces around items are dropped, and an
// empty item is kept so that validation can name it.
func listSetting(path string, field func(*Config) *[]string) setting {
	s := newSetting(path, "strings")
	s.apply = func(c *Config, raw string) error {
		items := strings.Split(raw, ",")
		for i := range items {
			items[i] = strings.TrimSpace(items[i])
		}
		*field(c) = items
		return nil
	}
	s.show = func(c *Config) string { return strings.Join(*field(c), ",") }
	return s
}

func durationSetting(path string, field func(*Config) *time.Duration) setting {
	s := newSetting(path, "duration")
	s.apply = func(c *Config, raw string) error {
		d, err := time.ParseDuration(raw)
		if err != nil || d <= 0 {
			return fmt.Errorf(`must be a positive duration such as "2s", "500ms" or "10m", got %q`, raw)
		}
		*field(c) = d
		return nil
	}
	s.show = func(c *Config) string { return field(c).String() }
	return s
}

func intSetting[T int | int64](path string, minimum T, field func(*Config) *T) setting {
	s := newSetting(path, "int")
	s.apply = func(c *Config, raw string) error {
		n, err := strconv.ParseInt(raw, 10, 0)
		if err != nil || T(n) < minimum {
			return fmt.Errorf("must be an integer >= %d, got %q", minimum, raw)
		}
		*field(c) = T(n)
		return nil
	}
	s.show = func(c *Config) string { return strconv.FormatInt(int64(*field(c)), 10) }
	return s
}

func boolSetting(path string, field func(*Config) *bool) setting {
	s := newSetting(path, "bool")
	s.apply = func(c *Config, raw string) error {
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("must be true or false, got %q", raw)
		}
		*field(c) = b
		return nil
	}
	s.show = func(c *Config) string { return strconv.FormatBool(*field(c)) }
	return s
}

// EnvUsage lists the environment variables, the flag each matches and the
// config path each sets, one a line, for help text. redis[default] is the
// connection named default, created when the config file has none.
func EnvUsage() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  %s\t--config\tconfig file path\n", EnvConfig)
	for _, s := range settings {
		flag := "-"
		if s.flag != "" {
			flag = "--" + s.flag
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", s.env, flag, s.path)
	}
	tw.Flush()
	return b.String()
}
