package app

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

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

// TestAConnectionWhoseCallsKeepBeingRefusedIsRefusedOnArrival: a caller
// sends calls that can only be refused (a health check of a service that
// does not exist, NotFound) on one connection. Past the burst its calls,
// valid ones too, are ResourceExhausted on arrival, naming the setting,
// and counted; a second connection, KEDA's, is served throughout; and the
// first is served again once its tokens come back with time.
func TestAConnectionWhoseCallsKeepBeingRefusedIsRefusedOnArrival(t *testing.T) {
	t.Parallel()
	const perSecond = 10
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

	// The burst is five seconds' worth; a call's token is taken when it
	// ends, which may come a moment after its answer.
	refused := 0
	var err2 error
	for refused <= 5*perSecond+5 {
		_, err2 = stranger.Check(ctx, unknown)
		if status.Code(err2) != codes.NotFound {
			break
		}
		refused++
	}
	require.Equal(t, codes.ResourceExhausted, status.Code(err2), "past the burst: %v", err2)
	require.ErrorContains(t, err2, "grpc.refusedCallsPerSecond")
	require.GreaterOrEqual(t, refused, 5*perSecond, "the burst is served")
	_, err = stranger.Check(ctx, &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "a valid call waits too while the bucket is empty: %v", err)
	require.GreaterOrEqual(t, testutil.ToFloat64(throttle.throttled), 2.0)

	for range 5 * perSecond {
		_, err := keda.Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err, "another connection is served")
	}

	clock.Add(time.Second)
	_, err = stranger.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "tokens come back with time")
}

// TestOnlyRefusalsTakeATokenNotAFailingRedis: a call that ends
// Unavailable (Redis out of reach), Internal or well takes no token; a
// refusal takes one.
func TestOnlyRefusalsTakeATokenNotAFailingRedis(t *testing.T) {
	t.Parallel()
	throttle := newRefusalThrottle(1, prometheus.NewRegistry())
	clock := &stoppedClock{now: time.Unix(1_800_000_000, 0)}
	throttle.now = clock.Now
	ctx := throttle.TagConn(context.Background(), &stats.ConnTagInfo{})
	b := ctx.Value(bucketKey{}).(*bucket)
	for _, err := range []error{nil, status.Error(codes.Unavailable, "redis"), status.Error(codes.DeadlineExceeded, "slow"), status.Error(codes.Internal, "bug")} {
		throttle.HandleRPC(ctx, &stats.End{Error: err})
	}
	require.InDelta(t, 5, b.tokens, 0, "no refusal, no token taken")
	for _, c := range []codes.Code{codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated, codes.ResourceExhausted, codes.NotFound} {
		throttle.HandleRPC(ctx, &stats.End{Error: status.Error(c, "refused")})
	}
	require.InDelta(t, 0, b.tokens, 0, "each refusal took one")
	_, err := throttle.tap(ctx, nil)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.Nil(t, newRefusalThrottle(0, prometheus.NewRegistry()), "0 is no throttle")
}
