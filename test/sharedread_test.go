package e2e

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/redistest"
)

// pelwardenCalls is what pelwarden asked of Redis between two reads of
// INFO commandstats: the producer's XADDs, the victim's heartbeats and
// the test's own CLIENT LIST left out.
func pelwardenCalls(before, after map[string]int64) (by map[string]int64, total int64) {
	by, _ = redistest.CallsSince(before, after)
	for name, n := range by {
		if name == "xadd" || name == "set" || name == "client|list" {
			delete(by, name)
			continue
		}
		total += n
	}
	return by, total
}

// TestStreamIsActiveTargetsDifferingOnlyInThresholdsShareEachRead: a
// stranger opens 100 StreamIsActive streams on one group, each a target of
// its own by its ghostIdleSeconds, that stay inactive, so that every XADD
// wakes them all. Each XADD then costs Redis one read of the group and
// the re-arming of its stream, not a read per target. Redis is unchanged
// but for the producer's entries, and no planted secret shows.
func TestStreamIsActiveTargetsDifferingOnlyInThresholdsShareEachRead(t *testing.T) {
	t.Parallel()
	const targets, xadds = 100, 10
	_, rdb := victim(t)
	plantSecrets(t, rdb)
	redistest.CreateGroup(t, rdb, "feed", "readers")
	books, others := readBooks(t, rdb), otherKeys(t, rdb, "hb:", "feed")
	cfg := testConfig(rdbAddr(rdb))
	// Answers from any read, and no resend: every read is one a wake asked
	// for.
	cfg.Scaler.Freshness = time.Hour
	cfg.Scaler.ActiveResendInterval = time.Hour
	// Past the default cap of a group's targets: reads are shared however
	// many an operator allows.
	cfg.Scaler.MaxActiveTargetsPerGroup = targets
	s := startStranger(t, cfg)
	addr := s.app.HTTPAddr()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var wg sync.WaitGroup
	for i := range targets {
		wg.Go(func() {
			md := map[string]string{"stream": "feed", "consumerGroup": "readers", "lagCount": "5",
				"activationLagCount": "1000000", "ghostIdleSeconds": strconv.Itoa(100 + i)}
			_, err := openActive(ctx, t, s.client, soObj("intruder", "flood-"+strconv.Itoa(i), md))
			require.NoError(t, err, "stream %d", i)
		})
	}
	wg.Wait()
	require.InDelta(t, float64(targets), gauge(t, addr, "pelwarden_scaler_active_targets"), 0, "a target per threshold")

	before := redistest.CommandCalls(t, rdb)
	for range xadds {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "feed", Values: []string{"job", "1"}}).Err())
		time.Sleep(200 * time.Millisecond) // every target woken, judged and armed again
	}
	by, total := pelwardenCalls(before, redistest.CommandCalls(t, rdb))
	// Per XADD: the XREAD that answers, one XREVRANGE and one CLIENT
	// UNBLOCK (or CLIENT ID, as the waker reconnects) to arm again, and
	// one read of four commands for every target.
	perXAdd := float64(total) / xadds
	t.Logf("Redis commands per XADD with %d targets of one group: %.1f (%v)", targets, perXAdd, by)
	require.LessOrEqual(t, perXAdd, float64(3+4+2), "commands per XADD follow the group's reads, not its %d targets: %v", targets, by)
	require.LessOrEqual(t, by["xinfo|consumers"], int64(xadds+1), "one read of the group per XADD, not one per target: %v", by)

	require.Equal(t, books, readBooks(t, rdb), "the victim's streams, pending entries and consumers are unchanged")
	require.Equal(t, others, otherKeys(t, rdb, "hb:", "feed"), "keys beside the streams are unchanged")
	n, err := rdb.XLen(ctx, "feed").Result()
	require.NoError(t, err)
	require.Equal(t, int64(xadds), n, "feed holds the producer's entries and nothing else")
	s.requireNoSecret(t)

	cancel()
	eventually(t, 5*time.Second, func() error {
		if n := gauge(t, addr, "pelwarden_scaler_active_targets"); n != 0 {
			return status.Errorf(codes.Unknown, "%v targets left with every stream closed", n)
		}
		return nil
	})
}

// TestTargetsDifferingOnlyInThresholdsShareEachRead: a stranger polls four
// targets of the victim's group that differ in ghostIdleSeconds alone,
// together, every 300ms. pelwarden reads the group ahead of each round of
// polls once for all four, not four times; and each is judged by its own
// threshold from those reads: under 1s and 2s the victim's two consumers,
// idle past them, are ghosts and their 6 entries left out; under 3600s
// and 7200s they are alive. Redis is unchanged and no planted secret
// shows.
func TestTargetsDifferingOnlyInThresholdsShareEachRead(t *testing.T) {
	t.Parallel()
	const interval, window = 300 * time.Millisecond, 3 * time.Second
	_, rdb := victim(t)
	plantSecrets(t, rdb)
	books, others := readBooks(t, rdb), otherKeys(t, rdb, "hb:")
	cfg := testConfig(rdbAddr(rdb))
	cfg.Scaler.Freshness = interval
	s := startStranger(t, cfg)
	ctx := context.Background()
	poll := func(ghostIdle string) int64 {
		md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "pendingEntriesCount": "1", "ghostIdleSeconds": ghostIdle}
		res, err := s.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: soObj("intruder", "t"+ghostIdle, md), MetricName: "m"})
		require.NoError(t, err)
		s.saw(t, res)
		return res.GetMetricValues()[0].GetMetricValue()
	}
	thresholds := []string{"1", "2", "3600", "7200"}
	round := func() {
		for _, th := range thresholds {
			poll(th)
		}
		time.Sleep(interval)
	}
	// The victim's consumers read at its setup: idle past two seconds.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		round()
	}

	before := redistest.CommandCalls(t, rdb)
	rounds := 0
	for end := time.Now().Add(window); time.Now().Before(end); rounds++ {
		round()
	}
	by, _ := pelwardenCalls(before, redistest.CommandCalls(t, rdb))
	reads := by["xinfo|consumers"]
	t.Logf("reads of the group in %d rounds of polls of %d targets: %d (%v)", rounds, len(thresholds), reads, by)
	require.Positive(t, reads, "the polls read the group")
	require.LessOrEqual(t, reads, int64(rounds)+2, "one read a round for all %d targets: %v", len(thresholds), by)

	for th, want := range map[string]int64{"1": 0, "2": 0, "3600": 6, "7200": 6} {
		require.Equal(t, want, poll(th), "ghostIdleSeconds %s: the consumers, idle over 2s, judged by it", th)
	}
	require.Equal(t, books, readBooks(t, rdb), "the victim's streams, pending entries and consumers are unchanged")
	require.Equal(t, others, otherKeys(t, rdb, "hb:"), "keys beside the streams are unchanged")
	s.requireNoSecret(t)
}
