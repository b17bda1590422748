package hygiene

import (
	"container/heap"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/pelwarden/pelwarden/internal/reclaim"
)

// idleWait is how long the dispatcher sleeps with no target queued; Add
// wakes it sooner.
const idleWait = time.Hour

// Run scans until ctx ends, then waits for the scans in progress and gives
// up this replica's leases. One dispatcher hands due targets to
// Options.Workers workers; one lease keeper renews the leases. These are
// all the goroutines the loop has, whatever the number of targets.
func (l *Loop) Run(ctx context.Context) {
	work := make(chan *runner)
	var wg sync.WaitGroup
	for range l.opts.Workers {
		wg.Go(func() {
			for r := range work {
				l.scanRunner(ctx, r)
			}
		})
	}
	var keeper sync.WaitGroup
	keeper.Go(func() { l.keepLeases(ctx) })
	l.dispatch(ctx, work)
	close(work)
	wg.Wait()
	keeper.Wait()
	l.releaseAll(ctx)
}

// dispatch hands each target to a worker when it is due. A send blocks
// while every worker is busy: the queue waits, not a goroutine per target.
func (l *Loop) dispatch(ctx context.Context, work chan<- *runner) {
	timer := time.NewTimer(idleWait)
	defer timer.Stop()
	for {
		r, wait := l.next(l.opts.Now())
		if r != nil {
			select {
			case work <- r:
				continue
			case <-ctx.Done():
				return
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-l.wake:
		}
	}
}

// next takes the queue's head if it is due and returns it, or returns how
// long until it is. A target from requests that no request has named for
// Options.Expiry is removed when it comes up: every target comes up once
// per scan interval, so expiry costs no walk over all of them. A target
// that comes up while it warms up is put back at its ActFrom, however
// often a ghost moves it forward.
func (l *Loop) next(now time.Time) (*runner, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.queue.Len() > 0 {
		r := l.queue[0]
		if !r.permanent && now.Sub(r.lastSeen) > l.opts.Expiry {
			l.remove(r, "no request named it for "+l.opts.Expiry.String())
			continue
		}
		if r.due.Before(r.t.ActFrom) && !r.due.After(now) {
			r.due = r.t.ActFrom
			heap.Fix(&l.queue, 0)
			continue
		}
		if wait := r.due.Sub(now); wait > 0 {
			return nil, wait
		}
		heap.Pop(&l.queue)
		r.scanning = true
		return r, 0
	}
	return nil, idleWait
}

// scanRunner scans one due target if this replica holds its lease, then
// queues it for the next interval with the ghosts its last read showed, so
// only a ghost newer than the scan moves it forward again.
func (l *Loop) scanRunner(ctx context.Context, r *runner) {
	l.mu.Lock()
	t, atDeadline := *r.t, r.atDeadline
	r.atDeadline = false
	if r.unpin == nil { // the view was full when the target came from configuration
		r.unpin, _ = l.view.Pin(&r.t.Target)
	}
	l.mu.Unlock()
	// decided holds the ghosts of the read this turn decided on; it stays
	// nil when the turn could not decide (another replica's lease, or a
	// failed scan), which never brings the next turn forward.
	w := l.mayHaveWork(t)
	// A turn at an entry's deadline scans whatever the view's latest read
	// says: that read may be older than the entry.
	busy, entryDue, since := w.busy || atDeadline, w.due, w.readAt
	decided, decidedAt := w.ghosts, w.readAt
	if busy {
		decided, since = nil, l.opts.Now()
		if l.holdsLease(ctx, r, t) {
			decided, entryDue, decidedAt = l.scanOnce(ctx, t)
		}
	}
	latest := ghostsHolding(l.view, t.Target)
	l.mu.Lock()
	defer l.mu.Unlock()
	r.scanning = false
	if r.removed {
		// The scan may have counted into series remove had deleted.
		l.opts.Engine.Forget(t.Target.GroupRef)
		l.metrics.forget(t.Target.GroupRef)
		return
	}
	missed, missedAt := r.missed, r.missedAt
	seen := union(latest, missed)
	r.ghosts, r.missed, r.missedAt = seen, nil, time.Time{}
	r.busy = busy
	if !busy && r.leader {
		l.dropLease(r)
	}
	r.due, r.since = l.opts.Now().Add(l.opts.ScanInterval), since
	if !entryDue.IsZero() && entryDue.Before(r.due) {
		r.due, r.atDeadline = entryDue, true
	}
	if decided != nil && newGhost(decided, seen) {
		// A read newer than the one decided on shows a ghost holding
		// entries, seen while this turn ran: its scan is now.
		r.due = l.opts.Now()
	}
	heap.Push(&l.queue, r)
	if len(missed) > 0 && missedAt.After(decidedAt) {
		// A read made after the one this turn decided on showed ghosts
		// holding entries, which Observe left to the turn: an entry
		// handed to a known ghost after the turn's read turns stale one
		// entryStaleSeconds on, as Observe would have armed it.
		l.armEntries(r)
	}
	l.poke(l.wake)
}

// scanOnce runs t's scan and returns the ghosts of the read it decided
// on, or nil if it failed (logged at a bounded rate), when an entry it
// left turns takable (entryDeadline), and when that read was made.
func (l *Loop) scanOnce(ctx context.Context, t Target) (ghosts map[string]bool, entryDue, readAt time.Time) {
	snap, steps, _, err := l.scan(ctx, t)
	switch {
	case err == nil:
		l.errs.Forget(t.Target.String()) // recovered: its next error is news
		return orEmpty(ghostsIn(snap)), l.entryDeadline(ctx, t, steps), snap.At
	case ctx.Err() == nil:
		l.errs.Log(ctx, l.opts.Log, slog.LevelWarn, t.Target.String(), "hygiene scan failed", "target", t.Target.String(), "err", err)
	}
	return nil, time.Time{}, time.Time{}
}

// work is what a turn learns from the view's latest read before it
// scans.
type work struct {
	// ghosts are the ghosts holding entries of the read judged by.
	ghosts map[string]bool
	// busy says a scan could do or count something.
	busy bool
	// due is when an owner holding nothing may next hold a stale entry
	// (quietDeadline), for a left-out scan.
	due time.Time
	// readAt is when the read judged by was made.
	readAt time.Time
}

// mayHaveWork reports whether a scan of t could do or count anything, and
// the ghosts of the read it judged by.
// When the view has read t within the last scan interval and the scan's
// own decision over that read takes nothing, deletes nothing and skips
// nothing it would count, the scan is left out: it would read Redis afresh
// to do nothing. A consumer that turns Ghost later is seen by the view's
// next read (Observe), which moves t to the head of the queue; and a scan
// that does run still decides on a fresh read, so the left-out scans never
// change what is acted on.
func (l *Loop) mayHaveWork(t Target) work {
	s, ok := l.view.Peek(t.Target)
	now := l.opts.Now()
	if !ok || now.Sub(s.At) >= l.opts.ScanInterval {
		return work{busy: true} // no recent read to judge by
	}
	steps := reclaim.Decide(s, t.Hygiene, now)
	for _, st := range steps {
		if st.Action != reclaim.None || st.Skip != "" {
			return work{busy: true}
		}
	}
	w := work{ghosts: orEmpty(ghostsIn(s)), readAt: s.At}
	if !t.Hygiene.DryRun {
		w.due = withMargin(quietDeadline(steps, t.Hygiene, s.At))
	}
	return w
}

// orEmpty returns m, or an empty map for nil: a turn that decided on a
// read with no ghosts is told apart from one that decided on nothing.
func orEmpty(m map[string]bool) map[string]bool {
	if m == nil {
		return map[string]bool{}
	}
	return m
}

// queue orders runners by when they are next due (container/heap).
type queue []*runner

func (q queue) Len() int           { return len(q) }
func (q queue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q queue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

func (q *queue) Push(x any) {
	r := x.(*runner) //nolint:forcetypeassert // container/heap hands back what Push was given
	r.index = len(*q)
	*q = append(*q, r)
}

func (q *queue) Pop() any {
	old := *q
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	r.index = -1
	return r
}
