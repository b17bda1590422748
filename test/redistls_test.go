package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
	"github.com/pelwarden/pelwarden/internal/tlstest"
)

const redisPassword = "pelwarden-s3cret"

// secureRedis is a redis-server that speaks TLS only, requires client
// certificates, and has a user "pelwarden" with exactly the commands
// pelwarden needs (redisx.ACLCommands).
type secureRedis struct {
	srv   *redistest.Server
	rdb   *redis.Client // the harness, as the default user, on database 1
	mount *tlstest.SecretDir
}

func startSecureRedis(t *testing.T) *secureRedis {
	t.Helper()
	ca := tlstest.NewCA(t, "redis-ca")
	server, harness, client := ca.Server(t), ca.Client(t, "harness"), ca.Client(t, "pelwarden")
	mount := tlstest.NewSecretDir(t, map[string][]byte{
		"server.crt": server.CertPEM, "server.key": server.KeyPEM, tlstest.CAKey: ca.CertPEM,
		"harness.crt": harness.CertPEM, "harness.key": harness.KeyPEM,
		tlstest.CertKey: client.CertPEM, tlstest.KeyKey: client.KeyPEM,
		"password": []byte(redisPassword + "\n"),
	})
	srv := redistest.Start(t, redistest.Options{
		TLS: &redistest.TLS{
			CertFile: mount.Path("server.crt"), KeyFile: mount.Path("server.key"), CAFile: mount.Path(tlstest.CAKey),
			AuthClients:    "yes",
			ClientCertFile: mount.Path("harness.crt"), ClientKeyFile: mount.Path("harness.key"),
		},
		Users: []string{"pelwarden on >" + redisPassword + " ~* resetchannels " + redisx.ACLCommands},
	})
	// As docs/security.md asks where the server has them.
	srv.GrantKnown(t, "pelwarden", redistest.XAckDel, redistest.XNack)
	// Database 1, so that pelwarden's connections must SELECT it too.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), TLSConfig: srv.TLSConfig(), DB: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	return &secureRedis{srv: srv, rdb: rdb, mount: mount}
}

// config loads pelwarden's configuration the way the binary does, from a
// YAML file naming the CA, the client pair and the password file.
func (r *secureRedis) config(t *testing.T, passwordFile string) config.Config {
	t.Helper()
	yaml := fmt.Sprintf(`
grpc: {addr: "127.0.0.1:0", shutdownTimeout: 2s}
http: {addr: "127.0.0.1:0"}
scaler: {freshness: 200ms, requestTimeout: 1s}
hygiene: {scanInterval: 200ms, leaseTTL: 2s}
triggers:
  rules: [{namespaces: ["*"], redis: ["*"], heartbeatKeys: ["hb:*"]}]
redis:
  - name: default
    addr: %s
    username: pelwarden
    passwordFile: %s
    db: 1
    tls:
      enabled: true
      caFile: %s
      certFile: %s
      keyFile: %s
    dialTimeout: 500ms
    readTimeout: 500ms
    writeTimeout: 500ms
`, r.srv.Addr(), passwordFile, r.mount.Path(tlstest.CAKey), r.mount.Path(tlstest.CertKey), r.mount.Path(tlstest.KeyKey))
	path := filepath.Join(t.TempDir(), "pelwarden.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
	cfg, err := config.Load(config.Sources{Env: func(name string) (string, bool) {
		if name == config.EnvConfig {
			return path, true
		}
		return "", false
	}}, nil)
	require.NoError(t, err)
	return cfg
}

// beat keeps the heartbeat keys of live consumers fresh until the test ends.
func beat(t *testing.T, rdb *redis.Client, consumers ...string) {
	t.Helper()
	values := make(map[string]func() string, len(consumers))
	for _, c := range consumers {
		values["hb:"+c] = msAgo(0)
	}
	beatEvery(t, rdb, values)
}

// TestPelwardenWorksAgainstTLSRedisAsALeastPrivilegeUser runs every Redis
// path pelwarden has (snapshot reads, heartbeats, the NULL-lag estimate,
// the stream waker, requeue with deleteOriginal, tombstones, claim,
// deleting ghost consumers, the lease) as the ACL user, over TLS with a
// client certificate, and then finds Redis's ACL log empty: the documented
// rule is enough.
func TestPelwardenWorksAgainstTLSRedisAsALeastPrivilegeUser(t *testing.T) {
	t.Parallel()
	r := startSecureRedis(t)
	rdb, ctx := r.rdb, context.Background()
	for _, stream := range []string{"jobs", "orders"} {
		redistest.CreateGroup(t, rdb, stream, "workers")
	}
	redistest.AddJobs(t, rdb, "jobs", "", 6)
	redistest.Read(t, rdb, "jobs", "workers", "ghost", 6)
	ghostHeld, err := rdb.XRange(ctx, "jobs", "-", "+").Result()
	require.NoError(t, err)
	require.NoError(t, rdb.XDel(ctx, "jobs", ghostHeld[0].ID).Err(), "one tombstone in the ghost's PEL")
	redistest.AddJobs(t, rdb, "orders", "", 5)
	redistest.Read(t, rdb, "orders", "workers", "ghost", 4)
	redistest.Read(t, rdb, "orders", "workers", "live-0", 1)
	redistest.AddJobs(t, rdb, "sparse", "", 6)
	require.NoError(t, rdb.XGroupCreate(ctx, "sparse", "workers", "0").Err())
	sparse, err := rdb.XRange(ctx, "sparse", "-", "+").Result()
	require.NoError(t, err)
	require.NoError(t, rdb.XDel(ctx, "sparse", sparse[2].ID).Err(), "a NULL lag")
	beat(t, rdb, "live-0")
	// The ghost's last heartbeat is an hour old: in jobs it is the only
	// consumer, and a group where no consumer has any heartbeat record is
	// judged Unknown (the key pattern may be wrong), never Ghost.
	heartbeat(t, rdb, "hb:ghost", time.Now().Add(-time.Hour))
	time.Sleep(1100 * time.Millisecond) // the ghosts' reads pass the 1 s grace

	live := map[string]string{"stream": "orders", "consumerGroup": "workers",
		"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}", "heartbeatMaxAgeSeconds": "1"}
	// Claim and deleteOriginal are the configuration's to ask for, never
	// a trigger's.
	claim := cloneWith(live, "reclaim", "claim", "entryStaleSeconds", "0.1")
	requeue := cloneWith(live, "stream", "jobs", "reclaim", "requeue", "entryStaleSeconds", "0.1",
		"deleteOriginal", "true", "lagCount", "1")
	cfg := r.config(t, r.mount.Path("password"))
	cfg.Hygiene.Targets = []map[string]string{claim, requeue}
	p := runPelwarden(t, cfg, insecure.NewCredentials())
	// The ghost's 4 entries are left out once a max age has passed since
	// pelwarden's first read.
	requireMetric(t, p, live, 1)
	v, err := metric(ctx, t, p.client, map[string]string{"stream": "sparse", "consumerGroup": "workers", "lagCount": "1"})
	require.NoError(t, err)
	require.Equal(t, int64(5), v, "the NULL lag is estimated by a script")
	requireWakerPushes(t, p, rdb, "")

	eventually(t, 10*time.Second, func() error { return ghostsGone(ctx, rdb) })
	v, err = metric(ctx, t, p.client, claim)
	require.NoError(t, err)
	require.Equal(t, int64(5), v, "live-0 now holds its entry and the 4 claimed")
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(5), n, "5 requeued copies; the originals deleted, the tombstone acknowledged")

	clients, err := rdb.ClientList(ctx).Result()
	require.NoError(t, err)
	require.Contains(t, clients, "name=pelwarden", "pelwarden's connections are named")
	require.Contains(t, clients, "user=pelwarden", "and authenticated as the ACL user")
	p.stop() // releases the leases, too
	denied, err := rdb.Do(ctx, "ACL", "LOG").Slice()
	require.NoError(t, err)
	require.Empty(t, denied, "no command pelwarden ran was denied: %v", denied)
}

// requireWakerPushes checks StreamIsActive's push path on two streams: an
// empty group is not active, and an XADD wakes the blocked XREAD at once.
// The second stream is armed while the first one's XREAD blocks, which
// interrupts it with CLIENT UNBLOCK. The streams' names start with prefix.
func requireWakerPushes(t *testing.T, p *pelwarden, rdb redis.Cmdable, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{prefix + "idle", prefix + "idle-too"} {
		redistest.CreateGroup(t, rdb, name, "workers")
		stream, err := p.client.StreamIsActive(ctx, ref(map[string]string{"stream": name, "consumerGroup": "workers", "lagCount": "1"}))
		require.NoError(t, err)
		first, err := stream.Recv()
		require.NoError(t, err)
		require.False(t, first.GetResult())
		time.Sleep(50 * time.Millisecond) // let the waker block on what is armed so far
		defer func() { redistest.AddJobs(t, rdb, name, "", 1); requireTrue(t, stream) }()
	}
}

func requireTrue(t *testing.T, stream externalscaler.ExternalScaler_StreamIsActiveClient) {
	t.Helper()
	for {
		r, err := stream.Recv()
		require.NoError(t, err, "a true push after the XADD")
		if r.GetResult() {
			return
		}
	}
}

// ghostsGone reports what is left of the ghosts: none pending, and the
// ghost consumer deleted from both groups.
func ghostsGone(ctx context.Context, rdb *redis.Client) error {
	for _, stream := range []string{"jobs", "orders"} {
		consumers, err := rdb.XInfoConsumers(ctx, stream, "workers").Result()
		if err != nil {
			return err
		}
		for _, c := range consumers {
			if c.Name == "ghost" {
				return fmt.Errorf("%s: ghost still there holding %d", stream, c.Pending)
			}
		}
	}
	return nil
}

// TestRedisCredentialProblemsAreUnavailableNotZero: pelwarden that cannot
// log in to Redis answers KEDA with an error naming the cause, and reports
// not ready, instead of a zero that would scale workers away.
func TestRedisCredentialProblemsAreUnavailableNotZero(t *testing.T) {
	t.Parallel()
	r := startSecureRedis(t)
	redistest.CreateGroup(t, r.rdb, "jobs", "workers")
	redistest.AddJobs(t, r.rdb, "jobs", "", 3)
	redistest.Read(t, r.rdb, "jobs", "workers", "w-0", 3)
	tests := map[string]struct {
		tune func(c *config.Config)
		want string // a regexp: what the error says
	}{
		"wrong password": {func(c *config.Config) {}, "WRONGPASS"},
		"unknown user":   {func(c *config.Config) { c.Redis[0].Username = "nobody" }, "WRONGPASS"},
		"no client certificate": {func(c *config.Config) {
			c.Redis[0].TLS.CertFile, c.Redis[0].TLS.KeyFile = "", ""
			// Redis refuses after the client's TLS 1.3 handshake is done:
			// its alert, or its closed connection, may be read first.
		}, "certificate required|broken pipe|connection reset"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			wrong := filepath.Join(t.TempDir(), "password")
			require.NoError(t, os.WriteFile(wrong, []byte("not-the-password"), 0o600))
			cfg := r.config(t, wrong)
			// Room for go-redis's retries, so the error is Redis's answer
			// rather than pelwarden's deadline.
			cfg.Scaler.RequestTimeout = 3 * time.Second
			tt.tune(&cfg)
			p := runPelwarden(t, cfg, insecure.NewCredentials())
			ctx := context.Background()

			_, err := metric(ctx, t, p.client, map[string]string{"stream": "jobs", "consumerGroup": "workers"})
			require.Equal(t, codes.Unavailable, status.Code(err), "an error, never a zero: %v", err)
			require.Regexp(t, tt.want, status.Convert(err).Message())
			_, err = p.client.IsActive(ctx, ref(map[string]string{"stream": "jobs", "consumerGroup": "workers"}))
			require.Equal(t, codes.Unavailable, status.Code(err), "IsActive too: %v", err)

			eventually(t, 5*time.Second, func() error {
				resp, err := http.Get("http://" + p.app.HTTPAddr() + "/readyz")
				if err != nil {
					return err
				}
				defer func() { _ = resp.Body.Close() }()
				body := make([]byte, 512)
				n, _ := resp.Body.Read(body)
				if resp.StatusCode != http.StatusServiceUnavailable || !regexp.MustCompile(tt.want).Match(body[:n]) {
					return fmt.Errorf("/readyz %d %q, want 503 naming %s", resp.StatusCode, body[:n], tt.want)
				}
				return nil
			})
			health, err := healthpb.NewHealthClient(p.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "externalscaler.ExternalScaler"})
			require.NoError(t, err)
			require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, health.GetStatus())
		})
	}
}
