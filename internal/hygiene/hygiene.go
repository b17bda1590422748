// Package hygiene runs the PEL hygiene loop: for every hygiene target it
// finds the entries that ghost consumers hold, on the same liveness view the
// scaler reports from, and gives them back through the guarded Redis
// actions; it dead-letters poison entries and deletes ghost consumers whose
// PEL is empty.
package hygiene

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/policy"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// Target is one group the loop looks after, with its settings.
type Target struct {
	Target  liveness.Target
	Hygiene policy.Hygiene
}

func (t Target) settings() string { return t.Target.Key() + "\x00" + t.Hygiene.String() }

// Options configures a Loop.
type Options struct {
	// ScanInterval is how often every target is scanned; a new ghost also
	// triggers a scan at once.
	ScanInterval time.Duration
	// LeaseTTL is how long a scanner's lease lasts without renewal.
	LeaseTTL time.Duration
	// Identity names this replica in the lease.
	Identity string
	// Expiry drops a target registered from ScaledObject metadata that no
	// RPC has named for this long. Targets from configuration stay.
	Expiry time.Duration
	Log    *slog.Logger
	Now    func() time.Time
	// Engine executes the scans' steps.
	Engine *reclaim.Engine
}

// Loop is the hygiene loop. Add targets, then Run.
type Loop struct {
	view    *liveness.View
	conns   *redisx.Conns
	opts    Options
	metrics *metrics

	mu      sync.Mutex
	targets map[liveness.GroupRef]*runner
	added   chan struct{}
	wg      sync.WaitGroup
}

type runner struct {
	t         Target
	permanent bool
	lastSeen  time.Time
	// stop ends the target's scanner; nil until Run starts it.
	stop context.CancelFunc
}

// New returns a Loop; its metrics are registered on reg.
func New(view *liveness.View, conns *redisx.Conns, opts Options, reg prometheus.Registerer) *Loop {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Loop{view: view, conns: conns, opts: opts, metrics: newMetrics(reg), targets: make(map[liveness.GroupRef]*runner), added: make(chan struct{}, 1)}
}

// Add registers a target, or marks it seen again. There is one scanner per
// group, and the latest request that asks for reclaim sets its settings;
// the scanner restarts only when the liveness settings change, so two
// ScaledObjects naming one group cannot make it flap. A request with
// reclaim off changes nothing: a group no request asks to reclaim expires.
// Targets from configuration (permanent) never expire, and requests cannot
// change them.
func (l *Loop) Add(t Target, permanent bool) {
	if t.Hygiene.Mode == policy.ReclaimOff {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.targets[t.Target.GroupRef]
	switch {
	case ok && r.permanent && !permanent:
		r.lastSeen = l.opts.Now()
		return
	case ok && r.t.Target.Key() == t.Target.Key():
		if r.t.settings() != t.settings() {
			l.opts.Log.Debug("hygiene settings changed", "target", t.Target.String(), "reclaim", t.Hygiene.Mode, "dryRun", t.Hygiene.DryRun)
		}
		r.t = t
		r.lastSeen = l.opts.Now()
		r.permanent = r.permanent || permanent
		return
	case ok:
		l.remove(r, "liveness settings changed")
	}
	l.targets[t.Target.GroupRef] = &runner{t: t, permanent: permanent, lastSeen: l.opts.Now()}
	select {
	case l.added <- struct{}{}:
	default:
	}
	l.opts.Log.Info("hygiene target added", "target", t.Target.String(), "reclaim", t.Hygiene.Mode, "dryRun", t.Hygiene.DryRun)
}

// Lookup returns the target the loop looks after for a consumer group,
// with its current settings.
func (l *Loop) Lookup(conn, stream, group string) (Target, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.targets[liveness.GroupRef{Conn: conn, Stream: stream, Group: group}]
	if !ok {
		return Target{}, false
	}
	return r.t, true
}

// Run scans until ctx ends, then waits for scans in progress. Each target
// has its own scanner; targets added later start at once.
func (l *Loop) Run(ctx context.Context) {
	tick := time.NewTicker(l.opts.ScanInterval)
	defer tick.Stop()
	for {
		l.sync(ctx)
		select {
		case <-ctx.Done():
			l.wg.Wait()
			return
		case <-tick.C:
		case <-l.added:
		}
	}
}

// remove stops a target's scanner and forgets it; l.mu is held.
func (l *Loop) remove(r *runner, why string) {
	if r.stop != nil {
		r.stop()
	}
	delete(l.targets, r.t.Target.GroupRef)
	l.opts.Engine.Forget(r.t.Target.GroupRef)
	l.metrics.forget(r.t.Target.GroupRef)
	l.opts.Log.Info("hygiene target removed", "target", r.t.Target.String(), "why", why)
}

// sync starts scanners for new targets and stops expired ones.
func (l *Loop) sync(ctx context.Context) {
	now := l.opts.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.targets {
		switch {
		case !r.permanent && now.Sub(r.lastSeen) > l.opts.Expiry:
			l.remove(r, "no request named it for "+l.opts.Expiry.String())
		case r.stop == nil:
			rctx, cancel := context.WithCancel(ctx)
			r.stop = cancel
			l.wg.Go(func() {
				if err := l.runTarget(rctx, r); err != nil {
					l.opts.Log.Error("hygiene target not watched; retrying", "target", r.t.Target.String(), "err", err)
					l.mu.Lock()
					if l.targets[r.t.Target.GroupRef] == r {
						r.stop = nil // the next sync starts it again
					}
					l.mu.Unlock()
				}
			})
		}
	}
}

// runTarget scans t every interval, and at once when a consumer holding
// entries turns Ghost in the view.
func (l *Loop) runTarget(ctx context.Context, r *runner) error {
	t := l.settingsOf(r)
	updates, unsubscribe, err := l.view.Subscribe(t.Target)
	if err != nil {
		return err
	}
	defer unsubscribe()
	c, _ := l.conns.Get(t.Target.Conn)
	lease := redisx.Lease{Client: c, Key: leaseKey(t.Target), Holder: l.opts.Identity, TTL: l.opts.LeaseTTL}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = lease.Release(rctx)
	}()
	tick := time.NewTicker(l.opts.ScanInterval)
	defer tick.Stop()
	var ghosts map[string]bool
	scan := true
	for {
		if scan {
			l.scanIfLeader(ctx, l.settingsOf(r), lease)
			ghosts = ghostsHolding(l.view, t.Target)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			scan = true
		case <-updates:
			now := ghostsHolding(l.view, t.Target)
			scan = newGhost(ghosts, now)
			ghosts = now
		}
	}
}

// settingsOf is the runner's current target; Add may replace its hygiene
// settings while it runs.
func (l *Loop) settingsOf(r *runner) Target {
	l.mu.Lock()
	defer l.mu.Unlock()
	return r.t
}

func (l *Loop) scanIfLeader(ctx context.Context, t Target, lease redisx.Lease) {
	held, err := lease.Hold(ctx)
	if err != nil {
		if ctx.Err() == nil {
			l.opts.Engine.CountError(t.Target.GroupRef)
			l.opts.Log.Warn("hygiene lease failed", "target", t.Target.String(), "err", err)
		}
		return
	}
	leader := 0.0
	if held {
		leader = 1
	}
	l.metrics.leader.WithLabelValues(t.Target.Labels()...).Set(leader)
	if !held {
		return
	}
	if _, err := l.Scan(ctx, t); err != nil && ctx.Err() == nil {
		l.opts.Log.Warn("hygiene scan failed", "target", t.Target.String(), "err", err)
	}
}

// ghostsHolding names the consumers whose entries are to be given back
// (Ghost or Degraded) and that hold some: one turning so starts a scan.
func ghostsHolding(v *liveness.View, t liveness.Target) map[string]bool {
	out := map[string]bool{}
	if s, ok := v.Peek(t); ok {
		for _, c := range s.Consumers {
			if c.Verdict.GivesBack() && c.Pending > 0 {
				out[c.Name] = true
			}
		}
	}
	return out
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
