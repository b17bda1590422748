package scaler

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pelwarden/pelwarden/internal/config"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/redistest"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// heldWake is a stream's watch the test fires by hand: every Arm until
// it fires shares it, as redisx.Waker's do.
type heldWake struct {
	c       chan struct{}
	armedAt time.Time
	firedAt time.Time
}

func (w *heldWake) C() <-chan struct{} { return w.c }
func (w *heldWake) Armed() time.Time   { return w.armedAt }
func (w *heldWake) Fired() time.Time   { return w.firedAt }
func (w *heldWake) Stop()              {}

type handWaker struct {
	mu  sync.Mutex
	cur *heldWake
}

func (h *handWaker) arm(context.Context, string, string) (Wake, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == nil {
		h.cur = &heldWake{c: make(chan struct{}), armedAt: time.Now()}
	}
	return h.cur, nil
}

// fire is one entry landing on the stream.
func (h *handWaker) fire() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cur.firedAt = time.Now()
	close(h.cur.c)
	h.cur = nil
}

// TestTargetsWokenByOneEntryAreJudgedOneAtATime: 30 StreamIsActive
// targets of one group, each with a ghostIdleSeconds of its own, are
// woken by one entry on their stream. They share its one read, and each
// is judged from it in turn, never two at once: a thousand such targets
// take one CPU, not every CPU ahead of other polls.
func TestTargetsWokenByOneEntryAreJudgedOneAtATime(t *testing.T) {
	t.Parallel()
	const targets = 30
	srv := redistest.Start(t)
	redistest.CreateGroup(t, srv.Client(t), "jobs", "workers")
	conns, err := redisx.Open([]config.Redis{config.DefaultRedis("default", srv.Addr())})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conns.Close() })
	reader := &redisx.Reader{Conns: conns, LagEstimateCap: 1000}

	var judged, inside, most atomic.Int64
	view := liveness.NewView(reader.Fetch, liveness.ViewOptions{Freshness: time.Hour, FetchTimeout: 5 * time.Second,
		Expiry: time.Hour, MaxTargets: targets,
		OnRefresh: func(liveness.Target, *liveness.Snapshot, error, time.Duration) {
			n := inside.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond) // judging takes a while: the others would overlap it
			inside.Add(-1)
			judged.Add(1)
		}})
	w := &handWaker{}
	env := metadata.Env{Conns: []string{"default"}}
	s := New(view, Options{Env: env, RequestTimeout: 5 * time.Second, ResendInterval: time.Hour, Arm: w.arm})
	ctx := context.Background()
	for i := range targets {
		r, err := metadata.Parse(map[string]string{"stream": "jobs", "consumerGroup": "workers", "lagCount": "5",
			"activationLagCount": "1000000", "ghostIdleSeconds": strconv.Itoa(100 + i)}, env)
		require.NoError(t, err)
		at, ans, leave, err := s.active.join(r)
		require.NoError(t, err)
		t.Cleanup(leave)
		require.NoError(t, at.answerSince(ctx, ans, time.Now()))
	}
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.cur != nil
	}, 5*time.Second, time.Millisecond, "the stream armed while the answers are false")

	judged.Store(0)
	most.Store(0)
	w.fire()
	require.Eventually(t, func() bool { return judged.Load() >= targets }, 10*time.Second, time.Millisecond, "every target judged from the entry's read")
	require.Equal(t, int64(1), most.Load(), "the targets woken together were judged one at a time")
}
