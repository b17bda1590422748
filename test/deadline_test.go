package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// Deadline tests: the view's refresh, the snapshot's maximum age and the
// hygiene scan are all ten minutes apart, so within a test's minute only a
// deadline can read the group again and act; each test fails when its
// deadline is ignored. None measures how fast.

// neverTicks is longer than any test here waits.
const neverTicks = 10 * time.Minute

// untilDeadline is how long a test waits for what a deadline does: far
// past every deadline it sets, far short of neverTicks.
const untilDeadline = time.Minute

func deadlineTune(c *config.Config) {
	c.Scaler.Freshness = neverTicks
	c.Hygiene.ScanInterval, c.Hygiene.LeaseTTL = neverTicks, 3*neverTicks
}

// startDeadlined runs pelwarden on srv with md as its trigger's liveness
// and hygiene (moved into a profile) and returns it with the trigger's
// metadata; the first GetMetrics enrolls the group and reads it.
func startDeadlined(t *testing.T, srv *redistest.Server, md map[string]string) (*pelwarden, map[string]string) {
	t.Helper()
	base := map[string]string{"stream": "jobs", "consumerGroup": "workers", "pendingEntriesCount": "5", "reclaim": "requeue"}
	for k, v := range md {
		base[k] = v
	}
	profile, trig := withProfile("deadline", base)
	return startPelwarden(t, srv.Addr(), tunes(profile, deadlineTune)), trig
}

// requireMetricTurns waits for the metric to become want; the view only
// changes it when it reads the group.
func requireMetricTurns(t *testing.T, p *pelwarden, md map[string]string, want int64, why string) {
	t.Helper()
	eventually(t, untilDeadline, func() error {
		v, err := metric(context.Background(), t, p.client, md)
		if err == nil && v != want {
			err = fmt.Errorf("metric %d, want %d: %s", v, want, why)
		}
		return err
	})
}

// requireRequeuedOnce checks that consumer holds nothing and that every
// job of want has exactly one requeued copy.
func requireRequeuedOnce(t *testing.T, rdb *redis.Client, consumer string, want map[string]int) {
	t.Helper()
	eventually(t, untilDeadline, func() error { return holds(t, rdb, consumer, 0) })
	require.Equal(t, want, copiesByJob(t, rdb), "each entry requeued exactly once")
}

// beater writes key as a fresh heartbeat every 100 ms until stop.
func beater(t *testing.T, rdb redis.Cmdable, key string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_ = rdb.Set(ctx, key, strconv.FormatInt(time.Now().UnixMilli(), 10), 0).Err()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func jobsOf(prefix string, n int) map[string]int {
	out := map[string]int{}
	for i := range n {
		out[fmt.Sprint(prefix, i)] = 1
	}
	return out
}

// TestAHeartbeatThatLapsesGivesBackItsEntriesAtTheDeadline: a worker
// holding entries stops beating; at its heartbeat's max age the view
// reads the group, the metric leaves its entries out and the hygiene
// loop requeues them.
func TestAHeartbeatThatLapsesGivesBackItsEntriesAtTheDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	stop := beater(t, rdb, "hb:w1")
	redistest.Hold(t, rdb, "jobs", "workers", "w1", "j", 5)
	p, md := startDeadlined(t, srv, map[string]string{"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}",
		"heartbeatMaxAgeSeconds": "2", "entryStaleSeconds": "0.1"})
	requireMetricTurns(t, p, md, 5, "the beating worker's entries count")
	// A heartbeat that lapses is evidence only once its node has been
	// read for a max age (the outage rule): beat past that first.
	time.Sleep(2500 * time.Millisecond)
	stop()
	requireMetricTurns(t, p, md, 0, "read again at the heartbeat's max age: the ghost's entries are left out")
	requireRequeuedOnce(t, rdb, "w1", jobsOf("j", 5))
}

// TestAnEntryTurningStaleUnderASilentOwnerIsRequeuedAtItsDeadline is seed
// 000's case: a process keeps reading entries under a name whose owner's
// heartbeat is an hour old. Each entry is requeued when it turns stale,
// not at the next scan.
func TestAnEntryTurningStaleUnderASilentOwnerIsRequeuedAtItsDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "j", 40)
	heartbeat(t, rdb, "hb:w1", time.Now().Add(-time.Hour))
	reader := startSilentReader(t, srv.Addr(), "w1")
	eventually(t, 2*time.Second, func() error { return holds(t, rdb, "w1", 1) })
	p, md := startDeadlined(t, srv, map[string]string{"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}",
		"heartbeatMaxAgeSeconds": "1", "entryStaleSeconds": "1"})
	_, err := metric(context.Background(), t, p.client, md)
	require.NoError(t, err)
	// Entries delivered after pelwarden judged the owner Ghost: only
	// their own deadlines can give them back within the test.
	eventually(t, untilDeadline, func() error {
		if n := len(copiesByJob(t, rdb)); n < 3 {
			return fmt.Errorf("%d entries requeued so far", n)
		}
		return nil
	})
	reader.stop()
	reader.mu.Lock()
	read := reader.jobs
	reader.mu.Unlock()
	require.GreaterOrEqual(t, len(read), 3)
	requireRequeuedOnce(t, rdb, "w1", read)
}

// TestAConsumerCrossingGhostIdleGivesBackItsEntriesAtTheCrossing: idle
// alone judges; the consumer was Alive at pelwarden's first read and
// turns Ghost at readAt + ghostIdle - idle, when the view reads again.
func TestAConsumerCrossingGhostIdleGivesBackItsEntriesAtTheCrossing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.Hold(t, rdb, "jobs", "workers", "w1", "j", 5)
	p, md := startDeadlined(t, srv, map[string]string{"liveness": "idle", "ghostIdleSeconds": "3", "entryStaleSeconds": "0.1"})
	v, err := metric(context.Background(), t, p.client, md)
	require.NoError(t, err)
	require.Equal(t, int64(5), v, "the consumer is Alive at the first read, which came before its idle reached ghostIdle")
	requireMetricTurns(t, p, md, 0, "read again at the idle crossing: the ghost's entries are left out")
	requireRequeuedOnce(t, rdb, "w1", jobsOf("j", 5))
}

// TestAWorkerThatBeatsAgainBeforeItsDeadlineKeepsItsEntries: the look at
// the deadline is the one read between the two beats' deadlines, of the
// heartbeat key alone (a GET beside TIME, no read of the group), and it
// finds the new beat: the entries stay. The worker then stops, and the
// next deadline gives them back, so the look was live all along.
func TestAWorkerThatBeatsAgainBeforeItsDeadlineKeepsItsEntries(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.Hold(t, rdb, "jobs", "workers", "w1", "j", 5)
	held := pendingIDs(t, rdb, "w1")
	const maxAge = 4 * time.Second
	first := time.Now()
	heartbeat(t, rdb, "hb:w1", first)
	p, md := startDeadlined(t, srv, map[string]string{"liveness": "heartbeat", "heartbeatKey": "hb:{consumer}",
		"heartbeatMaxAgeSeconds": "4", "entryStaleSeconds": "0.1"})
	requireMetricTurns(t, p, md, 5, "the beating worker's entries count")
	time.Sleep(time.Until(first.Add(time.Second)))
	before := redistest.CommandCalls(t, rdb)
	heartbeat(t, rdb, "hb:w1", time.Now())
	time.Sleep(time.Until(first.Add(maxAge + 500*time.Millisecond)))
	by, _ := redistest.CallsSince(before, redistest.CommandCalls(t, rdb))
	// One read of the key at the first beat's deadline; a look that lands
	// a hair early on a loaded machine finds the worker within its max
	// age and looks once more (liveness.DeadlineMargin). Without the look,
	// none; with a look that reads the group, XINFO too.
	require.GreaterOrEqual(t, by["get"], int64(1), "a read of the key at the first beat's deadline (commands: %v)", by)
	require.LessOrEqual(t, by["get"], int64(2), "a beat before the deadline costs a read, not reads on a tick (commands: %v)", by)
	require.Zero(t, by["xinfo|consumers"]+by["xinfo|groups"], "the beat decided the look: the group was not read (commands: %v)", by)
	require.Equal(t, held, pendingIDs(t, rdb, "w1"), "the worker keeps its entries")
	ext, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "jobs", Group: "workers", Start: "-", End: "+", Count: 10, Consumer: "w1"}).Result()
	require.NoError(t, err)
	for _, e := range ext {
		require.Equal(t, int64(1), e.RetryCount, "entry %s was never delivered again", e.ID)
	}
	v, err := metric(ctx, t, p.client, md)
	require.NoError(t, err)
	require.Equal(t, int64(5), v, "the metric still counts them")

	requireRequeuedOnce(t, rdb, "w1", jobsOf("j", 5))
}
