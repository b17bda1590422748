package config

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// EnvConfig names the environment variable that holds the config file path,
// the same as --config.
const EnvConfig = "PELWARDEN_CONFIG"

// Variables for the default connection's password. The password itself has
// no flag: a command line is visible to every process on the host.
const (
	envPassword     = "PELWARDEN_REDIS_PASSWORD"      //nolint:gosec // G101: a variable name, not a credential
	envPasswordFile = "PELWARDEN_REDIS_PASSWORD_FILE" //nolint:gosec // G101: a variable name, not a credential
)

// setting is one value that an environment variable, and usually a flag, can
// set. A variable is PELWARDEN_ followed by the config path in upper snake
// case (scaler.refreshInterval is PELWARDEN_SCALER_REFRESH_INTERVAL); the
// default connection's variables are PELWARDEN_REDIS_ followed by the name of
// their flag (--redis-tls-ca is PELWARDEN_REDIS_TLS_CA).
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

// settings lists every environment variable and flag, in help order.
var settings = []setting{
	stringSetting("grpc.addr", "PELWARDEN_GRPC_ADDR", "grpc-addr",
		"gRPC listen address (KEDA ExternalScaler and diagnostics)",
		func(c *Config) *string { return &c.GRPC.Addr }),
	durationSetting("grpc.shutdownTimeout", "PELWARDEN_GRPC_SHUTDOWN_TIMEOUT", "shutdown-timeout",
		"how long graceful shutdown may take before open streams are cut",
		func(c *Config) *time.Duration { return &c.GRPC.ShutdownTimeout }),
	stringSetting("grpc.tls.certFile", "PELWARDEN_GRPC_TLS_CERT_FILE", "grpc-tls-cert",
		"server certificate (PEM) for the gRPC port; with --grpc-tls-key turns TLS on",
		func(c *Config) *string { return &c.GRPC.TLS.CertFile }),
	stringSetting("grpc.tls.keyFile", "PELWARDEN_GRPC_TLS_KEY_FILE", "grpc-tls-key",
		"private key (PEM) of the gRPC server certificate",
		func(c *Config) *string { return &c.GRPC.TLS.KeyFile }),
	stringSetting("grpc.tls.clientCAFile", "PELWARDEN_GRPC_TLS_CLIENT_CA_FILE", "grpc-tls-client-ca",
		"CA bundle (PEM) that gRPC clients' certificates must chain to (mutual TLS)",
		func(c *Config) *string { return &c.GRPC.TLS.ClientCAFile }),
	durationSetting("grpc.tls.reloadInterval", "PELWARDEN_GRPC_TLS_RELOAD_INTERVAL", "", "",
		func(c *Config) *time.Duration { return &c.GRPC.TLS.ReloadInterval }),
	stringSetting("grpc.tls.minVersion", "PELWARDEN_GRPC_TLS_MIN_VERSION", "", "",
		func(c *Config) *string { return &c.GRPC.TLS.MinVersion }),
	stringSetting("http.addr", "PELWARDEN_HTTP_ADDR", "http-addr",
		"HTTP listen address for /metrics, /healthz and /readyz",
		func(c *Config) *string { return &c.HTTP.Addr }),
	stringSetting("log.level", "PELWARDEN_LOG_LEVEL", "log-level",
		"log level: debug, info, warn or error",
		func(c *Config) *string { return &c.Log.Level }),
	stringSetting("log.format", "PELWARDEN_LOG_FORMAT", "log-format",
		"log format: json or text",
		func(c *Config) *string { return &c.Log.Format }),

	durationSetting("scaler.refreshInterval", "PELWARDEN_SCALER_REFRESH_INTERVAL", "refresh-interval",
		"background snapshot refresh interval per target",
		func(c *Config) *time.Duration { return &c.Scaler.RefreshInterval }),
	durationSetting("scaler.maxSnapshotAge", "PELWARDEN_SCALER_MAX_SNAPSHOT_AGE", "", "",
		func(c *Config) *time.Duration { return &c.Scaler.MaxSnapshotAge }),
	durationSetting("scaler.requestTimeout", "PELWARDEN_SCALER_REQUEST_TIMEOUT", "request-timeout",
		"deadline for an RPC that must reach Redis",
		func(c *Config) *time.Duration { return &c.Scaler.RequestTimeout }),
	durationSetting("scaler.targetIdleExpiry", "PELWARDEN_SCALER_TARGET_IDLE_EXPIRY", "target-idle-expiry",
		"drop a target that no RPC has asked about for this long",
		func(c *Config) *time.Duration { return &c.Scaler.TargetIdleExpiry }),
	durationSetting("scaler.activeResendInterval", "PELWARDEN_SCALER_ACTIVE_RESEND_INTERVAL", "", "",
		func(c *Config) *time.Duration { return &c.Scaler.ActiveResendInterval }),
	intSetting("scaler.maxTargets", "PELWARDEN_SCALER_MAX_TARGETS", "", "", 1,
		func(c *Config) *int { return &c.Scaler.MaxTargets }),
	intSetting("scaler.lagEstimateCap", "PELWARDEN_SCALER_LAG_ESTIMATE_CAP", "", "", 1,
		func(c *Config) *int64 { return &c.Scaler.LagEstimateCap }),

	boolSetting("kubernetes.enabled", "PELWARDEN_KUBERNETES_ENABLED", "kubernetes",
		"watch pods through the Kubernetes API (liveness: kubernetes)",
		func(c *Config) *bool { return &c.Kubernetes.Enabled }),
	stringSetting("kubernetes.kubeconfig", "PELWARDEN_KUBERNETES_KUBECONFIG", "kubeconfig",
		"kubeconfig file for running outside a cluster; empty means in-cluster",
		func(c *Config) *string { return &c.Kubernetes.Kubeconfig }),

	stringSetting("admin.tokenFile", "PELWARDEN_ADMIN_TOKEN_FILE", "admin-token-file",
		"file holding the bearer token that Reclaim, DeleteConsumer and Deregister need",
		func(c *Config) *string { return &c.Admin.TokenFile }),
	listSetting("admin.allowedClientIdentities", "PELWARDEN_ADMIN_ALLOWED_CLIENT_IDENTITIES", "admin-allowed-client-identities",
		"comma list of mTLS client identities (CN, DNS or URI SAN) allowed to call the mutating Admin RPCs",
		func(c *Config) *[]string { return &c.Admin.AllowedClientIdentities }),

	stringSetting("redis[default].addr", "PELWARDEN_REDIS_ADDR", "redis-addr",
		"address host:port of the Redis connection named default",
		func(c *Config) *string { return &defaultRedis(c).Addr }),
	stringSetting("redis[default].username", "PELWARDEN_REDIS_USERNAME", "redis-username",
		"ACL user of the default Redis connection",
		func(c *Config) *string { return &defaultRedis(c).Username }),
	{
		path: "redis[default].password", env: envPassword, typ: "string",
		apply: func(c *Config, _ string) error {
			r := defaultRedis(c)
			r.PasswordEnv, r.PasswordFile = envPassword, ""
			return nil
		},
	},
	{
		path: "redis[default].passwordFile", env: envPasswordFile, flag: "redis-password-file", typ: "path",
		usage: "file holding the password of the default Redis connection",
		apply: func(c *Config, raw string) error {
			r := defaultRedis(c)
			r.PasswordEnv, r.PasswordFile = "", raw
			return nil
		},
	},
	intSetting("redis[default].db", "PELWARDEN_REDIS_DB", "redis-db",
		"database number of the default Redis connection", 0,
		func(c *Config) *int { return &defaultRedis(c).DB }),
	boolSetting("redis[default].tls.enabled", "PELWARDEN_REDIS_TLS", "redis-tls",
		"use TLS for the default Redis connection",
		func(c *Config) *bool { return &defaultRedis(c).TLS.Enabled }),
	stringSetting("redis[default].tls.caFile", "PELWARDEN_REDIS_TLS_CA", "redis-tls-ca",
		"CA bundle (PEM) that verifies the default Redis server",
		func(c *Config) *string { return &defaultRedis(c).TLS.CAFile }),
	stringSetting("redis[default].tls.certFile", "PELWARDEN_REDIS_TLS_CERT", "redis-tls-cert",
		"client certificate (PEM) for the default Redis connection",
		func(c *Config) *string { return &defaultRedis(c).TLS.CertFile }),
	stringSetting("redis[default].tls.keyFile", "PELWARDEN_REDIS_TLS_KEY", "redis-tls-key",
		"client key (PEM) for the default Redis connection",
		func(c *Config) *string { return &defaultRedis(c).TLS.KeyFile }),
}

// defaultRedis returns the connection named DefaultConnection, appending one
// with defaults when there is none.
func defaultRedis(c *Config) *Redis {
	for i := range c.Redis {
		if c.Redis[i].Name == DefaultConnection {
			return &c.Redis[i]
		}
	}
	c.Redis = append(c.Redis, DefaultRedis(DefaultConnection, ""))
	return &c.Redis[len(c.Redis)-1]
}

func stringSetting(path, env, flag, usage string, field func(*Config) *string) setting {
	return setting{
		path: path, env: env, flag: flag, usage: usage, typ: "string",
		apply: func(c *Config, raw string) error { *field(c) = raw; return nil },
		show:  func(c *Config) string { return *field(c) },
	}
}

// listSetting reads a comma list; spaces around items are dropped, and an
// empty item is kept so that validation can name it.
func listSetting(path, env, flag, usage string, field func(*Config) *[]string) setting {
	return setting{
		path: path, env: env, flag: flag, usage: usage, typ: "strings",
		apply: func(c *Config, raw string) error {
			items := strings.Split(raw, ",")
			for i := range items {
				items[i] = strings.TrimSpace(items[i])
			}
			*field(c) = items
			return nil
		},
		show: func(c *Config) string { return strings.Join(*field(c), ",") },
	}
}

func durationSetting(path, env, flag, usage string, field func(*Config) *time.Duration) setting {
	return setting{
		path: path, env: env, flag: flag, usage: usage, typ: "duration",
		apply: func(c *Config, raw string) error {
			d, err := time.ParseDuration(raw)
			if err != nil || d <= 0 {
				return fmt.Errorf(`must be a positive duration such as "2s", "500ms" or "10m", got %q`, raw)
			}
			*field(c) = d
			return nil
		},
		show: func(c *Config) string { return field(c).String() },
	}
}

func intSetting[T int | int64](path, env, flag, usage string, minimum T, field func(*Config) *T) setting {
	return setting{
		path: path, env: env, flag: flag, usage: usage, typ: "int",
		apply: func(c *Config, raw string) error {
			n, err := strconv.ParseInt(raw, 10, 0)
			if err != nil || T(n) < minimum {
				return fmt.Errorf("must be an integer >= %d, got %q", minimum, raw)
			}
			*field(c) = T(n)
			return nil
		},
		show: func(c *Config) string { return strconv.FormatInt(int64(*field(c)), 10) },
	}
}

func boolSetting(path, env, flag, usage string, field func(*Config) *bool) setting {
	return setting{
		path: path, env: env, flag: flag, usage: usage, typ: "bool",
		apply: func(c *Config, raw string) error {
			b, err := strconv.ParseBool(raw)
			if err != nil {
				return fmt.Errorf("must be true or false, got %q", raw)
			}
			*field(c) = b
			return nil
		},
		show: func(c *Config) string { return strconv.FormatBool(*field(c)) },
	}
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
