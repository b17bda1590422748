package hygiene

import (
	"container/heap"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/reclaim"
	"github.com/pelwarden/pelwarden/internal/redisx"
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
	// failed scan), which never brings the next turn forward by itself; a
	// failure does, through retryFailed.
	w, failed := l.mayHaveWork(ctx, t)
	// A turn at an entry's deadline scans on a read made in the turn: the
	// view's latest may be older than the entry.
	busy, entryDue, since := (w.busy || atDeadline) && !failed, w.due, w.readAt
	decided, decidedAt := w.ghosts, w.readAt
	switch {
	case busy && l.refused(ctx, t):
		// Paused: Redis refuses what a scan would write, and a lease. The
		// connection logs the refusal once; the turn comes again an
		// interval on, and the view holds what workers could not write.
		decided, since = nil, l.opts.Now()
		l.metrics.paused.Inc()
	case busy:
		decided, since = nil, l.opts.Now()
		var held bool
		if held, failed = l.holdsLease(ctx, r, t); held {
			var d decision
			d, failed = l.scanOnce(ctx, t, w.read)
			decided, entryDue, decidedAt = d.ghosts, d.entryDue, d.readAt
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
	l.retryFailed(r, failed && ctx.Err() == nil)
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

// refused says the stream's node refuses writes, sampling it first when
// due: a paused target reads nothing else that would tell it that writes
// are accepted again.
func (l *Loop) refused(ctx context.Context, t Target) bool {
	if l.conns.WritesRefused(ctx, t.Target.Conn, t.Target.Stream) == nil {
		return false
	}
	l.conns.SampleWrites(ctx, t.Target.Conn, t.Target.Stream)
	return l.conns.WritesRefused(ctx, t.Target.Conn, t.Target.Stream) != nil
}

// decision is what a turn's scan decided on.
type decision struct {
	// ghosts are the ghosts holding entries of the read decided on; nil
	// when the scan failed.
	ghosts map[string]bool
	// entryDue is when an entry the scan left turns takable
	// (entryDeadline); readAt is when the read decided on was made.
	entryDue, readAt time.Time
}

// scanOnce runs t's scan on read, made in this turn, or, when nil, on a
// read it makes, and returns what it decided on. failed says a read or a
// write to Redis failed (logged at a bounded rate): the scan, or the read
// of the oldest entries it left.
func (l *Loop) scanOnce(ctx context.Context, t Target, read *liveness.Snapshot) (d decision, failed bool) {
	began := l.opts.Now()
	snap, steps, _, err := l.scan(ctx, t, read)
	switch {
	case err == nil:
		l.errs.Forget(t.Target.String()) // recovered: its next error is news
		d.ghosts, d.readAt = orEmpty(ghostsIn(snap)), snap.At
		d.entryDue, failed = l.entryDeadline(ctx, t, steps, began)
		return d, failed
	case redisx.IsWritesRefused(err):
		// Told once by the connection; the next turn finds it paused.
		return decision{}, false
	case ctx.Err() == nil:
		l.errs.Log(ctx, l.opts.Log, slog.LevelWarn, t.Target.String(), "hygiene scan failed", "target", t.Target.String(), "err", err)
	}
	return decision{}, true
}

// retryFailed brings the next turn of r, whose turn just ended, forward
// after a turn that failed: a look at an entry's deadline that Redis did
// not answer would otherwise wait a whole scan interval. The retries back
// off from retryFirst, doubling up to the scan interval, so an outage
// costs each target a read per interval at most once it lasts. A retry
// scans on a fresh read, as a look at a deadline does. l.mu is held; r is
// not queued yet.
func (l *Loop) retryFailed(r *runner, failed bool) {
	if !failed {
		r.failures = 0
		return
	}
	r.failures++
	wait := l.opts.ScanInterval
	if shift := r.failures - 1; shift < 32 {
		wait = min(wait, retryFirst<<shift)
	}
	if at := l.opts.Now().Add(wait); at.Before(r.due) {
		r.due, r.atDeadline = at, true
	}
}

// retryFirst is the wait before the first retry of a failed turn.
const retryFirst = 250 * time.Millisecond

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
	// read is that read when the turn made it.
	read *liveness.Snapshot
}

// mayHaveWork reports whether a scan of t could do or count anything, and
// the ghosts of the read it judged by: the view's latest read if it was
// made within the last scan interval (a poll's, or a look's at a
// deadline), else one made now, which is how a hygiene target nobody
// polls is read once an interval. failed says that read failed (logged
// at a bounded rate).
// When the scan's own decision over the read takes nothing, deletes
// nothing and skips nothing it would count, the scan is left out: it
// would read Redis again to do nothing. A consumer that turns Ghost later
// is seen by the view's look at its deadline (Observe), which moves t to
// the head of the queue; and a scan that does run still decides on a
// read begun in its turn, so the left-out scans never change what is
// acted on.
func (l *Loop) mayHaveWork(ctx context.Context, t Target) (w work, failed bool) {
	s, ok := l.view.Peek(t.Target)
	now := l.opts.Now()
	var read *liveness.Snapshot
	if !ok || now.Sub(s.At) >= l.opts.ScanInterval {
		var err error
		if s, err = l.view.Refresh(ctx, t.Target); err != nil {
			l.opts.Engine.CountError(t.Target.GroupRef)
			if ctx.Err() == nil {
				l.errs.Log(ctx, l.opts.Log, slog.LevelWarn, t.Target.String(), "hygiene scan failed", "target", t.Target.String(), "err", err)
			}
			return work{}, true
		}
		read, now = s, l.opts.Now()
	}
	steps := reclaim.Decide(s, t.Hygiene, now)
	for _, st := range steps {
		if st.Action != reclaim.None || st.Skip != "" {
			return work{busy: true, read: read}, false
		}
	}
	w = work{ghosts: orEmpty(ghostsIn(s)), readAt: s.At, read: read}
	if !t.Hygiene.DryRun {
		w.due = withMargin(quietDeadline(steps, t.Hygiene, s.At))
	}
	return w, false
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
