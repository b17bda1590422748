package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/tlstest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// TestMutatingCallsOverMutualTLSNeedAnAllowedIdentity runs pelwarden's own
// gRPC listener with a client CA: every client presents a certificate, and
// KEDA's may read but not mutate; an operator's listed identity may.
func TestMutatingCallsOverMutualTLSNeedAnAllowedIdentity(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 2)
	redistest.Read(t, rdb, "jobs", "workers", "leaving", 2)

	ca := tlstest.NewCA(t, "pelwarden-ca")
	keda, ops := ca.Client(t, "keda-operator"), ca.Client(t, "ops-admin")
	secret := tlstest.NewSecretDir(t, tlstest.ServerFiles(ca.Server(t), ca))
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(adminToken), 0o600))
	cfg := testConfig(srv.Addr())
	cfg.GRPC.TLS = config.GRPCTLS{
		CertFile: secret.Path(tlstest.CertKey), KeyFile: secret.Path(tlstest.KeyKey), ClientCAFile: secret.Path(tlstest.CAKey),
		ReloadInterval: time.Second, MinVersion: "1.2",
	}
	cfg.Admin = config.Admin{TokenFile: tokenFile, AllowedClientIdentities: []string{"ops-admin"}}
	cfg.Hygiene.Targets = []map[string]string{hygieneTarget("ghostIdleSeconds", "3600")}
	p := runPelwarden(t, cfg, kedaCreds(t, ca.CertPEM, keda.CertPEM, keda.KeyPEM))

	as := func(pair tlstest.Pair) pelwardenv1.AdminClient {
		conn, err := grpc.NewClient(p.app.GRPCAddr(), grpc.WithTransportCredentials(kedaCreds(t, ca.CertPEM, pair.CertPEM, pair.KeyPEM)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		return pelwardenv1.NewAdminClient(conn)
	}
	deregister := func(ctx context.Context, c pelwardenv1.AdminClient) (*pelwardenv1.DeregisterResponse, error) {
		return c.Deregister(ctx, &pelwardenv1.DeregisterRequest{Target: jobsRef, Consumer: "leaving"})
	}
	ctx := context.Background()

	kedaAdmin := as(keda)
	_, err := kedaAdmin.ListTargets(ctx, &pelwardenv1.ListTargetsRequest{})
	require.NoError(t, err, "reading needs only the TLS handshake")
	_, err = deregister(ctx, kedaAdmin)
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "keda-operator are not in admin.allowedClientIdentities")
	require.Len(t, pendingIDs(t, rdb, "leaving"), 2, "a refused call changes nothing")

	res, err := deregister(ctx, as(ops))
	require.NoError(t, err)
	require.Equal(t, int64(2), res.GetRequeued())
	require.True(t, res.GetConsumerDeleted())

	withToken := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+adminToken)
	res, err = deregister(withToken, kedaAdmin)
	require.NoError(t, err, "the token works over TLS whatever the certificate")
	require.False(t, res.GetConsumerDeleted(), "already gone")
}
