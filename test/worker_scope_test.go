package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// TestAWorkerCredentialReachesOnlyItsOwnWork: pelwarden looks after
// jobs/workers and payments/billing; the jobs stream also has a group
// nothing names, audit, whose consumer holds an entry, and pelwarden's
// dead-letter holder holds one in jobs/workers. With the workers' token,
// and with a token scoped to jobs*, a stranger tries Deregister on each
// thing it should not reach. Every call is refused, every stream, PEL and
// consumer is as it was, no series or event names what was refused, and
// no planted secret leaves. The scoped token still deregisters a consumer
// of its own stream.
func TestAWorkerCredentialReachesOnlyItsOwnWork(t *testing.T) {
	t.Parallel()
	srv, rdb := victim(t)
	ctx := context.Background()
	require.NoError(t, rdb.XGroupCreate(ctx, "jobs", "audit", "0").Err())
	redistest.Read(t, rdb, "jobs", "audit", "auditor", 1)
	redistest.AddJobs(t, rdb, "jobs", "held-", 1)
	redistest.Read(t, rdb, "jobs", "workers", liveness.DeadLetterHolder, 1)
	plantSecrets(t, rdb)
	before, keys := readBooks(t, rdb), otherKeys(t, rdb, "hb:")
	auditBefore := rdb.XPending(ctx, "jobs", "audit").Val()

	dir := t.TempDir()
	workerFile, jobsFile := filepath.Join(dir, "worker"), filepath.Join(dir, "jobs")
	require.NoError(t, os.WriteFile(workerFile, []byte(workerToken), 0o600))
	const jobsToken = "e2e-jobs-worker-token-0123456789"
	require.NoError(t, os.WriteFile(jobsFile, []byte(jobsToken), 0o600))
	cfg := testConfig(srv.Addr())
	cfg.Admin = config.Admin{WorkerTokenFile: workerFile, WorkerTokens: []config.WorkerToken{{TokenFile: jobsFile, Streams: []string{"jobs*"}}}}
	// Thresholds no consumer reaches: only a Deregister could move anything.
	cfg.Hygiene.Targets = []map[string]string{hygieneTarget("ghostIdleSeconds", "3600"),
		{"stream": "payments", "consumerGroup": "billing", "reclaim": "requeue", "ghostIdleSeconds": "3600"}}
	cfg.Hygiene.ScanInterval, cfg.Hygiene.LeaseTTL = 200*time.Millisecond, time.Second
	s := startStranger(t, cfg)

	attacks := map[string]struct {
		token    string
		req      *pelwardenv1.DeregisterRequest
		code     codes.Code
		mentions string
	}{
		"a group nothing looks after": {workerToken, &pelwardenv1.DeregisterRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "audit"}, Consumer: "auditor"},
			codes.NotFound, "Deregister acts only on groups listed under hygiene.targets or enrolled by a trigger"},
		"a group nothing looks after, on a stream the scoped token reaches": {jobsToken, &pelwardenv1.DeregisterRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "audit"}, Consumer: "auditor"},
			codes.NotFound, "pelwarden does not look after"},
		"the dead-letter holder": {workerToken, &pelwardenv1.DeregisterRequest{Target: jobsRef, Consumer: liveness.DeadLetterHolder},
			codes.InvalidArgument, "reserved holder"},
		"another application's group, outside the scoped token's globs": {jobsToken, &pelwardenv1.DeregisterRequest{Target: &pelwardenv1.TargetRef{Stream: "payments", Group: "billing"}, Consumer: "biller"},
			codes.PermissionDenied, "may deregister consumers on streams jobs* only"},
	}
	for name, a := range attacks {
		res, err := s.admin.Deregister(bearer(a.token), a.req)
		s.saw(t, res)
		require.Equal(t, a.code, status.Code(err), "%s: %v", name, err)
		require.Contains(t, status.Convert(err).Message(), a.mentions, name)
		require.Equal(t, before, readBooks(t, rdb), "%s: refused, and nothing changed", name)
		require.Equal(t, auditBefore, rdb.XPending(ctx, "jobs", "audit").Val(), "%s: the audit group's PEL is as it was", name)
	}
	require.Equal(t, keys, otherKeys(t, rdb, "hb:"))

	metrics := scrape(t, s.app.HTTPAddr())
	require.NotContains(t, metrics, `group="audit"`, "a refused call leaves no series")
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "pelwarden_hygiene_actions_total") || strings.HasPrefix(line, "pelwarden_hygiene_skipped_total") {
			require.Fail(t, "a refused Deregister counted an action or a skip", line)
		}
	}
	d, err := s.admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	require.Empty(t, d.GetRecentEvents(), "a refused Deregister publishes no event")
	s.requireNoSecret(t)

	res, err := s.admin.Deregister(bearer(jobsToken), &pelwardenv1.DeregisterRequest{Target: jobsRef, Consumer: "ghost-0"})
	require.NoError(t, err, "the scoped token deregisters a consumer of its own stream")
	require.Equal(t, int64(3), res.GetRequeued())
	require.True(t, res.GetConsumerDeleted())
}
