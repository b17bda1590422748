package app

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// heldByLiveWorker gives worker-0 three entries of jobs/workers, idle an
// hour: a forced Reclaim takes all three.
func heldByLiveWorker(t *testing.T, c *redis.Client) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for range 3 {
		id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []string{"job", "x"}}).Result()
		require.NoError(t, err)
		ids = append(ids, id)
	}
	_, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "worker-0", Streams: []string{"jobs", ">"}, Count: 10}).Result()
	require.NoError(t, err)
	args := append([]any{"XCLAIM", "jobs", "workers", "worker-0", 0}, toAny(ids)...)
	require.NoError(t, c.Do(ctx, append(args, "IDLE", time.Hour.Milliseconds())...).Err())
	return ids
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// books is what a reclaim would change: worker-0's pending count and the
// stream's length (a requeue adds a copy).
func books(t *testing.T, c *redis.Client) (pending, length int64) {
	t.Helper()
	ctx := context.Background()
	p, err := c.XPending(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	length, err = c.XLen(ctx, "jobs").Result()
	require.NoError(t, err)
	return p.Consumers["worker-0"], length
}

// TestADryRunReclaimNeedsNoCredentialAndATokenlessCallerChangesNothing:
// every mutating call without a credential is refused and leaves the
// entries where they are; the same Reclaim as a dry run is answered, and
// changes nothing either; the token then takes the entries, so the
// refusals were all that kept them.
func TestADryRunReclaimNeedsNoCredentialAndATokenlessCallerChangesNothing(t *testing.T) {
	t.Parallel()
	addr, c := serveAdminOn(t, config.Admin{TokenFile: tokenFile(t, token)}, nil)
	client := dial(t, addr, nil)
	ids := heldByLiveWorker(t, c)
	target := &pelwardenv1.TargetRef{Stream: "jobs", Group: "workers"}
	byConsumer := &pelwardenv1.ReclaimRequest{Target: target, Force: true, Selector: &pelwardenv1.ReclaimRequest_Consumer{Consumer: "worker-0"}}
	byIDs := &pelwardenv1.ReclaimRequest{Target: target, Force: true, Selector: &pelwardenv1.ReclaimRequest_Ids{Ids: &pelwardenv1.EntryIds{Ids: ids}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	mutations := map[string]func(context.Context) error{
		"Reclaim of a consumer": func(ctx context.Context) error { _, err := client.Reclaim(ctx, byConsumer); return err },
		"Reclaim of named ids":  func(ctx context.Context) error { _, err := client.Reclaim(ctx, byIDs); return err },
		"Reclaim as claim": func(ctx context.Context) error {
			_, err := client.Reclaim(ctx, &pelwardenv1.ReclaimRequest{Target: target, Force: true, Mode: "claim", Selector: byConsumer.GetSelector().(*pelwardenv1.ReclaimRequest_Consumer)})
			return err
		},
		"DeleteConsumer": func(ctx context.Context) error {
			_, err := client.DeleteConsumer(ctx, &pelwardenv1.DeleteConsumerRequest{Target: target, Consumer: "worker-0"})
			return err
		},
		"Deregister": func(ctx context.Context) error {
			_, err := client.Deregister(ctx, &pelwardenv1.DeregisterRequest{Target: target, Consumer: "worker-0"})
			return err
		},
	}
	for name, call := range mutations {
		err := call(ctx)
		require.Equal(t, codes.Unauthenticated, status.Code(err), "%s without a credential: %v", name, err)
		pending, length := books(t, c)
		require.Equal(t, []int64{3, 3}, []int64{pending, length}, "%s without a credential changed the group", name)
	}

	for _, req := range []*pelwardenv1.ReclaimRequest{byConsumer, byIDs} {
		dry := &pelwardenv1.ReclaimRequest{Target: req.GetTarget(), Force: true, DryRun: true, Selector: req.GetSelector()}
		res, err := client.Reclaim(ctx, dry)
		require.NoError(t, err, "a dry run needs no credential")
		require.True(t, res.GetDryRun())
		require.Equal(t, int64(3), res.GetCounts()["requeued"], "the dry run reports what the call would do")
		pending, length := books(t, c)
		require.Equal(t, []int64{3, 3}, []int64{pending, length}, "a dry run changed the group")
	}

	_, err := client.Reclaim(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), byConsumer)
	require.NoError(t, err)
	pending, length := books(t, c)
	require.Equal(t, []int64{0, 6}, []int64{pending, length}, "with the token the entries are requeued")
}

// TestAReclaimThatTakesNothingSaysWhy: a consumer whose entries are all
// younger than the threshold, and one that holds none.
func TestAReclaimThatTakesNothingSaysWhy(t *testing.T) {
	t.Parallel()
	addr, c := serveAdminOn(t, config.Admin{TokenFile: tokenFile(t, token)}, nil)
	client := dial(t, addr, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []string{"job", "x"}}).Err())
	_, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "worker-1", Streams: []string{"jobs", ">"}}).Result()
	require.NoError(t, err)
	require.NoError(t, c.XGroupCreateConsumer(ctx, "jobs", "workers", "worker-2").Err())
	notes := map[string]string{
		"worker-1": `no pending entry of consumer "worker-1" has been idle at least 30s (entryStaleSeconds, as force asks); younger entries are left with it`,
		"worker-2": `consumer "worker-2" holds no pending entries`,
	}
	for consumer, note := range notes {
		res, err := client.Reclaim(ctx, &pelwardenv1.ReclaimRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "workers"},
			Force: true, DryRun: true, Selector: &pelwardenv1.ReclaimRequest_Consumer{Consumer: consumer}})
		require.NoError(t, err)
		require.Equal(t, note, res.GetNote())
	}
}
