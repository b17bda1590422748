package scaler

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pelwarden/pelwarden/internal/clip"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/rpcstatus"
)

// answerKey is what, beside its target's snapshot, decides a
// StreamIsActive answer: streams with equal keys on one target always
// have the same answer.
type answerKey struct {
	metric     policy.Metric
	activation float64 // never NaN: metadata refuses it
}

// activeTargets holds one activeTarget per target with a StreamIsActive
// stream open. A flood of streams on one target then costs one goroutine
// woken per XADD and per read of the target, whatever their number and
// their thresholds: a stream's own goroutine wakes only when its answer
// changes or its resend is due.
type activeTargets struct {
	s *Server

	mu       sync.Mutex
	targets  map[string]*activeTarget // by liveness.Target.Key
	perGroup map[liveness.GroupRef]int
	gates    map[streamKey]*gate

	// evaluations counts reads of a target evaluated for its answers;
	// wakes counts streams woken to send.
	evaluations, wakes atomic.Uint64
}

func newActiveTargets(s *Server) *activeTargets {
	return &activeTargets{s: s, targets: make(map[string]*activeTarget), perGroup: make(map[liveness.GroupRef]int),
		gates: make(map[streamKey]*gate)}
}

// activeTarget is the streams of one target: one goroutine reads it,
// holds the armed watch while any of its answers is false, and decides
// every answer from each read.
type activeTarget struct {
	all *activeTargets
	key string
	r   metadata.Request // the first stream's; only its Target is read

	streams int // guarded by all.mu
	cancel  context.CancelFunc
	poke    chan struct{}
	wake    Wake  // used by run alone
	gate    *gate // its stream's

	mu      sync.Mutex
	answers map[answerKey]*answer
	// since: the latest read decided began no earlier than this; next is
	// closed when a later read is decided.
	since time.Time
	next  chan struct{}
	err   error // a failed read: every stream of the target ends with it
	// want is the latest opening of a stream still waiting for an answer
	// from a read begun after it.
	want time.Time
}

// answer is one (metric, activation) of a target and the streams that
// ask it. Its fields are guarded by its target's mu.
type answer struct {
	metric     policy.Metric
	activation float64
	streams    int
	read       bool // false before its first read
	active     bool
	// changed is closed when active changes or the target fails, so a
	// read that changes nothing wakes none of the streams.
	changed chan struct{}
}

// join adds a stream to its target, starting the target's goroutine on
// the first; leave takes it out, and the last to leave stops the goroutine.
func (a *activeTargets) join(r metadata.Request) (*activeTarget, *answer, func(), error) {
	key := r.Target.Key()
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.targets[key]
	if t == nil {
		if limit := a.s.opts.MaxActiveTargetsPerGroup; limit > 0 && a.perGroup[r.Target.GroupRef] >= limit {
			return nil, nil, nil, status.Errorf(codes.ResourceExhausted,
				"StreamIsActive: group %q of stream %q has streams open for %d targets (liveness settings), the most scaler.maxActiveTargetsPerGroup allows; a stream with the settings of one of them is served, and KEDA opens this one again later",
				clip.String(r.Target.Group, maxEchoedNamespace), clip.String(r.Target.Stream, maxEchoedNamespace), a.perGroup[r.Target.GroupRef])
		}
		// One subscription per target: the view signals each read to the
		// target's goroutine, not to every stream.
		updates, unsubscribe, err := a.s.view.Subscribe(r.Target)
		if err != nil {
			return nil, nil, nil, rpcstatus.Of(err, r.Target.GroupRef)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t = &activeTarget{all: a, key: key, r: r, cancel: cancel, poke: make(chan struct{}, 1),
			answers: make(map[answerKey]*answer), next: make(chan struct{}),
			gate: a.gateLocked(streamKey{r.Target.Conn, r.Target.Stream})}
		a.targets[key] = t
		a.perGroup[r.Target.GroupRef]++
		go t.run(ctx, updates, unsubscribe)
	}
	t.streams++
	ak := answerKey{metric: r.Metric, activation: r.Activation}
	t.mu.Lock()
	ans := t.answers[ak]
	if ans == nil {
		ans = &answer{metric: r.Metric, activation: r.Activation, changed: make(chan struct{})}
		t.answers[ak] = ans
	}
	ans.streams++
	t.mu.Unlock()
	var once sync.Once
	return t, ans, func() { once.Do(func() { a.leave(t, ak) }) }, nil
}

func (a *activeTargets) leave(t *activeTarget, ak answerKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t.mu.Lock()
	if ans := t.answers[ak]; ans != nil {
		if ans.streams--; ans.streams <= 0 {
			delete(t.answers, ak)
		}
	}
	t.mu.Unlock()
	if t.streams--; t.streams > 0 {
		return
	}
	a.dropLocked(t)
	t.cancel()
}

// dropLocked forgets t, unless a newer activeTarget of its key took its
// place.
func (a *activeTargets) dropLocked(t *activeTarget) {
	if a.targets[t.key] != t {
		return
	}
	delete(a.targets, t.key)
	g := t.r.Target.GroupRef
	if a.perGroup[g]--; a.perGroup[g] <= 0 {
		delete(a.perGroup, g)
	}
}

// Len is the number of targets with a stream open.
func (a *activeTargets) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.targets)
}

// state is an answer as a stream sees it, and what to wait on for the
// next.
func (t *activeTarget) state(ans *answer) (active bool, changed <-chan struct{}, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return ans.active, ans.changed, t.err
}

// answerSince waits until ans is decided from a read begun no earlier
// than opened, or the target failed, asking the target for that read:
// the streams asking within one read share it.
func (t *activeTarget) answerSince(ctx context.Context, ans *answer, opened time.Time) error {
	t.mu.Lock()
	if opened.After(t.want) {
		t.want = opened
	}
	t.mu.Unlock()
	select {
	case t.poke <- struct{}{}:
	default:
	}
	for {
		t.mu.Lock()
		done := t.err != nil || (ans.read && !t.since.Before(opened))
		next := t.next
		t.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-next:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// run decides the target's answers until its last stream leaves or a
// read fails: at once, after every read of the target, when a stream
// asks (its opening, its resend), and, while an answer is false, when an
// entry lands on the stream.
func (t *activeTarget) run(ctx context.Context, updates <-chan struct{}, unsubscribe func()) {
	defer t.all.ungate(t)
	defer unsubscribe()
	defer t.disarm()
	// since, when set, asks for a read that began after it: a stream's
	// opening, the arming, or the entry that woke the target.
	var since time.Time
	woken := false // by an entry, with the stream's other targets
	for {
		since = later(since, t.takeWant())
		// The evaluation reads the view's latest snapshot: a signal of a
		// read that settled before it is answered by it.
		select {
		case <-updates:
		default:
		}
		if woken && !t.gate.enter(ctx) {
			return
		}
		t.all.evaluations.Add(1)
		snap, err := t.all.s.snapshot(ctx, t.r, since)
		if woken {
			t.gate.leave()
			woken = false
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			t.fail(err)
			return
		}
		allActive := t.decide(snap, since)
		if since = t.arm(ctx, allActive); !since.IsZero() {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.fired():
			since, woken = t.rearm(ctx), true
		case <-updates:
		case <-t.poke:
		}
	}
}

func (t *activeTarget) takeWant() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.want
	t.want = time.Time{}
	return w
}

// decide sets every answer from a read begun no earlier than since (a
// zero since served the view's latest snapshot, whose read began no
// earlier than the one before it), waking the streams of those that
// changed, and reports whether all are true.
func (t *activeTarget) decide(snap *liveness.Snapshot, since time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	allActive := true
	for _, ans := range t.answers {
		active := policy.Active(policy.Value(ans.metric, snap), ans.activation)
		allActive = allActive && active
		if ans.read && ans.active == active {
			continue
		}
		if ans.read {
			close(ans.changed)
			ans.changed = make(chan struct{})
		}
		ans.read, ans.active = true, active
	}
	t.since = later(t.since, since)
	close(t.next)
	t.next = make(chan struct{})
	return allActive
}

// fail ends every stream of the target with err. The target leaves the
// map first, so a stream opened after it starts afresh.
func (t *activeTarget) fail(err error) {
	t.all.mu.Lock()
	t.all.dropLocked(t)
	t.all.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.err = err
	for _, ans := range t.answers {
		close(ans.changed)
		ans.changed = make(chan struct{})
	}
	close(t.next)
	t.next = make(chan struct{})
}

// arm holds the stream's watch while an answer is false and lets go of it
// once all are true. On a new hold it returns when the watch began: the
// answers must be read once more from a read begun after it, so that an
// entry added between the last read and the arming cannot slip by.
func (t *activeTarget) arm(ctx context.Context, allActive bool) time.Time {
	arm := t.all.s.opts.Arm
	switch {
	case allActive:
		t.disarm()
	case t.wake == nil && arm != nil:
		if k, err := arm(ctx, t.r.Target.Conn, t.r.Target.Stream); err == nil {
			t.wake = k
			return k.Armed()
		}
	}
	return time.Time{}
}

// rearm trades the watch that fired for a new one before the read it
// asks for, and returns the moment that read must begin after: the entry
// that fired and the new watch's start. One read then both sees the entry
// and covers the gap until the new watch, where reading first and arming
// after would take a second read. A target whose answers all turn true
// lets the new watch go after the read.
func (t *activeTarget) rearm(ctx context.Context) time.Time {
	fired := t.wake.Fired()
	t.disarm()
	if arm := t.all.s.opts.Arm; arm != nil {
		if k, err := arm(ctx, t.r.Target.Conn, t.r.Target.Stream); err == nil {
			t.wake = k
			return later(fired, k.Armed())
		}
	}
	return fired
}

// fired is the held watch's channel; nil, which never fires, when none
// is held.
func (t *activeTarget) fired() <-chan struct{} {
	if t.wake == nil {
		return nil
	}
	return t.wake.C()
}

func (t *activeTarget) disarm() {
	if t.wake != nil {
		t.wake.Stop()
		t.wake = nil
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
