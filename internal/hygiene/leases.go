package hygiene

import (
	"context"
	"log/slog"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// The lease keeps two replicas from scanning one group at once most of the
// time; it saves work, nothing more, since every action is guarded in
// Redis on its own. Each group keeps its own lease key, so replicas share
// the groups between them, but the keys of one connection are renewed
// together: every third of LeaseTTL, one pipelined round trip takes or
// extends them all. A lease renewed at t lasts until t+TTL in Redis; the
// loop trusts it until t+2/3 TTL, by when the next renewal has run. A
// target no renewal has covered yet (just added, or after a failed round
// trip) takes its own lease before its scan. Only targets whose last turn
// had work hold a lease: an idle group's is given up, so idle groups cost
// no renewals, and any replica takes it when the group has work again.

// keepLeases renews every target's lease each third of LeaseTTL and gives
// up the leases of removed targets as soon as it is told of them.
func (l *Loop) keepLeases(ctx context.Context) {
	tick := time.NewTicker(l.opts.LeaseTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			l.renewAll(ctx)
		case <-l.renew:
		}
		l.releaseRemoved(ctx)
	}
}

// renewAll takes or extends the leases of all targets, one round trip per
// connection.
func (l *Loop) renewAll(ctx context.Context) {
	type batch struct {
		runners []*runner
		keys    []string
	}
	l.mu.Lock()
	byConn := make(map[string]*batch)
	for g, r := range l.targets {
		if !r.busy || l.conns.WritesRefused(ctx, g.Conn, g.Stream) != nil {
			continue // a lease on a node that refuses writes is refused too
		}
		b := byConn[g.Conn]
		if b == nil {
			b = &batch{}
			byConn[g.Conn] = b
		}
		b.runners = append(b.runners, r)
		b.keys = append(b.keys, leaseKey(r.t.Target))
	}
	l.mu.Unlock()
	for conn, b := range byConn {
		c, ok := l.conns.Get(conn)
		if !ok {
			continue
		}
		rs, keys := b.runners, b.keys
		start := l.opts.Now()
		held, err := redisx.HoldAll(ctx, c, keys, l.holder, l.opts.LeaseTTL)
		if err != nil {
			if ctx.Err() == nil && !redisx.IsWritesRefused(err) {
				l.errs.Log(ctx, l.opts.Log, slog.LevelWarn, "lease:"+conn, "hygiene leases not renewed", "redis", conn, "targets", len(keys), "err", err)
			}
			continue
		}
		l.errs.Forget("lease:" + conn)
		l.mu.Lock()
		for i, r := range rs {
			if !r.removed {
				l.setLease(r, held[i], start)
			}
		}
		l.mu.Unlock()
	}
}

// holdsLease reports whether this replica may scan r now: from the last
// renewal while it is current, else by taking r's lease on its own.
// It is false, with failed true, when Redis could not answer.
func (l *Loop) holdsLease(ctx context.Context, r *runner, t Target) (held, failed bool) {
	now := l.opts.Now()
	l.mu.Lock()
	known, leader := now.Before(r.leaseKnown), r.leader
	l.mu.Unlock()
	if known {
		return leader, false
	}
	c, ok := l.conns.Get(t.Target.Conn)
	if !ok {
		return false, false
	}
	held, err := redisx.Lease{Client: c, Key: leaseKey(t.Target), Holder: l.holder, TTL: l.opts.LeaseTTL}.Hold(ctx)
	if err != nil {
		if ctx.Err() == nil && !redisx.IsWritesRefused(err) {
			l.opts.Engine.CountError(t.Target.GroupRef)
			l.errs.Log(ctx, l.opts.Log, slog.LevelWarn, t.Target.String(), "hygiene lease failed", "target", t.Target.String(), "err", err)
		}
		return false, true
	}
	l.mu.Lock()
	if !r.removed {
		l.setLease(r, held, now)
	}
	l.mu.Unlock()
	return held, false
}

// setLease records a lease answer obtained at start; l.mu is held. A lease
// held is trusted for two thirds of its TTL; one another replica holds is
// not asked about again before the next renewal round.
func (l *Loop) setLease(r *runner, held bool, start time.Time) {
	if held {
		r.leaseKnown = start.Add(l.opts.LeaseTTL * 2 / 3)
	} else {
		r.leaseKnown = start.Add(l.opts.LeaseTTL / 3)
	}
	if held == r.leader && r.leaderSet {
		return
	}
	r.leader, r.leaderSet = held, true
	l.metrics.setLeader(r.t.Target.GroupRef, held)
}

// dropLease gives up r's lease once its turn found no work: the lease
// keeper releases the key, and r takes it again before its next scan that
// has work. l.mu is held.
func (l *Loop) dropLease(r *runner) {
	l.release = append(l.release, r.t.Target.GroupRef)
	l.poke(l.renew)
	r.leaseKnown = time.Time{}
	r.leader = false
	l.metrics.setLeader(r.t.Target.GroupRef, false)
}

// releaseRemoved gives up the leases of removed and idle targets, one
// round trip per connection; a key this replica holds again meanwhile (a
// group whose liveness settings changed, or that found work again) is
// kept.
func (l *Loop) releaseRemoved(ctx context.Context) {
	l.mu.Lock()
	pending := l.release
	l.release = nil
	gone := make(map[string][]string)
	for _, g := range pending {
		// Only the groups given up are looked at, not every target: at
		// 10k groups whose first turns all give up their leases, a pass
		// over all targets per release was most of the loop's garbage.
		if r, ok := l.targets[g]; ok && r.leader {
			continue
		}
		gone[g.Conn] = append(gone[g.Conn], leaseKey(liveness.Target{GroupRef: g}))
	}
	l.mu.Unlock()
	for conn, keys := range gone {
		l.releaseKeys(ctx, conn, keys)
	}
}

// releaseAll gives up every lease this replica may hold, at shutdown, so
// another replica can scan without waiting for the TTL.
func (l *Loop) releaseAll(ctx context.Context) {
	l.mu.Lock()
	byConn := make(map[string][]string)
	for g, r := range l.targets {
		byConn[g.Conn] = append(byConn[g.Conn], leaseKey(r.t.Target))
	}
	for _, g := range l.release {
		byConn[g.Conn] = append(byConn[g.Conn], leaseKey(liveness.Target{GroupRef: g}))
	}
	l.release = nil
	l.mu.Unlock()
	for conn, keys := range byConn {
		l.releaseKeys(ctx, conn, keys)
	}
}

func (l *Loop) releaseKeys(ctx context.Context, conn string, keys []string) {
	c, ok := l.conns.Get(conn)
	if !ok || len(keys) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = redisx.ReleaseAll(rctx, c, keys, l.holder)
}
