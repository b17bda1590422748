package scaler

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/clip"
)

// Wake is one StreamIsActive's hold on its stream's armed watch, shared
// with every other waiter on the stream (redisx.Wake).
type Wake interface {
	// C is closed when an entry lands on the stream.
	C() <-chan struct{}
	// Armed is when the watch began: an entry added after it closes C.
	Armed() time.Time
	// Fired is when the entry that closed C was read.
	Fired() time.Time
	// Stop lets go of the watch.
	Stop()
}

// ArmFunc arms a stream of a connection: the returned Wake fires when a new
// entry lands on it. Arms of one stream share one Redis watch.
type ArmFunc func(ctx context.Context, conn, stream string) (Wake, error)

// maxEchoedNamespace is as much of a namespace as a refusal quotes.
const maxEchoedNamespace = 64

// streamQuota bounds the streams of one method (StreamIsActive or
// StreamMetricSpec) open at once, in all and per ScaledObject namespace: each holds a goroutine, a subscription to
// its target and, while inactive, a share of its stream's watch, and any
// caller that reaches the port can open them. The namespace bound keeps
// one namespace's streams from taking the whole of the other.
type streamQuota struct {
	// method names the streams in a refusal.
	method            string
	max, perNamespace int

	mu    sync.Mutex
	open  int
	perNS map[string]int
}

func newStreamQuota(method string, maxStreams, perNamespace int) *streamQuota {
	return &streamQuota{method: method, max: maxStreams, perNamespace: perNamespace, perNS: make(map[string]int)}
}

// take counts one more stream of namespace, or refuses it with
// ResourceExhausted naming the setting that is full. A bound of 0 or less
// is no bound. release gives the slot back; call it once.
func (q *streamQuota) take(namespace string) (release func(), err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.max > 0 && q.open >= q.max {
		return nil, status.Errorf(codes.ResourceExhausted,
			"%s: %d streams are open, the most scaler.maxActiveStreams allows; KEDA opens it again later", q.method, q.open)
	}
	if q.perNamespace > 0 && q.perNS[namespace] >= q.perNamespace {
		return nil, status.Errorf(codes.ResourceExhausted,
			"%s: namespace %q has %d streams open, the most scaler.maxActiveStreamsPerNamespace allows; KEDA opens it again later",
			q.method, clip.String(namespace, maxEchoedNamespace), q.perNS[namespace])
	}
	q.open++
	q.perNS[namespace]++
	var once sync.Once
	return func() { once.Do(func() { q.give(namespace) }) }, nil
}

func (q *streamQuota) give(namespace string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.open--
	if q.perNS[namespace]--; q.perNS[namespace] <= 0 {
		delete(q.perNS, namespace)
	}
}

// Open is the number of StreamIsActive streams open.
func (q *streamQuota) Open() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.open
}

// ActiveStats are the StreamIsActive figures beside the open streams:
// targets is how many targets have a stream open, evaluations how many
// times a read of one was evaluated for all its streams' answers at once,
// wakes how many times a stream's goroutine woke to send (a changed
// answer, or its resend).
func (s *Server) ActiveStats() (targets int, evaluations, wakes uint64) {
	return s.active.Len(), s.active.evaluations.Load(), s.active.wakes.Load()
}
