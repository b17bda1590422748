package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
)

// requireLoadContract checks what every Load result must satisfy: an error is
// a *config.Error whose problems each name a field, and a config returned
// without error validates.
func requireLoadContract(t *testing.T, cfg config.Config, err error) {
	t.Helper()
	if err != nil {
		var cfgErr *config.Error
		require.ErrorAs(t, err, &cfgErr, "Load error should be a *config.Error")
		require.NotEmpty(t, cfgErr.Problems)
		for _, p := range cfgErr.Problems {
			require.NotEmpty(t, p.Field, "problem %q names no field", p.Problem)
			require.NotEmpty(t, p.Problem, "problem for %q says nothing", p.Field)
		}
		return
	}
	require.NoError(t, cfg.Validate(), "Load returned a config that does not validate")
}

// FuzzLoadYAML feeds arbitrary bytes as the config file. The seed corpus is in
// testdata/fuzz/FuzzLoadYAML.
func FuzzLoadYAML(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		src := config.Sources{
			Env: func(name string) (string, bool) {
				if strings.HasPrefix(name, "PW") {
					return "secret", true
				}
				return "", false
			},
			ReadFile: func(path string) ([]byte, error) {
				switch path {
				case "/c.yaml":
					return data, nil
				case "/pw":
					return []byte("secret\n"), nil
				}
				return nil, errors.New("no such file")
			},
		}
		cfg, err := config.Load(src, parseFlags(t, "--config=/c.yaml"))
		requireLoadContract(t, cfg, err)
	})
}

// fuzzEnvNames are the variables FuzzLoadEnv picks from.
var fuzzEnvNames = []string{
	"PELWARDEN_GRPC_ADDR", "PELWARDEN_GRPC_SHUTDOWN_TIMEOUT", "PELWARDEN_HTTP_ADDR",
	"PELWARDEN_LOG_LEVEL", "PELWARDEN_LOG_FORMAT",
	"PELWARDEN_REDIS_ADDR", "PELWARDEN_REDIS_USERNAME", "PELWARDEN_REDIS_PASSWORD", "PELWARDEN_REDIS_PASSWORD_FILE",
	"PELWARDEN_REDIS_DB", "PELWARDEN_REDIS_TLS", "PELWARDEN_REDIS_TLS_CA", "PELWARDEN_REDIS_TLS_CERT", "PELWARDEN_REDIS_TLS_KEY",
	"PELWARDEN_SCALER_FRESHNESS", "PELWARDEN_SCALER_REQUEST_TIMEOUT",
	"PELWARDEN_SCALER_TARGET_IDLE_EXPIRY", "PELWARDEN_SCALER_ACTIVE_RESEND_INTERVAL",
	"PELWARDEN_SCALER_MAX_TARGETS", "PELWARDEN_SCALER_LAG_ESTIMATE_CAP",
	"PELWARDEN_GRPC_TLS_CERT_FILE", "PELWARDEN_GRPC_TLS_KEY_FILE", "PELWARDEN_GRPC_TLS_CLIENT_CA_FILE",
	"PELWARDEN_GRPC_TLS_RELOAD_INTERVAL", "PELWARDEN_GRPC_TLS_MIN_VERSION", "PELWARDEN_GRPC_MAX_RECV_MSG_BYTES",
	"PELWARDEN_GRPC_REFUSED_CALLS_PER_SECOND",
	"PELWARDEN_ADMIN_TOKEN_FILE", "PELWARDEN_ADMIN_ALLOWED_CLIENT_IDENTITIES",
	"PELWARDEN_TRIGGERS_RECLAIM", "PELWARDEN_TRIGGERS_FLOORS_ENTRY_STALE", "PELWARDEN_TRIGGERS_FLOORS_GHOST_IDLE",
	"PELWARDEN_TRIGGERS_FLOORS_HEARTBEAT_MAX_AGE", "PELWARDEN_TRIGGERS_QUOTAS_SCALER_TARGETS", "PELWARDEN_TRIGGERS_QUOTAS_HYGIENE_TARGETS",
	"PELWARDEN_REDIS_CLUSTER_ADDRS", "PELWARDEN_REDIS_SENTINEL_ADDRS", "PELWARDEN_REDIS_SENTINEL_MASTER",
	"PELWARDEN_REDIS_SENTINEL_USERNAME", "PELWARDEN_REDIS_SENTINEL_PASSWORD", "PELWARDEN_REDIS_SENTINEL_PASSWORD_FILE",
	"PELWARDEN_TRIGGERS_FLOORS_POD_DELETION_GRACE", "PELWARDEN_TRIGGERS_FLOORS_MAX_DELIVERIES", "PELWARDEN_TRIGGERS_WARM_UP",
}

// FuzzLoadEnv sets one PELWARDEN_* variable, chosen by pick, to an arbitrary
// value on top of a working zero-config environment. The seed corpus is in
// testdata/fuzz/FuzzLoadEnv.
func FuzzLoadEnv(f *testing.F) {
	f.Fuzz(func(t *testing.T, pick uint8, value string) {
		name := fuzzEnvNames[int(pick)%len(fuzzEnvNames)]
		env := map[string]string{"PELWARDEN_REDIS_ADDR": "127.0.0.1:6379", name: value}
		cfg, err := config.Load(sources(env, map[string]string{"/pw": "secret"}), nil)
		requireLoadContract(t, cfg, err)
	})
}
