package app

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// scalerService is the health-check name of the ExternalScaler service; it
// is SERVING while every Redis connection answers. The empty name (overall
// liveness) stays SERVING while the process runs, so a Redis outage does not
// get pelwarden restarted.
const scalerService = "externalscaler.ExternalScaler"

// newGRPCServer builds the server with its interceptor chain: metrics, then
// logging (once per call, at the boundary), then auth (the mutating Admin
// RPCs; everything else passes), then recovery innermost so a panic is
// logged and counted like any other Internal error. No streaming RPC
// mutates, so streams skip auth.
func newGRPCServer(log *slog.Logger, reg prometheus.Registerer, auth *adminAuth) *grpc.Server {
	srvMetrics := grpcprom.NewServerMetrics(
		grpcprom.WithServerCounterOptions(grpcprom.WithNamespace("pelwarden")),
		grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramNamespace("pelwarden")),
	)
	reg.MustRegister(srvMetrics)
	logger := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(codeToLevel),
	}
	recoverOpts := []recovery.Option{recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		log.ErrorContext(ctx, "panic in gRPC handler", "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	})}
	s := grpc.NewServer(
		grpc.ChainUnaryInterceptor(
			srvMetrics.UnaryServerInterceptor(),
			logging.UnaryServerInterceptor(logger, logOpts...),
			auth.unary,
			recovery.UnaryServerInterceptor(recoverOpts...),
		),
		grpc.ChainStreamInterceptor(
			srvMetrics.StreamServerInterceptor(),
			logging.StreamServerInterceptor(logger, logOpts...),
			recovery.StreamServerInterceptor(recoverOpts...),
		),
		// KEDA keeps one connection open; let it ping, and find dead peers.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
	)
	srvMetrics.InitializeMetrics(s)
	return s
}

// codeToLevel keeps KEDA's steady polling at debug and surfaces failures.
func codeToLevel(c codes.Code) logging.Level {
	switch c {
	case codes.OK, codes.Canceled:
		return logging.LevelDebug
	case codes.Internal, codes.Unknown, codes.DataLoss, codes.Unimplemented:
		return logging.LevelError
	default:
		return logging.LevelWarn
	}
}
