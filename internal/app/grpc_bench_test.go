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
// nothing: the whole chain as grpc calls it, and each step alone.
func BenchmarkUnaryChain(b *testing.B) {
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ch := newChain(log, prometheus.NewRegistry(), newAdminAuth(config.Admin{}, log), nil)
	s := grpc.NewServer()
	externalscaler.RegisterExternalScalerServer(s, externalscaler.UnimplementedExternalScalerServer{})
	ch.metrics.initialize(s)
	info := &grpc.UnaryServerInfo{FullMethod: "/externalscaler.ExternalScaler/GetMetrics"}
	handler := func(context.Context, any) (any, error) { return struct{}{}, nil }
	// grpc calls the chain as it is, one interceptor; the others are its
	// steps as interceptors of their own.
	cases := map[string]grpc.UnaryServerInterceptor{
		"chain": ch.unary, "metrics": ch.metrics.unaryInterceptor, "logging": logUnary(ch.log.log, ch.log.failed),
		"auth": ch.auth.unary, "recovery": ch.recover,
	}
	for name, in := range cases {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := in(ctx, nil, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
