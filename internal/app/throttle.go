package app

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/pelwarden/pelwarden/internal/scaler"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// refusalThrottle slows a connection whose calls keep being refused. A
// refused call costs pelwarden a whole call (headers, the message read and
// decoded, the handler, the answer) and its caller next to nothing, so one
// caller sending calls that can only be refused takes pelwarden's CPU from
// the polls that matter; refusing it sooner only lets it send more. Each
// connection holds a bucket of refusals: every call answered with a
// refusal code (or a CheckTrigger answering that the trigger would be
// refused, or GetMetricSpec's placeholder for a refused trigger) takes a
// token, and one more for each refusedBytesPerToken its
// messages carried, and tokens come back at perSecond up to burst. While
// the bucket is empty or in debt, the connection's next call waits for
// the next token when its headers arrive, in the connection's own reader,
// so nothing more is read from that connection meanwhile: a caller whose
// calls keep being refused gets perSecond tokens' worth of calls a second,
// each answered as it would have been, however fast it sends. Unavailable
// and the other codes of a failing Redis take no token: KEDA's polls
// during an outage are not a caller's fault. One connection's refusals never slow another.
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
			Help: "Calls held on arrival because their connection had used up its refused calls (grpc.refusedCallsPerSecond)."})}
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

// refusedBytesPerToken is how many bytes of a refused call's messages cost
// one more token: a refused megabyte weighs as 16 refused polls, whose
// requests are a few hundred bytes.
const refusedBytesPerToken = 64 << 10

// received counts the bytes of one call's messages, and says whether its
// answer refused the input without failing the call.
type received struct {
	bytes   atomic.Int64
	refused atomic.Bool
}

type receivedKey struct{}

// refill brings b's tokens up to now; the caller holds b.mu.
func (t *refusalThrottle) refill(b *bucket, now time.Time) {
	b.tokens = min(t.burst, b.tokens+now.Sub(b.at).Seconds()*t.perSecond)
	b.at = now
}

// tap holds a call on arrival, while its connection's bucket is empty,
// until the next token is due; the call then runs as any other.
func (t *refusalThrottle) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	b, ok := ctx.Value(bucketKey{}).(*bucket)
	if !ok {
		return ctx, nil
	}
	b.mu.Lock()
	t.refill(b, t.now())
	wait := time.Duration((1 - b.tokens) / t.perSecond * float64(time.Second))
	b.mu.Unlock()
	if wait <= 0 {
		return ctx, nil
	}
	t.throttled.Inc()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return ctx, nil
	case <-ctx.Done():
		return ctx, status.Error(codes.Unavailable, "the connection closed while its call waited (grpc.refusedCallsPerSecond)")
	}
}

// TagConn gives each connection its full bucket.
func (t *refusalThrottle) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, bucketKey{}, &bucket{tokens: t.burst, at: t.now()})
}

// HandleRPC counts a call's message bytes and takes a call that ends
// refused out of its connection's bucket.
func (t *refusalThrottle) HandleRPC(ctx context.Context, s stats.RPCStats) {
	switch s := s.(type) {
	case *stats.InPayload:
		if r, ok := ctx.Value(receivedKey{}).(*received); ok {
			r.bytes.Add(int64(max(s.Length, s.WireLength)))
		}
	case *stats.OutPayload:
		if refusedAnswer(s.Payload) {
			if r, ok := ctx.Value(receivedKey{}).(*received); ok {
				r.refused.Store(true)
			}
		}
	case *stats.End:
		r, _ := ctx.Value(receivedKey{}).(*received)
		if (s.Error != nil && refusalCodes[status.Code(s.Error)]) || (r != nil && r.refused.Load()) {
			t.take(ctx)
		}
	}
}

// refusedAnswer says an answer refuses the call's input without failing
// the call: CheckTrigger's answer that the trigger would be refused, and
// GetMetricSpec's placeholder for a refused trigger.
func refusedAnswer(payload any) bool {
	switch a := payload.(type) {
	case *pelwardenv1.CheckTriggerResponse:
		return a.GetCode() != codes.OK.String()
	case *externalscaler.GetMetricSpecResponse:
		return scaler.IsRefusedSpec(a)
	}
	return false
}

// take takes a refused call's tokens from its connection's bucket.
func (t *refusalThrottle) take(ctx context.Context) {
	b, ok := ctx.Value(bucketKey{}).(*bucket)
	if !ok {
		return
	}
	cost := 1.0
	if r, ok := ctx.Value(receivedKey{}).(*received); ok {
		cost += float64(r.bytes.Load() / refusedBytesPerToken)
	}
	b.mu.Lock()
	t.refill(b, t.now())
	// A call may cost more than the bucket holds: the rest is a debt the
	// connection's next call waits out, so a refused megabyte weighs as
	// much on an empty bucket as on a full one. The debt is bounded by a
	// burst, so no connection waits longer than its burst takes to come
	// back.
	b.tokens = max(-t.burst, b.tokens-cost)
	b.mu.Unlock()
}

// TagRPC gives each call its byte count.
func (t *refusalThrottle) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, receivedKey{}, &received{})
}

func (t *refusalThrottle) HandleConn(context.Context, stats.ConnStats) {}
