package app

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/pelwarden/pelwarden/internal/config"
)

// BenchmarkUnaryChain is what the interceptors add to one KEDA call that
// succeeds, with logging at info as deployed and a handler that does
// nothing: the whole chain, and each interceptor alone.
func BenchmarkUnaryChain(b *testing.B) {
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ch := newChain(log, prometheus.NewRegistry(), newAdminAuth(config.Admin{}, log))
	s := grpc.NewServer()
	externalscaler.RegisterExternalScalerServer(s, externalscaler.UnimplementedExternalScalerServer{})
	ch.metrics.initialize(s)
	info := &grpc.UnaryServerInfo{FullMethod: "/externalscaler.ExternalScaler/GetMetrics"}
	handler := func(context.Context, any) (any, error) { return struct{}{}, nil }
	cases := map[string][]grpc.UnaryServerInterceptor{
		"chain": ch.unary, "metrics": ch.unary[:1], "logging": ch.unary[1:2], "auth": ch.unary[2:3], "recovery": ch.unary[3:],
	}
	for name, ins := range cases {
		b.Run(name, func(b *testing.B) {
			call := chainUnary(ins, info, handler)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := call(ctx, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// chainUnary nests the interceptors around handler the way grpc's
// ChainUnaryInterceptor does, outermost first.
func chainUnary(ins []grpc.UnaryServerInterceptor, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) grpc.UnaryHandler {
	for i := len(ins) - 1; i >= 0; i-- {
		in, next := ins[i], handler
		handler = func(ctx context.Context, req any) (any, error) { return in(ctx, req, info, next) }
	}
	return handler
}
