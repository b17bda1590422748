package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/scaler"
)

// TestGetMetricsLeavesOutGhostHeldEntries is the scenario KEDA's built-in
// scaler gets wrong: 3 heartbeating consumers hold 9 entries and 2 dead ones
// hold 40. KEDA's count would be 49; the work live workers face is 9.
func TestGetMetricsLeavesOutGhostHeldEntries(t *testing.T) {
	t.Parallel()
	requireGhostsLeftOut(t, startStandalone(t), "")
}

// requireGhostsLeftOut runs the ghost scenario on b with its keys under
// prefix: the metric counts live pending, lag and backlog, never the
// ghosts' entries. The heartbeat keys and the stream need not share a
// node: in a cluster they spread over the masters.
func requireGhostsLeftOut(t *testing.T, b *backend, prefix string) {
	t.Helper()
	rdb := b.rdb
	ctx := context.Background()
	stream, hb := prefix+"jobs", prefix+"hb:"
	redistest.CreateGroup(t, rdb, stream, "workers")
	redistest.AddJobs(t, rdb, stream, "", 49)
	redistest.Read(t, rdb, stream, "workers", "ghost-a", 25)
	redistest.Read(t, rdb, stream, "workers", "ghost-b", 15)
	for _, c := range []string{"live-0", "live-1", "live-2"} {
		redistest.Read(t, rdb, stream, "workers", c, 3)
	}
	redistest.AddJobs(t, rdb, stream, "", 5) // lag: added, not yet delivered
	heartbeat(t, rdb, hb+"ghost-a", time.Now().Add(-time.Hour))
	// ghost-b never heartbeated: a missing key is no heartbeat.
	time.Sleep(1100 * time.Millisecond) // the ghosts' idle passes the 1 s read grace

	done := make(chan struct{})
	defer close(done)
	go func() { // the live workers keep beating while they hold their entries
		for {
			for _, c := range []string{"live-0", "live-1", "live-2"} {
				_ = rdb.Set(ctx, hb+c, time.Now().UnixMilli(), 0).Err()
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	eventually(t, time.Second, func() error { return rdb.Get(ctx, hb+"live-2").Err() })

	p := startPelwardenOn(t, b.connect, nil)
	md := map[string]string{
		"scalerAddress": "pelwarden:9090", "stream": stream, "consumerGroup": "workers",
		"pendingEntriesCount": "3", "liveness": "heartbeat", "heartbeatKey": hb + "{consumer}", "heartbeatMaxAgeSeconds": "1",
	}
	spec, err := p.client.GetMetricSpec(ctx, ref(md))
	require.NoError(t, err)
	require.Len(t, spec.GetMetricSpecs(), 1)
	require.Equal(t, int64(3), spec.GetMetricSpecs()[0].GetTargetSize(), "the target comes from pendingEntriesCount")
	require.InDelta(t, 3.0, spec.GetMetricSpecs()[0].GetTargetSizeFloat(), 0)
	require.Equal(t, "pelwarden-default-"+metricPart(stream)+"-workers", spec.GetMetricSpecs()[0].GetMetricName())

	// live pending: 9, not the 49 an all-consumers count gives, once a
	// max age has passed since pelwarden's first read (before it, a
	// heartbeat stale already is not evidence: the ghosts are Unknown).
	requireMetric(t, p, md, 9)
	active, err := p.client.IsActive(ctx, ref(md))
	require.NoError(t, err)
	require.True(t, active.GetResult())

	lag := cloneWith(md, "pendingEntriesCount", "", "lagCount", "2")
	v, err := metric(ctx, t, p.client, lag)
	require.NoError(t, err)
	require.Equal(t, int64(5), v, "lag is XINFO GROUPS lag")
	backlog := cloneWith(md, "pendingEntriesCount", "", "backlogCount", "2")
	v, err = metric(ctx, t, p.client, backlog)
	require.NoError(t, err)
	require.Equal(t, int64(14), v, "backlog is lag plus live pending")
}

// TestGetMetricsOfMissingStreamOrGroupIsZeroButAMissingGroupsLag: no
// stream or no group is no pending work, and not an error; the lag of a
// group not created yet is the stream's length, as KEDA's lagCount counts
// it, so a moved lag trigger starts the worker that creates the group.
func TestGetMetricsOfMissingStreamOrGroupIsZeroButAMissingGroupsLag(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	p := startPelwarden(t, srv.Addr(), nil)
	redistest.AddJobs(t, rdb, "jobs", "", 3)
	for name, tc := range map[string]struct {
		md   map[string]string
		want int64
	}{
		"missing stream":       {md: map[string]string{"stream": "nothing-here", "consumerGroup": "workers", "lagCount": "1"}},
		"missing group":        {md: map[string]string{"stream": "jobs", "consumerGroup": "nobody"}},
		"missing group's lag":  {md: map[string]string{"stream": "jobs", "consumerGroup": "nobody", "lagCount": "1"}, want: 3},
		"missing group's work": {md: map[string]string{"stream": "jobs", "consumerGroup": "nobody", "backlogCount": "1"}, want: 3},
	} {
		v, err := metric(ctx, t, p.client, tc.md)
		require.NoError(t, err, name)
		require.Equal(t, tc.want, v, name)
		active, err := p.client.IsActive(ctx, ref(tc.md))
		require.NoError(t, err, name)
		require.Equal(t, tc.want > 0, active.GetResult(), name)
	}
}

func TestBadMetadataIsInvalidArgumentNamingTheKey(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := startPelwarden(t, srv.Addr(), nil)
	ctx := context.Background()
	bad := map[string]string{"stream": "jobs", "consumerGroup": "workers", "ghostIdleSeconds": "soon"}
	_, err := p.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(bad)})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "ghostIdleSeconds")
	noStream := ref(map[string]string{"consumerGroup": "workers"})
	spec, err := p.client.GetMetricSpec(ctx, noStream)
	require.NoError(t, err)
	require.Equal(t, scaler.RefusedMetricName, spec.GetMetricSpecs()[0].GetMetricName(), "GetMetricSpec answers the placeholder")
	_, err = p.client.IsActive(ctx, noStream)
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "stream")
	_, err = p.client.IsActive(ctx, nil)
	require.Equal(t, codes.InvalidArgument, status.Code(err), "a nil ref is refused, not a panic")
}

// TestRedisDownIsUnavailableThenRecovers: a Redis failure is an error to
// KEDA (so it keeps its fallback), returned within pelwarden's own deadline
// although KEDA sets none; when Redis is back, no restart is needed.
func TestRedisDownIsUnavailableThenRecovers(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 6)
	redistest.Read(t, rdb, "jobs", "workers", "w-0", 4)
	require.NoError(t, rdb.Do(context.Background(), "BGREWRITEAOF").Err())
	time.Sleep(200 * time.Millisecond)

	const requestTimeout = time.Second
	p := startPelwarden(t, srv.Addr(), nil)
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers"}
	ctx := context.Background()
	v, err := metric(ctx, t, p.client, md)
	require.NoError(t, err)
	require.Equal(t, int64(4), v)

	srv.Kill()
	time.Sleep(600 * time.Millisecond) // let the last good snapshot pass its max age
	for _, call := range []string{"GetMetrics", "IsActive"} {
		start := time.Now()
		if call == "GetMetrics" {
			_, err = metric(ctx, t, p.client, md)
		} else {
			_, err = p.client.IsActive(ctx, ref(md))
		}
		took := time.Since(start)
		require.Equal(t, codes.Unavailable, status.Code(err), "%s with Redis down: %v", call, err)
		require.Less(t, took, requestTimeout+2*time.Second, "%s answers within pelwarden's own deadline", call)
	}

	srv.Restart(t)
	eventually(t, 10*time.Second, func() error {
		got, err := metric(ctx, t, p.client, md)
		if err == nil && got != 4 {
			t.Fatalf("after recovery got %d, want 4", got)
		}
		return err
	})
}

// TestStreamIsActivePushesOnXAddAndEndsOnCancel is not parallel: it checks
// for leaked goroutines.
func TestStreamIsActivePushesOnXAddAndEndsOnCancel(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	before := goleak.IgnoreCurrent()
	p := startPelwarden(t, srv.Addr(), nil)
	md := map[string]string{"stream": "jobs", "consumerGroup": "workers", "lagCount": "1"}
	_, err := metric(context.Background(), t, p.client, md) // registers the target
	require.NoError(t, err)
	running := goleak.IgnoreCurrent()

	ctx, cancel := context.WithCancel(context.Background())
	stream, err := p.client.StreamIsActive(ctx, ref(md))
	require.NoError(t, err)
	first, err := stream.Recv()
	require.NoError(t, err)
	require.False(t, first.GetResult(), "an empty group is not active")

	added := time.Now()
	redistest.AddJobs(t, rdb, "jobs", "", 1)
	got := make(chan bool, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				close(got)
				return
			}
			if r.GetResult() {
				got <- true
			}
		}
	}()
	select {
	case ok := <-got:
		require.True(t, ok)
		t.Logf("push after XADD took %s", time.Since(added))
	case <-time.After(5 * time.Second):
		t.Fatal("no true pushed within 5s of the XADD")
	}

	cancel()
	// The handler, its waker watch and the client's receive loop all end
	// while pelwarden keeps running. The watch taken again when the entry
	// fired, before the read that found the group active, was let go at
	// once; the waker's XREAD ends within its block (a second), which an
	// XREAD sent just before the release may wait out, and its loop then.
	eventually(t, 3*time.Second, func() error {
		list, err := rdb.ClientList(context.Background()).Result()
		require.NoError(t, err)
		for line := range strings.Lines(list) {
			if strings.Contains(line, "flags=b ") && strings.Contains(line, "cmd=xread ") {
				return fmt.Errorf("an XREAD still blocks: %s", line)
			}
		}
		return goleak.Find(running)
	})
	p.stop()
	goleak.VerifyNone(t, before)
}

func cloneWith(md map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(md))
	for k, v := range md {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(out, kv[i])
			continue
		}
		out[kv[i]] = kv[i+1]
	}
	return out
}

// TestScaledObjectAskingForReclaimGetsItsGhostsRequeued: a trigger with
// reclaim=requeue registers the target with the hygiene loop, which gives
// the ghost's entries back; the metric then counts them as lag.
func TestScaledObjectAskingForReclaimGetsItsGhostsRequeued(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	redistest.CreateGroup(t, rdb, "jobs", "workers")
	redistest.AddJobs(t, rdb, "jobs", "", 8)
	redistest.Read(t, rdb, "jobs", "workers", "ghost", 8)
	time.Sleep(400 * time.Millisecond)
	profile, md := withProfile("quick", map[string]string{"stream": "jobs", "consumerGroup": "workers", "backlogCount": "4",
		"ghostIdleSeconds": "0.3", "reclaim": "requeue", "entryStaleSeconds": "0.1"})
	p := startPelwarden(t, srv.Addr(), profile)
	_, err := metric(ctx, t, p.client, md) // registers the target with the hygiene loop
	require.NoError(t, err)
	eventually(t, 5*time.Second, func() error {
		got, err := metric(ctx, t, p.client, md)
		if err == nil && got != 8 {
			return fmt.Errorf("backlog %d, want the 8 requeued entries", got)
		}
		return err
	})
	pending, err := rdb.XPending(ctx, "jobs", "workers").Result()
	require.NoError(t, err)
	require.Zero(t, pending.Count)
}
