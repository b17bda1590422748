package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// TestAPollingWorkerHoldingAnEntryIsNeverTakenForDeadOnAnyVersion: a worker
// holds one entry and keeps polling the empty stream (XREADGROUP BLOCK),
// under idle-only hygiene. From Redis 7.2 every poll resets idle: the
// worker is Alive. Before 7.2 (Debian's 7.0 on PATH) idle counts from the
// last read that delivered entries, so the worker ages like a dead one:
// it is Unknown, with an idle-undecided finding, and its entry is never
// requeued. `make compat` runs this once per server.
func TestAPollingWorkerHoldingAnEntryIsNeverTakenForDeadOnAnyVersion(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	version := srv.Version(t)
	rdb := srv.Client(t)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	held := redistest.Hold(t, rdb, "jobs", "workers", "poller", "job-", 1)
	polled := make(chan struct{})
	go poll(ctx, srv.Client(t), polled)

	p := startPelwarden(t, srv.Addr(), func(c *config.Config) {
		c.Redis[0].IdleBefore72 = config.IdleUnknown // the default, which the suites' harness changes
		c.Hygiene.ScanInterval, c.Hygiene.LeaseTTL = 200*time.Millisecond, time.Second
		c.Hygiene.Targets = []map[string]string{{"stream": "jobs", "consumerGroup": "workers", "reclaim": "requeue",
			"liveness": "idle", "ghostIdleSeconds": "1", "entryStaleSeconds": "0.5"}}
	})
	admin := pelwardenv1.NewAdminClient(p.conn)
	// Past ghostIdle since the entry was delivered, and polled since.
	time.Sleep(1500 * time.Millisecond)
	<-polled
	want := pelwardenv1.Verdict_VERDICT_ALIVE
	if !version.AtLeast(7, 2) {
		want = pelwardenv1.Verdict_VERDICT_UNKNOWN
	}
	var poller *pelwardenv1.Consumer
	eventually(t, 10*time.Second, func() error {
		res, err := admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
		if err != nil {
			return err
		}
		for _, c := range res.GetTarget().GetConsumers() {
			if c.GetName() == "poller" && c.GetIdleMs() > time.Second.Milliseconds() == !version.AtLeast(7, 2) {
				poller = c
				return nil
			}
		}
		return fmt.Errorf("%s: no read of the poller past ghostIdle yet: %v", version, res.GetTarget().GetConsumers())
	})
	t.Logf("%s: the polling holder is %s: %v", version, poller.GetVerdict(), poller.GetReasons())
	require.Equal(t, want, poller.GetVerdict(), "%s: %v", version, poller.GetReasons())

	if !version.AtLeast(7, 2) {
		require.Contains(t, fmt.Sprint(poller.GetReasons()), "last read that delivered entries", "%s: the reason says what idle counts here", version)
		f, err := admin.Findings(ctx, &pelwardenv1.FindingsRequest{Target: jobsRef})
		require.NoError(t, err)
		kinds := map[pelwardenv1.FindingKind]string{}
		for _, x := range f.GetFindings() {
			kinds[x.GetKind()] = x.GetConsumer()
		}
		require.Equal(t, "poller", kinds[pelwardenv1.FindingKind_FINDING_KIND_IDLE_UNDECIDED], "%s: a finding names the holder", version)
	}
	// Several scans later the entry is still the poller's, uncopied.
	time.Sleep(time.Second)
	pending, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err)
	require.Len(t, pending, 1, "%s", version)
	require.Equal(t, held[0], pending[0].ID)
	require.Equal(t, "poller", pending[0].Consumer, "%s: the holder keeps its entry", version)
	require.Equal(t, int64(1), rdb.XLen(ctx, "jobs").Val(), "%s: no copy was requeued", version)
}

// poll reads the empty stream as a worker between jobs does, until ctx
// ends; polled closes after the first read.
func poll(ctx context.Context, rdb *redis.Client, polled chan struct{}) {
	once := false
	for ctx.Err() == nil {
		err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "workers", Consumer: "poller", Streams: []string{"jobs", ">"}, Count: 1,
			Block: 200 * time.Millisecond}).Err()
		if err != nil && !errors.Is(err, redis.Nil) && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
		if !once {
			once = true
			close(polled)
		}
	}
}
