package app

import (
	"context"
	"log/slog"
	"path"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/lograte"
)

// callLogEvery is how often one method failing with one code is logged:
// its first failure at once, then at most a line per interval with the
// count left out. Anyone who reaches the port can make calls fail, so the
// log of failed calls is bounded by methods x codes, not by the callers.
const callLogEvery = 10 * time.Second

// failedCalls is the limiter of failed-call lines; nil logs every line.
type failedCalls struct{ lim *lograte.Limiter }

func newFailedCalls() failedCalls { return failedCalls{lim: lograte.New(callLogEvery, nil)} }

// allow reports whether a failed call of method with code is logged now,
// and how many such lines were left out since the last.
func (f failedCalls) allow(method, code string) (bool, int) {
	if f.lim == nil || code == codes.OK.String() || code == codes.Canceled.String() {
		return true, 0
	}
	return f.lim.Allow(method + " " + code)
}

// logUnary logs every finished unary call once, at codeToLevel of its
// code, with the fields go-grpc-middleware's logging gives streams. KEDA's
// steady polls succeed and log at debug, which a deployed pelwarden drops:
// for them the only cost is one Enabled check, and no field is built.
// Failed calls go through the failed-call limiter.
func logUnary(log *slog.Logger, failed failedCalls) grpc.UnaryServerInterceptor {
	l := unaryLog{log: log, failed: failed}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		l.finished(ctx, info.FullMethod, start, err)
		return resp, err
	}
}

// unaryLog is the logging step of the unary chain.
type unaryLog struct {
	log    *slog.Logger
	failed failedCalls
}

// finished logs a unary call of method that started at start and ended
// with err, if its level is enabled and the limiter lets it through.
func (l unaryLog) finished(ctx context.Context, method string, start time.Time, err error) {
	st := status.Convert(err)
	lvl := slog.Level(codeToLevel(st.Code()))
	if !l.log.Enabled(ctx, lvl) {
		return
	}
	ok, suppressed := l.failed.allow(method, st.Code().String())
	if !ok {
		return
	}
	attrs := []slog.Attr{
		slog.String("protocol", "grpc"),
		slog.String("grpc.component", "server"),
		slog.String("grpc.service", path.Dir(method)[1:]),
		slog.String("grpc.method", path.Base(method)),
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
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	l.log.LogAttrs(ctx, lvl, "finished call", attrs...)
}
