package e2e

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// Secrets an attack plants beside the victim's streams: a string that
// is no Unix time, and a number that would pass for one. Neither may
// reach a caller without a credential, the log or /metrics.
const (
	secretKey     = "secret:db-password"
	secretValue   = "Sup3r-S3cret-Passw0rd!"
	secretPINKey  = "secret:pin"
	secretPIN     = "1747396800123"
	secretHashKey = "secret:session"
)

// plantSecrets writes the secrets into Redis.
func plantSecrets(t *testing.T, rdb redis.Cmdable) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, secretKey, secretValue, 0).Err())
	require.NoError(t, rdb.Set(ctx, secretPINKey, secretPIN, 0).Err())
	require.NoError(t, rdb.HSet(ctx, secretHashKey, "token", secretValue).Err())
}

// stranger is a pelwarden whose log the test keeps, with the clients an
// uncredentialed caller has: KEDA's and the Admin API's.
type stranger struct {
	*pelwarden
	admin pelwardenv1.AdminClient
	logs  *logLines
	// answers collects every RPC answer the test saw, as JSON.
	answers []string
}

// startStranger runs pelwarden with cfg, its log kept at debug level.
func startStranger(t *testing.T, cfg config.Config, opts ...app.Option) *stranger {
	t.Helper()
	logs := newLogLines(t)
	cfg.Log.Level = "debug"
	a, err := app.New(cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	p := &pelwarden{app: a, client: externalscaler.NewExternalScalerClient(conn), conn: conn}
	var stopped bool
	p.stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = conn.Close()
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("pelwarden did not stop within 10s")
		}
	}
	t.Cleanup(p.stop)
	return &stranger{pelwarden: p, admin: pelwardenv1.NewAdminClient(conn), logs: logs}
}

// saw records an RPC answer for requireNoSecret.
func (s *stranger) saw(t *testing.T, m proto.Message) {
	t.Helper()
	if m == nil {
		return
	}
	b, err := protojson.Marshal(m)
	require.NoError(t, err)
	s.answers = append(s.answers, string(b))
}

// readAll asks every open read RPC about every target pelwarden knows,
// and records the answers.
func (s *stranger) readAll(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	list, err := s.admin.ListTargets(ctx, &pelwardenv1.ListTargetsRequest{})
	require.NoError(t, err)
	s.saw(t, list)
	for _, tg := range list.GetTargets() {
		ref := &pelwardenv1.TargetRef{Redis: tg.GetRedis(), Stream: tg.GetStream(), Group: tg.GetGroup()}
		if d, err := s.admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: ref}); err == nil {
			s.saw(t, d)
		}
		if f, err := s.admin.Findings(ctx, &pelwardenv1.FindingsRequest{Target: ref}); err == nil {
			s.saw(t, f)
		}
		if pl, err := s.admin.Plan(ctx, &pelwardenv1.PlanRequest{Target: ref}); err == nil {
			s.saw(t, pl)
		}
	}
}

// requireNoSecret reads every open RPC, then checks that no planted
// secret appears in any answer the test saw, in the log or on /metrics.
func (s *stranger) requireNoSecret(t *testing.T) {
	t.Helper()
	s.readAll(t)
	metrics := scrape(t, s.app.HTTPAddr())
	logs := strings.Join(s.logs.lines(), "\n")
	for _, secret := range []string{secretValue, secretPIN} {
		for i, a := range s.answers {
			require.NotContains(t, a, secret, "RPC answer %d shows a planted secret", i)
		}
		require.NotContains(t, logs, secret, "the log shows a planted secret")
		require.NotContains(t, metrics, secret, "/metrics shows a planted secret")
	}
}

// otherKeys is every key that is neither a stream the books read nor
// pelwarden's own lease, with its type and, for strings and hashes, its
// value: an attack must leave them as they were.
func otherKeys(t *testing.T, rdb *redis.Client, skip ...string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	out := map[string]string{}
	for _, k := range keys {
		if strings.HasPrefix(k, "pelwarden:lease:") || slices.ContainsFunc(skip, func(p string) bool { return strings.HasPrefix(k, p) }) {
			continue
		}
		typ, err := rdb.Type(ctx, k).Result()
		require.NoError(t, err)
		switch typ {
		case "string":
			v, err := rdb.Get(ctx, k).Result()
			require.NoError(t, err)
			out[k] = typ + " " + v
		case "hash":
			v, err := rdb.HGetAll(ctx, k).Result()
			require.NoError(t, err)
			fields := make([]string, 0, len(v))
			for f, x := range v {
				fields = append(fields, f+"="+x)
			}
			slices.Sort(fields)
			out[k] = typ + " " + strings.Join(fields, ",")
		default:
			out[k] = typ
		}
	}
	return out
}
