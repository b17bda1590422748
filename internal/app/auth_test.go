package app

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/admin"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/hygiene"
	"github.com/pelwarden/pelwarden/internal/liveness"
	pwmetadata "github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
	"github.com/pelwarden/pelwarden/internal/tlstest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

const (
	token      = "correct-horse-battery-staple"
	otherToken = "a-token-someone-guessed-wrong"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// serveAdmin runs the real Admin server over a real Redis behind the auth
// interceptor, with TLS when creds is set, and returns its address.
func serveAdmin(t *testing.T, cfg config.Admin, creds credentials.TransportCredentials) string {
	t.Helper()
	addr, _ := serveAdminOn(t, cfg, creds)
	return addr
}

// serveAdminOn is serveAdmin that also returns a client of its Redis.
func serveAdminOn(t *testing.T, cfg config.Admin, creds credentials.TransportCredentials) (string, *redis.Client) {
	t.Helper()
	rdb := redistest.Start(t)
	c := rdb.Client(t)
	redistest.CreateGroup(t, c, "jobs", "workers")
	conns, err := redisx.Open([]config.Redis{config.DefaultRedis("default", rdb.Addr())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	reader := &redisx.Reader{Conns: conns, LagEstimateCap: 100}
	view := liveness.NewView(reader.Fetch, liveness.ViewOptions{Freshness: time.Second, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 10})

	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(newAdminAuth(cfg, discard).unary)}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	srv := grpc.NewServer(opts...)
	engine, err := reclaim.New(reclaim.Options{View: view, BatchSize: 100}, prometheus.NewRegistry())
	require.NoError(t, err)
	// jobs/workers is a group the hygiene loop looks after, as
	// hygiene.targets would make it: Deregister acts on no other.
	lookedAfter := func(conn, stream, group string) (hygiene.Target, bool) {
		g := liveness.GroupRef{Conn: conn, Stream: stream, Group: group}
		return hygiene.Target{Target: liveness.Target{GroupRef: g}, Hygiene: pwmetadata.DefaultHygiene(stream)},
			g == liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}
	}
	adminServer, err := admin.New(admin.Options{View: view, Conns: conns, Engine: engine, RequestTimeout: time.Second, Hygiene: lookedAfter})
	require.NoError(t, err)
	pelwardenv1.RegisterAdminServer(srv, adminServer)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), c
}

func dial(t *testing.T, addr string, creds credentials.TransportCredentials) pelwardenv1.AdminClient {
	t.Helper()
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return pelwardenv1.NewAdminClient(conn)
}

// deleteConsumer calls a mutating RPC; on a group without that consumer it
// changes nothing and answers deleted=false once authorized.
func deleteConsumer(client pelwardenv1.AdminClient, authorization string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if authorization != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", authorization)
	}
	res, err := client.DeleteConsumer(ctx, &pelwardenv1.DeleteConsumerRequest{
		Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "workers"}, Consumer: "nobody",
	})
	if err == nil && res.GetDeleted() {
		return status.Error(codes.Internal, "deleted a consumer that does not exist")
	}
	return err
}

func tokenFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte(content+"\n"), 0o600))
	return path
}

func TestMutatingAdminCallsNeedTheBearerToken(t *testing.T) {
	t.Parallel()
	addr := serveAdmin(t, config.Admin{TokenFile: tokenFile(t, token)}, nil)
	client := dial(t, addr, nil)
	tests := map[string]struct {
		authorization string
		want          codes.Code
		message       string
	}{
		"no credentials":         {"", codes.Unauthenticated, "authorization: Bearer <token>"},
		"not a bearer token":     {"Basic dXNlcjpwYXNz", codes.Unauthenticated, "must be `Bearer <token>`"},
		"an empty bearer token":  {"Bearer ", codes.Unauthenticated, "must be `Bearer <token>`"},
		"the wrong token":        {"Bearer " + otherToken, codes.PermissionDenied, "does not match admin.tokenFile"},
		"a prefix of the token":  {"Bearer " + token[:10], codes.PermissionDenied, "does not match"},
		"the token":              {"Bearer " + token, codes.OK, ""},
		"the scheme in any case": {"bearer " + token, codes.OK, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := deleteConsumer(client, tc.authorization)
			require.Equal(t, tc.want, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), tc.message)
		})
	}
	_, err := client.ListTargets(context.Background(), &pelwardenv1.ListTargetsRequest{})
	require.NoError(t, err, "read RPCs need no credentials")
}

func TestWithNoCredentialConfiguredMutatingCallsAreRefused(t *testing.T) {
	t.Parallel()
	client := dial(t, serveAdmin(t, config.Admin{}, nil), nil)
	for _, authorization := range []string{"", "Bearer " + token} {
		err := deleteConsumer(client, authorization)
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), "set admin.tokenFile (--admin-token-file)")
	}
}

func TestARotatedTokenFileTakesEffectWithoutARestart(t *testing.T) {
	t.Parallel()
	path := tokenFile(t, token)
	client := dial(t, serveAdmin(t, config.Admin{TokenFile: path}, nil), nil)
	require.NoError(t, deleteConsumer(client, "Bearer "+token))
	// Kubernetes swaps a Secret's files: a new file takes the name.
	next := path + ".new"
	require.NoError(t, os.WriteFile(next, []byte(otherToken), 0o600))
	require.NoError(t, os.Rename(next, path))
	require.Equal(t, codes.PermissionDenied, status.Code(deleteConsumer(client, "Bearer "+token)), "the old token is gone")
	require.NoError(t, deleteConsumer(client, "Bearer "+otherToken))
	require.NoError(t, os.Remove(path))
	require.Equal(t, codes.Unavailable, status.Code(deleteConsumer(client, "Bearer "+otherToken)), "an unreadable token file fails closed")
}

// TestMutatingAdminCallsAcceptAnAllowedClientCertificate runs the gRPC
// server over mutual TLS: a verified client certificate is a credential
// when its common name, DNS SAN or URI SAN is listed.
func TestMutatingAdminCallsAcceptAnAllowedClientCertificate(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t, "test CA")
	// The same name on another key: the client sends its certificate, which
	// only this server's check can refuse.
	stranger := tlstest.NewCA(t, "test CA")
	serverCreds := credentials.NewTLS(&tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{ca.Server(t, "127.0.0.1").TLS(t)},
		ClientCAs:    ca.Pool(),
		// A client without a certificate may still use a bearer token.
		ClientAuth: tls.VerifyClientCertIfGiven,
	})
	addr := serveAdmin(t, config.Admin{
		TokenFile:               tokenFile(t, token),
		AllowedClientIdentities: []string{"ops", "deployer.jobs.svc", "spiffe://cluster.local/ns/jobs/sa/worker"},
	}, serverCreds)
	clientWith := func(pairs ...tlstest.Pair) pelwardenv1.AdminClient {
		return dial(t, addr, credentials.NewTLS(ca.ClientConfig(t, pairs...)))
	}
	tests := map[string]struct {
		client        pelwardenv1.AdminClient
		authorization string
		want          codes.Code
		message       string
	}{
		"allowed by common name":          {clientWith(ca.ClientWithSANs(t, "ops", nil)), "", codes.OK, ""},
		"allowed by DNS SAN":              {clientWith(ca.ClientWithSANs(t, "someone", []string{"deployer.jobs.svc"})), "", codes.OK, ""},
		"allowed by URI SAN":              {clientWith(ca.ClientWithSANs(t, "", nil, "spiffe://cluster.local/ns/jobs/sa/worker")), "", codes.OK, ""},
		"an unlisted identity":            {clientWith(ca.ClientWithSANs(t, "intruder", []string{"evil.example"})), "", codes.PermissionDenied, "intruder, evil.example are not in admin.allowedClientIdentities"},
		"an unlisted identity with token": {clientWith(ca.ClientWithSANs(t, "intruder", nil)), "Bearer " + token, codes.OK, ""},
		"TLS without a certificate":       {clientWith(), "", codes.Unauthenticated, "needs credentials"},
		"TLS with the token":              {clientWith(), "Bearer " + token, codes.OK, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := deleteConsumer(tc.client, tc.authorization)
			require.Equal(t, tc.want, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), tc.message)
		})
	}
	// A certificate from another CA never reaches the interceptor: the
	// handshake refuses it, so an allowed name on it proves nothing.
	err := deleteConsumer(clientWith(stranger.ClientWithSANs(t, "ops", nil)), "")
	require.Error(t, err)
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
}
