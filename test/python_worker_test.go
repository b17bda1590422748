package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/proctest"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// pythonWithRedis is a Python 3 that imports redis: the one on PATH, or
// Debian's, where python3-redis installs it. None fails the test: CI
// installs python3-redis.
func pythonWithRedis(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import redis").Run() == nil {
			return py
		}
	}
	t.Fatal("no python3 that imports redis: install Debian's python3-redis (.ci/run does)")
	return ""
}

// TestPythonWorkerIsJudgedByItsHeartbeatDedupesByLineageAndDeregisters
// runs examples/python/worker.py, as docs/workers.md shows it, against a
// real redis-server and pelwarden judging heartbeats: a copy of a job a
// ghost finished late is acknowledged without doing it again; the worker
// is Alive while it beats and Ghost once SIGKILLed, and its entries go
// back; on SIGTERM it hands its entries back with `pelwarden deregister`
// and the workers' token. Every job is done once.
func TestPythonWorkerIsJudgedByItsHeartbeatDedupesByLineageAndDeregisters(t *testing.T) {
	t.Parallel()
	py := pythonWithRedis(t)
	cli := proctest.Build(t, "../cmd/pelwarden")[0]
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	tokenFile := filepath.Join(t.TempDir(), "worker-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(workerToken), 0o600))
	p := startPelwarden(t, srv.Addr(), func(c *config.Config) {
		c.Admin.WorkerTokenFile = tokenFile
		c.Hygiene.ScanInterval, c.Hygiene.LeaseTTL = 200*time.Millisecond, time.Second
		c.Hygiene.Targets = []map[string]string{hygieneTarget("liveness", "heartbeat", "heartbeatKey", "hb:{consumer}",
			"heartbeatMaxAgeSeconds", "1", "entryStaleSeconds", "0.5")}
	})
	admin := pelwardenv1.NewAdminClient(p.conn)
	start := func(name, work string) *proctest.Proc {
		return proctest.StartEnv(t, name, py, []string{"REDIS_URL=redis://" + srv.Addr(), "STREAM=jobs", "GROUP=workers",
			"HOSTNAME=" + name, "HEARTBEAT_EVERY=0.2", "WORK_TIME=" + work, "LEDGER=ledger",
			"PELWARDEN_SERVER=" + p.app.GRPCAddr(), "PELWARDEN_TOKEN_FILE=" + tokenFile,
			"PATH=" + filepath.Dir(cli) + string(os.PathListSeparator) + os.Getenv("PATH")}, "../examples/python/worker.py")
	}
	consumer := func(name string) (*pelwardenv1.Consumer, error) {
		res, err := admin.DescribeTarget(ctx, &pelwardenv1.DescribeTargetRequest{Target: jobsRef})
		if err != nil {
			return nil, err
		}
		for _, c := range res.GetTarget().GetConsumers() {
			if c.GetName() == name {
				return c, nil
			}
		}
		return nil, fmt.Errorf("%s is not among the consumers", name)
	}
	requireVerdict := func(name string, want pelwardenv1.Verdict, proc *proctest.Proc) {
		eventually(t, 10*time.Second, func() error {
			c, err := consumer(name)
			if err == nil && c.GetVerdict() != want {
				return fmt.Errorf("%s is %s, want %s: %v\n%s", name, c.GetVerdict(), want, c.GetReasons(), proc.Tail(10))
			}
			return err
		})
	}
	holding := func(name string, n int64, proc *proctest.Proc) {
		eventually(t, 10*time.Second, func() error {
			if got := pendingCount(ctx, t, rdb, name); got < n {
				return fmt.Errorf("%s holds %d entries, waiting for %d\n%s", name, got, n, proc.Tail(10))
			}
			return nil
		})
	}
	released := func(name string) {
		eventually(t, 10*time.Second, func() error {
			if got := pendingCount(ctx, t, rdb, name); got != 0 {
				return fmt.Errorf("%s still holds %d entries", name, got)
			}
			return nil
		})
	}

	// A ghost holds two jobs and finished the first without its XACK.
	ids := redistest.AddJobs(t, rdb, "jobs", "early-", 10)
	redistest.Read(t, rdb, "jobs", "workers", "ghost", 2)
	require.NoError(t, rdb.HIncrBy(ctx, "ledger", "jobs/"+ids[0], 1).Err())
	a := start("py-a", "0.3")
	requireVerdict("py-a", pelwardenv1.Verdict_VERDICT_ALIVE, a)
	beat, err := rdb.Get(ctx, "hb:py-a").Result()
	require.NoError(t, err, "the worker heartbeats")
	ms, err := strconv.ParseInt(beat, 10, 64)
	require.NoError(t, err, "a heartbeat is a Unix time in milliseconds")
	require.WithinDuration(t, time.Now(), time.UnixMilli(ms), 5*time.Second)
	released("ghost")

	redistest.AddJobs(t, rdb, "jobs", "late-", 20)
	holding("py-a", 2, a)
	a.Kill()
	requireVerdict("py-a", pelwardenv1.Verdict_VERDICT_GHOST, a)
	released("py-a")

	b := start("py-b", "0.3")
	holding("py-b", 2, b)
	b.Term()
	require.Contains(t, b.Tail(5), "py-b: requeued", "the worker deregistered through the CLI")
	require.Zero(t, b.Cmd.ProcessState.ExitCode(), b.Tail(10))
	_, err = consumer("py-b")
	require.Error(t, err, "Deregister deleted the consumer")
	require.Zero(t, rdb.Exists(ctx, "hb:py-b").Val(), "a departed worker leaves no heartbeat behind")

	c := start("py-c", "0.01")
	eventually(t, 20*time.Second, func() error {
		if n := rdb.HLen(ctx, "ledger").Val(); n != 30 {
			return fmt.Errorf("%d of 30 jobs done\n%s", n, c.Tail(10))
		}
		if left := pendingTotal(ctx, t, rdb); left != 0 {
			return fmt.Errorf("%d entries still pending\n%s", left, c.Tail(10))
		}
		return nil
	})
	c.Term()
	done := rdb.HGetAll(ctx, "ledger").Val()
	for job, n := range done {
		require.True(t, strings.HasPrefix(job, "jobs/"), "a job's key is its original stream and id: %s", job)
		require.Equal(t, "1", n, "job %s done once", job)
	}
	require.Contains(t, done, "jobs/"+ids[1], "the ghost's other job was done from its copy, under its original's key")
}

func pendingTotal(ctx context.Context, t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	p, err := rdb.XPending(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	return p.Count
}

// TestWorkersPageShowsTheTestedExamples: every python and go block of
// docs/workers.md is a part of the example the tests run, word for word.
func TestWorkersPageShowsTheTestedExamples(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join("..", "docs", "workers.md"))
	require.NoError(t, err)
	sources := map[string]string{"python": "../examples/python/worker.py", "go": "../examples/worker/main.go"}
	shown := map[string]int{}
	blocks := strings.Split(string(page), "```")
	for i := 1; i+1 < len(blocks); i += 2 {
		lang, body, _ := strings.Cut(blocks[i], "\n")
		file, ok := sources[lang]
		if !ok {
			continue
		}
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		require.Contains(t, string(src), body, "docs/workers.md shows a %s block that is not in %s", lang, file)
		shown[lang]++
	}
	require.Equal(t, map[string]int{"python": 4, "go": 1}, shown, "the page's examples, by language")
}
