package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
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
	p, _ := startAdmin(t, srv.Addr(), hygieneTarget("ghostIdleSeconds", "3600"))
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

// TestExampleWorkerReportsItselfDegradedAndGetsItsEntriesGivenBack: on
// SIGUSR1 examples/worker writes a JSON heartbeat that says degraded and
// stops taking jobs; pelwarden judges it Degraded, leaves its entries out
// of the metric, requeues them, and keeps the consumer. SIGUSR1 again
// makes it Alive.
func TestExampleWorkerReportsItselfDegradedAndGetsItsEntriesGivenBack(t *testing.T) {
	t.Parallel()
	worker := proctest.Build(t, "../examples/worker")[0]
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 30)
	_, admin := startAdmin(t, srv.Addr(), hygieneTarget("liveness", "heartbeat", "heartbeatKey", "hb:{consumer}", "heartbeatMaxAgeSeconds", "2", "entryStaleSeconds", "1"))
	z := proctest.StartEnv(t, "worker-z", worker, []string{"HOSTNAME=worker-z", "REDIS_ADDR=" + srv.Addr(), "STREAM=jobs", "GROUP=workers",
		"LEDGER=ledger", "WORK_TIME=300ms", "BATCH=10", "HEARTBEAT_EVERY=200ms"})
	eventually(t, 10*time.Second, func() error {
		if n := pendingCount(ctx, t, rdb, "worker-z"); n < 5 {
			return fmt.Errorf("worker-z holds %d entries; waiting for a batch\n%s", n, z.Tail(10))
		}
		return nil
	})
	z.Signal(syscall.SIGUSR1)
	verdictOf := func() (*pelwardenv1.Consumer, error) {
		res, err := admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
		if err != nil {
			return nil, err
		}
		for _, c := range res.GetTarget().GetConsumers() {
			if c.GetName() == "worker-z" {
				return c, nil
			}
		}
		return nil, fmt.Errorf("worker-z is not among the consumers")
	}
	eventually(t, 5*time.Second, func() error {
		c, err := verdictOf()
		if err == nil && c.GetVerdict() != pelwardenv1.Verdict_VERDICT_DEGRADED {
			return fmt.Errorf("worker-z is %s: %v", c.GetVerdict(), c.GetReasons())
		}
		return err
	})
	beat, err := rdb.Get(ctx, "hb:worker-z").Result()
	require.NoError(t, err)
	require.Contains(t, beat, `"degraded":true`)
	require.Contains(t, beat, "provider_quota_exhausted_until_")
	eventually(t, 5*time.Second, func() error {
		if n := pendingCount(ctx, t, rdb, "worker-z"); n != 0 {
			return fmt.Errorf("worker-z still holds %d entries", n)
		}
		return nil
	})
	c, err := verdictOf()
	require.NoError(t, err, "the degraded consumer is kept: it is alive")
	require.Contains(t, strings.Join(c.GetReasons(), "; "), "says degraded (provider_quota_exhausted_until_")

	z.Signal(syscall.SIGUSR1)
	eventually(t, 15*time.Second, func() error {
		n, err := rdb.HLen(ctx, "ledger").Result()
		if err == nil && n != 30 {
			return fmt.Errorf("%d of 30 jobs processed\n%s", n, z.Tail(10))
		}
		return err
	})
	c, err = verdictOf()
	require.NoError(t, err)
	require.Equal(t, pelwardenv1.Verdict_VERDICT_ALIVE, c.GetVerdict(), "healthy again: %v", c.GetReasons())
	counts, err := rdb.HGetAll(ctx, "ledger").Result()
	require.NoError(t, err)
	for job, n := range counts {
		require.Equal(t, "1", n, "job %s processed once", job)
	}
	z.Term()
}
