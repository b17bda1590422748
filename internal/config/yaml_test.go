package config_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
)

func TestYAMLConnectionsStartFromDefaults(t *testing.T) {
	t.Parallel()
	const file = `
redis:
  - name: orders
    addr: orders:6379
    readTimeout: 500ms
    tls:
      enabled: true
`
	cfg, err := config.Load(sources(nil, map[string]string{"/c.yaml": file}), parseFlags(t, "--config=/c.yaml"))
	require.NoError(t, err)

	want := config.DefaultRedis("orders", "orders:6379")
	want.ReadTimeout = 500 * time.Millisecond
	want.TLS.Enabled = true
	require.Equal(t, []config.Redis{want}, cfg.Redis)
}

func TestYAMLMergeKeysAndNullsAreAccepted(t *testing.T) {
	t.Parallel()
	const file = `
log:
scaler: ~
redis:
  - &base
    name: a
    addr: a:6379
    poolSize: 5
  - <<: *base
    name: b
  - &other
    name: c
    addr: c:6379
    poolSize: 9
    db: 2
  - <<: [*base, *other]
    name: d
`
	cfg, err := config.Load(sources(nil, map[string]string{"/c.yaml": file}), parseFlags(t, "--config=/c.yaml"))
	require.NoError(t, err)
	require.Equal(t, config.Default().Log, cfg.Log, "an empty section keeps its defaults")
	require.Equal(t, config.Default().Scaler, cfg.Scaler, "a null section keeps its defaults")
	b := connection(t, cfg, "b")
	require.Equal(t, "a:6379", b.Addr, "b should inherit addr from the merged anchor")
	require.Equal(t, 5, b.PoolSize)
	d := connection(t, cfg, "d")
	require.Equal(t, 5, d.PoolSize, "the first mapping in a merge list should win")
	require.Equal(t, 2, d.DB, "keys only a later mapping has should still merge")
}

func TestEmptyConfigFileMeansDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load(sources(nil, map[string]string{"/c.yaml": "# nothing yet\n"}),
		parseFlags(t, "--config=/c.yaml", "--redis-addr=r:6379"))
	require.NoError(t, err)
	require.Equal(t, config.Default().Scaler, cfg.Scaler)
}

func TestLoadRejectsBadYAMLNamingTheKey(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		file string
		want []string
	}{
		"unknown top-level key": {
			file: "grcp:\n  addr: ':1'\n",
			want: []string{`grcp: unknown key (/c.yaml:1); accepted keys: grpc, http, log, scaler, redis`},
		},
		"unknown nested key": {
			file: "redis:\n  - name: a\n    addr: a:1\n  - name: b\n    addr: b:1\n    tls:\n      caFlie: /ca.pem\n",
			want: []string{`redis[1].tls.caFlie: unknown key (/c.yaml:7); accepted keys: enabled, caFile, certFile, keyFile, serverName, insecureSkipVerify`},
		},
		"empty key": {
			file: "log:\n  '': debug\n",
			want: []string{`log."": unknown key (/c.yaml:2)`},
		},
		"password in YAML": {
			file: "redis:\n  - name: a\n    addr: a:1\n    password: hunter2\n",
			want: []string{`redis[0].password: unknown key (/c.yaml:4)`, `set passwordEnv or passwordFile`},
		},
		"duration as a number": {
			file: "scaler:\n  freshness: 2\n",
			want: []string{`scaler.freshness: must be a duration such as "2s", "500ms" or "10m", got "2" (/c.yaml:2)`},
		},
		"text where an integer goes": {
			file: "scaler:\n  maxTargets: many\n",
			want: []string{`scaler.maxTargets: must be an integer, got "many" (/c.yaml:2)`},
		},
		"text where a bool goes": {
			file: "redis:\n  - name: a\n    addr: a:1\n    tls: {enabled: sure}\n",
			want: []string{`redis[0].tls.enabled: must be true or false, got "sure"`},
		},
		"list where a mapping goes": {
			file: "grpc: [a, b]\n",
			want: []string{`grpc: must be a mapping with keys addr, shutdownTimeout, tls, maxRecvMsgBytes, refusedCallsPerSecond, got a list (/c.yaml:1)`},
		},
		"mapping where a list goes": {
			file: "redis:\n  name: a\n",
			want: []string{`redis: must be a list, got a mapping (/c.yaml:2)`},
		},
		"mapping where a string goes": {
			file: "http:\n  addr: {port: 1}\n",
			want: []string{`http.addr: must be a string, got a mapping`},
		},
		"a key set twice": {
			file: "log:\n  level: info\n  level: debug\n",
			want: []string{`log.level: is set twice, at lines 2 and 3`},
		},
		"top level is not a mapping": {
			file: "- grpc\n",
			want: []string{`/c.yaml: must be a mapping with keys grpc, http, log, scaler, redis, hygiene, kubernetes, admin, triggers, got a list`},
		},
		"two documents": {
			file: "log: {level: info}\n---\nlog: {level: debug}\n",
			want: []string{`/c.yaml: must hold one YAML document, found another at line 2`},
		},
		"invalid syntax": {
			file: "log: [\n",
			want: []string{`/c.yaml: is not valid YAML`},
		},
		"a key set twice in a hygiene target": {
			file: "hygiene:\n  targets:\n    - {stream: a, stream: b}\n",
			want: []string{`hygiene.targets[0].stream: is set twice, at lines 3 and 3`},
		},
		"list where a hygiene target value goes": {
			file: "hygiene:\n  targets:\n    - stream: [a]\n",
			want: []string{`hygiene.targets[0].stream: must be a string, got a list (/c.yaml:3)`},
		},
		"a bad value in an anchor is reported where it is written": {
			file: "redis:\n  - &a {name: a, addr: 'a:1', poolSize: many}\n  - {<<: *a, name: b}\n",
			want: []string{`redis[0].poolSize: must be an integer, got "many" (/c.yaml:2)`},
		},
		"a key that is a list": {
			file: "log: {? [a] : debug}\n",
			want: []string{`log: keys must be plain names, got a list (/c.yaml:1)`},
		},
		"every problem at once": {
			file: "grcp: {}\nlog: {lvl: x}\nscaler: {maxTargets: x}\n",
			want: []string{"grcp: unknown key", "log.lvl: unknown key", "scaler.maxTargets: must be an integer"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(sources(nil, map[string]string{"/c.yaml": tt.file}), parseFlags(t, "--config=/c.yaml", "--redis-addr=r:1"))
			var cfgErr *config.Error
			require.ErrorAs(t, err, &cfgErr)
			for _, want := range tt.want {
				require.ErrorContains(t, err, want)
			}
		})
	}
}

func TestNestedAliasesCannotMakeLoadingExponential(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"merge keys":    "log: {<<: *x%d}\n",
		"alias in list": "hygiene: {targets: [*x%d]}\n",
	}
	for name, use := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// Each level merges the one below ten times: 10^9 visits unbounded.
			var b strings.Builder
			b.WriteString("x0: &x0 {level: info}\n")
			for i := 1; i <= 9; i++ {
				fmt.Fprintf(&b, "x%d: &x%d {<<: [%s]}\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*x%d, ", i-1), 10), ", "))
			}
			fmt.Fprintf(&b, use, 9)

			_, err := config.Load(sources(nil, map[string]string{"/c.yaml": b.String()}), parseFlags(t, "--config=/c.yaml"))
			require.ErrorContains(t, err, "/c.yaml: document contains excessive aliasing")
		})
	}
}

func TestAHundredConnectionsSharingOneAnchorLoad(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("redis:\n  - &base\n    name: r0\n    addr: r0:6379\n    username: scaler\n    passwordFile: /pw\n" +
		"    dialTimeout: 1s\n    readTimeout: 1s\n    writeTimeout: 1s\n    poolSize: 4\n    db: 1\n" +
		"    tls: {enabled: true, serverName: redis}\n")
	for i := 1; i < 100; i++ {
		fmt.Fprintf(&b, "  - {<<: *base, name: r%d, addr: 'r%d:6379'}\n", i, i)
	}
	files := map[string]string{"/c.yaml": b.String(), "/pw": "secret"}
	cfg, err := config.Load(sources(nil, files), parseFlags(t, "--config=/c.yaml"))
	require.NoError(t, err, "the aliases a real config uses stay within yaml.v3's limit")
	require.Len(t, cfg.Redis, 100)
	last := cfg.Redis[99]
	require.Equal(t, "r99:6379", last.Addr)
	require.Equal(t, 4, last.PoolSize, "merged from the anchor")
	require.Equal(t, "redis", last.TLS.ServerName, "merged from the anchor")
}

func TestLoadReadsHygieneTargetsFromYAML(t *testing.T) {
	t.Parallel()
	yml := `
redis:
  - name: default
    addr: 127.0.0.1:6379
hygiene:
  scanInterval: 5s
  targets:
    - stream: jobs
      consumerGroup: workers
      reclaim: requeue
      maxDeliveries: 3
`
	src := config.Sources{
		Env: func(name string) (string, bool) {
			if name == config.EnvConfig {
				return "/c.yaml", true
			}
			return "", false
		},
		ReadFile: func(string) ([]byte, error) { return []byte(yml), nil },
	}
	cfg, err := config.Load(src, nil)
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, cfg.Hygiene.ScanInterval)
	require.Equal(t, []map[string]string{{"stream": "jobs", "consumerGroup": "workers", "reclaim": "requeue", "maxDeliveries": "3"}}, cfg.Hygiene.Targets)
}
