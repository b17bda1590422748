package e2e

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
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

const (
	workerToken  = "e2e-worker-token-0123456789"
	workerPrefix = "spiffe://e2e.local/pelwarden/worker/"
)

func bearer(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
}

// operatorCalls are the mutating calls only the operator may make, on
// consumer "stuck", which holds entries long idle.
func operatorCalls(admin pelwardenv1.AdminClient) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"Reclaim": func(ctx context.Context) error {
			_, err := admin.Reclaim(ctx, &pelwardenv1.ReclaimRequest{Target: jobsRef, Selector: &pelwardenv1.ReclaimRequest_Consumer{Consumer: "stuck"}})
			return err
		},
		"Reclaim force": func(ctx context.Context) error {
			_, err := admin.Reclaim(ctx, &pelwardenv1.ReclaimRequest{Target: jobsRef, Selector: &pelwardenv1.ReclaimRequest_Consumer{Consumer: "stuck"}, Force: true})
			return err
		},
		"DeleteConsumer": func(ctx context.Context) error {
			_, err := admin.DeleteConsumer(ctx, &pelwardenv1.DeleteConsumerRequest{Target: jobsRef, Consumer: "idle"})
			return err
		},
	}
}

func TestAWorkerTokenMayDeregisterAndNothingElse(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 6)
	redistest.Read(t, rdb, "jobs", "workers", "stuck", 3)
	redistest.Read(t, rdb, "jobs", "workers", "leaving", 3)
	require.NoError(t, rdb.XGroupCreateConsumer(context.Background(), "jobs", "workers", "idle").Err())
	time.Sleep(300 * time.Millisecond) // past entryStaleSeconds: only the credential stands in the way
	dir := t.TempDir()
	operatorFile, workerFile := filepath.Join(dir, "operator"), filepath.Join(dir, "worker")
	require.NoError(t, os.WriteFile(operatorFile, []byte(adminToken), 0o600))
	require.NoError(t, os.WriteFile(workerFile, []byte(workerToken), 0o600))
	p := startPelwarden(t, srv.Addr(), func(c *config.Config) {
		c.Admin.TokenFile, c.Admin.WorkerTokenFile = operatorFile, workerFile
		c.Hygiene.Targets = []map[string]string{hygieneTarget("ghostIdleSeconds", "3600")}
	})
	admin := pelwardenv1.NewAdminClient(p.conn)

	before := readBooks(t, rdb)
	for name, call := range operatorCalls(admin) {
		err := call(bearer(workerToken))
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", name, err)
		require.Contains(t, status.Convert(err).Message(), "allows only Deregister", name)
		require.Equal(t, before, readBooks(t, rdb), "%s with the worker token changed nothing", name)
	}

	res, err := admin.Deregister(bearer(workerToken), &pelwardenv1.DeregisterRequest{Target: jobsRef, Consumer: "leaving"})
	require.NoError(t, err)
	require.Equal(t, int64(3), res.GetRequeued())
	require.True(t, res.GetConsumerDeleted())
	require.Len(t, pendingIDs(t, rdb, "stuck"), 3, "the other worker's entries stay its own")

	err = operatorCalls(admin)["Reclaim force"](bearer(adminToken))
	require.NoError(t, err, "the operator's token keeps everything")
	require.Empty(t, pendingIDs(t, rdb, "stuck"))
}

func TestAWorkerCertificateMayDeregisterOnlyTheConsumerItNames(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 4)
	redistest.Read(t, rdb, "jobs", "workers", "worker-a", 2)
	redistest.Read(t, rdb, "jobs", "workers", "worker-b", 2)

	ca := tlstest.NewCA(t, "pelwarden-ca")
	keda := ca.Client(t, "keda-operator")
	workerA := ca.ClientWithSANs(t, "worker-a", nil, workerPrefix+"worker-a")
	secret := tlstest.NewSecretDir(t, tlstest.ServerFiles(ca.Server(t), ca))
	cfg := testConfig(srv.Addr())
	cfg.GRPC.TLS = config.GRPCTLS{
		CertFile: secret.Path(tlstest.CertKey), KeyFile: secret.Path(tlstest.KeyKey), ClientCAFile: secret.Path(tlstest.CAKey),
		ReloadInterval: time.Second, MinVersion: "1.2",
	}
	cfg.Admin = config.Admin{WorkerIdentityPrefix: workerPrefix}
	cfg.Hygiene.Targets = []map[string]string{hygieneTarget("ghostIdleSeconds", "3600")}
	p := runPelwarden(t, cfg, kedaCreds(t, ca.CertPEM, keda.CertPEM, keda.KeyPEM))
	conn, err := grpc.NewClient(p.app.GRPCAddr(), grpc.WithTransportCredentials(kedaCreds(t, ca.CertPEM, workerA.CertPEM, workerA.KeyPEM)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	admin := pelwardenv1.NewAdminClient(conn)
	ctx := context.Background()

	before := readBooks(t, rdb)
	_, err = admin.Deregister(ctx, &pelwardenv1.DeregisterRequest{Target: jobsRef, Consumer: "worker-b"})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), `may deregister consumer "worker-a" only`)
	require.Equal(t, before, readBooks(t, rdb), "worker-b's PEL and everything else unchanged")
	for name, call := range operatorCalls(admin) {
		err := call(ctx)
		require.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", name, err)
		require.Equal(t, before, readBooks(t, rdb), "%s with a worker certificate changed nothing", name)
	}

	impostor := ca.Client(t, workerPrefix+"worker-b") // the name in the common name, not a URI SAN
	conn, err = grpc.NewClient(p.app.GRPCAddr(), grpc.WithTransportCredentials(kedaCreds(t, ca.CertPEM, impostor.CertPEM, impostor.KeyPEM)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = pelwardenv1.NewAdminClient(conn).Deregister(ctx, &pelwardenv1.DeregisterRequest{Target: jobsRef, Consumer: "worker-b"})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "only a URI SAN names a worker: %v", err)
	require.Equal(t, before, readBooks(t, rdb))

	res, err := admin.Deregister(ctx, &pelwardenv1.DeregisterRequest{Target: jobsRef, Consumer: "worker-a"})
	require.NoError(t, err)
	require.Equal(t, int64(2), res.GetRequeued())
	require.True(t, res.GetConsumerDeleted())
	require.Len(t, pendingIDs(t, rdb, "worker-b"), 2)
}

func TestAnOutOfRangeStreamIDIsInvalidArgumentAndChangesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 2)
	_, admin := startAdmin(t, srv.Addr(), hygieneTarget())
	before := readBooks(t, rdb)
	for _, id := range []string{"99999999999999999999-0", "1-18446744073709551616", strings.Repeat("9", 30) + "-1"} {
		_, err := admin.Reclaim(authed(), &pelwardenv1.ReclaimRequest{Target: jobsRef, Force: true,
			Selector: &pelwardenv1.ReclaimRequest_Ids{Ids: &pelwardenv1.EntryIds{Ids: []string{id}}}})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%s: %v", id, err)
		require.Contains(t, status.Convert(err).Message(), "ids.ids[0]")
	}
	require.Equal(t, before, readBooks(t, rdb))
}

func TestAnOutOfRangePageTokenIsInvalidArgument(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 2)
	_, admin := startAdmin(t, srv.Addr(), hygieneTarget())
	token := base64.RawURLEncoding.EncodeToString([]byte("99999999999999999999-0"))
	_, err := admin.ListPending(context.Background(), &pelwardenv1.ListPendingRequest{Target: jobsRef, PageToken: token})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "page_token")
}
