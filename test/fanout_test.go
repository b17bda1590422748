package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/pelwarden/pelwarden/internal/app"
	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/kube"
	"github.com/pelwarden/pelwarden/internal/redistest"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// gauge reads one unlabelled series from a scrape; -1 when it is absent.
func gauge(t *testing.T, addr, name string) float64 {
	t.Helper()
	for line := range strings.Lines(scrape(t, addr)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return -1
}

// openActive opens a StreamIsActive as KEDA does and returns its first
// answer's error, and the stream for more.
func openActive(ctx context.Context, t *testing.T, c externalscaler.ExternalScalerClient, ref *externalscaler.ScaledObjectRef) (externalscaler.ExternalScaler_StreamIsActiveClient, error) {
	t.Helper()
	st, err := c.StreamIsActive(ctx, ref)
	require.NoError(t, err)
	first, err := st.Recv()
	if err == nil {
		require.False(t, first.GetResult(), "nothing waits on the stream yet")
	}
	return st, err
}

// xreadBlocked counts the clients of a server blocked in XREAD.
func xreadBlocked(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	require.NoError(t, err)
	return strings.Count(list, "cmd=xread ")
}

// TestStreamIsActiveFloodSharesOneWaiterAndIsCapped: a stranger opens as
// many StreamIsActive streams on one Redis stream as the caps let it, on
// a few targets that stay inactive, so that every XADD wakes them all. A
// producer's XADD then costs Redis a few commands per target, not two per
// stream; one XREAD waits for all of them; past the namespace's share and
// past the cap a stream is ResourceExhausted naming the setting; a
// legitimate ScaledObject's stream from another namespace is admitted and
// pushes true on the XADD. Nothing in Redis changes but the producer's
// entries, and no planted secret is shown.
func TestStreamIsActiveFloodSharesOneWaiterAndIsCapped(t *testing.T) {
	t.Parallel()
	const perNamespace, maxStreams, targets, xadds = 150, 200, 3, 10
	_, rdb := victim(t)
	plantSecrets(t, rdb)
	redistest.CreateGroup(t, rdb, "feed", "readers")
	books, others := readBooks(t, rdb), otherKeys(t, rdb, "hb:", "feed")
	cfg := testConfig(rdbAddr(rdb))
	// The default refresh: the reads a wake causes are not lost among
	// the view's own.
	d := config.Default().Scaler
	cfg.Scaler.Freshness = d.Freshness
	cfg.Scaler.MaxActiveStreams, cfg.Scaler.MaxActiveStreamsPerNamespace = maxStreams, perNamespace
	s := startStranger(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	asleep := func(ns string, i int) *externalscaler.ScaledObjectRef {
		return soObj(ns, "flood-"+strconv.Itoa(i), map[string]string{"stream": "feed", "consumerGroup": "readers",
			"lagCount": "5", "activationLagCount": "1000000", "ghostIdleSeconds": strconv.Itoa(100 + i%targets)})
	}
	for i := range perNamespace {
		_, err := openActive(ctx, t, s.client, asleep("intruder", i))
		require.NoError(t, err, "stream %d, within the namespace's share", i)
	}
	_, err := openActive(ctx, t, s.client, asleep("intruder", perNamespace))
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "past the namespace's share: %v", err)
	require.ErrorContains(t, err, "scaler.maxActiveStreamsPerNamespace")
	legit, err := openActive(ctx, t, s.client, soObj("jobs", "feed-readers", map[string]string{"stream": "feed", "consumerGroup": "readers", "lagCount": "1"}))
	require.NoError(t, err, "another namespace's stream is admitted with the flood's namespace at its share")
	for i := perNamespace + 1; i < maxStreams; i++ {
		_, err := openActive(ctx, t, s.client, asleep("intruder-"+strconv.Itoa(i%2), i))
		require.NoError(t, err, "stream %d, within the cap", i)
	}
	_, err = openActive(ctx, t, s.client, asleep("intruder-9", 0))
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "past the cap: %v", err)
	require.ErrorContains(t, err, "the most scaler.maxActiveStreams allows")
	require.InDelta(t, float64(maxStreams), gauge(t, s.app.HTTPAddr(), "pelwarden_scaler_active_streams"), 0)
	eventually(t, 5*time.Second, func() error {
		if n := gauge(t, s.app.HTTPAddr(), "pelwarden_stream_waker_armed_streams"); n != 1 {
			return status.Errorf(codes.Unknown, "%v streams armed, want feed alone", n)
		}
		return nil
	})
	require.Equal(t, 1, xreadBlocked(t, rdb), "one XREAD waits for all %d streams", maxStreams)

	before := redistest.CommandCalls(t, rdb)
	for range xadds {
		require.NoError(t, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "feed", Values: []string{"job", "1"}}).Err())
		time.Sleep(200 * time.Millisecond) // every stream woken, read and armed again
	}
	by, _ := redistest.CallsSince(before, redistest.CommandCalls(t, rdb))
	// The producer's XADDs, the victim's heartbeats and the test's own
	// CLIENT LIST are not pelwarden's.
	var total int64
	for name, n := range by {
		if name != "xadd" && name != "set" && name != "client|list" {
			total += n
		}
	}
	// Per XADD: the XREAD that answers, one XREVRANGE and one CLIENT
	// UNBLOCK to arm again, and per target two reads of four commands
	// (after the wake, after the arming), plus the view's refreshes.
	perXAdd := float64(total) / xadds
	t.Logf("Redis commands per XADD with %d streams on %d+1 targets: %.1f (%v)", maxStreams, targets, perXAdd, by)
	require.LessOrEqual(t, perXAdd, float64(3+2*4*(targets+1)+8), "commands per XADD follow the targets, not the %d streams: %v", maxStreams, by)
	require.LessOrEqual(t, by["xrevrange"], int64(xadds+1), "one arming per wake, not one per stream: %v", by)

	got, err := legit.Recv()
	require.NoError(t, err)
	require.True(t, got.GetResult(), "the legitimate stream pushed true on the XADD")

	require.Equal(t, books, readBooks(t, rdb), "the victim's streams, pending entries and consumers are unchanged")
	require.Equal(t, others, otherKeys(t, rdb, "hb:", "feed"), "keys beside the streams are unchanged")
	n, err := rdb.XLen(ctx, "feed").Result()
	require.NoError(t, err)
	require.Equal(t, int64(xadds), n, "feed holds the producer's entries and nothing else")
	pending, err := rdb.XPending(ctx, "feed", "readers").Result()
	require.NoError(t, err)
	require.Zero(t, pending.Count, "nothing read from feed")
	s.requireNoSecret(t)

	cancel()
	eventually(t, 5*time.Second, func() error {
		if n := gauge(t, s.app.HTTPAddr(), "pelwarden_scaler_active_streams"); n != 0 {
			return status.Errorf(codes.Unknown, "%v streams still counted open", n)
		}
		if n := gauge(t, s.app.HTTPAddr(), "pelwarden_stream_waker_armed_streams"); n != 0 {
			return status.Errorf(codes.Unknown, "%v streams still armed", n)
		}
		return nil
	})
}

// TestPodWatchFloodIsCappedAndALegitimateSelectorIsServed: a stranger
// names a new podSelector on every call, from one namespace and then from
// many. Past the namespace's share and past kubernetes.maxPodWatches the
// call is ResourceExhausted naming the setting, and no more watches run;
// a legitimate ScaledObject of another namespace, polling while the
// stranger's namespace holds its share, gets its watch, and its consumers
// are judged by their pods. Redis is unchanged and no secret shows.
func TestPodWatchFloodIsCappedAndALegitimateSelectorIsServed(t *testing.T) {
	t.Parallel()
	const perNamespace, maxWatches = 10, 30
	_, rdb := victim(t)
	plantSecrets(t, rdb)
	books, others := readBooks(t, rdb), otherKeys(t, rdb, "hb:")
	pods := fake.NewClientset(workerPod("w-live"))
	cfg := testConfig(rdbAddr(rdb))
	cfg.Kubernetes.Enabled = true
	cfg.Kubernetes.MaxPodWatches, cfg.Kubernetes.MaxPodWatchesPerNamespace = maxWatches, perNamespace
	s := startStranger(t, cfg, app.WithKubernetesClient(kube.PodsFrom(pods.CoreV1().Pods)))
	ctx := context.Background()
	// A selector's pods are watched in the ScaledObject's namespace, unless
	// podNamespace names another.
	poll := func(namespace string, i int) error {
		md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "kubernetes",
			"podSelector": "app=flood-" + strconv.Itoa(i)}
		_, err := s.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: soObj(namespace, "flood", md), MetricName: "m"})
		return err
	}
	watches := func() int { return len(series(scrape(t, s.app.HTTPAddr()), "pelwarden_pod_watch_state")) / 6 }

	for i := range perNamespace {
		require.NoError(t, poll("intruder", i), "selector %d", i)
	}
	err := poll("intruder", perNamespace)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "past the namespace's share: %v", err)
	require.ErrorContains(t, err, "kubernetes.maxPodWatchesPerNamespace")

	legit := map[string]string{"stream": "jobs", "consumerGroup": "workers", "liveness": "kubernetes", "podSelector": "app=worker", "podNamespace": "jobs"}
	_, err = s.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: soObj("jobs", "workers", legit), MetricName: "m"})
	require.NoError(t, err, "another namespace's selector gets its watch")

	refused := 0
	for i := perNamespace + 1; i < 3*maxWatches; i++ {
		if err := poll("intruder-"+strconv.Itoa(i), i); err != nil {
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
			require.ErrorContains(t, err, "the most kubernetes.maxPodWatches allows")
			refused++
		}
	}
	require.Equal(t, 3*maxWatches-perNamespace-1-(maxWatches-perNamespace-1), refused, "every selector past the cap is refused")
	require.Equal(t, maxWatches, watches(), "no more pod watches than the cap")
	_, err = s.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: soObj("jobs", "workers", legit), MetricName: "m"})
	require.NoError(t, err, "the legitimate selector is still served with the cap full")
	eventually(t, 5*time.Second, func() error {
		res, err := s.admin.ListTargets(ctx, &pelwardenv1.ListTargetsRequest{})
		if err != nil {
			return err
		}
		s.saw(t, res)
		for _, tg := range res.GetTargets() {
			if !strings.Contains(tg.GetLiveness(), "|jobs|app=worker|") {
				continue
			}
			for _, c := range tg.GetConsumers() {
				if c.GetName() == "w-live" && c.GetPod() == "running" {
					return nil
				}
			}
			return fmt.Errorf("w-live's pod not seen running: %v", tg.GetConsumers())
		}
		return errors.New("no target watches app=worker")
	})

	require.Equal(t, books, readBooks(t, rdb), "streams, pending entries and consumers are unchanged")
	require.Equal(t, others, otherKeys(t, rdb, "hb:"), "keys beside the streams are unchanged")
	s.requireNoSecret(t)
}

// TestListPendingRunsAtMostTwoAtOnce: ListPending is open to anyone who
// reaches the port and a page can scan a whole PEL, so it shares Plan's
// and Findings' bound. With Redis paused, five pages asked at once: two
// wait for Redis and then answer, three are refused at once with
// ResourceExhausted, and a Plan asked meanwhile is refused too. Redis is
// unchanged and no secret shows.
func TestListPendingRunsAtMostTwoAtOnce(t *testing.T) {
	t.Parallel()
	const calls, pause = 5, 2 * time.Second
	_, rdb := victim(t)
	plantSecrets(t, rdb)
	books, others := readBooks(t, rdb), otherKeys(t, rdb, "hb:")
	cfg := testConfig(rdbAddr(rdb))
	cfg.Redis[0].ReadTimeout = 3 * pause // the held pages wait out the pause
	s := startStranger(t, cfg)
	ctx := context.Background()
	_, err := s.client.GetMetricSpec(ctx, soObj("jobs", "workers", map[string]string{"stream": "jobs", "consumerGroup": "workers"}))
	require.NoError(t, err, "jobs/workers registered, for Plan")

	require.NoError(t, rdb.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err())
	type answer struct {
		res *pelwardenv1.ListPendingResponse
		err error
	}
	answers := make(chan answer, calls)
	for range calls {
		go func() {
			res, err := s.admin.ListPending(ctx, &pelwardenv1.ListPendingRequest{Target: jobsRef, PageSize: 10000})
			answers <- answer{res, err}
		}()
	}
	var served, refused int
	for range calls {
		a := <-answers
		switch status.Code(a.err) {
		case codes.OK:
			served++
			require.Len(t, a.res.GetEntries(), 6, "the page answers once Redis is back")
			s.saw(t, a.res)
		case codes.ResourceExhausted:
			refused++
			require.ErrorContains(t, a.err, "at most 2 run at once")
			if refused == calls-2 {
				_, err := s.admin.Plan(ctx, &pelwardenv1.PlanRequest{Target: jobsRef})
				require.Equal(t, codes.ResourceExhausted, status.Code(err), "Plan shares the bound: %v", err)
			}
		default:
			require.NoError(t, a.err)
		}
	}
	require.Equal(t, 2, served, "two pages ran")
	require.Equal(t, calls-2, refused, "the others were refused, not queued")
	require.Equal(t, books, readBooks(t, rdb), "streams, pending entries and consumers are unchanged")
	require.Equal(t, others, otherKeys(t, rdb, "hb:"), "keys beside the streams are unchanged")
	s.requireNoSecret(t)
}
