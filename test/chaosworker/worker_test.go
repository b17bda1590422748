package main

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

const (
	stream, group = "jobs", "workers"
	consumer      = "worker-1-4242"
	poisonEvery   = 10
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testConfig(addr string) config {
	cfg := defaultConfig()
	cfg.Redis, cfg.Stream, cfg.Group, cfg.Consumer = addr, stream, group, consumer
	cfg.MinProcess, cfg.MaxProcess = time.Millisecond, 5*time.Millisecond
	cfg.PoisonEvery = poisonEvery
	return cfg
}

// seed creates the group at the start of the stream and adds jobs 1..n.
func seed(t *testing.T, rdb *redis.Client, n int) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, rdb.XGroupCreateMkStream(ctx, stream, group, "0").Err())
	for job := 1; job <= n; job++ {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"job", job}}).Err())
	}
}

// wantLedger is the ledger after jobs from..to were each processed once.
func wantLedger(from, to int) map[string]string {
	want := map[string]string{}
	for job := from; job <= to; job++ {
		if job%poisonEvery != 0 {
			want[strconv.Itoa(job)] = "1"
		}
	}
	return want
}

// startWorker runs the worker in-process. stop cancels it and returns how
// long run took to return and its error; it also runs at cleanup.
func startWorker(t *testing.T, cfg config) (stop func() (time.Duration, error)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	go func() { done <- run(ctx, cfg, log) }()
	var (
		stopped bool
		err     error
		took    time.Duration
	)
	stop = func() (time.Duration, error) {
		if !stopped {
			stopped = true
			start := time.Now()
			cancel()
			err = <-done
			took = time.Since(start)
		}
		return took, err
	}
	t.Cleanup(func() { _, _ = stop() })
	return stop
}

func pending(t *testing.T, rdb *redis.Client) []redis.XPendingExt {
	t.Helper()
	p, err := rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: stream, Group: group, Start: "-", End: "+", Count: 1000}).Result()
	require.NoError(t, err)
	return p
}

// pendingJobs returns the job of every pending entry, checking it is ours.
func pendingJobs(t *testing.T, rdb *redis.Client) []int {
	t.Helper()
	ctx := context.Background()
	jobs := []int{}
	for _, p := range pending(t, rdb) {
		require.Equal(t, consumer, p.Consumer, "entry %s is pending for another consumer", p.ID)
		msgs, err := rdb.XRange(ctx, stream, p.ID, p.ID).Result()
		require.NoError(t, err)
		require.Len(t, msgs, 1, "pending entry %s is missing from the stream", p.ID)
		job, err := strconv.Atoi(msgs[0].Values["job"].(string))
		require.NoError(t, err)
		jobs = append(jobs, job)
	}
	return jobs
}

// poisonJobs lists the poison jobs among from..to.
func poisonJobs(from, to int) []int {
	jobs := []int{}
	for job := from; job <= to; job++ {
		if job%poisonEvery == 0 {
			jobs = append(jobs, job)
		}
	}
	return jobs
}

func intRange(from, to int) []int {
	var s []int
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// requireLedger checks that the ledger counts exactly the jobs in want, once
// each, naming the culprits instead of printing two maps of hundreds.
func requireLedger(t *testing.T, rdb *redis.Client, want map[string]string) {
	t.Helper()
	got, err := rdb.HGetAll(context.Background(), "ledger").Result()
	require.NoError(t, err)
	var twice, missing, unexpected []string
	for field, n := range got {
		if n != "1" {
			twice = append(twice, field+"="+n)
		}
		if _, ok := want[field]; !ok {
			unexpected = append(unexpected, field)
		}
	}
	for field := range want {
		if _, ok := got[field]; !ok {
			missing = append(missing, field)
		}
	}
	require.Empty(t, twice, "no job should be counted more than once")
	require.Empty(t, missing, "every non-poison job should be counted")
	require.Empty(t, unexpected, "only non-poison jobs should be counted")
}

func requireRecentHeartbeat(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ms, err := rdb.Get(context.Background(), "hb:"+consumer).Int64()
	require.NoError(t, err, "heartbeat key hb:%s should hold a Unix time in ms", consumer)
	require.WithinDuration(t, time.Now(), time.UnixMilli(ms), 2*time.Second, "heartbeat should be recent")
}

func TestWorkerAcksEachJobOnceAndLeavesPoisonPending(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		readOwnPEL bool
		// preDelivered entries sit in the consumer's PEL before it starts,
		// as after a restart that kept the consumer name.
		preDelivered int64
		wantLedger   map[string]string
		wantPending  []int
	}{
		"fresh consumer": {
			readOwnPEL: true, wantLedger: wantLedger(1, 200), wantPending: poisonJobs(1, 200),
		},
		"own PEL is processed first": {
			readOwnPEL: true, preDelivered: 30, wantLedger: wantLedger(1, 200), wantPending: poisonJobs(1, 200),
		},
		"own PEL is left alone without --read-own-pel": {
			readOwnPEL: false, preDelivered: 30, wantLedger: wantLedger(31, 200),
			wantPending: append(intRange(1, 30), poisonJobs(31, 200)...),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			ctx := context.Background()
			seed(t, rdb, 200)
			if tc.preDelivered > 0 {
				require.NoError(t, rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
					Group: group, Consumer: consumer, Streams: []string{stream, ">"}, Count: tc.preDelivered, Block: -1,
				}).Err())
			}
			cfg := testConfig(srv.Addr())
			cfg.ReadOwnPEL = tc.readOwnPEL
			stop := startWorker(t, cfg)

			require.Eventually(t, func() bool {
				n, err := rdb.XPending(ctx, stream, group).Result()
				return err == nil && n.Count == int64(len(tc.wantPending)) &&
					rdb.HLen(ctx, cfg.Ledger).Val() == int64(len(tc.wantLedger))
			}, 10*time.Second, 20*time.Millisecond, "worker should drain the stream")
			requireRecentHeartbeat(t, rdb)
			_, err := stop()
			require.NoError(t, err)

			requireLedger(t, rdb, tc.wantLedger)
			require.ElementsMatch(t, tc.wantPending, pendingJobs(t, rdb), "pending entries")
		})
	}
}

func TestWorkerAcksBadEntryUnderItsID(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	seed(t, rdb, 0)
	id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"job", "not-a-number"}}).Result()
	require.NoError(t, err)
	cfg := testConfig(srv.Addr())
	startWorker(t, cfg)

	require.Eventually(t, func() bool {
		return rdb.HGet(ctx, cfg.Ledger, "bad:"+id).Val() == "1"
	}, 5*time.Second, 20*time.Millisecond, "bad entry should be counted under bad:<id>")
	require.Empty(t, pending(t, rdb), "bad entry should be acked")
}

func TestWorkerCountsEachJobOnceAcrossRedisRestart(t *testing.T) {
	t.Parallel()
	tests := map[string]func(*testing.T, *redistest.Server){
		"SIGKILL then restart": func(t *testing.T, srv *redistest.Server) {
			srv.Kill()
			time.Sleep(300 * time.Millisecond) // the worker sees the outage
			srv.Restart(t)
		},
		"graceful restart": func(t *testing.T, srv *redistest.Server) { srv.Restart(t) },
	}
	for name, disrupt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const jobs = 400
			srv := redistest.Start(t, redistest.Options{AOF: true, Args: []string{"--appendfsync", "always"}})
			rdb := srv.Client(t)
			ctx := context.Background()
			seed(t, rdb, jobs)
			cfg := testConfig(srv.Addr())
			cfg.MinProcess, cfg.MaxProcess = 2*time.Millisecond, 8*time.Millisecond
			stop := startWorker(t, cfg)

			require.Eventually(t, func() bool { return rdb.HLen(ctx, cfg.Ledger).Val() >= 60 },
				10*time.Second, 5*time.Millisecond, "worker should be processing")
			disrupt(t, srv)

			want := wantLedger(1, jobs)
			require.Eventually(t, func() bool {
				n, err := rdb.XPending(ctx, stream, group).Result()
				return err == nil && n.Count == jobs/poisonEvery && rdb.HLen(ctx, cfg.Ledger).Val() >= int64(len(want))
			}, 30*time.Second, 20*time.Millisecond, "worker should drain the stream after the restart")
			_, err := stop()
			require.NoError(t, err)

			requireLedger(t, rdb, want)
			require.ElementsMatch(t, poisonJobs(1, jobs), pendingJobs(t, rdb), "only poison stays pending")
		})
	}
}

func TestCancelMakesRunReturnPromptly(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		jobs    int
		process time.Duration
		// before runs once the worker is up, just before the cancel.
		before     func(*testing.T, *redistest.Server, *redis.Client)
		wantLedger map[string]string
	}{
		"while blocked in XREADGROUP": {
			before: func(*testing.T, *redistest.Server, *redis.Client) { time.Sleep(100 * time.Millisecond) },
		},
		"while Redis is down": {
			before: func(_ *testing.T, srv *redistest.Server, _ *redis.Client) {
				srv.Kill()
				time.Sleep(300 * time.Millisecond)
			},
		},
		"with an entry in hand, which is acked": {
			jobs: 1, process: 800 * time.Millisecond, wantLedger: wantLedger(1, 1),
			before: func(t *testing.T, _ *redistest.Server, rdb *redis.Client) {
				require.Eventually(t, func() bool {
					n, err := rdb.XPending(context.Background(), stream, group).Result()
					return err == nil && n.Count == 1
				}, 5*time.Second, 5*time.Millisecond, "worker should take the entry")
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			seed(t, rdb, tc.jobs)
			cfg := testConfig(srv.Addr())
			if tc.process > 0 {
				cfg.MinProcess, cfg.MaxProcess = tc.process, tc.process
			}
			stop := startWorker(t, cfg)
			require.Eventually(t, func() bool { return rdb.Exists(context.Background(), "hb:"+consumer).Val() == 1 },
				5*time.Second, 5*time.Millisecond, "worker should heartbeat")
			tc.before(t, srv, rdb)

			took, err := stop()
			require.NoError(t, err)
			require.Less(t, took, 2*time.Second, "run should return promptly after cancel")
			if tc.wantLedger != nil {
				requireLedger(t, rdb, tc.wantLedger)
				require.Empty(t, pending(t, rdb), "the entry in hand should be acked")
			}
		})
	}
}

func TestADeliveryIsCountedUnderTheOriginalItNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, "jobs/1-0", original("jobs", redis.XMessage{ID: "1-0", Values: map[string]any{"job": "7"}}), "an original names itself")
	require.Equal(t, "jobs/1-0", original("jobs", redis.XMessage{ID: "9-0", Values: map[string]any{"job": "7",
		"pelwarden-original-stream": "jobs", "pelwarden-original-id": "1-0"}}), "a copy names its first original")
}
