// Package hygiene runs the PEL hygiene loop: for every hygiene target it
// finds the entries that ghost consumers hold, on the same liveness view the
// scaler reports from, and gives them back through the guarded Redis
// actions; it dead-letters poison entries and deletes ghost consumers whose
// PEL is empty.
//
// Its cost follows the work, not the number of groups: a target waits in a
// queue ordered by when it is next due, a bounded pool of workers runs the
// scans that are due, the view's reads tell the loop when a consumer holding
// entries turns Ghost, and the scan leases of one connection are renewed in
// one round trip. An idle group costs a queue entry and a pin in the view,
// not a goroutine, a subscription or a Redis call of its own.
package hygiene

import (
	"container/heap"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/lograte"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// ErrFull is returned by Add when a request would enroll one target more
// than Options.MaxTargets allows.
var ErrFull = errors.New("too many hygiene targets")

// Target is one group the loop looks after, with its settings.
type Target struct {
	Target  liveness.Target
	Hygiene policy.Hygiene
	// ActFrom is when the group's scans may start: until then it is not
	// scanned at all (triggers.warmUp), since a scan would decide on
	// settings that may still change, and Plan shows on demand what it
	// would do. Zero: at once.
	ActFrom time.Time
	// WarmUp says why the group waits until ActFrom; nil when it does
	// not. It is put into words only when shown (Why).
	WarmUp fmt.Stringer
}

// Why says why the group waits until ActFrom; empty when nothing does.
func (t Target) Why() string {
	if t.WarmUp == nil {
		return ""
	}
	return t.WarmUp.String()
}

func (t Target) settings() string { return t.Target.Key() + "\x00" + t.Hygiene.String() }

// Options configures a Loop.
type Options struct {
	// ScanInterval is how often every target is scanned at the latest: a
	// new ghost triggers a scan at once, and an entry left because it was
	// not idle long enough one at the instant it is (deadline.go). Default
	// 10s.
	ScanInterval time.Duration
	// LeaseTTL is how long a scanner's lease lasts without renewal; the
	// leases are renewed every third of it. Longer than ScanInterval;
	// default three intervals.
	LeaseTTL time.Duration
	// Identity names this replica in the lease, the same across its
	// restarts: a restarted replica takes the leases its earlier run
	// left at once, where another replica waits out LeaseTTL.
	Identity string
	// Expiry drops a target registered from ScaledObject metadata that no
	// RPC has named for this long. Targets from configuration stay.
	Expiry time.Duration
	// Workers bounds the scans running at once; default 4.
	Workers int
	// MaxTargets bounds the targets requests may enroll; targets from
	// configuration are always accepted. Zero means no bound.
	MaxTargets int
	// ErrorLogInterval is the most often one target's repeated error is
	// logged; default one minute.
	ErrorLogInterval time.Duration
	Log              *slog.Logger
	Now              func() time.Time
	// Engine executes the scans' steps.
	Engine *reclaim.Engine
}

// Loop is the hygiene loop. Add targets, then Run.
type Loop struct {
	view    *liveness.View
	conns   *redisx.Conns
	opts    Options
	metrics *metrics
	errs    *lograte.Limiter
	// holder is this run under opts.Identity in the leases.
	holder redisx.Holder

	mu      sync.Mutex
	targets map[liveness.GroupRef]*runner
	queue   queue
	// release holds the groups of removed and idle targets, for the lease
	// keeper to give up their leases in its next round trip.
	release []liveness.GroupRef
	// wake tells the dispatcher the queue's head may have changed; renew
	// tells the lease keeper there are leases to give up.
	wake, renew chan struct{}
	// readers follows each target's readers (readers.go).
	readers readerWatches
}

// runner is one target's place in the loop. Its fields are guarded by
// Loop.mu.
type runner struct {
	// t is replaced, never written to: the view keeps t.Target itself,
	// not a copy, for as long as the runner's pin registered it.
	t         *Target
	permanent bool
	lastSeen  time.Time
	// due is when the next scan starts; index is the runner's place in the
	// queue, -1 while it scans or once it is removed.
	due      time.Time
	index    int
	scanning bool
	removed  bool
	// unpin ends the view's hold on the target; nil while the view refused.
	unpin func()
	// ghosts are the consumers holding entries to give back, as of the
	// latest read the loop has looked at.
	ghosts map[string]bool
	// missed gathers the ghosts of the reads observed while the target was
	// out of the queue for its turn, and missedAt is when the newest of
	// those reads was made; the turn's end compares them with what it
	// decided on.
	missed   map[string]bool
	missedAt time.Time
	// leader is the lease's state as last known; it is known until
	// leaseKnown, after which the worker asks Redis before scanning.
	leader     bool
	leaseKnown time.Time
	// leaderSet says the leader gauge has been set for this target.
	leaderSet bool
	// busy says the target's last turn found work; only busy targets hold
	// a lease, so an idle group costs no lease renewal.
	busy bool
	// atDeadline says due is an entry's deadline (deadline.go): that turn
	// scans on a fresh read whatever the view's latest read says.
	atDeadline bool
	// since is when the read the last turn judged by was made: an entry a
	// ghost holds that the turn did not see was delivered after it.
	since time.Time
	// failures counts the turns in a row that failed (retryFailed).
	failures int
}

// New returns a Loop; its metrics are registered on reg. Wire the view's
// OnRefresh to Observe so a new ghost is scanned at once.
func New(view *liveness.View, conns *redisx.Conns, opts Options, reg prometheus.Registerer) *Loop {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.ScanInterval <= 0 {
		opts.ScanInterval = 10 * time.Second
	}
	if opts.LeaseTTL <= opts.ScanInterval {
		opts.LeaseTTL = 3 * opts.ScanInterval
	}
	if opts.ErrorLogInterval <= 0 {
		opts.ErrorLogInterval = time.Minute
	}
	l := &Loop{
		view: view, conns: conns, opts: opts, errs: lograte.New(opts.ErrorLogInterval, opts.Now), holder: redisx.NewHolder(opts.Identity),
		targets: make(map[liveness.GroupRef]*runner),
		wake:    make(chan struct{}, 1), renew: make(chan struct{}, 1),
	}
	l.metrics = newMetrics(reg, func() float64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return float64(len(l.targets))
	})
	return l
}

// Add registers a target, or marks it seen again, in O(log n). There is
// one scanner per group, and the latest request that asks for reclaim sets
// its settings; the target is replaced only when the liveness settings
// change, so two ScaledObjects naming one group cannot make it flap. A
// request with reclaim off changes nothing: a group no request asks to
// reclaim expires. Targets from configuration (permanent) never expire,
// requests cannot change them, and they are accepted past MaxTargets; a
// request that would enroll a new group past it gets ErrFull.
func (l *Loop) Add(t Target, permanent bool) error {
	if t.Hygiene.Mode == policy.ReclaimOff {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.opts.Now()
	r, ok := l.targets[t.Target.GroupRef]
	switch {
	case ok && r.permanent && !permanent:
		r.lastSeen = now
		return nil
	case ok && liveness.SameKey(r.t.Target, t.Target):
		if r.t.settings() != t.settings() {
			l.opts.Log.Debug("hygiene settings changed", "target", t.Target.String(), "reclaim", t.Hygiene.Mode, "dryRun", t.Hygiene.DryRun)
		}
		if !t.ActFrom.Equal(r.t.ActFrom) && t.ActFrom.After(now) {
			l.opts.Log.Info("hygiene target warms up", "target", t.Target.String(), "actFrom", t.ActFrom, "why", t.Why())
		}
		if *r.t != t {
			r.t = share(t)
		}
		r.lastSeen = now
		r.permanent = r.permanent || permanent
		return nil
	case ok:
		l.remove(r, "liveness settings changed")
	case !permanent && l.opts.MaxTargets > 0 && len(l.targets) >= l.opts.MaxTargets:
		l.metrics.refused.Inc()
		return fmt.Errorf("%w: hygiene.maxTargets is %d; a target from hygiene.targets is always accepted", ErrFull, l.opts.MaxTargets)
	}
	shared := share(t)
	unpin, err := l.view.Pin(&shared.Target)
	if err != nil && !permanent {
		return err
	}
	r = &runner{t: shared, permanent: permanent, lastSeen: now, due: now, unpin: unpin}
	l.targets[t.Target.GroupRef] = r
	heap.Push(&l.queue, r)
	l.poke(l.wake)
	l.opts.Log.Info("hygiene target added", "target", t.Target.String(), "reclaim", t.Hygiene.Mode, "dryRun", t.Hygiene.DryRun, "actFrom", t.ActFrom)
	return nil
}

// share is t where a runner and the view can both point to it; it is
// never written to after.
func share(t Target) *Target { return &t }

// Lookup returns the target the loop looks after for a consumer group,
// with its current settings.
func (l *Loop) Lookup(conn, stream, group string) (Target, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.targets[liveness.GroupRef{Conn: conn, Stream: stream, Group: group}]
	if !ok {
		return Target{}, false
	}
	return *r.t, true
}

// Observe is the view's OnRefresh hook: when a read of a hygiene target
// shows a consumer holding entries that has newly turned Ghost (or
// Degraded), the target's scan moves to now. A read that lands while the
// target has its turn is kept for the turn's end, which scans again at
// once if the read shows a ghost the turn did not decide on: dropping it
// would leave that ghost's entries to the next interval.
func (l *Loop) Observe(t liveness.Target, s *liveness.Snapshot) {
	if s == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.targets[t.GroupRef]
	if !ok || r.removed {
		return
	}
	if s.GhostConsumers+s.DegradedConsumers == 0 && (len(r.ghosts) == 0 || r.scanning) {
		return // the common case: nothing to give back, before or now
	}
	if !liveness.SameKey(r.t.Target, t) {
		return // a read of another target on the group, judged by other rules
	}
	now := ghostsIn(s)
	if r.scanning {
		// The turn in progress may have read the group before this read:
		// its end decides whether these ghosts were acted on.
		r.missed = union(r.missed, now)
		if s.At.After(r.missedAt) {
			r.missedAt = s.At
		}
		return
	}
	fresh := newGhost(r.ghosts, now)
	r.ghosts = now
	switch {
	case fresh && r.index >= 0:
		r.due = l.opts.Now()
		heap.Fix(&l.queue, r.index)
		l.poke(l.wake)
	case len(now) > 0:
		l.armEntries(r)
	}
}

// remove forgets a target and everything kept for it: its queue entry,
// the view's pin, its series, its error log state; its lease is given up
// by the lease keeper. l.mu is held.
func (l *Loop) remove(r *runner, why string) {
	if r.index >= 0 {
		heap.Remove(&l.queue, r.index)
	}
	r.removed = true
	delete(l.targets, r.t.Target.GroupRef)
	if r.unpin != nil {
		r.unpin()
	}
	g := r.t.Target.GroupRef
	l.release = append(l.release, g)
	l.poke(l.renew)
	l.opts.Engine.Forget(g)
	l.forgetReaders(g)
	l.metrics.forget(g)
	l.errs.Forget(g.String())
	l.opts.Log.Info("hygiene target removed", "target", r.t.Target.String(), "why", why)
}

func (l *Loop) poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// ghostsHolding names the consumers of t's latest read whose entries are
// to be given back (Ghost or Degraded) and that hold some.
func ghostsHolding(v *liveness.View, t liveness.Target) map[string]bool {
	s, ok := v.Peek(t)
	if !ok {
		return nil
	}
	return ghostsIn(s)
}

func ghostsIn(s *liveness.Snapshot) map[string]bool {
	var out map[string]bool
	for _, c := range s.Consumers {
		if c.Verdict.GivesBack() && c.Pending > 0 {
			if out == nil {
				out = map[string]bool{}
			}
			out[c.Name] = true
		}
	}
	return out
}

// union returns a with b's names added; a may be nil, and is reused.
func union(a, b map[string]bool) map[string]bool {
	for name := range b {
		if a == nil {
			a = make(map[string]bool, len(b))
		}
		a[name] = true
	}
	return a
}

func newGhost(before, now map[string]bool) bool {
	for name := range now {
		if !before[name] {
			return true
		}
	}
	return false
}

// leaseKey names a group's lease; the stream's length keeps stream "a:b"
// with group "c" apart from stream "a" with group "b:c".
func leaseKey(t liveness.Target) string {
	return fmt.Sprintf("pelwarden:lease:%d:%s:%s", len(t.Stream), t.Stream, t.Group)
}
