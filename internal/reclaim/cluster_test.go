package reclaim

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// clusterJob is a job on stream/group "workers" of a real 3-master cluster.
func clusterJob(rdb *redis.ClusterClient, stream, dead string) Job {
	h := policy.Hygiene{Mode: policy.ReclaimRequeue, EntryStale: 50 * time.Millisecond, MaxDeliveries: 1,
		DeadLetterStream: dead, ClaimFallback: policy.FallbackRequeue}
	return Job{Client: rdb, Target: liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: stream, Group: "workers"}},
		Hygiene: h, Source: events.SourceHygiene}
}

// ghostStep is the step a scan decides for ghost holding n entries.
func ghostStep(job Job, n int64) []Step {
	snap := &liveness.Snapshot{Consumers: []liveness.ConsumerView{{Name: "ghost", Pending: n, Idle: time.Hour, Verdict: liveness.Ghost}}}
	return Decide(snap, job.Hygiene, time.Now())
}

// holderStep is the step a scan decides for the holder holding n entries.
func holderStep(job Job, n int64) []Step {
	snap := &liveness.Snapshot{Consumers: []liveness.ConsumerView{{Name: liveness.DeadLetterHolder, Pending: n, Verdict: liveness.Alive}}}
	return Decide(snap, job.Hygiene, time.Now())
}

func requireOneRecordEach(t *testing.T, rdb redis.UniversalClient, stream, dead string, ids []string) {
	t.Helper()
	recs, err := rdb.XRange(t.Context(), dead, "-", "+").Result()
	require.NoError(t, err)
	copies := map[string]int{}
	for _, r := range recs {
		copies[r.Values[redisx.FieldOriginID].(string)]++
	}
	want := map[string]int{}
	for _, id := range ids {
		want[id] = 1
	}
	require.Equal(t, want, copies, "exactly one dead-letter record per poison entry")
	require.Zero(t, rdb.XPending(t.Context(), stream, "workers").Val().Count, "every entry acknowledged, none held")
	require.Equal(t, int64(len(ids)), rdb.XLen(t.Context(), stream).Val(), "nothing requeued, nothing lost")
}

// TestTheTwoStepPathOnARealClusterSurvivesACrashBetweenSteps runs on a
// 3-master cluster: the engine picks the path by slot on its own, and a
// crash after step 1 or step 2 (the steps run alone, as a process killed
// there leaves them) ends, after a fresh scan, in one record per entry.
func TestTheTwoStepPathOnARealClusterSurvivesACrashBetweenSteps(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, redistest.ClusterOptions{})
	rdb := cl.Client(t)
	view := liveness.NewView(nil, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1})
	engine, err := New(Options{View: view, BatchSize: 2}, prometheus.NewRegistry())
	require.NoError(t, err)

	t.Run("a dead-letter stream in the stream's slot takes one script", func(t *testing.T) {
		job := clusterJob(rdb, "{same}", "{same}:dead")
		ids := redistest.Hold(t, rdb, "{same}", "workers", "ghost", "", 3)
		time.Sleep(60 * time.Millisecond)
		rep, err := engine.RunAll(t.Context(), job, ghostStep(job, 3))
		require.NoError(t, err)
		require.Equal(t, map[redisx.Outcome]int64{redisx.DeadLettered: 3}, rep.Counts(), "no holder")
		requireOneRecordEach(t, rdb, "{same}", "{same}:dead", ids)
	})

	for name, crash := range map[string]func(t *testing.T, job Job){
		"no crash": nil,
		"a crash after step 1": func(t *testing.T, job Job) {
			_, err := redisx.RunReclaim(t.Context(), rdb, engine.batch(job, ghostStep(job, 5)[0], nil, ""))
			require.NoError(t, err)
		},
		"a crash after step 2": func(t *testing.T, job Job) {
			_, err := redisx.RunReclaim(t.Context(), rdb, engine.batch(job, ghostStep(job, 5)[0], nil, ""))
			require.NoError(t, err)
			h := engine.heldBatch(job, "", nil, "")
			entries, err := redisx.ReadHeld(t.Context(), rdb, h)
			require.NoError(t, err)
			require.Len(t, entries, 2, "one batch of two was held")
			for _, e := range entries {
				_, err := redisx.AddRecord(t.Context(), rdb, h, e)
				require.NoError(t, err)
			}
		},
	} {
		t.Run(name+", a dead-letter stream in another slot takes two steps", func(t *testing.T) {
			stream, dead := "jobs-"+name, onAnotherMaster(t, cl, "dead-"+name, "jobs-"+name)
			job := clusterJob(rdb, stream, dead)
			ids := redistest.Hold(t, rdb, stream, "workers", "ghost", "", 5)
			time.Sleep(60 * time.Millisecond)
			if crash != nil {
				crash(t, job)
				held := rdb.XPending(t.Context(), stream, "workers").Val().Consumers[liveness.DeadLetterHolder]
				_, err := engine.RunAll(t.Context(), job, holderStep(job, held))
				require.NoError(t, err)
			}
			rep, err := engine.RunAll(t.Context(), job, ghostStep(job, 5))
			require.NoError(t, err)
			if crash == nil {
				require.Equal(t, map[redisx.Outcome]int64{redisx.DeadLetterHeld: 5, redisx.DeadLettered: 5}, rep.Counts())
			}
			requireOneRecordEach(t, rdb, stream, dead, ids)
		})
	}
}

// onAnotherMaster is a key named after prefix that another master than
// key's serves.
func onAnotherMaster(t *testing.T, cl *redistest.Cluster, prefix, key string) string {
	t.Helper()
	for i := 0; ; i++ {
		other := fmt.Sprintf("%s-%d", prefix, i)
		if cl.MasterForKey(t, other).Addr() != cl.MasterForKey(t, key).Addr() {
			require.False(t, redisx.SameSlot(key, other))
			return other
		}
	}
}
