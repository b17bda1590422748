package app

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// refusalThrottle slows a connection whose calls keep being refused. A
// refused call costs pelwarden a whole call (headers, the message read and
// decoded, the handler, the answer) and its caller next to nothing, so one
// caller sending calls that can only be refused takes pelwarden's CPU from
// the polls that matter. Each connection holds a bucket of refusals: every
// call answered with a refusal code takes a token, and tokens come back at
// perSecond up to burst. While the bucket is empty, the connection's next
// calls are refused when their headers arrive, before a stream, a
// goroutine or a byte of their message is spent on them. Unavailable and
// the other codes of a failing Redis take no token: KEDA's polls during an
// outage are not a caller's fault. One connection's refusals never slow
// another.
type refusalThrottle struct {
	perSecond, burst float64
	now              func() time.Time
	throttled        prometheus.Counter
}

// refusalCodes are the answers to a call that could never have been
// served as sent: bad input, no permission, a cap, a target unknown.
var refusalCodes = map[codes.Code]bool{
	codes.InvalidArgument:    true,
	codes.PermissionDenied:   true,
	codes.Unauthenticated:    true,
	codes.ResourceExhausted:  true,
	codes.NotFound:           true,
	codes.FailedPrecondition: true,
}

// newRefusalThrottle lets each connection perSecond refusals a second,
// burst five seconds' worth; zero perSecond turns it off (nil).
func newRefusalThrottle(perSecond int, reg prometheus.Registerer) *refusalThrottle {
	if perSecond <= 0 {
		return nil
	}
	t := &refusalThrottle{perSecond: float64(perSecond), burst: 5 * float64(perSecond), now: time.Now,
		throttled: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "pelwarden", Name: "grpc_throttled_calls_total",
			Help: "Calls refused on arrival because their connection had used up its refused calls (grpc.refusedCallsPerSecond)."})}
	reg.MustRegister(t.throttled)
	return t
}

// bucket is one connection's refusals. It lives in the connection's
// context, so it ends with the connection and needs no index.
type bucket struct {
	mu     sync.Mutex
	tokens float64
	at     time.Time
}

type bucketKey struct{}

// refill brings b's tokens up to now; the caller holds b.mu.
func (t *refusalThrottle) refill(b *bucket, now time.Time) {
	b.tokens = min(t.burst, b.tokens+now.Sub(b.at).Seconds()*t.perSecond)
	b.at = now
}

// tap refuses a call on arrival while its connection's bucket is empty.
func (t *refusalThrottle) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	b, ok := ctx.Value(bucketKey{}).(*bucket)
	if !ok {
		return ctx, nil
	}
	b.mu.Lock()
	t.refill(b, t.now())
	empty := b.tokens < 1
	b.mu.Unlock()
	if empty {
		t.throttled.Inc()
		return ctx, status.Errorf(codes.ResourceExhausted,
			"this connection's calls were refused more than %g times a second (grpc.refusedCallsPerSecond); its calls are refused on arrival until that rate drops", t.perSecond)
	}
	return ctx, nil
}

// TagConn gives each connection its full bucket.
func (t *refusalThrottle) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, bucketKey{}, &bucket{tokens: t.burst, at: t.now()})
}

// HandleRPC takes a token for every call that ends refused.
func (t *refusalThrottle) HandleRPC(ctx context.Context, s stats.RPCStats) {
	end, ok := s.(*stats.End)
	if !ok || end.Error == nil || !refusalCodes[status.Code(end.Error)] {
		return
	}
	b, ok := ctx.Value(bucketKey{}).(*bucket)
	if !ok {
		return
	}
	b.mu.Lock()
	t.refill(b, t.now())
	b.tokens = max(0, b.tokens-1)
	b.mu.Unlock()
}

func (t *refusalThrottle) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}

func (t *refusalThrottle) HandleConn(context.Context, stats.ConnStats) {}
