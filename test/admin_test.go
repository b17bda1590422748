package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

const adminToken = "e2e-admin-token-0123456789"

var jobsRef = &pelwardenv1.TargetRef{Stream: "jobs", Group: "workers"}

// startAdmin runs pelwarden with an admin token file, batches of 10 so
// that paging shows, and the given hygiene targets.
func startAdmin(t *testing.T, redisAddr string, targets ...map[string]string) (*pelwarden, pelwardenv1.AdminClient) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte(adminToken+"\n"), 0o600))
	p := startPelwarden(t, redisAddr, func(c *config.Config) {
		c.Admin.TokenFile = file
		c.Hygiene.BatchSize = 10
		c.Hygiene.ScanInterval, c.Hygiene.LeaseTTL = 200*time.Millisecond, time.Second
		c.Hygiene.Targets = targets
	})
	return p, pelwardenv1.NewAdminClient(p.conn)
}

// hygieneTarget is jobs/workers with quick thresholds; kv overrides keys.
func hygieneTarget(kv ...string) map[string]string {
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "reclaim": "requeue", "ghostIdleSeconds": "0.5", "entryStaleSeconds": "0.2"}
	for i := 0; i+1 < len(kv); i += 2 {
		md[kv[i]] = kv[i+1]
	}
	return md
}

func authed() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+adminToken)
}

// pendingIDs lists a consumer's pending ids in order.
func pendingIDs(t *testing.T, rdb *redis.Client, consumer string) []string {
	t.Helper()
	ext, err := rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 10000, Consumer: consumer}).Result()
	require.NoError(t, err)
	ids := make([]string, len(ext))
	for i, e := range ext {
		ids[i] = e.ID
	}
	return ids
}

// jobCopies counts a stream's entries per job field.
func jobCopies(t *testing.T, rdb *redis.Client, stream string) map[string]int {
	t.Helper()
	all, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	require.NoError(t, err)
	out := map[string]int{}
	for _, e := range all {
		out[e.Values["job"].(string)]++
	}
	return out
}

func TestMutatingCallsThroughPelwardenNeedTheToken(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	redistest.CreateGroup(t, srv.Client(t), "jobs", "workers")
	_, admin := startAdmin(t, srv.Addr(), hygieneTarget())
	req := &pelwardenv1.DeregisterRequest{Target: jobsRef, Consumer: "w1"}
	_, err := admin.Deregister(context.Background(), req)
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	wrong := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer not-the-token-at-all")
	_, err = admin.Deregister(wrong, req)
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = admin.Deregister(authed(), req)
	require.NoError(t, err)
}

// TestDeregisterRequeuesEveryEntryOnceAndDeletesTheConsumer: a worker
// shutting down holds 25 entries, three of them delivered twice already;
// with maxDeliveries 2 those go to the dead-letter stream.
func TestDeregisterRequeuesEveryEntryOnceAndDeletesTheConsumer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 25)
	redistest.Read(t, rdb, "jobs", "workers", "w1", 25)
	require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "jobs", Group: "workers", Consumer: "w1", Messages: pendingIDs(t, rdb, "w1")[:3]}).Err())
	_, admin := startAdmin(t, srv.Addr(), hygieneTarget("maxDeliveries", "2"))

	res, err := admin.Deregister(authed(), &pelwardenv1.DeregisterRequest{Target: jobsRef, Consumer: "w1"})
	require.NoError(t, err)
	require.Equal(t, int64(22), res.GetRequeued())
	require.Equal(t, int64(3), res.GetDeadLettered())
	require.True(t, res.GetConsumerDeleted())

	require.Empty(t, pendingIDs(t, rdb, ""), "nothing is left pending")
	copies := jobCopies(t, rdb, "jobs")
	dead := jobCopies(t, rdb, "jobs:dead")
	require.Len(t, copies, 25)
	for job, n := range copies {
		if dead[job] == 1 {
			require.Equal(t, 1, n, "job %s was dead-lettered, not requeued", job)
		} else {
			require.Equal(t, 2, n, "job %s: the acknowledged original and exactly one copy", job)
		}
	}
	require.Len(t, dead, 3)
	consumers, err := rdb.XInfoConsumers(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	require.Empty(t, consumers, "the consumer is gone")
	length := rdb.XLen(ctx, "jobs").Val()

	again, err := admin.Deregister(authed(), &pelwardenv1.DeregisterRequest{Target: jobsRef, Consumer: "w1"})
	require.NoError(t, err, "a second call is harmless")
	require.Zero(t, again.GetRequeued())
	require.Zero(t, again.GetDeadLettered())
	require.False(t, again.GetConsumerDeleted(), "nothing to delete")
	require.Equal(t, length, rdb.XLen(ctx, "jobs").Val(), "a second call writes nothing")

	// A group pelwarden does not look after is refused, even with the
	// operator's token, and nothing of it moves.
	redistest.CreateGroup(t, rdb, "mail", "senders")
	redistest.AddJobs(t, rdb, "mail", "", 2)
	redistest.Read(t, rdb, "mail", "senders", "s1", 2)
	_, err = admin.Deregister(authed(), &pelwardenv1.DeregisterRequest{Target: &pelwardenv1.TargetRef{Stream: "mail", Group: "senders"}, Consumer: "s1"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "Deregister acts only on groups listed under hygiene.targets or enrolled by a trigger")
	require.Equal(t, int64(2), rdb.XPending(ctx, "mail", "senders").Val().Count, "s1 keeps its entries")
	require.Equal(t, int64(2), rdb.XLen(ctx, "mail").Val(), "and nothing was copied")

	_, err = admin.Deregister(authed(), &pelwardenv1.DeregisterRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "nobody"}, Consumer: "w1"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
}

// TestReclaimByIDsReportsEachEntrysOutcome: of four entries a ghost held,
// one was acknowledged since and one taken by a live worker.
func TestReclaimByIDsReportsEachEntrysOutcome(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 4)
	redistest.Read(t, rdb, "jobs", "workers", "ghost", 4)
	ids := pendingIDs(t, rdb, "ghost")
	// dryRun keeps the loop from taking the entries first; it lends the
	// group its thresholds.
	// A stale threshold of a second leaves room for the not-idle case below
	// on a loaded machine.
	_, admin := startAdmin(t, srv.Addr(), hygieneTarget("dryRun", "true", "entryStaleSeconds", "1"))
	time.Sleep(1200 * time.Millisecond) // past ghostIdleSeconds and entryStaleSeconds
	require.NoError(t, rdb.XAck(ctx, "jobs", "workers", ids[1]).Err())
	require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "jobs", Group: "workers", Consumer: "live", Messages: ids[2:3]}).Err())

	byIDs := func(dryRun, force bool, owner string, ids ...string) (*pelwardenv1.ReclaimResponse, error) {
		return admin.Reclaim(authed(), &pelwardenv1.ReclaimRequest{Target: jobsRef, DryRun: dryRun, Force: force,
			Selector: &pelwardenv1.ReclaimRequest_Ids{Ids: &pelwardenv1.EntryIds{Ids: ids, Consumer: owner}}})
	}
	outcomes := func(res *pelwardenv1.ReclaimResponse) map[string]string {
		out := map[string]string{}
		for _, o := range res.GetOutcomes() {
			out[o.GetId()] = o.GetOutcome()
		}
		return out
	}
	want := map[string]string{ids[0]: "requeued", ids[1]: "not-pending", ids[2]: "owner-changed", ids[3]: "requeued"}

	dry, err := byIDs(true, false, "ghost", ids...)
	require.NoError(t, err)
	require.True(t, dry.GetDryRun())
	require.Equal(t, want, outcomes(dry))
	require.Equal(t, []string{ids[0], ids[3]}, pendingIDs(t, rdb, "ghost"), "a dry run changes nothing")

	res, err := byIDs(false, false, "ghost", ids...)
	require.NoError(t, err)
	require.Equal(t, want, outcomes(res))
	require.Equal(t, map[string]int64{"requeued": 2, "not-pending": 1, "owner-changed": 1}, res.GetCounts())
	require.Equal(t, `no longer owned by "ghost"`, res.GetOutcomes()[2].GetDetail())
	require.Empty(t, pendingIDs(t, rdb, "ghost"))
	require.Equal(t, map[string]int{"0": 2, "1": 1, "2": 1, "3": 2}, jobCopies(t, rdb, "jobs"), "one copy of each requeued entry")

	// The live worker's entry: its owner is Alive and there is no hard
	// timeout, so only force takes it, and only once it is stale.
	_, err = byIDs(false, false, "", ids[2])
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), `"live" is Alive`)
	require.Contains(t, status.Convert(err).Message(), "force")
	_, err = admin.Reclaim(authed(), &pelwardenv1.ReclaimRequest{Target: jobsRef, Selector: &pelwardenv1.ReclaimRequest_Consumer{Consumer: "live"}})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	res, err = byIDs(false, true, "", ids[2])
	require.NoError(t, err)
	require.Equal(t, map[string]string{ids[2]: "not-idle"}, outcomes(res), "claimed a moment ago: not stale yet")
	time.Sleep(1100 * time.Millisecond)
	res, err = byIDs(false, true, "", ids[2], ids[1])
	require.NoError(t, err)
	require.Equal(t, map[string]string{ids[2]: "requeued", ids[1]: "not-pending"}, outcomes(res))
}

func TestDeleteConsumerIsRefusedWhileItHoldsEntries(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 3)
	redistest.Read(t, rdb, "jobs", "workers", "holder", 3)
	require.NoError(t, rdb.XGroupCreateConsumer(ctx, "jobs", "workers", "empty").Err())
	_, admin := startAdmin(t, srv.Addr())
	del := func(name string) (*pelwardenv1.DeleteConsumerResponse, error) {
		return admin.DeleteConsumer(authed(), &pelwardenv1.DeleteConsumerRequest{Target: jobsRef, Consumer: name})
	}

	_, err := del("holder")
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "would drop them for good")
	require.Len(t, pendingIDs(t, rdb, "holder"), 3, "its entries are untouched")

	res, err := del("empty")
	require.NoError(t, err)
	require.True(t, res.GetDeleted())
	res, err = del("empty")
	require.NoError(t, err)
	require.False(t, res.GetDeleted(), "no such consumer any more")
	_, err = admin.DeleteConsumer(authed(), &pelwardenv1.DeleteConsumerRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "gone"}, Consumer: "c"})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	_, err = admin.DeleteConsumer(authed(), &pelwardenv1.DeleteConsumerRequest{Target: &pelwardenv1.TargetRef{Redis: "nope", Stream: "jobs", Group: "workers"}, Consumer: "c"})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "target.redis: must name a configured Redis connection (default)")
}
