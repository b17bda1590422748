package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/metadata"
)

// result is what one command line did.
type result struct {
	code           int
	stdout, stderr string
	ran            bool          // runApp was called
	cfg            config.Config // what runApp was given
}

// runCLI runs args against env with a runApp that records its config and
// returns appErr.
func runCLI(t *testing.T, env map[string]string, appErr error, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	var r result
	runApp := func(ctx context.Context, cfg config.Config) error {
		require.NoError(t, ctx.Err(), "runApp should get a live context")
		r.ran, r.cfg = true, cfg
		return appErr
	}
	lookup := func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
	r.code = execute(args, lookup, &out, &errOut, runApp)
	r.stdout, r.stderr = out.String(), errOut.String()
	return r
}

func TestCommandLineExitStatus(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		args       []string
		env        map[string]string
		wantCode   int
		wantStderr string
		wantStdout string
		// wantRow is a pattern a whole row of stdout must match.
		wantRow string
	}{
		"bad config names the field": {
			args:       []string{"serve", "--redis-addr", "no-port"},
			wantCode:   exitUsage,
			wantStderr: "pelwarden: invalid configuration:\n  redis[0].addr: must be host:port with a host and a numeric port 1-65535",
		},
		"every config problem on its own line": {
			args:     []string{"serve", "--redis-addr", "no-port", "--log-level", "loud"},
			wantCode: exitUsage,
			wantStderr: "pelwarden: invalid configuration:\n" +
				`  log.level: must be one of debug, info, warn, error, got "loud"` + "\n" +
				"  redis[0].addr: must be host:port",
		},
		"no redis connection": {
			args:       []string{"serve"},
			wantCode:   exitUsage,
			wantStderr: "  redis: at least one connection is required",
		},
		"bad env value names the variable": {
			args:       []string{"serve"},
			env:        map[string]string{"PELWARDEN_REDIS_ADDR": "r:6379", "PELWARDEN_REDIS_DB": "abc"},
			wantCode:   exitUsage,
			wantStderr: `  PELWARDEN_REDIS_DB: must be an integer >= 0, got "abc"`,
		},
		"missing config file": {
			args:       []string{"serve", "--config", "/does/not/exist.yaml"},
			wantCode:   exitUsage,
			wantStderr: `  config file: must name a readable file: "/does/not/exist.yaml"`,
		},
		"unknown flag": {
			args:       []string{"serve", "--bogus"},
			wantCode:   exitUsage,
			wantStderr: "pelwarden: unknown flag: --bogus\nRun 'pelwarden serve --help' for usage.",
		},
		"bad flag value": {
			args:       []string{"serve", "--freshness", "2"},
			wantCode:   exitUsage,
			wantStderr: `invalid argument "2" for "--freshness" flag: must be a positive duration`,
		},
		"unknown command": {
			args:       []string{"serf"},
			wantCode:   exitUsage,
			wantStderr: `unknown command "serf" for "pelwarden"`,
		},
		"positional argument to serve": {
			args:       []string{"serve", "extra"},
			wantCode:   exitUsage,
			wantStderr: `unknown command "extra" for "pelwarden serve"`,
		},
		"root help": {
			args:       []string{"--help"},
			wantCode:   exitOK,
			wantStdout: "serve",
		},
		"root help has the description": {
			args:       []string{"--help"},
			wantCode:   exitOK,
			wantStdout: "Ghost-aware KEDA external scaler and PEL hygiene for Redis Streams consumer groups",
		},
		"serve help lists env variables": {
			args:       []string{"serve", "--help"},
			wantCode:   exitOK,
			wantStdout: "PELWARDEN_REDIS_ADDR",
		},
		"serve help names the admin credentials": {
			args:     []string{"serve", "--help"},
			wantCode: exitOK,
			wantRow:  `PELWARDEN_ADMIN_TOKEN_FILE +--admin-token-file +admin\.tokenFile\n`,
		},
		"version": {
			args:       []string{"version"},
			wantCode:   exitOK,
			wantStdout: "version: dev\ncommit:  ",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, tt.env, nil, tt.args...)
			require.Equal(t, tt.wantCode, r.code, "exit status; stderr:\n%s", r.stderr)
			require.Contains(t, r.stderr, tt.wantStderr)
			require.Contains(t, r.stdout, tt.wantStdout)
			if tt.wantRow != "" {
				require.Regexp(t, tt.wantRow, r.stdout, "one row names the variable, its flag and the config path")
			}
			require.False(t, r.ran, "runApp should not run")
		})
	}
}

func TestServeHandsTheLoadedConfigToRunApp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "pelwarden.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
log:
  level: debug
redis:
  - name: orders
    addr: orders:6379
    passwordEnv: ORDERS_PASSWORD
`), 0o600))
	env := map[string]string{
		"PELWARDEN_CONFIG":         file,
		"PELWARDEN_REDIS_ADDR":     "127.0.0.1:6379",
		"PELWARDEN_REDIS_PASSWORD": "s3cret",
		"ORDERS_PASSWORD":          "orders-pw",
	}

	r := runCLI(t, env, nil, "serve", "--grpc-addr", "127.0.0.1:0", "--http-addr=127.0.0.1:0", "--freshness=2s")
	require.Equal(t, exitOK, r.code, "stderr:\n%s", r.stderr)
	require.True(t, r.ran, "runApp should run")

	require.Equal(t, "127.0.0.1:0", r.cfg.GRPC.Addr)
	require.Equal(t, "127.0.0.1:0", r.cfg.HTTP.Addr)
	require.Equal(t, "debug", r.cfg.Log.Level)
	require.Equal(t, 2*time.Second, r.cfg.Scaler.Freshness)
	byName := map[string]config.Redis{}
	for _, c := range r.cfg.Redis {
		byName[c.Name] = c
	}
	require.Equal(t, "orders-pw", byName["orders"].Password)
	require.Equal(t, "127.0.0.1:6379", byName[metadata.DefaultConnection].Addr)
	require.Equal(t, "s3cret", byName[metadata.DefaultConnection].Password)
}

func TestServeExitsOneWhenRunAppFails(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, errors.New("listen tcp :9090: address already in use"), "serve", "--redis-addr", "r:6379")
	require.Equal(t, exitFailure, r.code)
	require.True(t, r.ran)
	require.Equal(t, "pelwarden: listen tcp :9090: address already in use\n", r.stderr)
}

// TestServeRunsTheCollectorAtGCPercentUnlessGOGCIsSet checks that serve
// sets the collector before it serves, and leaves it to GOGC when the
// environment names one (the runtime has applied it). Not parallel: the
// setting is the process's.
func TestServeRunsTheCollectorAtGCPercentUnlessGOGCIsSet(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	for _, tc := range []struct {
		env  map[string]string
		want int
	}{
		{map[string]string{"PELWARDEN_REDIS_ADDR": "r:6379"}, gcPercent},
		{map[string]string{"PELWARDEN_REDIS_ADDR": "r:6379", "GOGC": "100"}, 100},
		{map[string]string{"PELWARDEN_REDIS_ADDR": "r:6379", "GOGC": "off"}, 100},
	} {
		debug.SetGCPercent(100)
		got := -2
		runApp := func(context.Context, config.Config) error {
			got = debug.SetGCPercent(100)
			return nil
		}
		lookup := func(name string) (string, bool) {
			v, ok := tc.env[name]
			return v, ok
		}
		var out, errOut bytes.Buffer
		require.Equal(t, exitOK, execute([]string{"serve"}, lookup, &out, &errOut, runApp), errOut.String())
		require.Equal(t, tc.want, got, "GOGC while serving, env %v", tc.env)
	}
}
