package reclaim

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// TestAScanResumesTheTwoStepPathAfterACrashBetweenSteps crashes the path
// after step 1 and after step 2 (by running the steps alone, as a process
// killed there would leave them), then runs a fresh scan, twice: each
// poison entry ends with exactly one dead-letter record and acknowledged.
func TestAScanResumesTheTwoStepPathAfterACrashBetweenSteps(t *testing.T) {
	t.Parallel()
	h := policy.Hygiene{Mode: policy.ReclaimRequeue, EntryStale: 50 * time.Millisecond, MaxDeliveries: 1,
		DeadLetterStream: "jobs:dead", DeliveryCountField: "pelwarden-deliveries", ClaimFallback: policy.FallbackRequeue}
	held := redisx.Held{Stream: "jobs", Group: "workers", Holder: liveness.DeadLetterHolder, DeadLetterStream: "jobs:dead", Count: 100}
	for name, crash := range map[string]func(t *testing.T, rdb *redis.Client){
		"after step 1": func(t *testing.T, rdb *redis.Client) {},
		"after step 2": func(t *testing.T, rdb *redis.Client) {
			entries, err := redisx.ReadHeld(t.Context(), rdb, held)
			require.NoError(t, err)
			for _, e := range entries {
				_, err := redisx.AddRecord(t.Context(), rdb, held, e)
				require.NoError(t, err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := newGroup(t)
			ids := redistest.Hold(t, g.rdb, "jobs", "workers", "ghost", "g", 5)
			time.Sleep(60 * time.Millisecond)
			r, err := redisx.RunReclaim(t.Context(), g.rdb, redisx.Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost",
				MinIdle: h.EntryStale, MaxDeliveries: 1, DeadLetterStream: "jobs:dead", Hold: liveness.DeadLetterHolder, Count: 100})
			require.NoError(t, err)
			require.Equal(t, int64(5), r.Counts[redisx.DeadLetterHeld])
			crash(t, g.rdb)

			snap := g.snapshot(t, map[string]liveness.Verdict{"ghost": liveness.Ghost})
			require.Equal(t, int64(5), snap.HeldPending, "held entries are shown apart")
			require.Zero(t, snap.LivePending, "and are no work for the scaler")
			view := liveness.NewView(g.reader.Fetch, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1})
			engine, err := New(Options{View: view, BatchSize: 2, TwoStepDeadLetter: true}, prometheus.NewRegistry())
			require.NoError(t, err)
			job := Job{Client: g.rdb, Target: g.target, Hygiene: h, Source: events.SourceHygiene}
			steps := Decide(snap, h, time.Now())
			plan, err := engine.RunAll(t.Context(), Job{Client: g.rdb, Target: g.target, Hygiene: h, Source: events.SourceAdmin, DryRun: true}, steps)
			require.NoError(t, err)
			require.Equal(t, map[redisx.Outcome]int64{redisx.DeadLettered: 5}, plan.Counts(), "Plan predicts the resumed steps")
			for range 2 {
				_, err = engine.RunAll(t.Context(), job, Decide(g.snapshot(t, nil), h, time.Now()))
				require.NoError(t, err)
			}

			requireOneRecordEach(t, g.rdb, "jobs", "jobs:dead", ids)
			require.Equal(t, int64(5), g.rdb.XLen(context.Background(), "jobs").Val(), "nothing requeued, nothing lost")
		})
	}
}

func TestDecideNeverJudgesOrDeletesTheHolder(t *testing.T) {
	t.Parallel()
	h := policy.Hygiene{Mode: policy.ReclaimRequeue, EntryStale: time.Second, DeleteGhostConsumers: true, HardTimeout: time.Second,
		MaxDeliveries: 3, DeadLetterStream: "dead"}
	now := time.Now()
	holder := func(pending int64) *liveness.Snapshot {
		return &liveness.Snapshot{Consumers: []liveness.ConsumerView{{Name: liveness.DeadLetterHolder, Pending: pending, Idle: time.Hour, Verdict: liveness.Ghost}}}
	}
	for name, tc := range map[string]struct {
		snap *liveness.Snapshot
		h    func(policy.Hygiene) policy.Hygiene
		want Action
	}{
		"holding entries, it finishes them":            {snap: holder(4), want: FinishDeadLetter},
		"holding nothing, it is left, not deleted":     {snap: holder(0), want: None},
		"with reclaim off, its entries wait":           {snap: holder(4), h: func(h policy.Hygiene) policy.Hygiene { h.Mode = policy.ReclaimOff; return h }, want: None},
		"with no dead-letter stream now, entries wait": {snap: holder(4), h: func(h policy.Hygiene) policy.Hygiene { h.DeadLetterStream = ""; h.MaxDeliveries = 0; return h }, want: None},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			hh := h
			if tc.h != nil {
				hh = tc.h(h)
			}
			steps := Decide(tc.snap, hh, now)
			require.Len(t, steps, 1)
			require.Equal(t, tc.want, steps[0].Action, steps[0].Reason)
		})
	}
}

func TestAScanStopsAtAWriteItsReplicasDidNotAcknowledge(t *testing.T) {
	t.Parallel()
	g := newGroup(t) // a master with no replica: WAIT 1 always falls short
	redistest.Hold(t, g.rdb, "jobs", "workers", "ghost", "g", 5)
	time.Sleep(60 * time.Millisecond)
	h := policy.Hygiene{Mode: policy.ReclaimRequeue, EntryStale: 50 * time.Millisecond, ClaimFallback: policy.FallbackRequeue}
	view := liveness.NewView(g.reader.Fetch, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1})
	reg := prometheus.NewRegistry()
	engine, err := New(Options{View: view, BatchSize: 2, Durability: func(conn string) redisx.Durability {
		require.Equal(t, "default", conn)
		return redisx.Durability{Replicas: 1, Timeout: 20 * time.Millisecond}
	}}, reg)
	require.NoError(t, err)
	job := Job{Client: g.rdb, Target: g.target, Hygiene: h, Source: events.SourceHygiene}
	rep, err := engine.RunAll(t.Context(), job, Decide(g.snapshot(t, map[string]liveness.Verdict{"ghost": liveness.Ghost}), h, time.Now()))
	var behind *redisx.ReplicasBehindError
	require.ErrorAs(t, err, &behind)
	require.Equal(t, map[redisx.Outcome]int64{redisx.Requeued: 2}, rep.Counts(), "the first batch was done and reported; the scan stopped there")
	require.Equal(t, int64(3), g.rdb.XPending(t.Context(), "jobs", "workers").Val().Count)
	require.InDelta(t, 1.0, testutil.ToFloat64(engine.metrics.replicasBehind.WithLabelValues(g.target.Labels()...)), 0)
}
