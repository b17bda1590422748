package liveness

import (
	"container/heap"
	"sync"
	"time"
)

// schedule holds the reads the view owes at an instant of its own
// choosing, one item per target and kind:
//   - a look: the target's earliest verdict-changing instant
//     (Snapshot.NextChange), read then with the least read that decides
//     it (confirm.go), and which both the scaler's numbers and the hygiene
//     loop (OnRefresh) see. A target whose worker keeps beating moves its
//     look on at every read, so the cost follows the consumers that are
//     actually going quiet;
//   - a read ahead of the target's next expected poll (viewpoll.go).
//
// An item is the entry's place in the heap: setting one again moves it,
// so a target polled a thousand times holds one item of each kind.
type schedule struct {
	mu   sync.Mutex
	q    schedQueue
	wake chan struct{}
}

type schedKind uint8

const (
	kindLook schedKind = iota
	kindAhead
	kinds
)

// slot is an entry's item of one kind; at and index are guarded by
// schedule.mu. index is -1 while the item is not in the heap.
type slot struct {
	at    time.Time
	index int
}

type schedItem struct {
	e    *entry
	kind schedKind
}

func (it schedItem) slot() *slot { return &it.e.slots[it.kind] }

// set puts e's item of kind at at (zero: removes it); s.mu is held. It
// reports whether the heap's head changed.
func (s *schedule) setLocked(e *entry, kind schedKind, at time.Time) bool {
	sl := &e.slots[kind]
	switch {
	case at.IsZero() && sl.index < 0:
		return false
	case at.IsZero():
		heap.Remove(&s.q, sl.index)
		sl.at = time.Time{}
		return false
	case sl.index < 0:
		sl.at = at
		heap.Push(&s.q, schedItem{e: e, kind: kind})
	default:
		sl.at = at
		heap.Fix(&s.q, sl.index)
	}
	return sl.index == 0
}

// set is setLocked under the lock, waking Run when the head changed.
func (s *schedule) set(e *entry, kind schedKind, at time.Time) {
	s.mu.Lock()
	head := s.setLocked(e, kind, at)
	s.mu.Unlock()
	if head {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// drop takes every item of e out.
func (s *schedule) drop(e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range kinds {
		s.setLocked(e, k, time.Time{})
	}
}

// due takes the looks due by now and, once one item is due, the reads
// ahead aimed by now+window, up to aheadBatch reads ahead in all, and
// returns how long until the next item (idleLook with none). Run wakes at
// the aim of the earliest read ahead and takes with it those of the next
// window, so the reads ahead go in batches, each up to a window early:
// a window apart where polls are sparse, and where they are dense, at
// most aheadBatch at a time, as often as their aims come.
func (s *schedule) due(now time.Time, window time.Duration) (looks, ahead []*entry, wait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wait = idleLook
	for s.q.Len() > 0 {
		it := s.q[0]
		at := it.slot().at
		due := !at.After(now)
		along := it.kind == kindAhead && len(looks)+len(ahead) > 0 && len(ahead) < aheadBatch && !at.After(now.Add(window))
		if !due && !along {
			wait = at.Sub(now)
			break
		}
		heap.Pop(&s.q)
		it.slot().at = time.Time{}
		if it.kind == kindLook {
			looks = append(looks, it.e)
		} else {
			ahead = append(ahead, it.e)
		}
	}
	return looks, ahead, wait
}

// aheadBatch bounds the reads ahead one wake of Run takes along with a
// due one. Their replies are decoded in one go, on as many of the
// process's CPUs as the batch has connections and maxBatch allows: at
// 10,000 targets polled every 5 s, a 250 ms window's 500 reads held both
// CPUs of a 2-core machine for milliseconds four times a second, and the
// polls arriving then waited. In batches of 32 the reads still share
// round trips, and the polls' p99 there fell by about a fifth. A read
// ahead already due is never left for a later wake.
const aheadBatch = 32

// scheduleLook sets e's next look from snap, a read just judged for it.
func (v *View) scheduleLook(e *entry, snap *Snapshot) {
	v.scheduleLookAt(e, snap.NextChange())
}

// scheduleLookAt sets e's next look at the deadline at (zero: none). A
// look already set within DeadlineMargin of the new one is kept, so the
// reads between a deadline's computation and its instant, which all
// compute it again, do not move it back and forth.
func (v *View) scheduleLookAt(e *entry, at time.Time) {
	if !at.IsZero() {
		at = at.Add(DeadlineMargin)
	}
	d := &v.sched
	d.mu.Lock()
	old := e.slots[kindLook]
	if old.index >= 0 && !at.IsZero() && old.at.Sub(at).Abs() < DeadlineMargin {
		d.mu.Unlock()
		return
	}
	head := d.setLocked(e, kindLook, at)
	d.mu.Unlock()
	if head {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
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

// idleLook is how long Run waits when nothing is scheduled; a new item
// at the head wakes it.
const idleLook = time.Hour

// schedQueue orders items by instant (container/heap).
type schedQueue []schedItem

func (q schedQueue) Len() int           { return len(q) }
func (q schedQueue) Less(i, j int) bool { return q[i].slot().at.Before(q[j].slot().at) }
func (q schedQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].slot().index, q[j].slot().index = i, j
}

func (q *schedQueue) Push(x any) {
	it := x.(schedItem) //nolint:forcetypeassert // container/heap hands back what Push was given
	it.slot().index = len(*q)
	*q = append(*q, it)
}

func (q *schedQueue) Pop() any {
	old := *q
	it := old[len(old)-1]
	old[len(old)-1] = schedItem{}
	*q = old[:len(old)-1]
	it.slot().index = -1
	return it
}
