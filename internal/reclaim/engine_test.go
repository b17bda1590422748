package reclaim

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// group is a real Redis with one consumer group "workers" on stream "jobs".
type group struct {
	srv    *redistest.Server
	rdb    *redis.Client
	conns  *redisx.Conns
	target liveness.Target
	reader *redisx.Reader
}

func newGroup(t *testing.T, opts ...redistest.Options) group {
	t.Helper()
	srv := redistest.Start(t, opts...)
	conns, err := redisx.Open([]config.Redis{config.DefaultRedis("default", srv.Addr())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	spec := liveness.Spec{Idle: true, GhostIdle: time.Hour}
	return group{srv: srv, rdb: srv.Client(t), conns: conns, reader: &redisx.Reader{Conns: conns, LagEstimateCap: 1000},
		target: liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}, Spec: spec}}
}

// snapshot reads the group and judges each consumer as verdicts says
// (Alive when not named): the scenarios set verdicts directly, since what
// is tested here is what follows a verdict.
func (g group) snapshot(t *testing.T, verdicts map[string]liveness.Verdict) *liveness.Snapshot {
	t.Helper()
	obs, err := g.reader.Fetch(context.Background(), g.target, nil)
	require.NoError(t, err)
	snap := liveness.Build(&g.target, obs, nil, time.Now())
	for i := range snap.Consumers {
		snap.Consumers[i].Verdict = liveness.Alive
		if v, ok := verdicts[snap.Consumers[i].Name]; ok {
			snap.Consumers[i].Verdict = v
		}
	}
	return snap
}

// state is everything a step could change: the stream, the PEL with its
// owners and delivery counts, the consumers, and the dead-letter stream.
type state struct {
	stream []redis.XMessage
	pel    []redis.XPendingExt
	names  []string
	dead   []redis.XMessage
}

func (g group) state(t *testing.T) state {
	t.Helper()
	ctx := context.Background()
	var s state
	var err error
	s.stream, err = g.rdb.XRange(ctx, "jobs", "-", "+").Result()
	require.NoError(t, err)
	s.pel, err = g.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 1000}).Result()
	require.NoError(t, err)
	for i := range s.pel {
		s.pel[i].Idle = 0
	}
	consumers, err := g.rdb.XInfoConsumers(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	for _, c := range consumers {
		s.names = append(s.names, c.Name)
	}
	s.dead, err = g.rdb.XRange(ctx, "jobs:dead", "-", "+").Result()
	require.NoError(t, err)
	return s
}

func (s state) owned(consumer string) int {
	n := 0
	for _, p := range s.pel {
		if p.Consumer == consumer {
			n++
		}
	}
	return n
}

func (g group) addCarried(t *testing.T, consumer string, n int, deliveries string) {
	t.Helper()
	ctx := context.Background()
	for range n {
		require.NoError(t, g.rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", "poison", "pelwarden-deliveries", deliveries, "pelwarden-carried", "pelwarden-deliveries"}}).Err())
	}
	require.NoError(t, g.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: consumer, Streams: []string{"jobs", ">"}, Count: int64(n), Block: -1}).Err())
}

// TestWhatPlanReportsIsWhatTheScanDoes runs the same steps twice on the
// same snapshot: dry, as Plan does, then for real, as the scan does. The
// dry run changes nothing, and its outcomes are the real run's, step by
// step; the real run's outcomes are what Redis shows afterwards.
func TestWhatPlanReportsIsWhatTheScanDoes(t *testing.T) {
	t.Parallel()
	base := policy.Hygiene{Mode: policy.ReclaimRequeue, EntryStale: 50 * time.Millisecond, DeleteGhostConsumers: true,
		DeliveryCountField: "pelwarden-deliveries", DeadLetterStream: "jobs:dead", ClaimFallback: policy.FallbackRequeue}
	with := func(f func(*policy.Hygiene)) policy.Hygiene { h := base; f(&h); return h }
	ghost := map[string]liveness.Verdict{"ghost": liveness.Ghost}
	cases := map[string]struct {
		h        policy.Hygiene
		verdicts map[string]liveness.Verdict
		setup    func(t *testing.T, g group)
		// operator, when set, is the consumer an operator's forced Reclaim names.
		operator string
		// twoStep forces the two-step dead-letter path.
		twoStep bool
		want    map[redisx.Outcome]int64
	}{
		"a ghost's entries are requeued, page by page": {
			h: base, verdicts: ghost,
			setup: func(t *testing.T, g group) { redistest.Hold(t, g.rdb, "jobs", "workers", "ghost", "g", 7) },
			want:  map[redisx.Outcome]int64{redisx.Requeued: 7},
		},
		"a live owner's entries past the hard timeout are taken": {
			h:     with(func(h *policy.Hygiene) { h.HardTimeout = 60 * time.Millisecond }),
			setup: func(t *testing.T, g group) { redistest.Hold(t, g.rdb, "jobs", "workers", "w", "w", 5) },
			want:  map[redisx.Outcome]int64{redisx.Requeued: 5},
		},
		"an Unknown owner is left alone, hard timeout or not": {
			h: with(func(h *policy.Hygiene) { h.HardTimeout = 60 * time.Millisecond }), verdicts: map[string]liveness.Verdict{"odd": liveness.Unknown},
			setup: func(t *testing.T, g group) { redistest.Hold(t, g.rdb, "jobs", "workers", "odd", "o", 4) },
			want:  map[redisx.Outcome]int64{redisx.OwnerUnknown: 4},
		},
		"deleted stream entries are tombstones": {
			h: base, verdicts: ghost,
			setup: func(t *testing.T, g group) {
				ids := redistest.Hold(t, g.rdb, "jobs", "workers", "ghost", "g", 5)
				require.NoError(t, g.rdb.XDel(context.Background(), "jobs", ids[1], ids[3]).Err())
			},
			want: map[redisx.Outcome]int64{redisx.Requeued: 3, redisx.Tombstoned: 2},
		},
		"entries at maxDeliveries, counting the carried count, are dead-lettered": {
			h: with(func(h *policy.Hygiene) { h.MaxDeliveries = 3 }), verdicts: ghost,
			setup: func(t *testing.T, g group) {
				redistest.Hold(t, g.rdb, "jobs", "workers", "ghost", "g", 3)
				g.addCarried(t, "ghost", 4, "2")
			},
			want: map[redisx.Outcome]int64{redisx.DeadLettered: 4, redisx.Requeued: 3},
		},
		"entries holding their own carry field stay pending, untouched, and the rest are requeued": {
			h: base, verdicts: ghost,
			setup: func(t *testing.T, g group) {
				redistest.Hold(t, g.rdb, "jobs", "workers", "ghost", "g", 2)
				for _, fields := range [][]any{{"job", "x", "pelwarden-deliveries", "mine"}, {"job", "y", "pelwarden-carried", "job"}} {
					require.NoError(t, g.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: "jobs", Values: fields}).Err())
				}
				redistest.Read(t, g.rdb, "jobs", "workers", "ghost", 2)
			},
			want: map[redisx.Outcome]int64{redisx.Requeued: 2, redisx.FieldCollision: 2},
		},
		"the two-step dead-letter path holds, writes and acknowledges each poison entry": {
			h: with(func(h *policy.Hygiene) { h.MaxDeliveries = 3 }), verdicts: ghost, twoStep: true,
			setup: func(t *testing.T, g group) {
				redistest.Hold(t, g.rdb, "jobs", "workers", "ghost", "g", 3)
				g.addCarried(t, "ghost", 4, "2")
			},
			want: map[redisx.Outcome]int64{redisx.DeadLetterHeld: 4, redisx.DeadLettered: 4, redisx.Requeued: 3},
		},
		"claim mode gives a ghost's entries to a live consumer": {
			h: with(func(h *policy.Hygiene) { h.Mode = policy.ReclaimClaim }), verdicts: ghost,
			setup: func(t *testing.T, g group) {
				redistest.Hold(t, g.rdb, "jobs", "workers", "ghost", "g", 6)
				redistest.Hold(t, g.rdb, "jobs", "workers", "live", "l", 1)
			},
			want: map[redisx.Outcome]int64{redisx.Claimed: 6},
		},
		"an empty quiet ghost is deleted": {
			h: base, verdicts: map[string]liveness.Verdict{"ghost": liveness.Ghost, "done": liveness.Ghost},
			setup: func(t *testing.T, g group) {
				ids := redistest.Hold(t, g.rdb, "jobs", "workers", "done", "d", 2)
				require.NoError(t, g.rdb.XAck(context.Background(), "jobs", "workers", ids...).Err())
				redistest.Hold(t, g.rdb, "jobs", "workers", "ghost", "g", 2)
			},
			want: map[redisx.Outcome]int64{redisx.ConsumerDeleted: 1, redisx.Requeued: 2},
		},
		"a dry-run target's scan is a dry run too": {
			h: with(func(h *policy.Hygiene) { h.DryRun = true }), verdicts: ghost,
			setup: func(t *testing.T, g group) { redistest.Hold(t, g.rdb, "jobs", "workers", "ghost", "g", 4) },
			want:  map[redisx.Outcome]int64{redisx.Requeued: 4},
		},
		"an operator's force takes a live owner's stale entries": {
			h: base, operator: "w",
			setup: func(t *testing.T, g group) { redistest.Hold(t, g.rdb, "jobs", "workers", "w", "w", 5) },
			want:  map[redisx.Outcome]int64{redisx.Requeued: 5},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := newGroup(t)
			tc.setup(t, g)
			time.Sleep(100 * time.Millisecond) // every entry idles past entryStaleSeconds
			snap := g.snapshot(t, tc.verdicts)
			now := time.Now()
			steps := Decide(snap, tc.h, now)
			if tc.operator != "" {
				_, err := DecideOperator(snap, tc.operator, tc.h, now, false, false)
				require.Error(t, err, "without force the operator is refused")
				st, err := DecideOperator(snap, tc.operator, tc.h, now, true, false)
				require.NoError(t, err)
				steps = []Step{st}
			}
			// An empty view: each step keeps the verdict this test gave it.
			view := liveness.NewView(g.reader.Fetch, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: time.Second, Expiry: time.Hour, MaxTargets: 1})
			engine, err := New(Options{View: view, BatchSize: 3, TwoStepDeadLetter: tc.twoStep}, prometheus.NewRegistry())
			require.NoError(t, err)
			job := Job{Client: g.rdb, Target: g.target, Hygiene: tc.h, Source: events.SourceHygiene, DryRun: tc.h.DryRun}

			before := g.state(t)
			planJob := job
			planJob.DryRun, planJob.Source = true, events.SourceAdmin
			plan, err := engine.RunAll(context.Background(), planJob, steps)
			require.NoError(t, err)
			require.Equal(t, before, g.state(t), "Plan changes nothing")
			require.Equal(t, tc.want, plan.Counts())

			scan, err := engine.RunAll(context.Background(), job, steps)
			require.NoError(t, err)
			require.Len(t, scan.Steps, len(plan.Steps))
			for i := range plan.Steps {
				require.Equal(t, plan.Steps[i].Counts, scan.Steps[i].Counts, "step %d (%s): what Plan said is what the scan did", i, steps[i].Owner.Name)
				require.Equal(t, Explain(plan.Steps[i], tc.h), Explain(scan.Steps[i], tc.h), "step %d explains the same", i)
			}
			requireRedisShows(t, before, g.state(t), scan.Counts(), tc.h.DryRun)
		})
	}
}

// requireRedisShows checks that Redis changed by exactly what counts say.
func requireRedisShows(t *testing.T, before, after state, counts map[redisx.Outcome]int64, dryRun bool) {
	t.Helper()
	if dryRun {
		require.Equal(t, before, after, "a dry run changes nothing")
		return
	}
	requeued, dead := int(counts[redisx.Requeued]), int(counts[redisx.DeadLettered])
	gone := requeued + dead + int(counts[redisx.Tombstoned])
	require.Len(t, after.stream, len(before.stream)+requeued, "one copy per requeued entry")
	require.Len(t, after.dead, len(before.dead)+dead, "one record per dead-lettered entry")
	require.Len(t, after.pel, len(before.pel)-gone, "every entry given back left the PEL")
	holder := 0
	if counts[redisx.DeadLetterHeld] > 0 && !slices.Contains(before.names, liveness.DeadLetterHolder) {
		holder = 1 // XCLAIM made pelwarden's holding consumer
	}
	require.Len(t, after.names, len(before.names)-int(counts[redisx.ConsumerDeleted])+holder)
	require.Zero(t, after.owned(liveness.DeadLetterHolder), "the holder holds nothing once a run is finished")
	require.Equal(t, before.stream, after.stream[:len(before.stream)], "no entry that was there changed: copies are appended")
	if claimed := int(counts[redisx.Claimed]); claimed > 0 {
		require.Equal(t, before.owned("live")+claimed, after.owned("live"), "claimed entries moved to the live consumer")
	}
}
