package app

import (
	"context"
	"log/slog"
	"path"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// logUnary logs every finished unary call once, at codeToLevel of its
// code, with the fields go-grpc-middleware's logging gives streams. KEDA's
// steady polls succeed and log at debug, which a deployed pelwarden drops:
// for them the only cost is one Enabled check, and no field is built.
func logUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		st := status.Convert(err)
		lvl := slog.Level(codeToLevel(st.Code()))
		if !log.Enabled(ctx, lvl) {
			return resp, err
		}
		attrs := []slog.Attr{
			slog.String("protocol", "grpc"),
			slog.String("grpc.component", "server"),
			slog.String("grpc.service", path.Dir(info.FullMethod)[1:]),
			slog.String("grpc.method", path.Base(info.FullMethod)),
			slog.String("grpc.method_type", "unary"),
		}
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			attrs = append(attrs, slog.String("peer.address", p.Addr.String()))
		}
		attrs = append(attrs,
			slog.String("grpc.start_time", start.Format(time.RFC3339)),
			slog.String("grpc.code", st.Code().String()),
			slog.Float64("grpc.time_ms", float64(time.Since(start).Microseconds())/1000),
		)
		if err != nil {
			attrs = append(attrs, slog.String("grpc.error", st.Message()))
		}
		log.LogAttrs(ctx, lvl, "finished call", attrs...)
		return resp, err
	}
}
