package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// TestExampleWorkerFinishesItsOwnPELAndDeregistersOnSIGTERM runs
// examples/worker as a real process: it must finish the entries its name
// already held (a container restarted in the same pod), heartbeat, and on
// SIGTERM finish the job in hand and hand the rest back through Deregister.
func TestExampleWorkerFinishesItsOwnPELAndDeregistersOnSIGTERM(t *testing.T) {
	t.Parallel()
	worker := proctest.Build(t, "../examples/worker")[0]
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 4)
	redistest.Read(t, rdb, "jobs", "workers", "worker-x", 4) // held before a restart
	held, err := rdb.XRange(ctx, "jobs", "-", "+").Result()
	require.NoError(t, err)
	for i := range 26 { // job names apart from the first four's
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "jobs", Values: []any{"job", "later-" + strconv.Itoa(i)}}).Err())
	}
	p, _ := startAdmin(t, srv.Addr())
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(adminToken), 0o600))
	env := func(name, work string) []string {
		return []string{"HOSTNAME=" + name, "REDIS_ADDR=" + srv.Addr(), "STREAM=jobs", "GROUP=workers", "LEDGER=ledger",
			"WORK_TIME=" + work, "BATCH=10", "HEARTBEAT_EVERY=200ms", "PELWARDEN_ADDR=" + p.app.GRPCAddr(), "PELWARDEN_TOKEN_FILE=" + tokenFile}
	}
	x := proctest.StartEnv(t, "worker-x", worker, env("worker-x", "400ms"))

	eventually(t, 10*time.Second, func() error {
		n, err := rdb.HLen(ctx, "ledger").Result()
		if err == nil && n < 4 {
			return fmt.Errorf("%d jobs processed", n)
		}
		return err
	})
	for _, m := range held {
		n, err := rdb.HGet(ctx, "ledger", m.Values["job"].(string)).Result()
		require.NoError(t, err, "job %v that worker-x held before it restarted is processed first\n%s", m.Values["job"], x.Tail(20))
		require.Equal(t, "1", n)
	}
	beat, err := rdb.Get(ctx, "hb:worker-x").Result()
	require.NoError(t, err, "the worker heartbeats")
	ms, err := strconv.ParseInt(beat, 10, 64)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), time.UnixMilli(ms), 5*time.Second)

	eventually(t, 10*time.Second, func() error {
		if n := pendingCount(ctx, t, rdb, "worker-x"); n < 3 {
			l, _ := rdb.HLen(ctx, "ledger").Result()
			return fmt.Errorf("worker-x holds %d entries, %d processed; waiting for a batch\n%s", n, l, x.Tail(10))
		}
		return nil
	})
	x.Term()
	consumers, err := rdb.XInfoConsumers(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	for _, c := range consumers {
		require.NotEqual(t, "worker-x", c.Name, "Deregister deleted the consumer\n%s", x.Tail(20))
	}
	require.Zero(t, pendingCount(ctx, t, rdb, "worker-x"))
	exists, err := rdb.Exists(ctx, "hb:worker-x").Result()
	require.NoError(t, err)
	require.Zero(t, exists, "a departed worker leaves no heartbeat behind")
	require.Contains(t, x.Tail(20), "deregistered")

	y := proctest.StartEnv(t, "worker-y", worker, env("worker-y", "1ms"))
	eventually(t, 15*time.Second, func() error {
		n, err := rdb.HLen(ctx, "ledger").Result()
		if err == nil && n != 30 {
			return fmt.Errorf("%d of 30 jobs processed", n)
		}
		return err
	})
	y.Term()
	counts, err := rdb.HGetAll(ctx, "ledger").Result()
	require.NoError(t, err)
	for job, n := range counts {
		require.Equal(t, "1", n, "job %s processed once", job)
	}
}

func pendingCount(ctx context.Context, t *testing.T, rdb *redis.Client, consumer string) int64 {
	t.Helper()
	p, err := rdb.XPending(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	return p.Consumers[consumer]
}
