package app

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// fakeStream is a server stream that sends and receives into nothing.
type fakeStream struct{ grpc.ServerStream }

func (fakeStream) Context() context.Context { return context.Background() }
func (fakeStream) SendMsg(any) error        { return nil }
func (fakeStream) RecvMsg(any) error        { return nil }

// interceptors is one implementation of the server metrics.
type interceptors struct {
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
	init   func(*grpc.Server)
}

// exercise makes the same calls through either implementation and returns
// what the registry exposes.
func exercise(t *testing.T, reg *prometheus.Registry, in interceptors) []string {
	t.Helper()
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	in.init(s)
	calls := []struct {
		method string
		err    error
	}{
		{"/grpc.health.v1.Health/Check", nil},
		{"/grpc.health.v1.Health/Check", nil},
		{"/grpc.health.v1.Health/Check", status.Error(codes.Unavailable, "down")},
		{"/grpc.health.v1.Health/Check", context.Canceled},
		{"/grpc.health.v1.Health/Check", errors.New("plain")},
		{"/other.Service/NotRegistered", nil},
	}
	for _, c := range calls {
		_, err := in.unary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: c.method}, func(context.Context, any) (any, error) { return nil, c.err })
		require.Equal(t, c.err, err)
	}
	info := &grpc.StreamServerInfo{FullMethod: "/grpc.health.v1.Health/Watch", IsServerStream: true}
	require.NoError(t, in.stream(nil, fakeStream{}, info, func(_ any, ss grpc.ServerStream) error {
		require.NoError(t, ss.RecvMsg(nil))
		require.NoError(t, ss.SendMsg(nil))
		return ss.SendMsg(nil)
	}))
	families, err := reg.Gather()
	require.NoError(t, err)
	var out []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			out = append(out, fmt.Sprintf("%s %s %s{%s} %s", f.GetName(), f.GetType(), f.GetHelp(), labels(m), value(m)))
		}
	}
	sort.Strings(out)
	return out
}

func labels(m *dto.Metric) string {
	parts := make([]string, 0, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return strings.Join(parts, ",")
}

// value is a counter's value, or a histogram's count (its sum is time).
func value(m *dto.Metric) string {
	if h := m.GetHistogram(); h != nil {
		return fmt.Sprintf("count=%d buckets=%d", h.GetSampleCount(), len(h.GetBucket()))
	}
	return fmt.Sprint(m.GetCounter().GetValue())
}

// TestRPCMetricsExposeWhatTheMiddlewareProviderExposed drives
// go-grpc-middleware's prometheus provider, which pelwarden used before,
// and pelwarden's own server metrics through the same calls: the series,
// their help, labels and values must be the same, so that dashboards and
// alerts see no difference.
func TestRPCMetricsExposeWhatTheMiddlewareProviderExposed(t *testing.T) {
	t.Parallel()
	theirs := prometheus.NewRegistry()
	pm := grpcprom.NewServerMetrics(
		grpcprom.WithServerCounterOptions(grpcprom.WithNamespace("pelwarden")),
		grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramNamespace("pelwarden")),
	)
	theirs.MustRegister(pm)
	want := exercise(t, theirs, interceptors{unary: pm.UnaryServerInterceptor(), stream: pm.StreamServerInterceptor(),
		init: func(s *grpc.Server) { pm.InitializeMetrics(s) }})

	ours := prometheus.NewRegistry()
	m := newRPCMetrics(ours)
	got := exercise(t, ours, interceptors{unary: m.unaryInterceptor, stream: m.streamInterceptor, init: m.initialize})
	require.Equal(t, want, got)
	require.Contains(t, strings.Join(got, "\n"), "grpc_code=Unavailable,grpc_method=Check,grpc_service=grpc.health.v1.Health,grpc_type=unary} 1")
}

func TestRPCMetricsCountAKnownUnaryCallWithoutAllocating(t *testing.T) {
	m := newRPCMetrics(prometheus.NewRegistry())
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	m.initialize(s)
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.health.v1.Health/Check"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	allocs := testing.AllocsPerRun(100, func() { _, _ = m.unaryInterceptor(context.Background(), nil, info, handler) })
	require.Zero(t, allocs)
}
