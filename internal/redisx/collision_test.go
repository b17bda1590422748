package redisx

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

// holdEntry adds one entry with exactly these fields (in order, repeats
// kept) and has the ghost read it.
func holdEntry(t *testing.T, rdb *redis.Client, fields ...any) string {
	t.Helper()
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	id, err := rdb.Do(ctx, append([]any{"XADD", "jobs", "*"}, fields...)...).Text()
	require.NoError(t, err)
	redistest.Read(t, rdb, "jobs", "workers", "ghost", 1)
	return id
}

// rawFields is an entry's fields as Redis stores them: in order, repeats
// kept, which go-redis's map would hide.
func rawFields(t *testing.T, rdb *redis.Client, id string) []any {
	t.Helper()
	res, err := rdb.Do(context.Background(), "XRANGE", "jobs", id, id).Slice()
	require.NoError(t, err)
	require.Len(t, res, 1, "entry %s", id)
	return res[0].([]any)[1].([]any)
}

func TestReclaimNeverWritesOverAFieldOfTheJob(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		fields []any
		carry  string
		// maxDeliveries 1 dead-letters on the first reclaim.
		maxDeliveries int64
		clash         string
	}{
		"the job's own default carry field, not a count": {
			fields: []any{"job", "a", "pelwarden-deliveries", "mine"}, carry: "pelwarden-deliveries", clash: "pelwarden-deliveries"},
		"a carry field named like the job's payload": {
			fields: []any{"payload", `{"order":42}`}, carry: "payload", clash: "payload"},
		"the job's own field named like the marker": {
			fields: []any{"job", "a", "pelwarden-carried", "x"}, carry: "pelwarden-deliveries", clash: "pelwarden-carried"},
		"a marker naming a field whose value is no count": {
			fields: []any{"payload", "data", "pelwarden-carried", "payload"}, carry: "pelwarden-deliveries", clash: "pelwarden-carried"},
		"a marker naming a field the entry holds twice": {
			fields: []any{"n", "1", "n", "2", "pelwarden-carried", "n"}, carry: "n", clash: "pelwarden-carried"},
		"a marker given twice": {
			fields: []any{"n", "1", "pelwarden-carried", "n", "pelwarden-carried", "n"}, carry: "n", clash: "n"},
		"a count too long to be one pelwarden wrote": {
			fields: []any{"n", "1234567890123", "pelwarden-carried", "n"}, carry: "n", clash: "pelwarden-carried"},
		"a dead-letter record field the job holds": {
			fields: []any{"job", "a", "pelwarden-reason", "mine"}, carry: "pelwarden-deliveries", maxDeliveries: 1, clash: "pelwarden-reason"},
		"a marker naming a field of the job that holds a number": {
			fields: []any{"job", "a", "amount", "100", "pelwarden-carried", "amount"}, carry: "pelwarden-deliveries", clash: "pelwarden-carried"},
		"a marker naming another field of pelwarden's": {
			fields: []any{"job", "a", "pelwarden-group", "5", "pelwarden-carried", "pelwarden-group"}, carry: "pelwarden-deliveries", clash: "pelwarden-carried"},
		"a marker naming a job's field named like a custom carry field was": {
			fields: []any{"job", "a", "attempts", "2", "pelwarden-carried", "attempts"}, carry: "tries", clash: "pelwarden-carried"},
		"the job's own field named like the original's id": {
			fields: []any{"job", "a", "pelwarden-original-id", "order-17"}, carry: "pelwarden-deliveries", clash: "pelwarden-original-id"},
		"the job's own original id, with the carry field off": {
			fields: []any{"job", "a", "pelwarden-original-id", "order-17"}, carry: "", clash: "pelwarden-original-id"},
		"lineage naming another stream": {
			fields: []any{"job", "a", "pelwarden-original-stream", "payments", "pelwarden-original-id", "1-0"}, carry: "pelwarden-deliveries", clash: "pelwarden-original-stream"},
		"an original id without its stream": {
			fields: []any{"pelwarden-original-id", "1-0", "job", "a"}, carry: "pelwarden-deliveries", clash: "pelwarden-original-id"},
		"lineage given twice": {
			fields: []any{"pelwarden-original-stream", "jobs", "pelwarden-original-id", "1-0", "pelwarden-original-id", "2-0"}, carry: "pelwarden-deliveries", clash: "pelwarden-original-stream"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Start(t).Client(t)
			ctx := context.Background()
			id := holdEntry(t, rdb, tc.fields...)
			before := groupState(t, rdb)
			raw := rawFields(t, rdb, id)
			r := Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", CarryField: tc.carry, DeleteOriginal: true,
				MaxDeliveries: tc.maxDeliveries, DeadLetterStream: "jobs:dead", Count: 10}
			for _, dry := range []bool{true, false} {
				r.DryRun = dry
				res, err := RunReclaim(ctx, rdb, r)
				require.NoError(t, err)
				require.Equal(t, map[Outcome]int64{FieldCollision: 1}, res.Counts, "dry run %v", dry)
				require.Equal(t, []EntryOutcome{{ID: id, Outcome: FieldCollision, Detail: tc.clash, Deliveries: 1}}, res.Outcomes)
				require.Equal(t, before, groupState(t, rdb), "entry, PEL and dead-letter stream unchanged (dry run %v)", dry)
				require.Equal(t, raw, rawFields(t, rdb, id), "every field of the job kept, in order")
			}
			found, err := Collisions(ctx, rdb, "jobs", []string{id}, tc.carry, tc.maxDeliveries > 0)
			require.NoError(t, err)
			require.Equal(t, map[string]string{id: tc.clash}, found, "Findings finds it by the same rule")
		})
	}
}

func TestARequeuedCopyCountsOnAcrossRequeuesAndKeepsEveryJobField(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	id := holdEntry(t, rdb, "job", "a", "payload", "data")
	first := id
	r := Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", CarryField: "pelwarden-deliveries"}
	for round, carry := range []string{"pelwarden-deliveries", "pelwarden-deliveries", "attempts"} {
		r.IDs, r.CarryField = []string{id}, carry
		outs, err := reclaimIDs(ctx, rdb, r)
		require.NoError(t, err)
		require.Equal(t, Requeued, outs[0].Outcome, "round %d", round+1)
		require.Equal(t, int64(round+1), outs[0].Deliveries, "round %d", round+1)
		require.Equal(t, []any{"job", "a", "payload", "data", FieldOriginalStream, "jobs", FieldOriginalID, first,
			carry, []string{"1", "2", "3"}[round], "pelwarden-carried", carry},
			rawFields(t, rdb, outs[0].Detail), "the job's fields, its first original, then the count once and its marker; a carry field changed from the default takes the count over")
		id = redistest.Read(t, rdb, "jobs", "workers", "ghost", 1)[0]
		require.Equal(t, outs[0].Detail, id)
	}
}

// TestACopyAnEarlierVersionRequeuedCountsOn: copies requeued before the
// marker carry pelwarden-deliveries alone; that count goes on, so such an
// entry is given back again rather than left pending for good.
func TestACopyAnEarlierVersionRequeuedCountsOn(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	id := holdEntry(t, rdb, "job", "a", "pelwarden-deliveries", "2")
	r := Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", CarryField: "pelwarden-deliveries", IDs: []string{id}}
	outs, err := reclaimIDs(context.Background(), rdb, r)
	require.NoError(t, err)
	require.Equal(t, Requeued, outs[0].Outcome)
	require.Equal(t, int64(3), outs[0].Deliveries)
	require.Equal(t, []any{"job", "a", FieldOriginalStream, "jobs", FieldOriginalID, id, "pelwarden-deliveries", "3", "pelwarden-carried", "pelwarden-deliveries"},
		rawFields(t, rdb, outs[0].Detail), "the earlier count goes on, now with its marker")
}

// TestOnlyAWriteCanCollide: a claim writes no field, and a dead-letter
// record keeps the job's fields as they are and adds pelwarden's own, so
// the job's field named like the carry field collides with neither.
func TestOnlyAWriteCanCollide(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	claimed := holdEntry(t, rdb, "payload", "a")
	dead := holdEntry(t, rdb, "payload", "b")
	r := Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", CarryField: "payload", ClaimTo: "live", IDs: []string{claimed}}
	outs, err := reclaimIDs(ctx, rdb, r)
	require.NoError(t, err)
	require.Equal(t, Claimed, outs[0].Outcome)
	require.Equal(t, []any{"payload", "a"}, rawFields(t, rdb, claimed))

	r = Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", CarryField: "payload", MaxDeliveries: 1,
		DeadLetterStream: "jobs:dead", IDs: []string{dead}}
	outs, err = reclaimIDs(ctx, rdb, r)
	require.NoError(t, err)
	require.Equal(t, DeadLettered, outs[0].Outcome)
	rec, err := rdb.XRange(ctx, "jobs:dead", "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, rec, 1)
	require.Equal(t, "b", rec[0].Values["payload"], "the job's payload reaches the dead-letter stream as it was")
	require.Equal(t, "1", rec[0].Values["pelwarden-deliveries"])
}
