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

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/redistest"
)

// activeCounts reads the StreamIsActive counters from a scrape.
func activeCounts(t *testing.T, addr string) (evaluations, wakes float64) {
	t.Helper()
	return gauge(t, addr, "pelwarden_scaler_active_evaluations_total"), gauge(t, addr, "pelwarden_scaler_active_stream_wakes_total")
}

// TestStreamIsActiveFloodOnOneTargetIsEvaluatedOncePerRead: a stranger
// opens 200 StreamIsActive streams on one target, each with an activation
// of its own, beside a legitimate ScaledObject's stream on the same
// target. Each XADD then costs pelwarden a few evaluations of the target,
// however many streams and thresholds it has, and wakes no stream whose
// answer stays false; the legitimate stream alone wakes, to push true.
// When the lag passes every threshold, every stream wakes once and pushes
// true. Redis is unchanged but for the producer's entries, and no planted
// secret is shown.
func TestStreamIsActiveFloodOnOneTargetIsEvaluatedOncePerRead(t *testing.T) {
	t.Parallel()
	const streams, xadds = 200, 10
	_, rdb := victim(t)
	plantSecrets(t, rdb)
	redistest.CreateGroup(t, rdb, "feed", "readers")
	books, others := readBooks(t, rdb), otherKeys(t, rdb, "hb:", "feed")
	cfg := testConfig(rdbAddr(rdb))
	d := config.Default().Scaler
	cfg.Scaler.Freshness = d.Freshness
	// No resend within the test: a wake is a changed answer.
	cfg.Scaler.ActiveResendInterval = time.Hour
	cfg.Scaler.MaxActiveStreamsPerNamespace = streams
	s := startStranger(t, cfg)
	addr := s.app.HTTPAddr()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	opened := make([]externalscaler.ExternalScaler_StreamIsActiveClient, streams)
	var wg sync.WaitGroup
	for i := range opened {
		wg.Go(func() {
			// Active once the lag passes the test's first XADDs and i more.
			md := map[string]string{"stream": "feed", "consumerGroup": "readers", "lagCount": "5", "activationLagCount": strconv.Itoa(xadds + i)}
			st, err := openActive(ctx, t, s.client, soObj("intruder", "flood-"+strconv.Itoa(i), md))
			require.NoError(t, err, "stream %d", i)
			opened[i] = st
		})
	}
	wg.Wait()
	legit, err := openActive(ctx, t, s.client, soObj("jobs", "feed-readers", map[string]string{"stream": "feed", "consumerGroup": "readers", "lagCount": "1"}))
	require.NoError(t, err)
	require.InDelta(t, float64(streams+1), gauge(t, addr, "pelwarden_scaler_active_streams"), 0)
	require.InDelta(t, 1, gauge(t, addr, "pelwarden_scaler_active_targets"), 0, "one target for every stream and threshold")

	evaluations0, wakes0 := activeCounts(t, addr)
	for range xadds {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "feed", Values: []string{"job", "1"}}).Err())
		time.Sleep(200 * time.Millisecond) // the target woken, read and armed again
	}
	evaluations1, wakes1 := activeCounts(t, addr)
	// Per XADD: the read after the wake and after the arming, and each
	// read the view signals; plus the view's own refreshes.
	perXAdd := (evaluations1 - evaluations0) / xadds
	t.Logf("evaluations per XADD with %d streams on one target: %.1f", streams+1, perXAdd)
	require.LessOrEqual(t, perXAdd, 6.0, "evaluations follow the target, not its %d streams and thresholds", streams+1)
	require.InDelta(t, 1, wakes1-wakes0, 0, "only the legitimate stream woke, to push true")
	got, err := legit.Recv()
	require.NoError(t, err)
	require.True(t, got.GetResult(), "the legitimate stream pushed true on the XADD")

	pipe := rdb.Pipeline()
	for range streams {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: "feed", Values: []string{"job", "1"}})
	}
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
	for i, st := range opened {
		got, err := st.Recv()
		require.NoError(t, err, "stream %d", i)
		require.True(t, got.GetResult(), "stream %d pushed true once the lag passed its threshold", i)
	}
	_, wakes2 := activeCounts(t, addr)
	require.InDelta(t, streams, wakes2-wakes1, 0, "each flood stream woke once, for its own change")

	require.Equal(t, books, readBooks(t, rdb), "the victim's streams, pending entries and consumers are unchanged")
	require.Equal(t, others, otherKeys(t, rdb, "hb:", "feed"), "keys beside the streams are unchanged")
	n, err := rdb.XLen(ctx, "feed").Result()
	require.NoError(t, err)
	require.Equal(t, int64(xadds+streams), n, "feed holds the producer's entries and nothing else")
	s.requireNoSecret(t)

	cancel()
	eventually(t, 5*time.Second, func() error {
		if n := gauge(t, addr, "pelwarden_scaler_active_targets"); n != 0 {
			return status.Errorf(codes.Unknown, "%v targets left with every stream closed", n)
		}
		return nil
	})
}

// TestStreamIsActiveTargetEndsEveryStreamWithTheRedisError: when Redis
// goes away, every stream of a target ends with Unavailable, never a
// false that would scale to zero; once Redis is back, a stream opened
// again gets a fresh answer rather than the failed read's error.
func TestStreamIsActiveTargetEndsEveryStreamWithTheRedisError(t *testing.T) {
	t.Parallel()
	const streams = 20
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	p := startPelwarden(t, srv.Addr(), nil)
	// A stream that never ends fails the test rather than hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "lagCount": "1"}
	opened := make([]externalscaler.ExternalScaler_StreamIsActiveClient, streams)
	for i := range opened {
		st, err := openActive(ctx, t, p.client, soObj("jobs", "w-"+strconv.Itoa(i), md))
		require.NoError(t, err)
		opened[i] = st
	}

	srv.Kill()
	for i, st := range opened {
		_, err := st.Recv()
		require.Equal(t, codes.Unavailable, status.Code(err), "stream %d ends with the read's error, not an answer: %v", i, err)
	}

	srv.Restart(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 1)
	eventually(t, 5*time.Second, func() error {
		st, err := p.client.StreamIsActive(ctx, soObj("jobs", "again", md))
		if err != nil {
			return err
		}
		got, err := st.Recv()
		if err != nil {
			return err
		}
		if !got.GetResult() {
			return status.Error(codes.Unknown, "the entry added after the restart is not seen")
		}
		return nil
	})
}

// TestStreamIsActiveStreamsOfOneTargetEachResendTheAnswer: the answer
// holds, so only the resend brings more, and each stream of the target
// re-sends it on its own interval, which a KEDA that missed one needs.
func TestStreamIsActiveStreamsOfOneTargetEachResendTheAnswer(t *testing.T) {
	t.Parallel()
	const streams, resends = 5, 2
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	p := startPelwarden(t, srv.Addr(), func(c *config.Config) { c.Scaler.ActiveResendInterval = 200 * time.Millisecond })
	// A stream that sends nothing more fails the test rather than hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "lagCount": "1"}
	opened := make([]externalscaler.ExternalScaler_StreamIsActiveClient, streams)
	for i := range opened {
		st, err := openActive(ctx, t, p.client, soObj("jobs", "w-"+strconv.Itoa(i), md))
		require.NoError(t, err)
		opened[i] = st
	}
	require.InDelta(t, 1, gauge(t, p.app.HTTPAddr(), "pelwarden_scaler_active_targets"), 0)
	for i, st := range opened {
		for range resends {
			got, err := st.Recv()
			require.NoError(t, err, "stream %d re-sends its answer", i)
			require.False(t, got.GetResult(), "stream %d re-sends the answer that holds", i)
		}
	}
}

// TestStreamIsActiveOpenedBesideAnotherIsAnsweredFromAFreshRead: a
// worker's read makes its group active without an XADD, so nothing wakes
// the target and the answer its open stream holds is stale until the next
// refresh; a stream opened beside it after the read is answered from a
// read begun after its opening, not from that stale answer.
func TestStreamIsActiveOpenedBesideAnotherIsAnsweredFromAFreshRead(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 1)
	p := startPelwarden(t, srv.Addr(), func(c *config.Config) {
		c.Scaler.Freshness = time.Hour
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "pendingEntriesCount": "1"}
	_, err := openActive(ctx, t, p.client, soObj("jobs", "first", md))
	require.NoError(t, err, "nothing is pending yet")

	redistest.Read(t, rdb, "jobs", "workers", "w-0", 1)
	st, err := p.client.StreamIsActive(ctx, soObj("jobs", "second", md))
	require.NoError(t, err)
	got, err := st.Recv()
	require.NoError(t, err)
	require.True(t, got.GetResult(), "the entry w-0 holds is seen by the stream opened after its read")
}

// TestStreamIsActiveTargetsOfOneGroupAreCapped: each target of a group
// with a StreamIsActive stream open is judged apart on every entry that
// lands on the stream, so a stranger with a ghostIdleSeconds per stream
// made an XADD cost a judgement per stream. Past
// scaler.maxActiveTargetsPerGroup a stream with new settings is
// ResourceExhausted naming the setting, while a stream with the settings
// of a target already open, or on another group, is served, and a target
// whose streams all closed frees its place. Redis is unchanged and no
// planted secret shows.
func TestStreamIsActiveTargetsOfOneGroupAreCapped(t *testing.T) {
	t.Parallel()
	const perGroup = 4
	_, rdb := victim(t)
	plantSecrets(t, rdb)
	redistest.CreateGroup(t, rdb, "feed", "readers")
	redistest.CreateGroup(t, rdb, "feed", "auditors")
	books, others := readBooks(t, rdb), otherKeys(t, rdb, "hb:", "feed")
	cfg := testConfig(rdbAddr(rdb))
	cfg.Scaler.MaxActiveTargetsPerGroup = perGroup
	s := startStranger(t, cfg)
	addr := s.app.HTTPAddr()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	asleep := func(group string, i int) *externalscaler.ScaledObjectRef {
		return soObj("intruder", "flood-"+strconv.Itoa(i), map[string]string{"stream": "feed", "consumerGroup": group,
			"lagCount": "5", "activationLagCount": "1000000", "ghostIdleSeconds": strconv.Itoa(100 + i)})
	}
	first, stop := context.WithCancel(ctx)
	_, err := openActive(first, t, s.client, asleep("readers", 0))
	require.NoError(t, err)
	for i := 1; i < perGroup; i++ {
		_, err := openActive(ctx, t, s.client, asleep("readers", i))
		require.NoError(t, err, "target %d, within the group's cap", i)
	}
	_, err = openActive(ctx, t, s.client, asleep("readers", perGroup))
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "a target past the group's cap: %v", err)
	require.ErrorContains(t, err, "scaler.maxActiveTargetsPerGroup")

	same := asleep("readers", 1)
	same.Namespace, same.Name = "jobs", "feed-readers"
	_, err = openActive(ctx, t, s.client, same)
	require.NoError(t, err, "a stream with the settings of an open target is served")
	_, err = openActive(ctx, t, s.client, asleep("auditors", perGroup))
	require.NoError(t, err, "another group's target is served")
	require.InDelta(t, perGroup+1, gauge(t, addr, "pelwarden_scaler_active_targets"), 0)

	stop()
	eventually(t, 5*time.Second, func() error {
		st, err := s.client.StreamIsActive(ctx, asleep("readers", perGroup))
		if err == nil {
			_, err = st.Recv()
		}
		return err
	})

	require.Equal(t, books, readBooks(t, rdb), "the victim's streams, pending entries and consumers are unchanged")
	require.Equal(t, others, otherKeys(t, rdb, "hb:", "feed"), "keys beside the streams are unchanged")
	s.requireNoSecret(t)
}
