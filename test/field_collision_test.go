package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// rawEntry is one entry's fields as Redis stores them, in order.
func rawEntry(t *testing.T, rdb *redis.Client, stream, id string) []any {
	t.Helper()
	res, err := rdb.Do(context.Background(), "XRANGE", stream, id, id).Slice()
	require.NoError(t, err)
	require.Len(t, res, 1, "entry %s of %s is still there", id, stream)
	return res[0].([]any)[1].([]any)
}

// holdFields adds entries with exactly these fields and has consumer read
// them all; it returns their ids.
func holdFields(t *testing.T, rdb *redis.Client, stream, consumer string, entries ...[]any) []string {
	t.Helper()
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, stream, "workers")
	ids := make([]string, len(entries))
	for i, fields := range entries {
		id, err := rdb.Do(ctx, append([]any{"XADD", stream, "*"}, fields...)...).Text()
		require.NoError(t, err)
		ids[i] = id
	}
	redistest.Read(t, rdb, stream, "workers", consumer, len(entries))
	return ids
}

// TestTheHygieneLoopNeverWritesOverAFieldOfTheJob: a ghost holds, on one
// stream, a job with its own pelwarden-deliveries field beside a plain
// job, and on another, whose carry field is payload (and whose originals
// are deleted after a requeue), a job with a payload. The plain job is
// requeued; the others stay pending, byte for byte, scan after scan, and
// Plan and Findings say why.
func TestTheHygieneLoopNeverWritesOverAFieldOfTheJob(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	jobs := holdFields(t, rdb, "jobs", "gone", []any{"job", "own", "pelwarden-deliveries", "mine"}, []any{"job", "plain"})
	orders := holdFields(t, rdb, "orders", "gone", []any{"payload", `{"order":42}`, "job", "order"})
	ownBefore, orderBefore := rawEntry(t, rdb, "jobs", jobs[0]), rawEntry(t, rdb, "orders", orders[0])
	_, admin := startAdmin(t, srv.Addr(), hygieneTarget(),
		hygieneTarget("stream", "orders", "deliveryCountField", "payload", "deleteOriginal", "true"))

	eventually(t, 10*time.Second, func() error {
		if n := jobCopies(t, rdb, "jobs")["plain"]; n != 2 {
			return fmt.Errorf("the plain job has %d copies, want the original and one copy", n)
		}
		return nil
	})
	time.Sleep(600 * time.Millisecond) // three more scans of each target

	require.Equal(t, []string{jobs[0]}, pendingIDs(t, rdb, "gone"), "the colliding job is still the ghost's")
	require.Equal(t, ownBefore, rawEntry(t, rdb, "jobs", jobs[0]), "its fields are untouched")
	require.Equal(t, map[string]int{"own": 1, "plain": 2}, jobCopies(t, rdb, "jobs"), "no copy of the colliding job")
	orderPEL, err := rdb.XPending(ctx, "orders", "workers").Result()
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"gone": 1}, orderPEL.Consumers, "the order is still pending")
	require.Equal(t, orderBefore, rawEntry(t, rdb, "orders", orders[0]), "its payload is not the delivery count, and it was not deleted")
	require.Equal(t, int64(1), rdb.XLen(ctx, "orders").Val(), "and it has no copy")

	plan, err := admin.Plan(ctx, &pelwardenv1.PlanRequest{Target: &pelwardenv1.TargetRef{Stream: "orders", Group: "workers"}})
	require.NoError(t, err)
	require.Len(t, plan.GetSteps(), 1)
	require.Equal(t, "none", plan.GetSteps()[0].GetAction())
	require.Contains(t, plan.GetSteps()[0].GetReason(), "1 of its 1 entries hold a field pelwarden would write over (field payload)")

	found, err := admin.Findings(ctx, &pelwardenv1.FindingsRequest{})
	require.NoError(t, err)
	var collisions []string
	for _, f := range found.GetFindings() {
		if f.GetKind() == pelwardenv1.FindingKind_FINDING_KIND_FIELD_COLLISION {
			collisions = append(collisions, f.GetTarget().GetStream()+" "+f.GetConsumer()+" "+f.GetIds()[0])
		}
	}
	require.ElementsMatch(t, []string{"jobs gone " + jobs[0], "orders gone " + orders[0]}, collisions)

	_, err = admin.Deregister(authed(), &pelwardenv1.DeregisterRequest{Target: jobsRef, Consumer: "gone"})
	require.Error(t, err, "Deregister cannot finish while an entry would be written over")
	require.Contains(t, status.Convert(err).Message(), "hold a field pelwarden would write over")
	require.Equal(t, []string{jobs[0]}, pendingIDs(t, rdb, "gone"), "the entry stays, and so does its consumer")
	require.Equal(t, ownBefore, rawEntry(t, rdb, "jobs", jobs[0]))
}
