package config_test

import (
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
)

func TestPasswordIsResolvedFromItsSource(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		file  string // config file; empty means none
		env   map[string]string
		files map[string]string
		args  []string
		want  string
	}{
		"passwordEnv in YAML": {
			file: "redis: [{name: default, addr: 'r:1', passwordEnv: ORDERS_PW}]",
			env:  map[string]string{"ORDERS_PW": "from-env"},
			want: "from-env",
		},
		"passwordFile in YAML, trailing newline trimmed": {
			file:  "redis: [{name: default, addr: 'r:1', passwordFile: /secret/pw}]",
			files: map[string]string{"/secret/pw": "from-file\r\n"},
			want:  "from-file",
		},
		"PELWARDEN_REDIS_PASSWORD": {
			env:  map[string]string{"PELWARDEN_REDIS_ADDR": "r:1", "PELWARDEN_REDIS_PASSWORD": "pelwarden-env"},
			want: "pelwarden-env",
		},
		"PELWARDEN_REDIS_PASSWORD_FILE": {
			env:   map[string]string{"PELWARDEN_REDIS_ADDR": "r:1", "PELWARDEN_REDIS_PASSWORD_FILE": "/secret/pw"},
			files: map[string]string{"/secret/pw": "pelwarden-file\n"},
			want:  "pelwarden-file",
		},
		"PELWARDEN_REDIS_PASSWORD replaces the file's passwordFile": {
			file: "redis: [{name: default, addr: 'r:1', passwordFile: /missing}]",
			env:  map[string]string{"PELWARDEN_REDIS_PASSWORD": "env-wins"},
			want: "env-wins",
		},
		"--redis-password-file replaces PELWARDEN_REDIS_PASSWORD": {
			env:   map[string]string{"PELWARDEN_REDIS_ADDR": "r:1", "PELWARDEN_REDIS_PASSWORD": "env"},
			files: map[string]string{"/flag/pw": "flag-wins"},
			args:  []string{"--redis-password-file=/flag/pw"},
			want:  "flag-wins",
		},
		"no password": {
			env:  map[string]string{"PELWARDEN_REDIS_ADDR": "r:1"},
			want: "",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			files := map[string]string{}
			for k, v := range tt.files {
				files[k] = v
			}
			args := tt.args
			if tt.file != "" {
				files["/c.yaml"] = tt.file
				args = append([]string{"--config=/c.yaml"}, args...)
			}
			cfg, err := config.Load(sources(tt.env, files), parseFlags(t, args...))
			require.NoError(t, err)
			require.Equal(t, tt.want, connection(t, cfg, "default").Password)
		})
	}
}

func TestPasswordSourceProblemsNameTheField(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		file string
		env  map[string]string
		want string
	}{
		"both sources in YAML": {
			file: "redis: [{name: default, addr: 'r:1', passwordEnv: PW, passwordFile: /pw}]",
			env:  map[string]string{"PW": "x"},
			want: `redis[0].passwordEnv: is mutually exclusive with passwordFile; set one of them`,
		},
		"both sources in env": {
			env:  map[string]string{"PELWARDEN_REDIS_ADDR": "r:1", "PELWARDEN_REDIS_PASSWORD": "x", "PELWARDEN_REDIS_PASSWORD_FILE": "/pw"},
			want: `PELWARDEN_REDIS_PASSWORD: is mutually exclusive with PELWARDEN_REDIS_PASSWORD_FILE`,
		},
		"passwordEnv names an unset variable": {
			file: "redis: [{name: default, addr: 'r:1', passwordEnv: ORDERS_PW}]",
			want: `redis[0].passwordEnv: names the environment variable ORDERS_PW, which is unset or empty`,
		},
		"passwordFile cannot be read": {
			file: "redis: [{name: default, addr: 'r:1', passwordFile: /missing}]",
			want: `redis[0].passwordFile: must name a readable file: "/missing": file does not exist`,
		},
		"passwordFile is empty": {
			file: "redis: [{name: default, addr: 'r:1', passwordFile: /empty}]",
			want: `redis[0].passwordFile: names "/empty", which holds no password`,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			files := map[string]string{"/pw": "pw", "/empty": "\n"}
			var args []string
			if tt.file != "" {
				files["/c.yaml"] = tt.file
				args = []string{"--config=/c.yaml"}
			}
			_, err := config.Load(sources(tt.env, files), parseFlags(t, args...))
			var cfgErr *config.Error
			require.ErrorAs(t, err, &cfgErr)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestNoSecretsLeavesPasswordsUnread: a configuration only looked at
// (check-trigger --config) loads where its password sources are missing,
// and none is read.
func TestNoSecretsLeavesPasswordsUnread(t *testing.T) {
	t.Parallel()
	read := map[string]bool{}
	src := config.Sources{
		Env: func(name string) (string, bool) {
			return map[string]string{config.EnvConfig: "/etc/pelwarden.yaml"}[name], name == config.EnvConfig
		},
		ReadFile: func(path string) ([]byte, error) {
			read[path] = true
			if path == "/etc/pelwarden.yaml" {
				return []byte("redis: [{name: default, addr: 'r:1', passwordFile: /missing}, {name: b, addr: 'r:2', passwordEnv: UNSET_PW}]"), nil
			}
			return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
		},
	}
	_, err := config.Load(src, nil)
	require.ErrorContains(t, err, "redis[0].passwordFile", "without NoSecrets the password file must be readable")
	read = map[string]bool{}
	src.NoSecrets = true
	cfg, err := config.Load(src, nil)
	require.NoError(t, err)
	require.Empty(t, cfg.Redis[0].Password)
	require.Equal(t, map[string]bool{"/etc/pelwarden.yaml": true}, read, "only the config file is read")
}

// TestNoSecretsLeavesTheNamedFilesUnjudged: the configuration a chart
// renders names TLS files, tokens and a kubeconfig that only its pod
// mounts; looked at elsewhere (check-trigger --config in CI) it loads,
// while every other problem is still reported.
func TestNoSecretsLeavesTheNamedFilesUnjudged(t *testing.T) {
	t.Parallel()
	const missing = "/nonexistent-pelwarden-test"
	file := `grpc: {tls: {certFile: ` + missing + `/tls.crt, keyFile: ` + missing + `/tls.key, clientCAFile: ` + missing + `/ca.crt}}
admin: {tokenFile: ` + missing + `/token, workerTokenFile: ` + missing + `/worker, workerTokens: [{tokenFile: ` + missing + `/jobs, streams: [jobs]}]}
kubernetes: {enabled: true, kubeconfig: ` + missing + `/kubeconfig}
redis: [{name: default, addr: 'r:1', tls: {enabled: true, caFile: ` + missing + `/redis-ca.crt}}]
`
	load := func(noSecrets bool, extra string) error {
		_, err := config.Load(config.Sources{
			Env: func(name string) (string, bool) { return "/etc/pelwarden.yaml", name == config.EnvConfig },
			ReadFile: func(path string) ([]byte, error) {
				if path == "/etc/pelwarden.yaml" {
					return []byte(file + extra), nil
				}
				return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
			},
			NoSecrets: noSecrets,
		}, nil)
		return err
	}
	err := load(false, "")
	for _, field := range []string{"grpc.tls.certFile", "grpc.tls.keyFile", "grpc.tls.clientCAFile", "admin.tokenFile",
		"admin.workerTokenFile", "admin.workerTokens[0].tokenFile", "kubernetes.kubeconfig", "redis[0].tls.caFile"} {
		require.ErrorContains(t, err, field+": must name a readable file", "served, every file must be readable")
	}
	require.NoError(t, load(true, ""))
	err = load(true, "log: {level: loud}\n")
	require.ErrorContains(t, err, "log.level: must be one of", "a problem that is no file's is still one")
	require.NotContains(t, err.Error(), "readable file")
}
