package redisx

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// holdPoison is step 1 for every entry of ghost: each has been delivered
// once, and one delivery dead-letters.
func holdPoison(t *testing.T, rdb redis.UniversalClient) Result {
	t.Helper()
	res, err := RunReclaim(t.Context(), rdb, Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost",
		CarryField: "pelwarden-deliveries", MaxDeliveries: 1, DeadLetterStream: "dead", Hold: liveness.DeadLetterHolder, Count: 100})
	require.NoError(t, err)
	return res
}

func held() Held {
	return Held{Stream: "jobs", Group: "workers", Holder: liveness.DeadLetterHolder, DeadLetterStream: "dead", CarryField: "pelwarden-deliveries", Count: 100}
}

// requireDeadLetteredOnce checks the books: one record per entry in the
// dead-letter stream, each entry acknowledged, nothing left held.
func requireDeadLetteredOnce(t *testing.T, rdb redis.UniversalClient, ids []string) {
	t.Helper()
	ctx := t.Context()
	recs, err := rdb.XRange(ctx, "dead", "-", "+").Result()
	require.NoError(t, err)
	copies := map[string]int{}
	for _, r := range recs {
		copies[r.Values[FieldOriginID].(string)]++
	}
	want := map[string]int{}
	for _, id := range ids {
		want[id] = 1
	}
	require.Equal(t, want, copies, "exactly one dead-letter record per entry")
	pending, err := rdb.XPending(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	require.Zero(t, pending.Count, "every entry acknowledged, none held")
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(len(ids)), n, "the originals stay (deleteOriginal off); no copy was requeued")
}

func TestTwoStepDeadLetterSurvivesACrashBetweenAnyTwoSteps(t *testing.T) {
	t.Parallel()
	for name, crash := range map[string]func(t *testing.T, rdb redis.UniversalClient){
		"after step 1 (held, no record)": func(t *testing.T, rdb redis.UniversalClient) {
			require.Equal(t, int64(3), holdPoison(t, rdb).Counts[DeadLetterHeld])
		},
		"after step 2 (records written, not acknowledged)": func(t *testing.T, rdb redis.UniversalClient) {
			holdPoison(t, rdb)
			entries, err := ReadHeld(t.Context(), rdb, held())
			require.NoError(t, err)
			require.Len(t, entries, 3)
			for _, e := range entries {
				_, err := AddRecord(t.Context(), rdb, held(), e)
				require.NoError(t, err)
			}
		},
		"after some records of a batch": func(t *testing.T, rdb redis.UniversalClient) {
			holdPoison(t, rdb)
			entries, err := ReadHeld(t.Context(), rdb, held())
			require.NoError(t, err)
			_, err = AddRecord(t.Context(), rdb, held(), entries[1])
			require.NoError(t, err)
		},
		"after step 3 (a finished run, retried)": func(t *testing.T, rdb redis.UniversalClient) {
			holdPoison(t, rdb)
			_, err := FinishHeld(t.Context(), rdb, held())
			require.NoError(t, err)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Start(t).Client(t)
			ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 3)
			crash(t, rdb)
			// A fresh run resumes at step 2, then a second one finds nothing.
			for range 2 {
				_, err := FinishHeld(t.Context(), rdb, held())
				require.NoError(t, err)
			}
			require.Zero(t, holdPoison(t, rdb).Total(), "the ghost holds nothing more")
			requireDeadLetteredOnce(t, rdb, ids)
		})
	}
}

func TestTwoStepDeadLetterRecordCarriesTheEntryAndItsOrigin(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	// A copy requeued four times before: its carried count goes into the
	// record's delivery count, and the carry field is not repeated.
	id := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", "7", "pelwarden-deliveries", "4", "pelwarden-carried", "pelwarden-deliveries"}}).Val()
	redistest.Read(t, rdb, "jobs", "workers", "ghost", 1)
	holdPoison(t, rdb)
	h := held()
	h.CarryField, h.Consumer = "pelwarden-deliveries", "ghost"
	res, err := FinishHeld(ctx, rdb, h)
	require.NoError(t, err)
	require.Equal(t, map[Outcome]int64{DeadLettered: 1}, res.Counts)
	raw, err := rdb.Do(ctx, "XRANGE", "dead", "-", "+").Slice()
	require.NoError(t, err)
	require.Len(t, raw, 1)
	require.Equal(t, res.Outcomes[0].Detail, raw[0].([]any)[0], "the outcome names the record")
	require.Equal(t, int64(5), res.Outcomes[0].Deliveries, "and its delivery count")
	require.Equal(t, "ghost", res.Outcomes[0].From, "and the consumer the entry was taken from")
	require.Equal(t, []any{"job", "7",
		FieldOriginID, id, FieldOriginStream, "jobs", FieldGroup, "workers", FieldConsumer, "ghost", FieldDeliveries, "5", FieldReason, "max-deliveries"},
		raw[0].([]any)[1], "the entry's own fields in order, then pelwarden's as the one-script path writes them, the carried count added into its delivery count")
	res, err = FinishHeld(ctx, rdb, h)
	require.NoError(t, err)
	require.Zero(t, res.Total())
}

func TestStepTwoRefusesToWriteWhenItsLookBackRunsOut(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 1)
	holdPoison(t, rdb)
	for range 3 {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "dead", Values: []any{"other", "writer"}})
	}
	h := held()
	h.LookBack = 3
	res, err := FinishHeld(ctx, rdb, h)
	require.NoError(t, err)
	require.Equal(t, map[Outcome]int64{Failed: 1}, res.Counts)
	require.Contains(t, res.Outcomes[0].Detail, "stays held")
	require.Equal(t, int64(3), rdb.XLen(ctx, "dead").Val(), "nothing written it cannot prove new")
	ext := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 10}).Val()
	require.Len(t, ext, 1)
	require.Equal(t, ids[0], ext[0].ID)
	require.Equal(t, liveness.DeadLetterHolder, ext[0].Consumer, "the entry stays held, visible, for the next run")
}

func TestStepThreeLeavesAnEntryAWorkerTookFromTheHolder(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 1)
	holdPoison(t, rdb)
	require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "jobs", Group: "workers", Consumer: "w", Messages: ids}).Err())
	outs, err := AckHeld(ctx, rdb, held(), ids)
	require.NoError(t, err)
	require.Equal(t, []Outcome{OwnerChanged}, results(outs))
	require.Equal(t, int64(1), rdb.XPending(ctx, "jobs", "workers").Val().Count, "XACK checks no owner; the script did")
}

func TestDryRunOfTheTwoStepPathWritesNothing(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 2)
	res, err := RunReclaim(ctx, rdb, Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost",
		MaxDeliveries: 1, DeadLetterStream: "dead", Hold: liveness.DeadLetterHolder, Count: 100, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, map[Outcome]int64{DeadLetterHeld: 2}, res.Counts)
	holdPoison(t, rdb)
	h := held()
	h.DryRun = true
	res, err = FinishHeld(ctx, rdb, h)
	require.NoError(t, err)
	require.Equal(t, map[Outcome]int64{DeadLettered: 2}, res.Counts)
	require.Zero(t, rdb.XLen(ctx, "dead").Val())
	require.Equal(t, int64(2), rdb.XPending(ctx, "jobs", "workers").Val().Consumers[liveness.DeadLetterHolder])
}
