package liveness

import (
	"container/heap"
	"sync"
	"time"
)

// deadlines are the looks the view has to take between its background
// refreshes: each target's earliest verdict-changing instant
// (Snapshot.NextChange) that falls before the refresh after next would
// judge it again anyway. A target whose worker keeps beating never gets
// one (its instant moves past the next refresh at every read), so the
// cost follows the consumers that are actually going quiet: one read
// each, at the instant their verdict turns, which both the scaler's
// numbers and the hygiene loop (OnRefresh) then see.
type deadlines struct {
	mu sync.Mutex
	// q holds a target's look, and looks made stale by a later read
	// (popped and dropped: their entry's lookAt moved on).
	q    lookQueue
	wake chan struct{}
}

type look struct {
	e  *entry
	at time.Time
}

// schedule sets e's next look from snap, a read just judged for it. A look
// already set within DeadlineMargin of the new one is kept, so the reads
// between a deadline's computation and its instant, which all compute it
// again, do not stack up looks.
func (v *View) schedule(e *entry, snap *Snapshot) {
	v.scheduleAt(e, snap, snap.NextChange())
}

// scheduleAt sets e's next look at the deadline at (zero: none), computed
// from snap and what was read since.
func (v *View) scheduleAt(e *entry, snap *Snapshot, at time.Time) {
	if !at.IsZero() {
		at = at.Add(DeadlineMargin)
	}
	if at.IsZero() || !at.Before(snap.At.Add(2*v.opts.RefreshInterval)) {
		at = time.Time{} // a background refresh judges it again before then
	}
	d := &v.looks
	d.mu.Lock()
	defer d.mu.Unlock()
	old := e.lookAt
	if !old.IsZero() && !at.IsZero() && old.Sub(at).Abs() < DeadlineMargin {
		return
	}
	e.lookAt = at
	if at.IsZero() {
		return
	}
	heap.Push(&d.q, look{e: e, at: at})
	if d.q[0].e == e && d.q[0].at.Equal(at) {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// dueLooks takes the looks due at now and returns their entries, of
// readers that still serve them, and how long until the next look
// (idleLook with none).
func (v *View) dueLooks(now time.Time) ([]*entry, time.Duration) {
	d := &v.looks
	d.mu.Lock()
	var out []*entry
	wait := idleLook
	for d.q.Len() > 0 {
		l := d.q[0]
		if w := l.at.Sub(now); w > 0 {
			wait = w
			break
		}
		heap.Pop(&d.q)
		if !l.e.lookAt.Equal(l.at) {
			continue // a later read moved it
		}
		l.e.lookAt = time.Time{}
		out = append(out, l.e)
	}
	d.mu.Unlock()
	return v.registered(out), wait
}

// registered keeps the entries whose reader still serves targets.
func (v *View) registered(es []*entry) []*entry {
	if len(es) == 0 {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	out := es[:0]
	for _, e := range es {
		if v.readerLocked(e.reader.key) == e.reader {
			out = append(out, e)
		}
	}
	return out
}

// readJob is one read the refresh loop runs: of a reader due its
// background refresh (looks nil), or of one whose targets' looks are due,
// which their heartbeat keys alone may decide (confirmBeats).
type readJob struct {
	r     *reader
	looks []*entry
}

// readJobs is one job per reader: the background refreshes, then the
// readers with looks due that no refresh reads already.
func readJobs(refresh []*reader, looks []*entry) []readJob {
	jobs := make([]readJob, 0, len(refresh)+len(looks))
	for _, r := range refresh {
		jobs = append(jobs, readJob{r: r})
	}
	next := len(jobs)
	for _, e := range looks {
		if containsReader(refresh, e.reader) {
			continue
		}
		i := next
		for i < len(jobs) && jobs[i].r != e.reader {
			i++
		}
		if i == len(jobs) {
			jobs = append(jobs, readJob{r: e.reader})
		}
		jobs[i].looks = append(jobs[i].looks, e)
	}
	return jobs
}

func containsReader(rs []*reader, r *reader) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// idleLook is how long the refresh waits for a look when none is set; a
// new one wakes it.
const idleLook = time.Hour

// lookQueue orders looks by instant (container/heap).
type lookQueue []look

func (q lookQueue) Len() int           { return len(q) }
func (q lookQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q lookQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *lookQueue) Push(x any)        { *q = append(*q, x.(look)) } //nolint:forcetypeassert // container/heap hands back what Push was given
func (q *lookQueue) Pop() any {
	old := *q
	l := old[len(old)-1]
	old[len(old)-1] = look{}
	*q = old[:len(old)-1]
	return l
}
