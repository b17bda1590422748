package admin

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redisx"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// serveWatch serves WatchEvents over an in-memory connection. It reads no
// Redis, so the connection points nowhere and is never dialed.
func serveWatch(t *testing.T, bus *events.Bus) (pelwardenv1.AdminClient, func()) {
	t.Helper()
	conns, err := redisx.Open([]config.Redis{config.DefaultRedis("default", "127.0.0.1:1")})
	require.NoError(t, err)
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer()
	view := liveness.NewView(nil, liveness.ViewOptions{})
	engine, err := reclaim.New(reclaim.Options{View: view, Events: bus, BatchSize: 1}, prometheus.NewRegistry())
	require.NoError(t, err)
	server, err := New(Options{View: view, Conns: conns, Engine: engine, Events: bus})
	require.NoError(t, err)
	pelwardenv1.RegisterAdminServer(srv, server)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	require.NoError(t, err)
	return pelwardenv1.NewAdminClient(conn), func() {
		_ = conn.Close()
		srv.Stop()
		<-served
		_ = conns.Close()
	}
}

var jobsGroup = liveness.GroupRef{Conn: "default", Stream: "jobs", Group: "workers"}

// TestWatchEventsEndsWithTheClientAndLeavesNothingRunning: a watcher that
// stops reading costs the publisher nothing (its events are dropped and
// counted), and once it goes, so do its goroutines.
func TestWatchEventsEndsWithTheClientAndLeavesNothingRunning(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	reg := prometheus.NewRegistry()
	bus := events.NewBus(events.Options{Buffer: 8}, reg)
	client, stop := serveWatch(t, bus)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := client.WatchEvents(ctx, &pelwardenv1.WatchEventsRequest{Target: &pelwardenv1.TargetRef{Stream: "jobs", Group: "workers"}})
	require.NoError(t, err)

	// The handler subscribes after the call returns: publish until the
	// first event arrives.
	publishing, stopPublishing := context.WithCancel(ctx)
	published := make(chan struct{})
	go func() {
		defer close(published)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			bus.Publish(events.Event{Group: liveness.GroupRef{Conn: "default", Stream: "other", Group: "workers"}, Action: "claimed"})
			bus.Publish(events.Event{Group: jobsGroup, Action: "requeued", Entries: 1, Source: events.SourceHygiene})
			select {
			case <-publishing.Done():
				return
			case <-tick.C:
			}
		}
	}()
	first, err := stream.Recv()
	stopPublishing()
	<-published
	require.NoError(t, err)
	require.Equal(t, "requeued", first.GetEvent().GetAction(), "another group's events are filtered out")
	require.Equal(t, "hygiene", first.GetEvent().GetSource())

	start := time.Now()
	for range 100_000 {
		bus.Publish(events.Event{Group: jobsGroup, Action: "requeued", Entries: 1})
	}
	require.Less(t, time.Since(start), 5*time.Second, "a watcher that does not read never holds up publishing")
	n, err := testutil.GatherAndCount(reg, "pelwarden_admin_events_dropped_total")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	families, err := reg.Gather()
	require.NoError(t, err)
	require.Positive(t, families[0].GetMetric()[0].GetCounter().GetValue(), "what did not fit was counted")
	cancel()
	stop()
}

// TestWatchEventsPastTheSubscriberCapIsResourceExhausted: the cap holds
// across calls; the refused call leaves the open ones watching.
func TestWatchEventsPastTheSubscriberCapIsResourceExhausted(t *testing.T) {
	bus := events.NewBus(events.Options{Subscribers: 1}, prometheus.NewRegistry())
	client, stop := serveWatch(t, bus)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := client.WatchEvents(ctx, &pelwardenv1.WatchEventsRequest{})
	require.NoError(t, err)
	go func() { // the first watcher is subscribed once it gets an event
		for ctx.Err() == nil {
			bus.Publish(events.Event{Group: jobsGroup, Action: "requeued"})
			time.Sleep(10 * time.Millisecond)
		}
	}()
	_, err = first.Recv()
	require.NoError(t, err)
	second, err := client.WatchEvents(ctx, &pelwardenv1.WatchEventsRequest{})
	require.NoError(t, err)
	_, err = second.Recv()
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.Contains(t, err.Error(), "too many event subscribers")
	_, err = first.Recv()
	require.NoError(t, err, "the open watcher goes on")
}
