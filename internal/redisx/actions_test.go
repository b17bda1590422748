package redisx

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

func requeue(ids []string) Reclaim {
	return Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", CarryField: "pelwarden-deliveries", IDs: ids}
}

// reclaimIDs runs an explicit-id batch and returns its per-entry outcomes.
func reclaimIDs(ctx context.Context, rdb *redis.Client, r Reclaim) ([]EntryOutcome, error) {
	res, err := RunReclaim(ctx, rdb, r)
	if err == nil && int64(len(res.Outcomes)) != res.Total() {
		return nil, fmt.Errorf("explicit ids list every outcome: %d listed, %d counted", len(res.Outcomes), res.Total())
	}
	return res.Outcomes, err
}

func TestDuplicateIDsInOneBatchAreActedOnOnce(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 1)
	outs, err := reclaimIDs(context.Background(), rdb, requeue([]string{ids[0], ids[0]}))
	require.NoError(t, err)
	require.Equal(t, []Outcome{Requeued, NotPending}, results(outs), "the first acked it")
	n, err := rdb.XLen(context.Background(), "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "one original, one copy")
}

func TestPagedReclaimTakesOnlyTheConsumersIdleEntries(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	old := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 5)
	redistest.Age(t, rdb, "jobs", "workers", "ghost", time.Hour, old...)
	other := redistest.Hold(t, rdb, "jobs", "workers", "other", "", 2)
	redistest.Age(t, rdb, "jobs", "workers", "other", time.Hour, other...)
	fresh := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 1)
	r := Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", MinIdle: time.Minute, Count: 3}
	var total int64
	for {
		res, err := RunReclaim(ctx, rdb, r)
		require.NoError(t, err)
		require.Empty(t, res.Outcomes, "plain requeues are counted, not listed")
		total += res.Total()
		if res.Total() < r.Count {
			break
		}
		r.After = res.Last
	}
	require.Equal(t, int64(5), total)
	ext, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err)
	left := map[string]string{}
	for _, e := range ext {
		left[e.ID] = e.Consumer
	}
	require.Equal(t, map[string]string{other[0]: "other", other[1]: "other", fresh[0]: "ghost"}, left,
		"other consumers' entries and the ghost's fresh entry stay")
}

func results(outs []EntryOutcome) []Outcome {
	r := make([]Outcome, len(outs))
	for i, o := range outs {
		r[i] = o.Outcome
	}
	return r
}

func TestRequeueCopiesThenAcksAndIsIdempotent(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 5)

	outs, err := reclaimIDs(ctx, rdb, requeue(ids))
	require.NoError(t, err)
	require.Equal(t, []Outcome{Requeued, Requeued, Requeued, Requeued, Requeued}, results(outs))
	pending, err := rdb.XPending(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	require.Zero(t, pending.Count, "the originals are acknowledged")
	all, err := rdb.XRange(ctx, "jobs", "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, all, 10, "originals stay (no XDEL asked), one copy each")
	for i, o := range outs {
		copyEntry, err := rdb.XRange(ctx, "jobs", o.Detail, o.Detail).Result()
		require.NoError(t, err)
		require.Len(t, copyEntry, 1)
		require.Equal(t, map[string]any{"job": strconv.Itoa(i), "pelwarden-deliveries": "1", "pelwarden-carried": "pelwarden-deliveries",
			FieldOriginalStream: "jobs", FieldOriginalID: ids[i]}, copyEntry[0].Values)
	}

	again, err := reclaimIDs(ctx, rdb, requeue(ids))
	require.NoError(t, err)
	require.Equal(t, []Outcome{NotPending, NotPending, NotPending, NotPending, NotPending}, results(again), "a retry finds nothing to do")
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(10), n, "a retry creates no copy")
}

func TestRequeueSkipsEntriesThatChangedDuringTheScan(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 3)
	require.NoError(t, rdb.XAck(ctx, "jobs", "workers", ids[0]).Err())                                                                                // acked by a slow worker
	require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "jobs", Group: "workers", Consumer: "other", MinIdle: 0, Messages: ids[1:2]}).Err()) // taken by someone else
	time.Sleep(50 * time.Millisecond)
	r := requeue(ids)
	r.MinIdle = 30 * time.Millisecond
	outs, err := reclaimIDs(ctx, rdb, r)
	require.NoError(t, err)
	require.Equal(t, []Outcome{NotPending, OwnerChanged, Requeued}, results(outs))

	fresh := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 1)
	r = requeue(fresh)
	r.MinIdle = time.Hour
	outs, err = reclaimIDs(ctx, rdb, r)
	require.NoError(t, err)
	require.Equal(t, []Outcome{NotIdle}, results(outs), "an entry idle less than entryStaleSeconds is left alone")
}

func TestDeletedEntryIsAckedAsATombstoneNotRequeued(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 2)
	require.NoError(t, rdb.XDel(ctx, "jobs", ids[0]).Err())
	outs, err := reclaimIDs(ctx, rdb, requeue(ids))
	require.NoError(t, err)
	require.Equal(t, []Outcome{Tombstoned, Requeued}, results(outs))
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "one original left plus one copy: nothing was made of the deleted entry")

}

// TestDryRunPredictsTombstonesAndCarriedCountsAndWritesNothing: a dry run
// is the same script with its writes off, so it sees what reading the
// entry shows (a deleted entry, a delivery count carried by an earlier
// requeue) and leaves the stream, the PEL and the dead letters as they were.
func TestDryRunPredictsTombstonesAndCarriedCountsAndWritesNothing(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	var ids []string
	for _, values := range [][]any{{"job", "carried", "pelwarden-deliveries", "2", "pelwarden-carried", "pelwarden-deliveries"}, {"job", "a"}, {"job", "b"}, {"job", "c"}} {
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: values}).Result()
		require.NoError(t, err)
		ids = append(ids, id)
	}
	require.NoError(t, rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "ghost", Streams: []string{"jobs", ">"}, Block: -1}).Err())
	require.NoError(t, rdb.XDel(ctx, "jobs", ids[3]).Err())
	before := groupState(t, rdb)

	r := Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", CarryField: "pelwarden-deliveries", MaxDeliveries: 3,
		DeadLetterStream: "jobs:dead", DryRun: true, IDs: ids}
	outs, err := reclaimIDs(ctx, rdb, r)
	require.NoError(t, err)
	require.Equal(t, []Outcome{DeadLettered, Requeued, Requeued, Tombstoned}, results(outs),
		"2 carried + 1 delivery reaches maxDeliveries 3; the deleted entry is a tombstone")
	require.Equal(t, before, groupState(t, rdb), "a dry run changes nothing")

	paged, err := RunReclaim(ctx, rdb, Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", CarryField: "pelwarden-deliveries",
		MaxDeliveries: 3, DeadLetterStream: "jobs:dead", DryRun: true, Count: 10})
	require.NoError(t, err)
	require.Equal(t, map[Outcome]int64{DeadLettered: 1, Requeued: 2, Tombstoned: 1}, paged.Counts)
	require.Equal(t, before, groupState(t, rdb), "a paged dry run changes nothing")

	done, err := RunReclaim(ctx, rdb, Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", CarryField: "pelwarden-deliveries",
		MaxDeliveries: 3, DeadLetterStream: "jobs:dead", Count: 10})
	require.NoError(t, err)
	require.Equal(t, paged.Counts, done.Counts, "the real run does what the dry run said")
}

// groupState is everything a reclaim could change: the stream, the PEL
// with delivery counts, and the dead-letter stream.
func groupState(t *testing.T, rdb *redis.Client) []any {
	t.Helper()
	ctx := context.Background()
	stream, err := rdb.XRange(ctx, "jobs", "-", "+").Result()
	require.NoError(t, err)
	pel, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 100}).Result()
	require.NoError(t, err)
	for i := range pel {
		pel[i].Idle = 0
	}
	dead, err := rdb.XRange(ctx, "jobs:dead", "-", "+").Result()
	require.NoError(t, err)
	return []any{stream, pel, dead}
}

func TestMaxDeliveriesDeadLettersWithTheCarriedCount(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 1)
	r := requeue(ids)
	r.MaxDeliveries, r.DeadLetterStream = 3, "jobs:dead"
	for round := 1; round <= 2; round++ {
		outs, err := reclaimIDs(ctx, rdb, r)
		require.NoError(t, err)
		require.Equal(t, Requeued, outs[0].Outcome, "round %d", round)
		require.Equal(t, int64(round), outs[0].Deliveries)
		// The copy is delivered to (and abandoned by) the next ghost.
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "ghost", Streams: []string{"jobs", ">"}, Count: 1, Block: -1}).Result()
		require.NoError(t, err)
		r.IDs = []string{res[0].Messages[0].ID}
	}
	outs, err := reclaimIDs(ctx, rdb, r)
	require.NoError(t, err)
	require.Equal(t, DeadLettered, outs[0].Outcome, "third delivery reaches maxDeliveries 3")
	dead, err := rdb.XRange(ctx, "jobs:dead", "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, "0", dead[0].Values["job"])
	require.Equal(t, r.IDs[0], dead[0].Values["pelwarden-origin-id"])
	require.Equal(t, "workers", dead[0].Values["pelwarden-group"])
	require.Equal(t, "ghost", dead[0].Values["pelwarden-consumer"])
	require.Equal(t, "3", dead[0].Values["pelwarden-deliveries"])
	require.Equal(t, "max-deliveries", dead[0].Values["pelwarden-reason"])
	pending, err := rdb.XPending(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	require.Zero(t, pending.Count)
}

func TestClaimMovesTheEntryToTheChosenConsumer(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 2)
	outs, err := reclaimIDs(ctx, rdb, Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", ClaimTo: "live", IDs: ids})
	require.NoError(t, err)
	require.Equal(t, []Outcome{Claimed, Claimed}, results(outs))
	ext, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err)
	for _, e := range ext {
		require.Equal(t, "live", e.Consumer)
		require.Equal(t, int64(2), e.RetryCount, "a claim counts as a delivery")
	}
	_, err = reclaimIDs(ctx, rdb, Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", ClaimTo: "ghost", IDs: ids})
	require.Error(t, err, "claiming to the owner itself is refused")
}

func TestDeleteConsumerRefusesWhileEntriesArePending(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 2)
	out, err := DeleteConsumer(ctx, rdb, "jobs", "workers", "ghost", 0, false)
	require.NoError(t, err)
	require.Equal(t, DeleteHasPending, out)
	require.NoError(t, rdb.XAck(ctx, "jobs", "workers", ids...).Err())
	out, err = DeleteConsumer(ctx, rdb, "jobs", "workers", "ghost", time.Hour, false)
	require.NoError(t, err)
	require.Equal(t, DeleteNotIdle, out)
	out, err = DeleteConsumer(ctx, rdb, "jobs", "workers", "ghost", 0, true)
	require.NoError(t, err)
	require.Equal(t, ConsumerDeleted, out, "a dry run says it would delete")
	out, err = DeleteConsumer(ctx, rdb, "jobs", "workers", "ghost", 0, false)
	require.NoError(t, err)
	require.Equal(t, ConsumerDeleted, out, "the dry run left it in place")
	out, err = DeleteConsumer(ctx, rdb, "jobs", "workers", "ghost", 0, false)
	require.NoError(t, err)
	require.Equal(t, DeleteGone, out)
}

// TestRacingReclaimersActOnEachEntryExactlyOnce: two reclaimers (two
// pelwarden replicas, or a retry) run the same batches at once; counting the
// copies in the stream shows each entry was requeued once.
func TestRacingReclaimersActOnEachEntryExactlyOnce(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	const n = 2000
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", n)
	var wg sync.WaitGroup
	acted := make([]int, 2)
	for w := range 2 {
		wg.Go(func() {
			for start := 0; start < n; start += 100 {
				outs, err := reclaimIDs(ctx, rdb, requeue(ids[start:start+100]))
				if err != nil {
					t.Error(err)
					return
				}
				for _, o := range outs {
					if o.Outcome.Acted() {
						acted[w]++
					}
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, n, acted[0]+acted[1], "every entry acted on once in total")
	all, err := rdb.XRange(ctx, "jobs", "-", "+").Result()
	require.NoError(t, err)
	copies := map[string]int{}
	for _, e := range all[n:] {
		copies[e.Values["job"].(string)]++
	}
	require.Len(t, copies, n)
	for job, c := range copies {
		require.Equal(t, 1, c, "job %s copied once", job)
	}
}

func TestPendingPageWalksPastAnyPageSize(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 250)
	seen, after := 0, ""
	for {
		page, err := PendingPage(ctx, rdb, "jobs", "workers", "ghost", 0, after, 100)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		seen += len(page)
		after = page[len(page)-1].ID
	}
	require.Equal(t, 250, seen)
}

func TestScriptsSurviveAScriptFlush(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 2)
	_, err := reclaimIDs(ctx, rdb, requeue(ids[:1]))
	require.NoError(t, err)
	require.NoError(t, rdb.ScriptFlush(ctx).Err(), "as after a Redis restart: EVALSHA now answers NOSCRIPT")
	outs, err := reclaimIDs(ctx, rdb, requeue(ids[1:]))
	require.NoError(t, err)
	require.Equal(t, []Outcome{Requeued}, results(outs))
}

func TestLeaseHasOneHolderAtATime(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	a := Lease{Client: rdb, Key: "lease", Holder: NewHolder("a"), TTL: time.Minute}
	b := Lease{Client: rdb, Key: "lease", Holder: NewHolder("b"), TTL: time.Minute}
	held, err := a.Hold(ctx)
	require.NoError(t, err)
	require.True(t, held)
	held, err = b.Hold(ctx)
	require.NoError(t, err)
	require.False(t, held, "b waits while a holds")
	held, err = a.Hold(ctx)
	require.NoError(t, err)
	require.True(t, held, "a renews its own lease")
	require.NoError(t, b.Release(ctx))
	held, err = b.Hold(ctx)
	require.NoError(t, err)
	require.False(t, held, "b cannot release a's lease")
	require.NoError(t, a.Release(ctx))
	held, err = b.Hold(ctx)
	require.NoError(t, err)
	require.True(t, held, "released: b takes it")
}

// TestAFailedWriteLeavesNoCopyBehindAnUnackedOriginal: the dead-letter key
// holds a string, and one entry is too wide to copy; the other entries of
// the batch are finished, the failing ones left exactly as they were.
func TestAFailedWriteLeavesNoCopyBehindAnUnackedOriginal(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	wide := make([]any, 0, 10000)
	for i := range 5000 {
		wide = append(wide, "f"+strconv.Itoa(i), "v")
	}
	for _, values := range [][]any{{"job", "0"}, {"job", "1", "pelwarden-deliveries", "9", "pelwarden-carried", "pelwarden-deliveries"}, wide, {"job", "3"}} {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: values}).Err())
	}
	require.NoError(t, rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "ghost", Streams: []string{"jobs", ">"}, Count: 10, Block: -1}).Err())
	require.NoError(t, rdb.Set(ctx, "jobs:dead", "not a stream", 0).Err())

	r := requeue(nil)
	r.Count, r.MaxDeliveries, r.DeadLetterStream = 10, 5, "jobs:dead"
	res, err := RunReclaim(ctx, rdb, r)
	require.NoError(t, err, "a failing entry does not fail the batch")
	require.Equal(t, map[Outcome]int64{Requeued: 2, Failed: 2}, res.Counts)
	for _, o := range res.Outcomes {
		require.Equal(t, Failed, o.Outcome)
		require.NotEmpty(t, o.Detail, "a failure says why")
	}
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(6), n, "four originals and two copies: nothing for the failed ones")
	require.Equal(t, map[string]int64{"ghost": 2}, mustPending(t, rdb), "the failed entries are still the ghost's")

	again, err := RunReclaim(ctx, rdb, r)
	require.NoError(t, err)
	require.Equal(t, map[Outcome]int64{Failed: 2}, again.Counts, "a retry fails the same way and adds nothing")
	n, err = rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(6), n)
}

func TestOneEntryNamedTwoWaysIsActedOnOnce(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ids := redistest.Hold(t, rdb, "jobs", "workers", "ghost", "", 1)
	// Claims are applied at the end of the batch, so only the id check
	// stops the second name from claiming again.
	outs, err := reclaimIDs(context.Background(), rdb, Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost",
		ClaimTo: "live", IDs: []string{ids[0], "0" + ids[0]}})
	require.NoError(t, err)
	require.Equal(t, []Outcome{Claimed, DuplicateID}, results(outs))
	ext, err := rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err)
	require.Len(t, ext, 1)
	require.Equal(t, int64(2), ext[0].RetryCount, "claimed once: one more delivery")
	_, err = reclaimIDs(context.Background(), rdb, requeue([]string{"12345"}))
	require.ErrorContains(t, err, "want <milliseconds>-<sequence>")
}

func mustPending(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	p, err := rdb.XPending(context.Background(), "jobs", "workers").Result()
	require.NoError(t, err)
	return p.Consumers
}
