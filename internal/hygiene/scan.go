package hygiene

import (
	"context"
	"fmt"
	"time"

	"github.com/pelwarden/pelwarden/internal/events"
	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/reclaim"
)

// Scan runs one pass over t on a fresh read of the liveness view: the
// engine decides a step for every consumer and executes them, paging each
// reclaimable PEL to its end and deleting ghosts whose PEL is empty.
// Correctness does not depend on the lease or on the view being current:
// each step is guarded in Redis.
func (l *Loop) Scan(ctx context.Context, t Target) (reclaim.Report, error) {
	_, _, rep, err := l.scan(ctx, t, nil)
	return rep, err
}

// scan is Scan on read, a read of t just made, or, when nil, on a fresh
// one; it also returns the read it decided on and the steps it executed.
func (l *Loop) scan(ctx context.Context, t Target, read *liveness.Snapshot) (*liveness.Snapshot, []reclaim.Step, reclaim.Report, error) {
	start := time.Now()
	defer func() { l.metrics.observeScan(t.Target.GroupRef, time.Since(start)) }()
	c, ok := l.conns.Get(t.Target.Conn)
	if !ok {
		return nil, nil, reclaim.Report{}, fmt.Errorf("no redis connection named %q", t.Target.Conn)
	}
	snap, err := read, error(nil)
	if snap == nil {
		snap, err = l.view.Refresh(ctx, t.Target)
	}
	if err != nil {
		l.opts.Engine.CountError(t.Target.GroupRef)
		return nil, nil, reclaim.Report{DryRun: t.Hygiene.DryRun}, err
	}
	l.watchReaders(ctx, c, t, snap.At)
	steps := reclaim.Decide(snap, t.Hygiene, l.opts.Now())
	job := reclaim.Job{Client: c, Target: t.Target, Hygiene: t.Hygiene, Source: events.SourceHygiene, DryRun: t.Hygiene.DryRun}
	rep, err := l.opts.Engine.RunAll(ctx, job, steps)
	return snap, steps, rep, err
}
