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

// ghostHolding adds n entries (field job=i) and has consumer read them all.
func ghostHolding(t *testing.T, rdb *redis.Client, consumer string, n int) []string {
	t.Helper()
	require.NoError(t, rdb.XGroupCreateMkStream(context.Background(), "jobs", "workers", "$").Err())
	return ghostHoldingMore(t, rdb, consumer, n)
}

func requeue(ids []string) Reclaim {
	return Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", Mode: ModeRequeue, CarryField: "pelwarden-deliveries", IDs: ids}
}

// reclaimIDs runs an explicit-id batch and returns its per-entry outcomes.
func reclaimIDs(ctx context.Context, rdb *redis.Client, r Reclaim) ([]Outcome, error) {
	res, err := RunReclaim(ctx, rdb, r)
	if err == nil && int64(len(res.Outcomes)) != res.Total() {
		return nil, fmt.Errorf("explicit ids list every outcome: %d listed, %d counted", len(res.Outcomes), res.Total())
	}
	return res.Outcomes, err
}

func TestDuplicateIDsInOneBatchAreActedOnOnce(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ids := ghostHolding(t, rdb, "ghost", 1)
	outs, err := reclaimIDs(context.Background(), rdb, requeue([]string{ids[0], ids[0]}))
	require.NoError(t, err)
	require.Equal(t, []string{Requeued, NotPending}, results(outs), "the first acked it")
	n, err := rdb.XLen(context.Background(), "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "one original, one copy")
}

func TestPagedReclaimTakesOnlyTheConsumersIdleEntries(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ghostHolding(t, rdb, "ghost", 5)
	other := ghostHoldingMore(t, rdb, "other", 2)
	time.Sleep(60 * time.Millisecond)
	fresh := ghostHoldingMore(t, rdb, "ghost", 1)
	r := Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", Mode: ModeRequeue, MinIdle: 50 * time.Millisecond, Count: 3}
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

func results(outs []Outcome) []string {
	r := make([]string, len(outs))
	for i, o := range outs {
		r[i] = o.Result
	}
	return r
}

func TestRequeueCopiesThenAcksAndIsIdempotent(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := ghostHolding(t, rdb, "ghost", 5)

	outs, err := reclaimIDs(ctx, rdb, requeue(ids))
	require.NoError(t, err)
	require.Equal(t, []string{Requeued, Requeued, Requeued, Requeued, Requeued}, results(outs))
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
		require.Equal(t, map[string]any{"job": strconv.Itoa(i), "pelwarden-deliveries": "1"}, copyEntry[0].Values)
	}

	again, err := reclaimIDs(ctx, rdb, requeue(ids))
	require.NoError(t, err)
	require.Equal(t, []string{NotPending, NotPending, NotPending, NotPending, NotPending}, results(again), "a retry finds nothing to do")
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(10), n, "a retry creates no copy")
}

func TestRequeueSkipsEntriesThatChangedDuringTheScan(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := ghostHolding(t, rdb, "ghost", 3)
	require.NoError(t, rdb.XAck(ctx, "jobs", "workers", ids[0]).Err())                                                                                // acked by a slow worker
	require.NoError(t, rdb.XClaim(ctx, &redis.XClaimArgs{Stream: "jobs", Group: "workers", Consumer: "other", MinIdle: 0, Messages: ids[1:2]}).Err()) // taken by someone else
	time.Sleep(50 * time.Millisecond)
	r := requeue(ids)
	r.MinIdle = 30 * time.Millisecond
	outs, err := reclaimIDs(ctx, rdb, r)
	require.NoError(t, err)
	require.Equal(t, []string{NotPending, OwnerChanged, Requeued}, results(outs))

	fresh := ghostHoldingMore(t, rdb, "ghost", 1)
	r = requeue(fresh)
	r.MinIdle = time.Hour
	outs, err = reclaimIDs(ctx, rdb, r)
	require.NoError(t, err)
	require.Equal(t, []string{NotIdle}, results(outs), "an entry idle less than entryStaleSeconds is left alone")
}

// ghostHoldingMore adds n entries (field job=i) to the existing group and
// has consumer read them.
func ghostHoldingMore(t *testing.T, rdb *redis.Client, consumer string, n int) []string {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", strconv.Itoa(i)}}).Err())
	}
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: consumer, Streams: []string{"jobs", ">"}, Count: int64(n), Block: -1}).Result()
	require.NoError(t, err)
	var ids []string
	for _, m := range res[0].Messages {
		ids = append(ids, m.ID)
	}
	return ids
}

func TestDeletedEntryIsAckedAsATombstoneNotRequeued(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := ghostHolding(t, rdb, "ghost", 2)
	require.NoError(t, rdb.XDel(ctx, "jobs", ids[0]).Err())
	outs, err := reclaimIDs(ctx, rdb, requeue(ids))
	require.NoError(t, err)
	require.Equal(t, []string{Tombstoned, Requeued}, results(outs))
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "one original left plus one copy: nothing was made of the deleted entry")

	ids = ghostHoldingMore(t, rdb, "ghost", 2)
	require.NoError(t, rdb.XDel(ctx, "jobs", ids[1]).Err())
	outs, err = RunTombstone(ctx, rdb, "jobs", "workers", "ghost", 0, ids)
	require.NoError(t, err)
	require.Equal(t, []string{EntryExists, Tombstoned}, results(outs), "tombstone acks only ids whose entry is gone")
}

func TestMaxDeliveriesDeadLettersWithTheCarriedCount(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := ghostHolding(t, rdb, "ghost", 1)
	r := requeue(ids)
	r.MaxDeliveries, r.DeadLetterStream = 3, "jobs:dead"
	for round := 1; round <= 2; round++ {
		outs, err := reclaimIDs(ctx, rdb, r)
		require.NoError(t, err)
		require.Equal(t, Requeued, outs[0].Result, "round %d", round)
		require.Equal(t, int64(round), outs[0].Deliveries)
		// The copy is delivered to (and abandoned by) the next ghost.
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "ghost", Streams: []string{"jobs", ">"}, Count: 1, Block: -1}).Result()
		require.NoError(t, err)
		r.IDs = []string{res[0].Messages[0].ID}
	}
	outs, err := reclaimIDs(ctx, rdb, r)
	require.NoError(t, err)
	require.Equal(t, DeadLettered, outs[0].Result, "third delivery reaches maxDeliveries 3")
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
	ids := ghostHolding(t, rdb, "ghost", 2)
	outs, err := reclaimIDs(ctx, rdb, Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", Mode: ModeClaim, ClaimTo: "live", IDs: ids})
	require.NoError(t, err)
	require.Equal(t, []string{Claimed, Claimed}, results(outs))
	ext, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err)
	for _, e := range ext {
		require.Equal(t, "live", e.Consumer)
		require.Equal(t, int64(2), e.RetryCount, "a claim counts as a delivery")
	}
	_, err = reclaimIDs(ctx, rdb, Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost", Mode: ModeClaim, ClaimTo: "ghost", IDs: ids})
	require.Error(t, err, "claiming to the owner itself is refused")
}

func TestDeleteConsumerRefusesWhileEntriesArePending(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	ids := ghostHolding(t, rdb, "ghost", 2)
	out, err := DeleteConsumer(ctx, rdb, "jobs", "workers", "ghost", 0)
	require.NoError(t, err)
	require.Equal(t, "has-pending", out)
	require.NoError(t, rdb.XAck(ctx, "jobs", "workers", ids...).Err())
	out, err = DeleteConsumer(ctx, rdb, "jobs", "workers", "ghost", time.Hour)
	require.NoError(t, err)
	require.Equal(t, "not-idle", out)
	out, err = DeleteConsumer(ctx, rdb, "jobs", "workers", "ghost", 0)
	require.NoError(t, err)
	require.Equal(t, "deleted", out)
	out, err = DeleteConsumer(ctx, rdb, "jobs", "workers", "ghost", 0)
	require.NoError(t, err)
	require.Equal(t, "gone", out)
}

// TestRacingReclaimersActOnEachEntryExactlyOnce: two reclaimers (two
// pelwarden replicas, or a retry) run the same batches at once; counting the
// copies in the stream shows each entry was requeued once.
func TestRacingReclaimersActOnEachEntryExactlyOnce(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	const n = 2000
	ids := ghostHolding(t, rdb, "ghost", n)
	var wg sync.WaitGroup
	acted := make([]int, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for start := 0; start < n; start += 100 {
				outs, err := reclaimIDs(ctx, rdb, requeue(ids[start:start+100]))
				if err != nil {
					t.Error(err)
					return
				}
				for _, o := range outs {
					if o.Acted() {
						acted[w]++
					}
				}
			}
		}()
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
	ghostHolding(t, rdb, "ghost", 250)
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
	ids := ghostHolding(t, rdb, "ghost", 2)
	_, err := reclaimIDs(ctx, rdb, requeue(ids[:1]))
	require.NoError(t, err)
	require.NoError(t, rdb.ScriptFlush(ctx).Err(), "as after a Redis restart: EVALSHA now answers NOSCRIPT")
	outs, err := reclaimIDs(ctx, rdb, requeue(ids[1:]))
	require.NoError(t, err)
	require.Equal(t, []string{Requeued}, results(outs))
}

func TestLeaseHasOneHolderAtATime(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	a := Lease{Client: rdb, Key: "lease", Holder: "a", TTL: time.Minute}
	b := Lease{Client: rdb, Key: "lease", Holder: "b", TTL: time.Minute}
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
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, "jobs", "workers", "$").Err())
	wide := make([]any, 0, 10000)
	for i := range 5000 {
		wide = append(wide, "f"+strconv.Itoa(i), "v")
	}
	for _, values := range [][]any{{"job", "0"}, {"job", "1", "pelwarden-deliveries", "9"}, wide, {"job", "3"}} {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: values}).Err())
	}
	require.NoError(t, rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "ghost", Streams: []string{"jobs", ">"}, Count: 10, Block: -1}).Err())
	require.NoError(t, rdb.Set(ctx, "jobs:dead", "not a stream", 0).Err())

	r := requeue(nil)
	r.Count, r.MaxDeliveries, r.DeadLetterStream = 10, 5, "jobs:dead"
	res, err := RunReclaim(ctx, rdb, r)
	require.NoError(t, err, "a failing entry does not fail the batch")
	require.Equal(t, map[string]int64{Requeued: 2, Failed: 2}, res.Counts)
	for _, o := range res.Outcomes {
		require.Equal(t, Failed, o.Result)
		require.NotEmpty(t, o.Detail, "a failure says why")
	}
	n, err := rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(6), n, "four originals and two copies: nothing for the failed ones")
	require.Equal(t, map[string]int64{"ghost": 2}, mustPending(t, rdb), "the failed entries are still the ghost's")

	again, err := RunReclaim(ctx, rdb, r)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{Failed: 2}, again.Counts, "a retry fails the same way and adds nothing")
	n, err = rdb.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	require.Equal(t, int64(6), n)
}

func TestOneEntryNamedTwoWaysIsActedOnOnce(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ids := ghostHolding(t, rdb, "ghost", 1)
	// Claims are applied at the end of the batch, so only the id check
	// stops the second name from claiming again.
	outs, err := reclaimIDs(context.Background(), rdb, Reclaim{Stream: "jobs", Group: "workers", Consumer: "ghost",
		Mode: ModeClaim, ClaimTo: "live", IDs: []string{ids[0], "0" + ids[0]}})
	require.NoError(t, err)
	require.Equal(t, []string{Claimed, DuplicateID}, results(outs))
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
