package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
)

const goodToken = "0123456789abcdef0123"

func TestAdminIsOffByDefault(t *testing.T) {
	t.Parallel()
	c := valid()
	require.False(t, c.Admin.Enabled(), "no credential is configured unless the operator names one")
	require.NoError(t, c.Validate())
}

func TestAdminFieldsAreCheckedByName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := map[string]struct {
		admin config.Admin
		want  string
	}{
		"a missing token file": {config.Admin{TokenFile: filepath.Join(dir, "nope")},
			`admin.tokenFile: must name a readable file holding the bearer token: "` + filepath.Join(dir, "nope") + `": no such file`},
		"a directory":              {config.Admin{TokenFile: dir}, `admin.tokenFile: must name a readable file holding the bearer token: "` + dir + `" is not a regular file`},
		"a device never ends":      {config.Admin{TokenFile: "/dev/zero"}, `"/dev/zero" is not a regular file`},
		"a short token":            {config.Admin{TokenFile: writeFile(t, "short", "s3cret\n")}, "must hold a token of at least 16 characters (such as the output of `openssl rand -hex 32`), it holds 6"},
		"an empty token file":      {config.Admin{TokenFile: writeFile(t, "empty", "\n")}, "it holds 0"},
		"two tokens":               {config.Admin{TokenFile: writeFile(t, "two", goodToken+"\n"+goodToken)}, "one token without spaces"},
		"a huge file":              {config.Admin{TokenFile: writeFile(t, "huge", strings.Repeat("a", 5000))}, "larger than 4096 bytes"},
		"an empty identity":        {config.Admin{AllowedClientIdentities: []string{"ok", ""}}, `admin.allowedClientIdentities[1]: must be a certificate common name, DNS name or URI`},
		"an identity with a space": {config.Admin{AllowedClientIdentities: []string{"CN=a b"}}, `admin.allowedClientIdentities[0]: must be`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			c.Admin = tc.admin
			require.ErrorContains(t, c.Validate(), tc.want)
		})
	}
}

func TestAdminAcceptsATokenFileAndIdentities(t *testing.T) {
	t.Parallel()
	c := valid()
	c.Admin = config.Admin{
		TokenFile:               writeFile(t, "token", "  "+goodToken+"\n"),
		AllowedClientIdentities: []string{"pelwarden-admin", "spiffe://cluster.local/ns/jobs/sa/worker"},
	}
	require.NoError(t, c.Validate())
	token, err := config.ReadToken(c.Admin.TokenFile)
	require.NoError(t, err)
	require.Equal(t, goodToken, token, "surrounding whitespace is trimmed")
}

func TestAdminComesFromEnvFlagsAndYAML(t *testing.T) {
	t.Parallel()
	tokenFile := writeFile(t, "token", goodToken)
	yaml := "admin:\n  tokenFile: " + tokenFile + "\n  allowedClientIdentities: [ops, deployer]\nredis:\n  - name: default\n    addr: r:6379\n"
	tests := map[string]struct {
		env   map[string]string
		flags []string
		want  config.Admin
	}{
		"yaml": {
			flags: []string{"--config=/c.yaml"},
			want:  config.Admin{TokenFile: tokenFile, AllowedClientIdentities: []string{"ops", "deployer"}},
		},
		"env": {
			env: map[string]string{"PELWARDEN_REDIS_ADDR": "r:6379", "PELWARDEN_ADMIN_TOKEN_FILE": tokenFile,
				"PELWARDEN_ADMIN_ALLOWED_CLIENT_IDENTITIES": "ops, spiffe://c/ns/a/sa/b"},
			want: config.Admin{TokenFile: tokenFile, AllowedClientIdentities: []string{"ops", "spiffe://c/ns/a/sa/b"}},
		},
		"flags over yaml": {
			flags: []string{"--config=/c.yaml", "--admin-allowed-client-identities=ci"},
			want:  config.Admin{TokenFile: tokenFile, AllowedClientIdentities: []string{"ci"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Load(sources(tc.env, map[string]string{"/c.yaml": yaml}), parseFlags(t, tc.flags...))
			require.NoError(t, err)
			require.Equal(t, tc.want, cfg.Admin)
		})
	}
}

func TestAnEmptyIdentityInTheEnvListIsNamed(t *testing.T) {
	t.Parallel()
	_, err := config.Load(sources(map[string]string{"PELWARDEN_REDIS_ADDR": "r:6379", "PELWARDEN_ADMIN_ALLOWED_CLIENT_IDENTITIES": "ops,,ci"}, nil), nil)
	require.ErrorContains(t, err, "admin.allowedClientIdentities[1]: must be")
}

func TestScopedWorkerTokensComeFromYAML(t *testing.T) {
	t.Parallel()
	jobs, mail := writeFile(t, "jobs-token", goodToken+"-jobs"), writeFile(t, "mail-token", goodToken+"-mail")
	yaml := "admin:\n  workerTokens:\n    - tokenFile: " + jobs + "\n      streams: [\"jobs*\"]\n    - tokenFile: " + mail +
		"\n      streams: [mail, \"mail:*\"]\nredis:\n  - name: default\n    addr: r:6379\n"
	cfg, err := config.Load(sources(nil, map[string]string{"/c.yaml": yaml}), parseFlags(t, "--config=/c.yaml"))
	require.NoError(t, err)
	require.Equal(t, []config.WorkerToken{{TokenFile: jobs, Streams: []string{"jobs*"}}, {TokenFile: mail, Streams: []string{"mail", "mail:*"}}},
		cfg.Admin.WorkerTokens)
	require.True(t, cfg.Admin.Enabled())
}
