package liveness

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Run reads what the view owes until ctx ends: each look at a verdict's
// deadline, with the least read that decides it (confirm.go), and each
// read ahead of a target's expected poll; the reads due together go in
// one batch per connection. It also expires the targets nobody uses.
func (v *View) Run(ctx context.Context) error {
	timer := time.NewTimer(idleLook)
	defer timer.Stop()
	sweep := time.NewTicker(v.sweepEvery())
	defer sweep.Stop()
	sem := make(chan struct{}, v.opts.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sweep.C:
			v.expire(v.opts.Now())
			continue
		case <-timer.C:
		case <-v.sched.wake:
		}
		now := v.opts.Now()
		looks, ahead, wait := v.sched.due(now, aheadWindow(v.opts.Freshness))
		timer.Reset(wait)
		if !v.look(ctx, v.registered(looks), sem, &wg) {
			return nil
		}
		v.readAhead(ctx, v.registered(ahead), now)
	}
}

// look takes the looks of es, due now: a reader whose looks its
// heartbeat keys alone may decide reads them (confirmBeats) on its own,
// and the group if they do not decide; the others read their groups at
// once, batched. It reports false when ctx ended first.
func (v *View) look(ctx context.Context, es []*entry, sem chan struct{}, wg *sync.WaitGroup) bool {
	var groups []*reader
	es = slices.DeleteFunc(es, func(e *entry) bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return !e.watchedLocked() // let go since its look was set
	})
	for _, j := range lookJobs(es) {
		if !v.confirmable(j.looks) {
			groups = append(groups, j.r)
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		wg.Go(func() {
			defer func() { <-sem }()
			decided := v.confirmBeats(ctx, j.looks)
			if v.opts.OnLook != nil {
				v.opts.OnLook(decided)
			}
			if !decided {
				v.readScheduled(ctx, []*reader{j.r}, func(*reader) bool { return true }, ReadDeadline)
			}
		})
	}
	for range groups {
		if v.opts.OnLook != nil {
			v.opts.OnLook(false)
		}
	}
	v.readScheduled(ctx, groups, func(*reader) bool { return true }, ReadDeadline)
	return true
}

// readAhead reads, batched, the readers of es whose reads ahead of a poll
// are due, unless a read since the poll they were set at serves it.
func (v *View) readAhead(ctx context.Context, es []*entry, now time.Time) {
	if len(es) == 0 {
		return
	}
	rs := make([]*reader, 0, len(es))
	for _, e := range es {
		if !slices.Contains(rs, e.reader) {
			rs = append(rs, e.reader)
		}
	}
	// A poll expected lead after the read's aim, answered from a read
	// begun within Freshness minus lead (aheadAt), needs none that began
	// after aim+2lead-Freshness; aim is at most window after now.
	fresh := v.opts.Freshness
	lead := aheadLead(fresh)
	enough := now.Add(aheadWindow(fresh) + 2*lead - fresh)
	v.readScheduled(ctx, rs, func(r *reader) bool { return r.lastGood.Before(enough) }, ReadAhead)
}

// sweepEvery is how often Run expires unused targets: a small share of
// Expiry, so a target goes within a quarter of it late.
func (v *View) sweepEvery() time.Duration {
	return min(max(v.opts.Expiry/4, time.Second), time.Minute)
}

// expire drops the targets nobody asked about for Expiry and nobody
// holds.
func (v *View) expire(now time.Time) {
	v.mu.Lock()
	var expired []*entry
	for g, rs := range v.groups {
		kept := rs[:0]
		for _, r := range rs {
			if v.sweepLocked(r, now, &expired) > 0 {
				kept = append(kept, r)
			}
		}
		switch {
		case len(kept) == 0:
			delete(v.groups, g)
		case len(kept) < len(rs):
			clear(rs[len(kept):])
			v.groups[g] = kept
		}
	}
	v.mu.Unlock()
	for _, e := range expired {
		v.sched.drop(e)
		if v.opts.OnExpire != nil {
			v.opts.OnExpire(*e.target)
		}
	}
}

// sweepLocked drops r's expired targets, adding them to expired, and
// returns how many are left; v.mu is held.
func (v *View) sweepLocked(r *reader, now time.Time, expired *[]*entry) (left int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.entries[:0]
	for _, e := range r.entries {
		e.mu.Lock()
		gone := len(e.subs) == 0 && e.pins == 0 && now.Sub(e.lastAsked) > v.opts.Expiry
		e.mu.Unlock()
		if gone {
			v.n--
			*expired = append(*expired, e)
			continue
		}
		kept = append(kept, e)
	}
	clear(r.entries[len(kept):])
	r.entries = kept
	r.reindex()
	return len(kept)
}

// indexFrom is how many targets a reader serves before it indexes them.
const indexFrom = 8

// add makes r serve e; v.mu and r.mu are held.
func (r *reader) add(e *entry) {
	r.entries = append(r.entries, e)
	if r.byKey != nil {
		r.byKey[keyOf(*e.target)] = e
		return
	}
	r.reindex()
}

// reindex indexes r's entries by key when they are many, and drops the
// index when they are few again; r.mu is held.
func (r *reader) reindex() {
	switch {
	case len(r.entries) <= indexFrom:
		r.byKey = nil
	case r.byKey == nil || len(r.byKey) != len(r.entries):
		r.byKey = make(map[viewKey]*entry, len(r.entries))
		for _, e := range r.entries {
			r.byKey[keyOf(*e.target)] = e
		}
	}
}

func (v *View) register(t Target) (*entry, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.registerLocked(t, nil)
}

// registerLocked returns t's entry, registering t if it is new: as
// shared when that is not nil (it is then t, and never written to), else
// as a copy of t, made only then so a known target's lookup allocates
// nothing; v.mu is held.
func (v *View) registerLocked(t Target, shared *Target) (*entry, error) {
	rk, key := readKeyOf(t), keyOf(t)
	r := v.readerLocked(rk)
	if r != nil {
		if e := r.lookup(key); e != nil {
			return e, nil
		}
	}
	if v.n >= v.opts.MaxTargets {
		return nil, fmt.Errorf("%w (maxTargets %d)", ErrTooManyTargets, v.opts.MaxTargets)
	}
	if r == nil {
		r = &reader{key: rk}
		v.groups[t.GroupRef] = append(v.groups[t.GroupRef], r)
	}
	if shared == nil {
		shared = new(Target)
		*shared = t
	}
	e := newEntry(shared, r, v.opts.Now())
	r.mu.Lock()
	r.add(e)
	r.mu.Unlock()
	v.n++
	return e, nil
}

// readerLocked returns the reader of rk, nil if none; v.mu is held.
func (v *View) readerLocked(rk readKey) *reader {
	for _, r := range v.groups[rk.GroupRef] {
		if r.key == rk {
			return r
		}
	}
	return nil
}

// lookupLocked returns t's entry, nil if t is not registered; v.mu is
// held.
func (v *View) lookupLocked(t Target) *entry {
	if r := v.readerLocked(readKeyOf(t)); r != nil {
		return r.lookup(keyOf(t))
	}
	return nil
}

// lookup returns the entry of key, nil if none; v.mu is held, so the
// entries do not change.
func (r *reader) lookup(key viewKey) *entry {
	if r.byKey != nil {
		return r.byKey[key]
	}
	for _, e := range r.entries {
		if keyOf(*e.target) == key {
			return e
		}
	}
	return nil
}
