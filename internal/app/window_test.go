package app

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/config"
)

// countingListener counts the bytes its connections read.
type countingListener struct {
	net.Listener
	read *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	return countingConn{Conn: c, read: l.read}, err
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// TestAnOversizedMessageIsRefusedBeforeItIsRead sends, from four callers,
// messages eight times the receive size: each is refused, and pelwarden
// reads about a window's worth of each, not the message. Without fixed
// windows gRPC's bandwidth estimate opens them to megabytes, and the
// sender's bytes were read, each frame into a fresh buffer, until the
// refusal reached it.
func TestAnOversizedMessageIsRefusedBeforeItIsRead(t *testing.T) {
	t.Parallel()
	const calls, callers, size = 64, 4, 8 * config.DefaultMaxRecvMsgBytes
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var read atomic.Int64
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, _ := newGRPCServer(log, prometheus.NewRegistry(), newAdminAuth(config.Admin{}, log), nil, grpc.MaxRecvMsgSize(config.DefaultMaxRecvMsgBytes))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(countingListener{Listener: lis, read: &read}) }()
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(2*size)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	client := healthpb.NewHealthClient(conn)
	big := strings.Repeat("x", size)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range calls / callers {
				_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{Service: big})
				assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
			}
		})
	}
	wg.Wait()
	_, err = client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "the connection serves on")
	perCall := read.Load() / calls
	t.Logf("read %d bytes per refused %d-byte message", perCall, size)
	require.Less(t, perCall, int64(4*streamWindowBytes), "a refused message is read a window's worth at most, not whole")
}
