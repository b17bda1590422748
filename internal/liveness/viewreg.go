package liveness

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Run refreshes every target each RefreshInterval and expires unused ones,
// until ctx ends; between refreshes it reads a target at its next look,
// the instant a verdict of it turns (viewdeadline.go), with the least read
// that decides it (confirm.go). A read of a reader refreshes all its
// targets.
func (v *View) Run(ctx context.Context) error {
	tick := time.NewTicker(v.opts.RefreshInterval)
	defer tick.Stop()
	timer := time.NewTimer(idleLook)
	defer timer.Stop()
	sem := make(chan struct{}, v.opts.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var readers []*reader
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			readers = v.due(v.opts.Now())
		case <-timer.C:
		case <-v.looks.wake:
		}
		looked, wait := v.dueLooks(v.opts.Now())
		timer.Reset(wait)
		for _, j := range readJobs(readers, looked) {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			wg.Go(func() {
				defer func() { <-sem }()
				if len(j.looks) > 0 {
					decided := v.confirmBeats(ctx, j.looks)
					if v.opts.OnLook != nil {
						v.opts.OnLook(decided)
					}
					if decided {
						return
					}
				}
				if c, err := v.readSince(ctx, j.r, nil, time.Time{}); err == nil {
					v.settleAll(j.r, c)
				}
			})
		}
	}
}

// due expires unused targets and returns the readers with a target whose
// snapshot is at least one interval old (a read on request may have
// refreshed some already).
func (v *View) due(now time.Time) []*reader {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []*reader
	var expired []Target
	for g, rs := range v.groups {
		kept := rs[:0]
		for _, r := range rs {
			stale, left := v.sweepLocked(r, now, &expired)
			if left == 0 {
				continue
			}
			kept = append(kept, r)
			if stale {
				out = append(out, r)
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
	if v.opts.OnExpire != nil {
		for _, t := range expired {
			v.opts.OnExpire(t)
		}
	}
	return out
}

// sweepLocked drops r's expired targets, adding them to expired, and
// reports whether a target left is due a read and how many are left;
// v.mu is held.
func (v *View) sweepLocked(r *reader, now time.Time, expired *[]Target) (stale bool, left int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.entries[:0]
	for _, e := range r.entries {
		e.mu.Lock()
		gone := len(e.subs) == 0 && e.pins == 0 && now.Sub(e.lastAsked) > v.opts.Expiry
		fresh := e.err == nil && e.snap != nil && now.Sub(e.snap.At) < v.refreshEvery(e.snap)*9/10
		e.mu.Unlock()
		if gone {
			v.n--
			*expired = append(*expired, *e.target)
			continue
		}
		kept = append(kept, e)
		stale = stale || !fresh
	}
	clear(r.entries[len(kept):])
	r.entries = kept
	r.reindex()
	return stale, len(kept)
}

// missingEvery is how many refresh intervals apart a target whose stream
// or group Redis does not have is read in the background. It has no
// entries to judge or give back, and a poll older than MaxAge reads it at
// once, so only the hygiene loop learns of a new group up to this many
// intervals late; meanwhile a trigger naming streams that do not exist,
// as a caller on the open port can from any number of namespaces, costs
// Redis a fifteenth of a real group's reads.
const missingEvery = 15

// refreshEvery is how often the target of snap is read in the background.
func (v *View) refreshEvery(snap *Snapshot) time.Duration {
	if snap.StreamMissing || snap.GroupMissing {
		return missingEvery * v.opts.RefreshInterval
	}
	return v.opts.RefreshInterval
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
	e := &entry{target: shared, reader: r, lastAsked: v.opts.Now()}
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
