package app

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/lograte"
	"github.com/pelwarden/pelwarden/internal/scaler"
)

// refusedSpecs logs and counts the GetMetricSpec calls answered with the
// placeholder of a refused trigger. The call succeeds, so the call log
// and grpc_server_handled_total see an OK; the refusal it stands for is
// logged here under the same bound as a failed call's line: per code,
// at most one a callLogEvery, with the count left out.
type refusedSpecs struct {
	log   *slog.Logger
	lim   *lograte.Limiter
	count map[codes.Code]prometheus.Counter
}

func newRefusedSpecs(log *slog.Logger, reg prometheus.Registerer) *refusedSpecs {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pelwarden", Name: "scaler_refused_metric_specs_total",
		Help: "GetMetricSpec calls answered with the placeholder spec (" + scaler.RefusedMetricName + ") of a refused trigger, by the code of the refusal."},
		[]string{"grpc_code"})
	reg.MustRegister(vec)
	r := &refusedSpecs{log: log, lim: lograte.New(callLogEvery, nil), count: map[codes.Code]prometheus.Counter{}}
	// Only these two refusals are answered with the placeholder; the
	// series exist before the first.
	for _, c := range []codes.Code{codes.InvalidArgument, codes.PermissionDenied} {
		r.count[c] = vec.WithLabelValues(c.String())
	}
	return r
}

// note is scaler.Options.Refused.
func (r *refusedSpecs) note(ctx context.Context, refusal error) {
	noteRefused(ctx)
	st := status.Convert(refusal)
	if c, ok := r.count[st.Code()]; ok {
		c.Inc()
	}
	if !r.log.Enabled(ctx, slog.LevelWarn) {
		return
	}
	ok, suppressed := r.lim.Allow(st.Code().String())
	if !ok {
		return
	}
	attrs := []slog.Attr{
		slog.String("grpc.method", "GetMetricSpec"),
		slog.String("grpc.code", codes.OK.String()),
		slog.String("refusal.code", st.Code().String()),
		slog.String("refusal.error", st.Message()),
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer.address", p.Addr.String()))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	r.log.LogAttrs(ctx, slog.LevelWarn, "answered a refused trigger with the placeholder metric spec", attrs...)
}
