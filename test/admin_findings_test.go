package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// TestFindingsThroughTheAdminAPI builds a group with a tombstone, a
// bouncing entry, a NULL lag and a name two connections read under, and
// asks pelwarden for its findings over gRPC.
func TestFindingsThroughTheAdminAPI(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 10)
	redistest.Read(t, rdb, "jobs", "workers", "alpha", 3)
	redistest.Read(t, rdb, "jobs", "workers", "beta", 3)
	alpha, beta := pendingIDs(t, rdb, "alpha"), pendingIDs(t, rdb, "beta")
	require.NoError(t, rdb.XDel(ctx, "jobs", alpha[0]).Err(), "a pending entry deleted from the stream is a tombstone")
	for range 3 { // each XCLAIM counts a delivery
		require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "jobs", Group: "workers", Consumer: "beta", Messages: beta[:1]}).Err())
	}
	unread, err := rdb.XRevRangeN(ctx, "jobs", "+", "-", 1).Result()
	require.NoError(t, err)
	require.NoError(t, rdb.XDel(ctx, "jobs", unread[0].ID).Err(), "a deletion in the unread range makes the lag NULL")

	p, admin := startAdmin(t, srv.Addr())
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "ghostIdleSeconds": "300"}
	_, err = metric(ctx, t, p.client, md) // registers the target, as a KEDA poll does
	require.NoError(t, err)

	// Two connections read under one name while the sample runs.
	readCtx, stopReading := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 2 {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 1})
		wg.Go(func() {
			defer c.Close()
			for readCtx.Err() == nil {
				_ = c.XReadGroup(readCtx, &redis.XReadGroupArgs{Group: "workers", Consumer: "shared", Streams: []string{"jobs", ">"}, Count: 1, Block: 20 * time.Millisecond}).Err()
			}
		})
	}
	_, err = admin.Findings(ctx, &pelwardenv1.FindingsRequest{Target: jobsRef, SampleMs: 100})
	require.Equal(t, codes.Unauthenticated, status.Code(err), "a MONITOR sample needs credentials: %v", err)
	res, err := admin.Findings(authed(), &pelwardenv1.FindingsRequest{Target: jobsRef, SampleMs: 600})
	stopReading()
	wg.Wait()
	require.NoError(t, err)

	got := map[pelwardenv1.FindingKind][]string{}
	for _, f := range res.GetFindings() {
		got[f.GetKind()] = append(got[f.GetKind()], f.GetConsumer())
		require.NotEmpty(t, f.GetDetail())
		require.Equal(t, "jobs", f.GetTarget().GetStream())
	}
	require.Equal(t, []string{"alpha"}, got[pelwardenv1.FindingKind_FINDING_KIND_TOMBSTONE], "findings: %v", res.GetFindings())
	require.Equal(t, []string{"beta"}, got[pelwardenv1.FindingKind_FINDING_KIND_BOUNCING])
	require.Equal(t, []string{"shared"}, got[pelwardenv1.FindingKind_FINDING_KIND_SHARED_NAME])
	require.Len(t, got[pelwardenv1.FindingKind_FINDING_KIND_NULL_LAG], 1)

	_, err = admin.Findings(authed(), &pelwardenv1.FindingsRequest{Target: jobsRef, SampleMs: -1})
	require.ErrorContains(t, err, "sample_ms")
	res, err = admin.Findings(ctx, &pelwardenv1.FindingsRequest{Target: jobsRef})
	require.NoError(t, err, "findings without a sample are open")
	require.NotEmpty(t, res.GetFindings())
}
