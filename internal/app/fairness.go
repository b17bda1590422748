package app

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pelwarden/pelwarden/internal/clip"
	"github.com/pelwarden/pelwarden/internal/lograte"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/trigger"
	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// refusals makes whoever asks pay for their own refused calls. A refused
// call costs pelwarden a whole call and its caller next to nothing, so
// calls that can only be refused are slowed; but KEDA's operator sends the
// calls of every ScaledObject of every namespace over one connection, so
// the one slowed is never the connection, and a connection is never left
// unread. Who asks is the trigger a request names (its ScaledObject and
// metadata: trigger.ID), or the peer's address where a request names none.
//
// Three buckets of refused calls, each five seconds' worth at once and
// owing at most that much: one per caller (a fortieth of
// grpc.refusedCallsPerSecond), one per namespace (a quarter) and one for
// all (the whole). A refused call weighs one, and one more per 64 KiB of
// its request; it is taken from its caller's bucket, and from its
// namespace's and the whole's too when the caller was not refused in the
// last callerMemory, so that repeats of a known refusal (KEDA polling a
// broken ScaledObject, whose parse and refusal the scaler keeps) cost
// only their own caller.
//
// Two holds, each in the call's own goroutine and bounded in count:
//   - a refused call whose caller owes is answered once the debt is paid,
//     holding only the answer: the caller's next call, KEDA's next poll of
//     that trigger, comes that much later;
//   - a call of a caller neither refused recently nor admitted (a trigger
//     pelwarden serves, or whose parse it has never seen) waits before it
//     is read any further while its namespace or the whole owes: a caller
//     inventing new triggers to be parsed is slowed, and a trigger already
//     served never waits. Past holdBytes its request is not kept: it is
//     refused once the wait is over.
//
// A call that would be held when every hold is taken is not held: one
// known refused is answered as it is, one unknown is refused at once with
// ResourceExhausted. Unavailable and the other codes of a failing Redis
// are not refusals: KEDA's polls during an outage are not a caller's
// fault.
type refusals struct {
	perCaller, perSpace, perAll float64
	now                         func() time.Time
	// admitted says a trigger is served (the trigger registry holds it).
	admitted func(trigger.ID) bool
	log      *slog.Logger
	lim      *lograte.Limiter
	held     *prometheus.CounterVec
	holding  prometheus.Gauge
	over     prometheus.Counter

	mu      sync.Mutex
	all     bucket
	spaces  map[string]*bucket
	callers map[callerKey]*callerBucket
	// holds counts the calls held, in all and by namespace.
	holds   int
	holdsIn map[string]int
	// swept is when the maps were last swept: at most once a second, so a
	// caller filling them cannot make every refusal a walk of them.
	swept time.Time
}

// bucket is the refusals one caller, namespace or all of them may still
// have at once; below zero, what they owe.
type bucket struct {
	tokens float64
	at     time.Time
}

// callerBucket is a caller's bucket, and when it was last refused.
type callerBucket struct {
	bucket
	refused time.Time
}

// callerKey is who asks: a trigger, or the peer address of a call that
// names none.
type callerKey struct {
	id   trigger.ID
	peer string
}

// asker is who asks in one call, and the bytes of its request.
type asker struct {
	key   callerKey
	bytes int
}

func (c asker) namespace() string { return c.key.id.Namespace }

const (
	// refusalBurst is the seconds' worth of refusals a bucket holds, and
	// the most it may owe.
	refusalBurst = 5
	// refusedBytesPerToken is how many bytes of a refused request weigh
	// one more: a refused megabyte weighs as 16 refused polls, whose
	// requests are a few hundred bytes.
	refusedBytesPerToken = 64 << 10
	// maxHolds and maxHoldsPerNamespace bound the calls held at once, and
	// so the goroutines: KEDA keeps one call of a trigger in flight.
	maxHolds             = 1024
	maxHoldsPerNamespace = 64
	// holdBytes is the largest request kept while its call waits before
	// it is read; a trigger at every metadata bound is about 20 KB.
	holdBytes = 64 << 10
	// callerMemory is how long a refused caller is remembered: a repeat
	// within it pays only its own bucket. maxCallers and maxSpaces bound
	// the callers and namespaces remembered; past them a caller counts as
	// new, a namespace shares one bucket with the others past the bound.
	callerMemory = 10 * time.Minute
	maxCallers   = 16384
	maxSpaces    = 4096
)

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

// newRefusals accounts refused calls at perSecond in all (zero turns
// accounting off: nil). admitted says a trigger is served.
func newRefusals(perSecond int, admitted func(trigger.ID) bool, log *slog.Logger, reg prometheus.Registerer) *refusals {
	if perSecond <= 0 {
		return nil
	}
	all := float64(perSecond)
	r := &refusals{
		perCaller: all / 40, perSpace: all / 4, perAll: all, now: time.Now, admitted: admitted,
		log: log, lim: lograte.New(callLogEvery, nil),
		held: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pelwarden", Name: "grpc_held_calls_total",
			Help: "Calls held in their own goroutine (grpc.refusedCallsPerSecond): by=caller, a refused call answered once its caller's debt was paid; " +
				"by=namespace, a call of a caller neither refused nor served waiting while its namespace, or all callers, owed."}, []string{"by"}),
		holding: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "pelwarden", Name: "grpc_held_calls",
			Help: "Calls held now (at most 1024, 64 of one namespace)."}),
		over: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "pelwarden", Name: "grpc_over_budget_calls_total",
			Help: "Calls of callers neither refused nor served refused at once with ResourceExhausted, unread, while their namespace owed and every hold was taken."}),
		all:     bucket{tokens: refusalBurst * all},
		spaces:  map[string]*bucket{},
		callers: map[callerKey]*callerBucket{},
		holdsIn: map[string]int{},
	}
	r.all.at = r.now()
	r.held.WithLabelValues("caller")
	r.held.WithLabelValues("namespace")
	reg.MustRegister(r.held, r.holding, r.over)
	return r
}

// callerOf names who asks in a request: the trigger of a scaler request
// or of a CheckTrigger, or the peer. A namespace or name past its bound
// names no one; metadata past its bound names the ScaledObject alone, and
// is not hashed.
func callerOf(ctx context.Context, req any) asker {
	c := asker{}
	if m, ok := req.(proto.Message); ok {
		c.bytes = proto.Size(m)
	}
	var ns, name string
	var md map[string]string
	switch r := req.(type) {
	case *externalscaler.ScaledObjectRef:
		ns, name, md = r.GetNamespace(), r.GetName(), r.GetScalerMetadata()
	case *externalscaler.GetMetricsRequest:
		ref := r.GetScaledObjectRef()
		ns, name, md = ref.GetNamespace(), ref.GetName(), ref.GetScalerMetadata()
	case *pelwardenv1.CheckTriggerRequest:
		ns, md = r.GetNamespace(), r.GetMetadata()
	default:
		c.key.peer = peerOf(ctx)
		return c
	}
	if ns == "" || metadata.CheckTriggerBounds(ns, name, nil) != nil {
		c.key.peer = peerOf(ctx)
		return c
	}
	if metadata.CheckTriggerBounds(ns, name, md) != nil {
		c.key.id = trigger.ID{Namespace: ns, Name: name}
		return c
	}
	c.key.id = trigger.IDOf(ns, name, md)
	return c
}

// peerOf is the address, without the port, of a call's peer.
func peerOf(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	a := p.Addr.String()
	for i := len(a) - 1; i >= 0; i-- {
		if a[i] == ':' {
			return a[:i]
		}
	}
	return a
}

// refill brings b up to now at rate.
func (b *bucket) refill(now time.Time, rate float64) {
	b.tokens = min(refusalBurst*rate, b.tokens+now.Sub(b.at).Seconds()*rate)
	b.at = now
}

// owed is how long b's debt takes to pay, at rate.
func (b *bucket) owed(now time.Time, rate float64) time.Duration {
	b.refill(now, rate)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / rate * float64(time.Second))
}

// take takes cost from b, owing what it lacks, up to a burst.
func (b *bucket) take(now time.Time, rate, cost float64) {
	b.refill(now, rate)
	b.tokens = max(-refusalBurst*rate, b.tokens-cost)
}

// space is ns's bucket, made full; past maxSpaces namespaces the rest
// share the bucket of an empty namespace name that no request can use. r.mu is
// held.
func (r *refusals) space(ns string, now time.Time) *bucket {
	b := r.spaces[ns]
	if b != nil {
		return b
	}
	if len(r.spaces) >= maxSpaces {
		r.sweep(now)
	}
	if len(r.spaces) >= maxSpaces {
		ns = ""
		if b = r.spaces[ns]; b != nil {
			return b
		}
	}
	b = &bucket{tokens: refusalBurst * r.perSpace, at: now}
	r.spaces[ns] = b
	return b
}

// sweep forgets the callers not refused within callerMemory and the
// namespaces whose buckets are full again. r.mu is held.
func (r *refusals) sweep(now time.Time) {
	if now.Sub(r.swept) < time.Second {
		return
	}
	r.swept = now
	for k, c := range r.callers {
		if now.Sub(c.refused) > callerMemory {
			delete(r.callers, k)
		}
	}
	for ns, b := range r.spaces {
		if b.refill(now, r.perSpace); b.tokens >= refusalBurst*r.perSpace && r.holdsIn[ns] == 0 {
			delete(r.spaces, ns)
		}
	}
}

// before is how long a call waits before it is read on: while its
// namespace or all callers owe, a call from a caller neither refused
// within callerMemory nor served waits until they owe nothing. Zero for
// every other call.
func (r *refusals) before(c asker) time.Duration {
	now := r.now()
	ns := c.namespace()
	var wait time.Duration
	r.mu.Lock()
	if _, known := r.callers[c.key]; !known {
		wait = r.all.owed(now, r.perAll)
		if b := r.spaces[ns]; b != nil {
			wait = max(wait, b.owed(now, r.perSpace))
		}
	}
	r.mu.Unlock()
	if wait > 0 && c.key.peer == "" && r.admitted(c.key.id) {
		return 0
	}
	return wait
}

// holdNew holds a call that before said must wait. With every hold
// taken it is refused at once, unread.
func (r *refusals) holdNew(ctx context.Context, c asker, d time.Duration) error {
	ns := c.namespace()
	if !r.takeHold(ns) {
		r.over.Inc()
		return status.Errorf(codes.ResourceExhausted, "refused unread: calls of namespace %q that pelwarden refused are over grpc.refusedCallsPerSecond, "+
			"and as many of its calls as may wait already do; triggers it serves are not slowed", clip.String(ns, 80))
	}
	defer r.releaseHold(ns)
	r.held.WithLabelValues("namespace").Inc()
	r.lim.Log(ctx, r.log, slog.LevelWarn, "namespace", "held a call of a new caller: the refused calls of its namespace, or of all callers, are over grpc.refusedCallsPerSecond",
		"namespace", clip.String(ns, 80), "wait", d)
	if !sleep(ctx, d) {
		return status.FromContextError(ctx.Err()).Err()
	}
	return nil
}

// after takes a refused call's weight from its caller's bucket, and from
// its namespace's and the whole's when the caller was not remembered, and
// returns how long the answer waits: what the caller owes.
func (r *refusals) after(c asker) time.Duration {
	cost := 1 + float64(c.bytes/refusedBytesPerToken)
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	cb := r.callers[c.key]
	if cb == nil {
		r.space(c.namespace(), now).take(now, r.perSpace, cost)
		r.all.take(now, r.perAll, cost)
		if len(r.callers) >= maxCallers {
			r.sweep(now)
		}
		if len(r.callers) >= maxCallers {
			return 0 // counted as new on every refusal: its namespace pays
		}
		cb = &callerBucket{bucket: bucket{tokens: refusalBurst * r.perCaller, at: now}}
		r.callers[c.key] = cb
	}
	cb.refused = now
	cb.take(now, r.perCaller, cost)
	return cb.owed(now, r.perCaller)
}

// hold waits d for a refused call of c's namespace, if a hold is free; it
// returns false at once when every hold is taken, or when ctx ends.
func (r *refusals) hold(ctx context.Context, c asker, d time.Duration) bool {
	ns := c.namespace()
	if !r.takeHold(ns) {
		return false
	}
	defer r.releaseHold(ns)
	r.held.WithLabelValues("caller").Inc()
	return sleep(ctx, d)
}

func (r *refusals) takeHold(ns string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holds >= maxHolds || r.holdsIn[ns] >= maxHoldsPerNamespace {
		return false
	}
	r.holds++
	r.holdsIn[ns]++
	r.holding.Inc()
	return true
}

func (r *refusals) releaseHold(ns string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holds--
	if r.holdsIn[ns]--; r.holdsIn[ns] <= 0 {
		delete(r.holdsIn, ns)
	}
	r.holding.Dec()
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// refused says a call's answer refuses its input: an error of a refusal
// code, CheckTrigger's answer that the trigger would be refused, or a
// spec GetMetricSpec or StreamMetricSpec answered a refused trigger with
// (noted on the call's context by noteRefused).
func refused(ctx context.Context, resp any, err error) bool {
	if err != nil {
		return refusalCodes[status.Code(err)]
	}
	if n, ok := ctx.Value(refusalNoteKey{}).(*refusalNote); ok && n.refused.Load() {
		return true
	}
	a, ok := resp.(*pelwardenv1.CheckTriggerResponse)
	return ok && a.GetCode() != codes.OK.String()
}

// refusalNote is carried by a call's context, for a handler to say it
// answered a refused trigger although the call succeeds.
type refusalNote struct{ refused atomic.Bool }

type refusalNoteKey struct{}

// withRefusalNote gives a call's context its note.
func withRefusalNote(ctx context.Context) context.Context {
	return context.WithValue(ctx, refusalNoteKey{}, &refusalNote{})
}

// noteRefused says the call of ctx answered a refused trigger with a
// spec: it is a refused call, though it succeeds.
func noteRefused(ctx context.Context) {
	if n, ok := ctx.Value(refusalNoteKey{}).(*refusalNote); ok {
		n.refused.Store(true)
	}
}

// streamInterceptor is the refused calls' accounting of a stream: the
// caller is named by its request, which may wait before it is read on
// (before); a stream that ends refused waits as a refused unary call's
// answer does.
func (r *refusals) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	fs := &fairStream{ServerStream: ss, r: r, ctx: withRefusalNote(ss.Context())}
	err := handler(srv, fs)
	if fs.asked && refused(fs.ctx, nil, err) {
		if owed := r.after(fs.c); owed > 0 {
			r.hold(ss.Context(), fs.c, owed)
		}
	}
	return err
}

// fairStream names its caller from the first message it receives.
type fairStream struct {
	grpc.ServerStream
	ctx   context.Context
	r     *refusals
	c     asker
	asked bool
}

func (s *fairStream) Context() context.Context { return s.ctx }

func (s *fairStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil || s.asked {
		return err
	}
	s.c, s.asked = callerOf(s.Context(), m), true
	if wait := s.r.before(s.c); wait > 0 {
		// A stream's request is small (a ScaledObjectRef) and read
		// already; it waits with it.
		return s.r.holdNew(s.Context(), s.c, wait)
	}
	return nil
}
