package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

func TestListPendingPagesCoverEveryEntryExactlyOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 137)
	redistest.Read(t, rdb, "jobs", "workers", "a", 60)
	redistest.Read(t, rdb, "jobs", "workers", "b", 77)
	_, admin := startAdmin(t, srv.Addr())

	all := func(req *pelwardenv1.ListPendingRequest) (map[string]int, int) {
		seen, pages := map[string]int{}, 0
		for {
			res, err := admin.ListPending(context.Background(), req)
			require.NoError(t, err)
			pages++
			for _, e := range res.GetEntries() {
				seen[e.GetId()]++
				require.Equal(t, int64(1), e.GetDeliveries())
				if req.GetConsumer() != "" {
					require.Equal(t, req.GetConsumer(), e.GetConsumer())
				}
			}
			if res.GetNextPageToken() == "" {
				return seen, pages
			}
			req.PageToken = res.GetNextPageToken()
		}
	}
	seen, pages := all(&pelwardenv1.ListPendingRequest{Target: jobsRef, PageSize: 10})
	require.Len(t, seen, 137)
	for id, n := range seen {
		require.Equal(t, 1, n, "entry %s listed once", id)
	}
	require.Equal(t, 14, pages, "13 full pages and a short one; no empty page after it")

	seen, _ = all(&pelwardenv1.ListPendingRequest{Target: jobsRef, Consumer: "a", PageSize: 7})
	require.Len(t, seen, 60)
	seen, _ = all(&pelwardenv1.ListPendingRequest{Target: jobsRef})
	require.Len(t, seen, 137, "the default page size is 100")
	seen, pages = all(&pelwardenv1.ListPendingRequest{Target: jobsRef, MinIdleMs: time.Hour.Milliseconds()})
	require.Empty(t, seen)
	require.Equal(t, 1, pages)

	_, err := admin.ListPending(context.Background(), &pelwardenv1.ListPendingRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "nobody"}})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	_, err = admin.ListPending(context.Background(), &pelwardenv1.ListPendingRequest{Target: jobsRef, PageSize: 20000})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
}

// TestPlanSaysWhatHygieneWouldDoAndChangesNothing: a ghost holding five
// entries, two of them at maxDeliveries; an empty ghost; a live worker.
func TestPlanSaysWhatHygieneWouldDoAndChangesNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 5)
	redistest.Read(t, rdb, "jobs", "workers", "ghost", 5)
	ids := pendingIDs(t, rdb, "ghost")
	for range 2 {
		require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "jobs", Group: "workers", Consumer: "ghost", Messages: ids[:2]}).Err())
	}
	require.NoError(t, rdb.XGroupCreateConsumer(ctx, "jobs", "workers", "empty").Err())
	p, admin := startAdmin(t, srv.Addr(), hygieneTarget("dryRun", "true", "maxDeliveries", "3"))
	time.Sleep(700 * time.Millisecond)
	redistest.AddJobs(t, rdb, "jobs", "", 1)
	redistest.Read(t, rdb, "jobs", "workers", "live", 1)

	res, err := admin.Plan(ctx, &pelwardenv1.PlanRequest{Target: jobsRef})
	require.NoError(t, err)
	require.Contains(t, res.GetHygiene(), "reclaim=requeue entryStaleSeconds=0.2")
	steps := map[string]*pelwardenv1.PlanStep{}
	for _, s := range res.GetSteps() {
		steps[s.GetConsumer()] = s
	}
	require.Len(t, steps, 3)
	require.Equal(t, "requeue", steps["ghost"].GetAction())
	require.Equal(t, pelwardenv1.Verdict_VERDICT_GHOST, steps["ghost"].GetVerdict())
	require.Equal(t, int64(5), steps["ghost"].GetEntries())
	require.Equal(t, int64(2), steps["ghost"].GetDeadLetterEntries())
	require.Contains(t, steps["ghost"].GetReason(), "go to jobs:dead")
	require.Equal(t, "delete-consumer", steps["empty"].GetAction())
	require.Equal(t, "none", steps["live"].GetAction())
	require.Equal(t, pelwardenv1.Verdict_VERDICT_ALIVE, steps["live"].GetVerdict())
	require.Equal(t, ids, pendingIDs(t, rdb, "ghost"), "planning changes nothing")

	// A group only a ScaledObject names is planned with the defaults,
	// and says so: its 30 s entryStaleSeconds has not passed.
	redistest.CreateGroup(t, rdb, "mail", "senders")
	redistest.AddJobs(t, rdb, "mail", "", 2)
	redistest.Read(t, rdb, "mail", "senders", "s1", 2)
	_, err = metric(ctx, t, p.client, map[string]string{"stream": "mail", "consumerGroup": "senders", "ghostIdleSeconds": "0.1"})
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)
	res, err = admin.Plan(ctx, &pelwardenv1.PlanRequest{Target: &pelwardenv1.TargetRef{Stream: "mail", Group: "senders"}})
	require.NoError(t, err)
	require.Contains(t, res.GetHygiene(), "hygiene does not look after this group")
	require.Len(t, res.GetSteps(), 1)
	require.Equal(t, "none", res.GetSteps()[0].GetAction())
	require.Contains(t, res.GetSteps()[0].GetReason(), "none of its 2 entries has been idle 30s yet")

	_, err = admin.Plan(ctx, &pelwardenv1.PlanRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "unknown"}})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "hygiene.targets")
}

func TestDescribeTargetShowsVerdictsTheReportedMetricAndSettings(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 6)
	redistest.Read(t, rdb, "jobs", "workers", "dead", 4)
	redistest.Read(t, rdb, "jobs", "workers", "alive", 2)
	heartbeat(t, rdb, "hb:dead", time.Now().Add(-time.Hour))
	p, admin := startAdmin(t, srv.Addr())
	time.Sleep(1200 * time.Millisecond) // both reads are older than the heartbeat max age
	heartbeat(t, rdb, "hb:alive", time.Now())
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "heartbeat", "heartbeatKey": "hb:{consumer}",
		"heartbeatMaxAgeSeconds": "1", "pendingEntriesCount": "2", "activationPendingEntriesCount": "1"}
	v, err := metric(ctx, t, p.client, md)
	require.NoError(t, err)
	require.Equal(t, int64(2), v)

	res, err := admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	tg := res.GetTarget()
	require.Equal(t, int64(2), tg.GetLivePending())
	require.Equal(t, int64(4), tg.GetGhostPending())
	got := map[string]*pelwardenv1.Consumer{}
	for _, c := range tg.GetConsumers() {
		got[c.GetName()] = c
	}
	require.Equal(t, pelwardenv1.Verdict_VERDICT_GHOST, got["dead"].GetVerdict())
	require.Greater(t, got["dead"].GetHeartbeatAgeMs(), time.Minute.Milliseconds())
	require.Equal(t, pelwardenv1.Verdict_VERDICT_ALIVE, got["alive"].GetVerdict())
	require.GreaterOrEqual(t, got["alive"].GetHeartbeatAgeMs(), int64(0))
	require.Less(t, got["alive"].GetHeartbeatAgeMs(), time.Minute.Milliseconds())
	require.Equal(t, int64(2), got["alive"].GetPending())
	require.NotEmpty(t, got["dead"].GetReasons())

	require.Len(t, res.GetMetrics(), 1)
	m := res.GetMetrics()[0]
	require.Equal(t, "s0-pelwarden", m.GetMetricName())
	require.Equal(t, "pendingEntriesCount", m.GetMetric())
	require.Equal(t, int64(2), m.GetValue())
	require.InDelta(t, 2, m.GetTargetValue(), 0)
	require.InDelta(t, 1, m.GetActivation(), 0)
	require.True(t, m.GetActive())
	require.Empty(t, res.GetHygiene(), "hygiene does not look after the group")

	_, err = admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: &pelwardenv1.TargetRef{Stream: "other", Group: "workers"}})
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "targets register when KEDA polls a ScaledObject")
}

// TestWatchEventsReceivesTheLoopsEvents: the loop requeues a ghost's 30
// entries in batches of 10, then deletes it; a watcher of the group sees
// each, and a watcher of another group sees none.
func TestWatchEventsReceivesTheLoopsEvents(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	_, admin := startAdmin(t, srv.Addr(), hygieneTarget())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	watch, err := admin.WatchEvents(ctx, &pelwardenv1.WatchEventsRequest{Target: jobsRef})
	require.NoError(t, err)
	other, err := admin.WatchEvents(ctx, &pelwardenv1.WatchEventsRequest{Target: &pelwardenv1.TargetRef{Stream: "other", Group: "workers"}})
	require.NoError(t, err)
	otherGot := make(chan *pelwardenv1.WatchEventsResponse, 1)
	go func() {
		if e, err := other.Recv(); err == nil {
			otherGot <- e
		}
	}()
	time.Sleep(100 * time.Millisecond) // the watchers are subscribed

	redistest.AddJobs(t, rdb, "jobs", "", 30)
	redistest.Read(t, rdb, "jobs", "workers", "ghost", 30)
	var requeued int64
	for deleted := false; !deleted; {
		res, err := watch.Recv()
		require.NoError(t, err)
		e := res.GetEvent()
		require.Equal(t, "hygiene", e.GetSource())
		require.Equal(t, "ghost", e.GetConsumer())
		require.Equal(t, "workers", e.GetTarget().GetGroup())
		switch e.GetAction() {
		case "requeued":
			require.Equal(t, int64(10), e.GetEntries(), "one event per batch")
			requeued += e.GetEntries()
		case "consumer-deleted":
			deleted = true
		default:
			t.Fatalf("unexpected event %v", e)
		}
	}
	require.Equal(t, int64(30), requeued)

	res, err := admin.DescribeTarget(context.Background(), &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
	require.NoError(t, err)
	recent := res.GetRecentEvents()
	require.Len(t, recent, 4)
	require.Equal(t, "consumer-deleted", recent[0].GetAction(), "newest first")
	require.GreaterOrEqual(t, recent[0].GetTimeMs(), recent[3].GetTimeMs())
	require.Contains(t, res.GetHygiene(), "reclaim=requeue")

	cancel()
	select {
	case e := <-otherGot:
		t.Fatalf("a watcher of another group got %v", e)
	default:
	}
}
