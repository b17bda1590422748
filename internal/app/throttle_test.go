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
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/scaler"
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

// TestAConnectionWhoseCallsKeepBeingRefusedIsHeldOnArrival: a caller
// sends calls that can only be refused (a health check of a service that
// does not exist, NotFound) on one connection. Past the burst each of its
// calls is held on arrival for the next token, and counted, and still
// answered as it would have been; a second connection, KEDA's, is never
// held; and a connection whose tokens came back is not held either.
func TestAConnectionWhoseCallsKeepBeingRefusedIsHeldOnArrival(t *testing.T) {
	t.Parallel()
	const perSecond = 100
	reg := prometheus.NewRegistry()
	throttle := newRefusalThrottle(perSecond, reg)
	clock := &stoppedClock{now: time.Unix(1_800_000_000, 0)}
	throttle.now = clock.Now
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, _ := newGRPCServer(log, reg, newAdminAuth(config.Admin{}, log), throttle)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	dial := func() healthpb.HealthClient {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		return healthpb.NewHealthClient(conn)
	}
	stranger, keda := dial(), dial()
	ctx := context.Background()
	unknown := &healthpb.HealthCheckRequest{Service: "no-such-service"}
	held := func() float64 { return testutil.ToFloat64(throttle.throttled) }

	// The burst is five seconds' worth, and the clock stands still: no
	// token comes back. A call's token is taken when it ends, which may
	// come a moment after its answer, so the first hold may come a few
	// calls past the burst.
	calls := 0
	for held() == 0 {
		_, err := stranger.Check(ctx, unknown)
		require.Equal(t, codes.NotFound, status.Code(err), "call %d is answered as it would be", calls)
		calls++
		require.LessOrEqual(t, calls, 5*perSecond+10, "calls past the burst are held")
	}
	require.GreaterOrEqual(t, calls, 5*perSecond, "the burst is not held")
	before := held()
	for range 5 {
		_, err := stranger.Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err, "a held call is then served")
	}
	require.InDelta(t, before+5, held(), 0, "each call on the connection is held while its bucket is empty")

	before = held()
	for range 5 * perSecond {
		_, err := keda.Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
	}
	require.InDelta(t, before, held(), 0, "another connection is never held")

	clock.Add(time.Second)
	before = held()
	_, err = stranger.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.InDelta(t, before, held(), 0, "once tokens came back, the connection's calls are not held")
}

// oneConnection is a throttle of one refusal a second on a stopped clock,
// and one connection's context and bucket.
func oneConnection(t *testing.T) (*refusalThrottle, *stoppedClock, context.Context, *bucket) {
	t.Helper()
	throttle := newRefusalThrottle(1, prometheus.NewRegistry())
	clock := &stoppedClock{now: time.Unix(1_800_000_000, 0)}
	throttle.now = clock.Now
	ctx := throttle.TagConn(context.Background(), &stats.ConnTagInfo{})
	b, ok := ctx.Value(bucketKey{}).(*bucket)
	require.True(t, ok)
	return throttle, clock, ctx, b
}

// TestOnlyRefusalsTakeATokenNotAFailingRedis: a call that ends
// Unavailable (Redis out of reach), Internal or well takes no token; a
// refusal takes one.
func TestOnlyRefusalsTakeATokenNotAFailingRedis(t *testing.T) {
	t.Parallel()
	throttle, clock, ctx, b := oneConnection(t)
	for _, err := range []error{nil, status.Error(codes.Unavailable, "redis"), status.Error(codes.DeadlineExceeded, "slow"), status.Error(codes.Internal, "bug")} {
		throttle.HandleRPC(ctx, &stats.End{Error: err})
	}
	require.InDelta(t, 5, b.tokens, 0, "no refusal, no token taken")
	for _, c := range []codes.Code{codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.ResourceExhausted, codes.NotFound} {
		throttle.HandleRPC(ctx, &stats.End{Error: status.Error(c, "refused")})
	}
	require.InDelta(t, 0, b.tokens, 0, "each refusal took one")

	// A refused call's bytes weigh too: 200 KiB are three tokens more.
	clock.Add(5 * time.Second)
	call := throttle.TagRPC(ctx, &stats.RPCTagInfo{})
	throttle.HandleRPC(call, &stats.InPayload{WireLength: 200 << 10})
	throttle.HandleRPC(call, &stats.End{Error: status.Error(codes.InvalidArgument, "too long")})
	require.InDelta(t, 1, b.tokens, 0, "a refused 200 KiB call took four tokens")
	served := throttle.TagRPC(ctx, &stats.RPCTagInfo{})
	throttle.HandleRPC(served, &stats.InPayload{WireLength: 200 << 10})
	throttle.HandleRPC(served, &stats.End{})
	require.InDelta(t, 1, b.tokens, 0, "a served call's bytes take nothing")

	// On a bucket with one token left, a refused 200 KiB call still
	// weighs four: the three it lacks are a debt the next calls wait out.
	owed := throttle.TagRPC(ctx, &stats.RPCTagInfo{})
	throttle.HandleRPC(owed, &stats.InPayload{WireLength: 200 << 10})
	throttle.HandleRPC(owed, &stats.End{Error: status.Error(codes.InvalidArgument, "too long")})
	require.InDelta(t, -3, b.tokens, 0, "the refused call's tokens are owed")
	clock.Add(4 * time.Second)
	throttle.HandleRPC(ctx, &stats.End{Error: status.Error(codes.InvalidArgument, "refused")})
	require.InDelta(t, 0, b.tokens, 0, "the debt came back at one a second, and a refusal took one more")
	for range 20 {
		huge := throttle.TagRPC(ctx, &stats.RPCTagInfo{})
		throttle.HandleRPC(huge, &stats.InPayload{WireLength: 4 << 20})
		throttle.HandleRPC(huge, &stats.End{Error: status.Error(codes.InvalidArgument, "too long")})
	}
	require.InDelta(t, -5, b.tokens, 0, "the debt is at most a burst")
	clock.Add(7 * time.Second)

	// A CheckTrigger that answers the trigger would be refused takes one;
	// one that answers OK takes none.
	for _, code := range []string{"OK", "InvalidArgument"} {
		check := throttle.TagRPC(ctx, &stats.RPCTagInfo{})
		throttle.HandleRPC(check, &stats.OutPayload{Payload: &pelwardenv1.CheckTriggerResponse{Code: code}})
		throttle.HandleRPC(check, &stats.End{})
	}
	require.InDelta(t, 1, b.tokens, 0, "the refused check took the token that came back")
	throttle.HandleRPC(ctx, &stats.End{Error: status.Error(codes.NotFound, "unknown")})
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err := throttle.tap(gone, nil)
	require.Equal(t, codes.Unavailable, status.Code(err), "an empty bucket holds the call; a closed connection ends the hold")
	require.Nil(t, newRefusalThrottle(0, prometheus.NewRegistry()), "0 is no throttle")
}

// TestThePlaceholderSpecTakesAToken: GetMetricSpec answers a refused
// trigger with the placeholder spec and OK; it takes a token as the
// refusal it stands for would, and a trigger's own spec takes none.
func TestThePlaceholderSpecTakesAToken(t *testing.T) {
	t.Parallel()
	throttle, _, ctx, b := oneConnection(t)
	answer := func(name string) {
		call := throttle.TagRPC(ctx, &stats.RPCTagInfo{})
		throttle.HandleRPC(call, &stats.OutPayload{Payload: &externalscaler.GetMetricSpecResponse{
			MetricSpecs: []*externalscaler.MetricSpec{{MetricName: name, TargetSize: 1}}}})
		throttle.HandleRPC(call, &stats.End{})
	}
	answer("pelwarden-default-jobs-workers")
	require.InDelta(t, 5, b.tokens, 0, "a trigger's own spec takes nothing")
	answer(scaler.RefusedMetricName)
	answer(scaler.RefusedMetricName)
	require.InDelta(t, 3, b.tokens, 0, "each placeholder took one")
}
