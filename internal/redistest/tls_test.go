package redistest

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/tlstest"
)

// tlsOptions writes a CA, a server pair for 127.0.0.1 and a client pair,
// and returns TLS options that use them.
func tlsOptions(t *testing.T, authClients string) (*TLS, *tlstest.CA, tlstest.Pair) {
	t.Helper()
	ca := tlstest.NewCA(t, "redis-ca")
	server, client := ca.Server(t), ca.Client(t, "harness")
	d := tlstest.NewSecretDir(t, map[string][]byte{
		"server.crt": server.CertPEM, "server.key": server.KeyPEM, "ca.crt": ca.CertPEM,
		"client.crt": client.CertPEM, "client.key": client.KeyPEM,
	})
	return &TLS{
		CertFile: d.Path("server.crt"), KeyFile: d.Path("server.key"), CAFile: d.Path("ca.crt"),
		AuthClients:    authClients,
		ClientCertFile: d.Path("client.crt"), ClientKeyFile: d.Path("client.key"),
	}, ca, client
}

func TestTLSServerAnswersOnlyOverTLS(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		authClients     string
		certlessAllowed bool
	}{
		"client certificates required": {authClients: "yes", certlessAllowed: false},
		"client certificates optional": {authClients: "optional", certlessAllowed: true},
		"Redis's default":              {authClients: "", certlessAllowed: false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			opts, ca, _ := tlsOptions(t, tt.authClients)
			s := Start(t, Options{TLS: opts})

			require.NoError(t, s.Client(t).Ping(ctx).Err(), "the harness's client speaks TLS with its certificate")

			plain := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
			defer plain.Close()
			require.Error(t, plain.Ping(ctx).Err(), "plaintext is refused on the TLS port")

			certless := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1,
				TLSConfig: ca.ClientConfig(t)})
			defer certless.Close()
			err := certless.Ping(ctx).Err()
			if tt.certlessAllowed {
				require.NoError(t, err, "no client certificate needed")
			} else {
				require.Error(t, err, "a TLS client without a certificate is refused")
			}
		})
	}
}

func TestTLSServerRestartsOnItsPort(t *testing.T) {
	t.Parallel()
	opts, _, _ := tlsOptions(t, "yes")
	s := Start(t, Options{TLS: opts, AOF: true})
	c := s.Client(t)
	require.NoError(t, c.Set(t.Context(), "k", "v", 0).Err())
	s.Kill()
	s.Restart(t)
	got, err := c.Get(t.Context(), "k").Result()
	require.NoError(t, err, "the TLS client reconnects after a restart")
	require.Equal(t, "v", got)
}

func TestACLUserCanRunOnlyWhatItsRuleAllows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := Start(t, Options{Users: []string{"app on >s3cret ~app:* resetchannels -@all +ping +get"}})
	app := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "app", Password: "s3cret"})
	defer app.Close()

	require.NoError(t, app.Ping(ctx).Err())
	require.ErrorIs(t, app.Get(ctx, "app:k").Err(), redis.Nil, "GET is allowed on its keys")
	require.ErrorContains(t, app.Set(ctx, "app:k", "v", 0).Err(), "NOPERM", "SET is not in the rule")
	require.ErrorContains(t, app.Get(ctx, "other").Err(), "NOPERM", "nor are keys outside ~app:*")

	wrong := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: "app", Password: "nope", MaxRetries: -1})
	defer wrong.Close()
	require.ErrorContains(t, wrong.Ping(ctx).Err(), "WRONGPASS")
}

func TestBadOptionsFailBeforeStarting(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		opts Options
		want string
	}{
		"empty user rule": {Options{Users: []string{"  "}}, "empty ACL user rule"},
		"missing CA":      {Options{TLS: &TLS{CAFile: "/nonexistent/ca.crt"}}, "TLS.CAFile"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := StartProcess(tt.opts)
			require.Nil(t, s)
			require.ErrorContains(t, err, tt.want)
		})
	}
}
