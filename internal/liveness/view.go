package liveness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Fetcher reads one target from Redis in one round trip. known lists the
// consumers of the previous snapshot so their heartbeat keys can be read in
// the same round trip.
type Fetcher func(ctx context.Context, t Target, known []string) (Observation, error)

// ErrTooManyTargets is returned when registering one more target would pass
// Options.MaxTargets.
var ErrTooManyTargets = errors.New("too many targets registered")

// ViewOptions configures a View.
type ViewOptions struct {
	// RefreshInterval is how often each target is read in the background.
	RefreshInterval time.Duration
	// MaxAge is the oldest snapshot served without reading again.
	MaxAge time.Duration
	// FetchTimeout bounds one read of one target.
	FetchTimeout time.Duration
	// Expiry drops a target nobody asked about (and nobody watches) for this long.
	Expiry time.Duration
	// MaxTargets bounds the number of registered targets.
	MaxTargets int
	// Concurrency bounds the background reads running at once.
	Concurrency int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// OnRefresh, when set, is called after every read with its outcome.
	OnRefresh func(t Target, s *Snapshot, err error, took time.Duration)
	// OnExpire, when set, is called when a target is dropped.
	OnExpire func(t Target)
	// Breaker is the disruption breaker's threshold; DefaultBreaker when
	// zero.
	Breaker Breaker
}

// View holds the latest snapshot of every registered target and keeps it
// fresh. It is safe for concurrent use.
type View struct {
	fetch Fetcher
	opts  ViewOptions

	mu sync.Mutex
	// groups holds the targets by their group, where a group has one
	// target or a few: keyed by the whole viewKey, the map's slots would
	// hold four times the bytes, once per target.
	groups map[GroupRef][]*entry
	n      int
}

type entry struct {
	target Target

	mu   sync.Mutex
	snap *Snapshot
	err  error
	// readAt is when the read that gave snap began.
	readAt    time.Time
	lastAsked time.Time
	inflight  *call
	// subs is nil until the first Subscribe: most targets never have one.
	subs map[chan struct{}]struct{}
	// pins counts holders that keep the target registered without a
	// channel (the hygiene loop's targets).
	pins int
}

// call is one read in progress; waiters block on done.
type call struct {
	started time.Time
	done    chan struct{}
	snap    *Snapshot
	err     error
}

// NewView returns a View reading through fetch.
func NewView(fetch Fetcher, opts ViewOptions) *View {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 32
	}
	if opts.Breaker == (Breaker{}) {
		opts.Breaker = DefaultBreaker
	}
	return &View{fetch: fetch, opts: opts, groups: make(map[GroupRef][]*entry)}
}

// Snapshot returns a snapshot of t no older than MaxAge, reading Redis when
// the last one is older or failed. It registers t on first use. The error is
// the read's: callers must not mistake it for an empty group.
func (v *View) Snapshot(ctx context.Context, t Target) (*Snapshot, error) {
	e, snap, err := v.cached(t)
	if err != nil || snap != nil {
		return snap, err
	}
	return v.refresh(ctx, e, time.Time{})
}

// Cached is Snapshot without the read: it registers t and returns its
// snapshot if one no older than MaxAge is at hand, and ok false if
// answering needs a read. It allocates nothing, so a poll served from a
// fresh snapshot needs no deadline of its own.
func (v *View) Cached(t Target) (snap *Snapshot, ok bool, err error) {
	_, snap, err = v.cached(t)
	return snap, snap != nil, err
}

func (v *View) cached(t Target) (*entry, *Snapshot, error) {
	e, err := v.register(t)
	if err != nil {
		return nil, nil, err
	}
	now := v.opts.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lastAsked = now
	if e.err == nil && e.snap != nil && now.Sub(e.snap.At) <= v.opts.MaxAge {
		return e, e.snap, nil
	}
	return e, nil, nil
}

// Refresh reads t now and returns a snapshot whose read started no earlier
// than the call: a caller woken by a new stream entry sees that entry.
func (v *View) Refresh(ctx context.Context, t Target) (*Snapshot, error) {
	e, err := v.register(t)
	if err != nil {
		return nil, err
	}
	return v.refresh(ctx, e, v.opts.Now())
}

// RefreshSince returns a snapshot of t whose read started no earlier than
// since, on the view's clock, reading only when the latest did not: the
// many callers woken by one event, each with the event's time, share one
// read, however late each gets to ask.
func (v *View) RefreshSince(ctx context.Context, t Target, since time.Time) (*Snapshot, error) {
	e, err := v.register(t)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.lastAsked = v.opts.Now()
	snap := e.snap
	if e.err != nil || e.readAt.Before(since) {
		snap = nil
	}
	e.mu.Unlock()
	if snap != nil {
		return snap, nil
	}
	return v.refresh(ctx, e, since)
}

// Subscribe returns a channel that receives a signal after every read of t,
// and a function to stop. A subscribed target does not expire.
func (v *View) Subscribe(t Target) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	// Registering and subscribing under the view's lock keeps expiry from
	// dropping the target in between.
	v.mu.Lock()
	e, err := v.registerLocked(t)
	if err == nil {
		e.mu.Lock()
		if e.subs == nil {
			e.subs = make(map[chan struct{}]struct{})
		}
		e.subs[ch] = struct{}{}
		e.mu.Unlock()
	}
	v.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	return ch, func() {
		e.mu.Lock()
		delete(e.subs, ch)
		e.lastAsked = v.opts.Now()
		e.mu.Unlock()
	}, nil
}

// Pin registers t and keeps it from expiring, like Subscribe but without a
// channel: a holder that learns of reads another way (OnRefresh) costs the
// view a counter, not a channel per target. unpin ends the hold once.
func (v *View) Pin(t Target) (unpin func(), err error) {
	v.mu.Lock()
	e, err := v.registerLocked(t)
	if err == nil {
		e.mu.Lock()
		e.pins++
		e.mu.Unlock()
	}
	v.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			e.pins--
			e.lastAsked = v.opts.Now()
			e.mu.Unlock()
		})
	}, nil
}

// Latest returns every target's latest snapshot (nil where none yet) and
// error, for diagnostics and metrics.
func (v *View) Latest() []Latest {
	v.mu.Lock()
	entries := make([]*entry, 0, v.n)
	for _, es := range v.groups {
		entries = append(entries, es...)
	}
	v.mu.Unlock()
	out := make([]Latest, 0, len(entries))
	for _, e := range entries {
		e.mu.Lock()
		out = append(out, Latest{Target: e.target, Snapshot: e.snap, Err: e.err})
		e.mu.Unlock()
	}
	return out
}

// Len is the number of registered targets.
func (v *View) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.n
}

// Peek returns t's latest good snapshot without reading Redis or
// registering t.
func (v *View) Peek(t Target) (*Snapshot, bool) {
	v.mu.Lock()
	e := v.lookupLocked(t)
	v.mu.Unlock()
	if e == nil {
		return nil, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snap, e.snap != nil
}

// Latest is one target's latest state.
type Latest struct {
	Target   Target
	Snapshot *Snapshot
	Err      error
}

// Run refreshes every target each RefreshInterval and expires unused ones,
// until ctx ends.
func (v *View) Run(ctx context.Context) error {
	tick := time.NewTicker(v.opts.RefreshInterval)
	defer tick.Stop()
	sem := make(chan struct{}, v.opts.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		for _, e := range v.due(v.opts.Now()) {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			wg.Go(func() {
				defer func() { <-sem }()
				_, _ = v.refresh(ctx, e, time.Time{})
			})
		}
	}
}

// due expires unused targets and returns those whose snapshot is at least
// one interval old (a read on request may have refreshed some already).
func (v *View) due(now time.Time) []*entry {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]*entry, 0, v.n)
	for g, es := range v.groups {
		kept := es[:0]
		for _, e := range es {
			e.mu.Lock()
			expired := len(e.subs) == 0 && e.pins == 0 && now.Sub(e.lastAsked) > v.opts.Expiry
			fresh := e.err == nil && e.snap != nil && now.Sub(e.snap.At) < v.opts.RefreshInterval*9/10
			e.mu.Unlock()
			if expired {
				v.n--
				if v.opts.OnExpire != nil {
					v.opts.OnExpire(e.target)
				}
				continue
			}
			kept = append(kept, e)
			if !fresh {
				out = append(out, e)
			}
		}
		switch {
		case len(kept) == 0:
			delete(v.groups, g)
		case len(kept) < len(es):
			clear(es[len(kept):])
			v.groups[g] = kept
		}
	}
	return out
}

func (v *View) register(t Target) (*entry, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.registerLocked(t)
}

func (v *View) registerLocked(t Target) (*entry, error) {
	if e := v.lookupLocked(t); e != nil {
		return e, nil
	}
	if v.n >= v.opts.MaxTargets {
		return nil, fmt.Errorf("%w (maxTargets %d)", ErrTooManyTargets, v.opts.MaxTargets)
	}
	e := &entry{target: t, lastAsked: v.opts.Now()}
	v.groups[t.GroupRef] = append(v.groups[t.GroupRef], e)
	v.n++
	return e, nil
}

// lookupLocked returns t's entry, nil if t is not registered; v.mu is
// held.
func (v *View) lookupLocked(t Target) *entry {
	key := keyOf(t)
	for _, e := range v.groups[t.GroupRef] {
		if keyOf(e.target) == key {
			return e
		}
	}
	return nil
}

// refresh joins a read of e that started at or after notBefore, or starts
// one. The read runs under its own timeout, detached from ctx, so one
// impatient caller cannot fail the read for the others waiting on it.
func (v *View) refresh(ctx context.Context, e *entry, notBefore time.Time) (*Snapshot, error) {
	for {
		e.mu.Lock()
		c := e.inflight
		if c == nil {
			c = &call{started: v.opts.Now(), done: make(chan struct{})}
			e.inflight = c
			prev := e.snap
			e.mu.Unlock()
			go v.read(ctx, e, c, prev)
		} else {
			e.mu.Unlock()
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if !c.started.Before(notBefore) {
			return c.snap, c.err
		}
	}
}

// read fetches e and judges it against prev, its latest good snapshot,
// which also names the consumers whose heartbeat keys to read and carries
// when each was first seen.
func (v *View) read(ctx context.Context, e *entry, c *call, prev *Snapshot) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.opts.FetchTimeout)
	defer cancel()
	obs, err := v.fetch(fctx, e.target, consumerNames(prev))
	now := v.opts.Now()
	if err == nil {
		c.snap = BuildWith(&e.target, obs, prev, now, v.opts.Breaker)
	} else {
		c.err = err
	}
	e.mu.Lock()
	if err == nil {
		e.snap, e.readAt = c.snap, c.started
	}
	e.err = err
	e.inflight = nil
	for ch := range e.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	e.mu.Unlock()
	close(c.done)
	if v.opts.OnRefresh != nil {
		v.opts.OnRefresh(e.target, c.snap, err, now.Sub(c.started))
	}
}

func consumerNames(s *Snapshot) []string {
	if s == nil {
		return nil
	}
	names := make([]string, len(s.Consumers))
	for i, c := range s.Consumers {
		names[i] = c.Name
	}
	return names
}

// viewKey is Target.Key as a comparable value: the view's map is looked up
// on every poll, and building the key string allocated on each. Two
// targets have equal viewKeys exactly when they have equal Keys.
type viewKey struct {
	GroupRef
	idle, heartbeat, kubernetes bool
	ghostIdle, heartbeatMaxAge  time.Duration
	startGrace, podGrace        time.Duration
	heartbeatKey                string
	ownerMode, ownerExpr        string
	podNamespace, podSelector   string
}

// keyOf leaves out, as Spec.String does, the settings of a source that is
// off: they change nothing about how the target is judged.
func keyOf(t Target) viewKey {
	s := t.Spec
	k := viewKey{
		GroupRef: t.GroupRef, idle: s.Idle, heartbeat: s.Heartbeat, kubernetes: s.Kubernetes,
		ghostIdle: s.GhostIdle, heartbeatMaxAge: s.HeartbeatMaxAge, heartbeatKey: s.HeartbeatKey,
		ownerMode: s.Owner.mode, ownerExpr: s.Owner.expr,
	}
	if k.ownerMode == "" {
		k.ownerMode = "exact"
	}
	if s.Heartbeat {
		k.startGrace = s.StartGrace
	}
	if s.Kubernetes {
		k.podNamespace, k.podSelector, k.podGrace = s.PodNamespace, s.PodSelector, s.PodGrace
	}
	return k
}
