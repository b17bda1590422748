package liveness

import (
	"context"
	"time"
)

// A target is read when its callers need it, not on a clock. KEDA polls
// a target every pollingInterval (GetMetrics, then IsActive) and, between
// those, its HPA asks GetMetrics through KEDA's metrics adapter at a
// period of its own. The view learns the rhythm of each target's polls
// from the gaps between them and reads the group just ahead of the next
// poll, with every other read due about then, so the poll is answered at
// once from a read no older than Freshness. A target nobody polls is read
// only at its deadlines, by the hygiene loop, or when a waker asks.

// Poll is Cached for a poll: it also learns the rhythm of t's polls and
// sets the read ahead of the next one. When ok is false the caller
// answers with PollWait.
func (v *View) Poll(t Target) (snap *Snapshot, ok bool, err error) {
	e, snap, err := v.cached(t)
	if err != nil {
		return nil, false, err
	}
	e.mu.Lock()
	e.polls.observe(v.opts.Now(), samePoll(v.opts.Freshness))
	e.mu.Unlock()
	if snap != nil && v.missingSince(e, snap).IsZero() {
		v.answered(e)
		return snap, true, nil
	}
	return nil, false, nil
}

// PollWait answers a poll that Poll could not: from a read of t, shared
// with every caller waiting on the group.
func (v *View) PollWait(ctx context.Context, t Target) (*Snapshot, error) {
	e, snap, err := v.cached(t)
	if err != nil {
		return nil, err
	}
	since := v.missingSince(e, snap)
	if snap == nil || !since.IsZero() {
		if snap, err = v.refresh(ctx, e, since, ReadPoll); err != nil {
			return nil, err
		}
	}
	v.answered(e)
	return snap, nil
}

// missingSince is when the read that answers a poll of e must have begun
// if snap, from e's latest read, found no stream or group and began
// before the poll did; zero otherwise. A read that found nothing serves
// only the poll it was read for (KEDA's IsActive after its GetMetrics):
// a stream created since, and the entries read from it, are seen at the
// next poll, where a stale "none" would scale to zero with work waiting.
// Such a read is a few commands that fail at once.
func (v *View) missingSince(e *entry, snap *Snapshot) time.Time {
	if snap == nil || (!snap.StreamMissing && !snap.GroupMissing) {
		return time.Time{}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.readAt.Before(e.polls.last) {
		return e.polls.last
	}
	return time.Time{}
}

// answered reports the age of the read a poll of e was answered from,
// and sets the read ahead of e's next poll.
func (v *View) answered(e *entry) {
	now := v.opts.Now()
	fresh := v.opts.Freshness
	e.mu.Lock()
	read, err := e.readAt, e.err
	next, ok := e.polls.next(rhythmSlack(fresh))
	// A group Redis does not have is not read ahead: it has nothing to
	// judge, and a caller polling names that do not exist from many
	// namespaces pays for its own reads.
	missing := e.snap != nil && (e.snap.StreamMissing || e.snap.GroupMissing)
	e.mu.Unlock()
	if v.opts.OnAnswer != nil && err == nil && !read.IsZero() {
		v.opts.OnAnswer(now.Sub(read))
	}
	var at time.Time
	if ok && !missing {
		if err != nil {
			read = time.Time{}
		}
		at = aheadAt(next, read, fresh)
	}
	v.sched.set(e, kindAhead, at)
}

// pollGaps is how many gaps between polls a target remembers: enough to
// see a rhythm of up to pollGaps/2 polls repeat, such as KEDA's loop with
// the HPA's polls between its own.
const pollGaps = 8

// pollClock is the rhythm of one target's polls.
type pollClock struct {
	// last is when the latest poll began.
	last time.Time
	// gaps are the latest gaps between polls, a ring: the n-th gap ever
	// seen is at (n-1) % pollGaps.
	gaps [pollGaps]time.Duration
	n    int
}

// observe records a call at now; a call within same of the poll it follows
// belongs to it (KEDA's IsActive after its GetMetrics).
func (c *pollClock) observe(now time.Time, same time.Duration) {
	if !c.last.IsZero() {
		gap := now.Sub(c.last)
		if gap < same {
			return
		}
		c.gaps[c.n%pollGaps] = gap
		c.n++
	}
	c.last = now
}

// gap is the i-th latest gap, 1 being the latest.
func (c *pollClock) gap(i int) time.Duration { return c.gaps[(c.n-i)%pollGaps] }

// next is when the next poll is expected: the gaps repeat with the
// shortest period (in polls) that the latest ones show, within tol. ok is
// false until two polls came, and while no period shows: a caller who
// polls at random pays a round trip per poll, and no read ahead is
// wasted on it.
func (c *pollClock) next(tol time.Duration) (at time.Time, ok bool) {
	if c.n == 1 {
		return c.last.Add(c.gap(1)), true
	}
	for period := 1; period <= pollGaps/2 && 2*period <= c.n; period++ {
		if c.repeats(period, tol) {
			return c.last.Add(c.gap(period)), true
		}
	}
	return time.Time{}, false
}

// repeats reports whether the latest 2*period gaps repeat with period.
func (c *pollClock) repeats(period int, tol time.Duration) bool {
	for i := 1; i <= period; i++ {
		if (c.gap(i) - c.gap(i+period)).Abs() > tol {
			return false
		}
	}
	return true
}

// The timing of a read ahead, as shares of Freshness F. A read ahead is
// aimed lead before the expected poll and may start up to window earlier
// to join a batch, so the poll finds a read at most lead+window (F/2) old
// and is still answered from it if it comes F/2 late; one that comes more
// than lead early, or later than that, waits for a read of its own.
// Polls closer than F/10 are one poll: KEDA's GetMetrics and IsActive
// arrive milliseconds apart.
func aheadLead(fresh time.Duration) time.Duration   { return fresh / 4 }
func aheadWindow(fresh time.Duration) time.Duration { return fresh / 4 }
func samePoll(fresh time.Duration) time.Duration    { return fresh / 10 }
func rhythmSlack(fresh time.Duration) time.Duration { return fresh / 8 }

// aheadAt is when to read ahead of a poll expected at next, where the
// latest read began at read (zero: none good); zero when that read is
// recent enough to serve the poll with lead to spare.
func aheadAt(next, read time.Time, fresh time.Duration) time.Time {
	lead := aheadLead(fresh)
	if !read.IsZero() && next.Sub(read) <= fresh-lead {
		return time.Time{}
	}
	return next.Add(-lead)
}
