package app

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/trigger"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// stoppedClock is a clock that moves only when told.
type stoppedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stoppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stoppedClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// stoppedRefusals is an accounting of 40 refused calls a second in all
// (one a second a caller, ten a namespace) on a stopped clock, where
// admitted are the triggers served.
func stoppedRefusals(t *testing.T, admitted ...trigger.ID) (*refusals, *stoppedClock) {
	t.Helper()
	served := map[trigger.ID]bool{}
	for _, id := range admitted {
		served[id] = true
	}
	r := newRefusals(40, func(id trigger.ID) bool { return served[id] }, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	clock := &stoppedClock{now: time.Unix(1_800_000_000, 0)}
	r.now = clock.Now
	r.all.at = clock.Now()
	return r, clock
}

func triggerAsker(ns, name string) asker {
	return asker{key: callerKey{id: trigger.IDOf(ns, name, map[string]string{"stream": "jobs"})}}
}

// TestARefusedCallerPaysForItsOwnRepeats: a caller's refusals come out
// of its own bucket; its first also out of its namespace's and the
// whole's, its repeats never; a refused call weighs one more per 64 KiB;
// what a caller owes is at most a burst, and is the wait of its answer.
func TestARefusedCallerPaysForItsOwnRepeats(t *testing.T) {
	t.Parallel()
	r, clock := stoppedRefusals(t)
	broken := triggerAsker("tenant-a", "broken")
	for i := range 5 {
		require.Zero(t, r.after(broken), "refusal %d is within the caller's burst of 5", i+1)
	}
	require.InDelta(t, 50-1, r.spaces["tenant-a"].tokens, 0, "only the first refusal of a caller costs its namespace")
	require.InDelta(t, 200-1, r.all.tokens, 0, "and the whole")
	require.Equal(t, time.Second, r.after(broken), "the sixth owes a second: its answer waits that long")
	for range 20 {
		r.after(broken)
	}
	require.Equal(t, 5*time.Second, r.after(broken), "a caller owes at most a burst")
	clock.Add(3 * time.Second)
	require.Equal(t, 3*time.Second, r.after(broken), "the debt comes back at the caller's rate, and the refusal took one more")

	big := triggerAsker("tenant-a", "big")
	big.bytes = 200 << 10
	r.after(big)
	require.InDelta(t, 5-4, r.callers[big.key].tokens, 0, "a refused 200 KiB request weighs four")
	require.InDelta(t, 50-4, r.spaces["tenant-a"].tokens, 0, "a new caller's first refusal weighs on its namespace too (refilled meanwhile)")
	require.Nil(t, r.spaces["tenant-b"], "another namespace is not touched")
}

// TestOnlyANewCallerWaitsWhileItsNamespaceOwes: a namespace whose new
// callers keep being refused owes; its calls from a caller neither
// refused nor served then wait until it owes nothing. A trigger pelwarden
// serves never waits, nor does a caller already refused (its own debt
// holds it), nor a new caller of another namespace.
func TestOnlyANewCallerWaitsWhileItsNamespaceOwes(t *testing.T) {
	t.Parallel()
	sibling := triggerAsker("tenant-a", "served")
	r, _ := stoppedRefusals(t, sibling.key.id)
	for i := range 100 {
		r.after(triggerAsker("tenant-a", "invented-"+string(rune('A'+i%26))+string(rune('a'+i/26))))
	}
	require.Equal(t, 5*time.Second, r.before(triggerAsker("tenant-a", "new")), "a new caller of the namespace waits out its debt")
	require.Zero(t, r.before(sibling), "a trigger pelwarden serves never waits")
	require.Zero(t, r.before(triggerAsker("tenant-a", "invented-Aa")), "a caller already refused is held by its own debt, not before it runs")
	require.Zero(t, r.before(triggerAsker("tenant-b", "new")), "another namespace's new caller does not wait")

	peer := asker{key: callerKey{peer: "10.0.0.9"}}
	require.Zero(t, r.before(peer), "a call that names no trigger pays in the namespace of none")
}

// TestTheCallersAndNamespacesRememberedAreBounded: callers past
// maxCallers are not remembered, and pay their namespace on every
// refusal; namespaces past maxSpaces share one bucket; a sweep forgets
// callers refused longer than callerMemory ago.
func TestTheCallersAndNamespacesRememberedAreBounded(t *testing.T) {
	t.Parallel()
	r, clock := stoppedRefusals(t)
	for i := range maxCallers + 100 {
		r.after(asker{key: callerKey{peer: string(rune(i))}})
	}
	require.Len(t, r.callers, maxCallers)
	for i := range maxSpaces + 10 {
		r.after(triggerAsker("ns-"+string(rune(0x100+i)), "x"))
	}
	require.LessOrEqual(t, len(r.spaces), maxSpaces)
	clock.Add(callerMemory + time.Second)
	r.after(triggerAsker("late", "x"))
	require.Len(t, r.callers, 1, "the sweep forgot every caller refused longer ago than callerMemory")
}

// TestOnlyRefusalsAreCharged: the codes of a call that could never be
// served as sent, CheckTrigger's refused answer and a spec answered to a
// refused trigger (noted by the scaler's Refused hook) are refusals; a
// failing Redis, a slow one, a bug or a good answer are not.
func TestOnlyRefusalsAreCharged(t *testing.T) {
	t.Parallel()
	ctx := withRefusalNote(context.Background())
	for _, c := range []codes.Code{codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.ResourceExhausted, codes.NotFound, codes.FailedPrecondition} {
		require.True(t, refused(ctx, nil, status.Error(c, "x")), "%s", c)
	}
	for _, c := range []codes.Code{codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Canceled} {
		require.False(t, refused(ctx, nil, status.Error(c, "x")), "%s", c)
	}
	require.False(t, refused(ctx, &externalscaler.GetMetricsResponse{}, nil))
	require.True(t, refused(ctx, &pelwardenv1.CheckTriggerResponse{Code: "PermissionDenied"}, nil))
	require.False(t, refused(ctx, &pelwardenv1.CheckTriggerResponse{Code: "OK"}, nil))
	spec := &externalscaler.GetMetricSpecResponse{MetricSpecs: []*externalscaler.MetricSpec{{MetricName: "pelwarden-default-jobs-workers"}}}
	require.False(t, refused(ctx, spec, nil), "a served trigger's spec")
	newRefusedSpecs(slog.New(slog.DiscardHandler), prometheus.NewRegistry()).note(ctx, status.Error(codes.PermissionDenied, "no rule"))
	require.True(t, refused(ctx, spec, nil), "the same spec answered to a refused trigger")
	require.Nil(t, newRefusals(0, nil, nil, prometheus.NewRegistry()), "0 turns the accounting off")
}

// brokenOrServed refuses GetMetrics of a trigger whose metadata says
// broken, and answers the others: the scaler's refusal without Redis.
type brokenOrServed struct {
	externalscaler.UnimplementedExternalScalerServer
}

func (brokenOrServed) GetMetrics(_ context.Context, req *externalscaler.GetMetricsRequest) (*externalscaler.GetMetricsResponse, error) {
	if req.GetScaledObjectRef().GetScalerMetadata()["broken"] != "" {
		return nil, status.Error(codes.InvalidArgument, `metadata "pendingEntriesCount": not a number`)
	}
	return &externalscaler.GetMetricsResponse{MetricValues: []*externalscaler.MetricValue{{MetricName: "m", MetricValue: 3}}}, nil
}

// TestABrokenTriggerNeverHoldsItsConnection: KEDA's operator sends every
// ScaledObject's calls over one connection. A broken trigger's refusals
// past its burst are held, each in its own goroutine; while one is held,
// a served trigger's polls on the same connection are answered, none of
// them held.
func TestABrokenTriggerNeverHoldsItsConnection(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	fair := newRefusals(40, func(trigger.ID) bool { return false }, log, reg)
	clock := &stoppedClock{now: time.Unix(1_800_000_000, 0)}
	fair.now = clock.Now
	srv, _ := newGRPCServer(log, reg, newAdminAuth(config.Admin{}, log), fair)
	externalscaler.RegisterExternalScalerServer(srv, brokenOrServed{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	keda := externalscaler.NewExternalScalerClient(conn)
	poll := func(ctx context.Context, name string, md map[string]string) error {
		_, err := keda.GetMetrics(ctx, &externalscaler.GetMetricsRequest{MetricName: "m",
			ScaledObjectRef: &externalscaler.ScaledObjectRef{Namespace: "apps", Name: name, ScalerMetadata: md}})
		return err
	}
	broken := map[string]string{"stream": "jobs", "broken": "yes"}
	ctx := context.Background()
	for range 5 {
		require.Equal(t, codes.InvalidArgument, status.Code(poll(ctx, "broken", broken)), "the burst is answered at once")
	}
	require.Zero(t, testutil.ToFloat64(fair.held.WithLabelValues("caller")))

	// The clock stands still: the sixth refusal owes a second, and its
	// answer waits that long (a real second).
	heldDone := make(chan error, 1)
	go func() { heldDone <- poll(ctx, "broken", broken) }()
	require.Eventually(t, func() bool { return testutil.ToFloat64(fair.holding) == 1 }, 5*time.Second, time.Millisecond, "the refused call is held")
	for i := range 200 {
		require.NoError(t, poll(ctx, "served", map[string]string{"stream": "jobs"}), "poll %d of the served trigger", i)
	}
	require.InDelta(t, 1.0, testutil.ToFloat64(fair.holding), 0, "200 polls of the served trigger were answered while the broken one's answer waited")
	require.Equal(t, codes.InvalidArgument, status.Code(<-heldDone), "the held call is then answered as it would have been")
	require.InDelta(t, 1.0, testutil.ToFloat64(fair.held.WithLabelValues("caller")), 0)
}
