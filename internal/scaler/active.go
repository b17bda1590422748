package scaler

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pelwarden/pelwarden/internal/metadata"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/rpcstatus"
)

// activeKey is what decides a StreamIsActive answer: streams with equal
// keys always have the same answer, so it is computed once for them all.
type activeKey struct {
	target string // liveness.Target.Key
	metric policy.Metric
	// activation as bits: a NaN key would never find itself in the map,
	// and its group would never leave it.
	activation uint64
}

func activeKeyOf(r metadata.Request) activeKey {
	return activeKey{target: r.Target.Key(), metric: r.Metric, activation: math.Float64bits(r.Activation)}
}

// activeGroups holds one activeGroup per activeKey with a stream open.
// A flood of StreamIsActive streams on one target then costs one
// goroutine woken per XADD and per read of the target, not one per
// stream: a stream's own goroutine wakes only when its group's answer
// changes or its resend is due.
type activeGroups struct {
	s *Server

	mu     sync.Mutex
	groups map[activeKey]*activeGroup

	// answers counts answers computed; wakes counts streams woken to send.
	answers, wakes atomic.Uint64
}

func newActiveGroups(s *Server) *activeGroups {
	return &activeGroups{s: s, groups: make(map[activeKey]*activeGroup)}
}

// activeGroup is the streams of one activeKey: one goroutine reads the
// target, holds the armed watch while the answer is false, and publishes
// each answer.
type activeGroup struct {
	all *activeGroups
	key activeKey
	r   metadata.Request // the first stream's; every stream's decides the same answer

	streams int // guarded by all.mu
	cancel  context.CancelFunc

	mu    sync.Mutex
	state *activeState
	// want is the latest opening of a stream still waiting for an answer
	// from a read begun after it.
	want time.Time
	poke chan struct{}
	wake Wake // held by run while the answer is false
}

// activeState is one published answer. Streams wait on changed, which
// the states with the same answer share, so a read that changes nothing
// wakes none of them; a newly opened stream waits on next.
type activeState struct {
	active bool
	err    error // a failed read: every stream of the group ends with it
	read   bool  // false before the group's first answer
	// since: the read that gave the answer began no earlier than this.
	since   time.Time
	changed chan struct{} // closed when an answer other than this one, or an error, is published
	next    chan struct{} // closed when any state replaces this one
}

// join adds a stream to its key's group, starting the group on the first;
// leave takes it out, and the last to leave stops the group.
func (a *activeGroups) join(r metadata.Request) (g *activeGroup, leave func(), err error) {
	key := activeKeyOf(r)
	a.mu.Lock()
	defer a.mu.Unlock()
	g = a.groups[key]
	if g == nil {
		// One subscription per group: the view signals each read of the
		// target to the group, not to every stream.
		updates, unsubscribe, err := a.s.view.Subscribe(r.Target)
		if err != nil {
			return nil, nil, rpcstatus.Of(err, r.Target.GroupRef)
		}
		ctx, cancel := context.WithCancel(context.Background())
		g = &activeGroup{
			all: a, key: key, r: r, cancel: cancel, poke: make(chan struct{}, 1),
			state: &activeState{changed: make(chan struct{}), next: make(chan struct{})},
		}
		a.groups[key] = g
		go g.run(ctx, updates, unsubscribe)
	}
	g.streams++
	var once sync.Once
	return g, func() { once.Do(func() { a.leave(g) }) }, nil
}

func (a *activeGroups) leave(g *activeGroup) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if g.streams--; g.streams > 0 {
		return
	}
	a.dropLocked(g)
	g.cancel()
}

// dropLocked forgets g, unless a newer group of its key took its place.
func (a *activeGroups) dropLocked(g *activeGroup) {
	if a.groups[g.key] == g {
		delete(a.groups, g.key)
	}
}

// Len is the number of groups.
func (a *activeGroups) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.groups)
}

// current is the latest published state.
func (g *activeGroup) current() *activeState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}

// answerSince returns the first state whose read began no earlier than
// opened, or an error state, asking the group for that read.
func (g *activeGroup) answerSince(ctx context.Context, opened time.Time) (*activeState, error) {
	g.mu.Lock()
	if opened.After(g.want) {
		g.want = opened
	}
	st := g.state
	g.mu.Unlock()
	select {
	case g.poke <- struct{}{}:
	default:
	}
	for st.err == nil && (!st.read || st.since.Before(opened)) {
		select {
		case <-st.next:
			st = g.current()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return st, nil
}

// run computes the group's answer until its last stream leaves or a read
// fails: at once, after every read of the target, on a stream's opening,
// and, while the answer is false, when an entry lands on the stream.
func (g *activeGroup) run(ctx context.Context, updates <-chan struct{}, unsubscribe func()) {
	defer unsubscribe()
	defer g.disarm()
	// since, when set, asks for a read that began after it: a stream's
	// opening, the arming, or the entry that woke the group.
	var since time.Time
	for {
		since = later(since, g.takeWant())
		active, err := g.compute(ctx, since)
		if ctx.Err() != nil {
			return
		}
		g.publish(active, err, since)
		if err != nil {
			return
		}
		if since = g.arm(ctx, active); !since.IsZero() {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-g.fired():
			since = g.wake.Fired()
			g.disarm()
		case <-updates:
		case <-g.poke:
		}
	}
}

func (g *activeGroup) takeWant() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.want
	g.want = time.Time{}
	return w
}

func (g *activeGroup) compute(ctx context.Context, since time.Time) (bool, error) {
	g.all.answers.Add(1)
	snap, err := g.all.s.snapshot(ctx, g.r, since)
	if err != nil {
		return false, err
	}
	return policy.Active(policy.Value(g.r.Metric, snap), g.r.Activation), nil
}

// publish makes an answer the current state. Only an answer that differs
// from the last, or an error, wakes the group's streams. A failed group
// leaves the map at once, so a stream opened after it starts a new one.
func (g *activeGroup) publish(active bool, err error, since time.Time) {
	if err != nil {
		g.all.mu.Lock()
		g.all.dropLocked(g)
		g.all.mu.Unlock()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.state
	st := &activeState{active: active, err: err, read: true, next: make(chan struct{}),
		// A zero since served the view's latest snapshot, whose read began
		// no earlier than the one before it.
		since: later(old.since, since)}
	if old.read && old.err == nil && err == nil && old.active == active {
		st.changed = old.changed
	} else {
		st.changed = make(chan struct{})
		close(old.changed)
	}
	g.state = st
	close(old.next)
}

// arm holds the stream's watch while the answer is false and lets go of it
// once true. On a new hold it returns when the watch began: the answer
// must be read once more from a read begun after it, so that an entry
// added between the last read and the arming cannot slip by.
func (g *activeGroup) arm(ctx context.Context, active bool) time.Time {
	arm := g.all.s.opts.Arm
	switch {
	case active:
		g.disarm()
	case g.wake == nil && arm != nil:
		if k, err := arm(ctx, g.r.Target.Conn, g.r.Target.Stream); err == nil {
			g.wake = k
			return k.Armed()
		}
	}
	return time.Time{}
}

// fired is the held watch's channel; nil, which never fires, when none
// is held.
func (g *activeGroup) fired() <-chan struct{} {
	if g.wake == nil {
		return nil
	}
	return g.wake.C()
}

func (g *activeGroup) disarm() {
	if g.wake != nil {
		g.wake.Stop()
		g.wake = nil
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
