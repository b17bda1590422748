package liveness

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// reader is the reads of one readKey: every target of the group that
// reads Redis alike. Whoever asks for a read of one of its targets, the
// read settles them all, so T targets that differ only in thresholds
// cost one read per refresh and one per wake, not T.
type reader struct {
	key readKey
	// target is what the fetcher is asked: the group, and of the spec
	// only what the read depends on.
	target Target

	mu sync.Mutex
	// entries is the targets the reader serves; it changes under
	// View.mu and this mu both, so either is enough to read it.
	entries  []*entry
	inflight *call
	// seq numbers the reader's reads, in the order they start.
	seq uint64
	// known is the consumers of the latest good read: the next read asks
	// for their heartbeat keys in its first round trip.
	known []string
}

// call is one read in progress; waiters block on done. Once done is
// closed its fields do not change.
type call struct {
	seq     uint64
	started time.Time
	done    chan struct{}
	obs     Observation
	err     error
	// at is when the read ended: the time its snapshots are built at.
	at time.Time
}

// Run refreshes every target each RefreshInterval and expires unused ones,
// until ctx ends. A read of a reader refreshes all its targets.
func (v *View) Run(ctx context.Context) error {
	tick := time.NewTicker(v.opts.RefreshInterval)
	defer tick.Stop()
	sem := make(chan struct{}, v.opts.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		for _, r := range v.due(v.opts.Now()) {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			wg.Go(func() {
				defer func() { <-sem }()
				_, _ = v.readSince(ctx, r, time.Time{})
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
		fresh := e.err == nil && e.snap != nil && now.Sub(e.snap.At) < v.opts.RefreshInterval*9/10
		e.mu.Unlock()
		if gone {
			v.n--
			*expired = append(*expired, e.target)
			continue
		}
		kept = append(kept, e)
		stale = stale || !fresh
	}
	clear(r.entries[len(kept):])
	r.entries = kept
	return stale, len(kept)
}

func (v *View) register(t Target) (*entry, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.registerLocked(t)
}

func (v *View) registerLocked(t Target) (*entry, error) {
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
		r = &reader{key: rk, target: rk.target()}
		v.groups[t.GroupRef] = append(v.groups[t.GroupRef], r)
	}
	e := &entry{target: t, reader: r, lastAsked: v.opts.Now()}
	r.mu.Lock()
	r.entries = append(r.entries, e)
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
	for _, e := range r.entries {
		if keyOf(e.target) == key {
			return e
		}
	}
	return nil
}

// refresh returns e's snapshot from a read of its reader that started at
// or after notBefore, joining one in flight or starting one.
func (v *View) refresh(ctx context.Context, e *entry, notBefore time.Time) (*Snapshot, error) {
	c, err := v.readSince(ctx, e.reader, notBefore)
	if err != nil {
		return nil, err
	}
	snap, _, err := v.settle(e, c, nil)
	return snap, err
}

// readSince joins a read of r that started at or after notBefore, or
// starts one, and waits for it. The read runs under its own timeout,
// detached from ctx, so one impatient caller cannot fail the read for the
// others waiting on it.
func (v *View) readSince(ctx context.Context, r *reader, notBefore time.Time) (*call, error) {
	for {
		r.mu.Lock()
		c := r.inflight
		if c == nil {
			r.seq++
			c = &call{seq: r.seq, started: v.opts.Now(), done: make(chan struct{})}
			r.inflight = c
			known := r.known
			r.mu.Unlock()
			go v.read(ctx, r, c, known)
		} else {
			r.mu.Unlock()
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if !c.started.Before(notBefore) {
			return c, nil
		}
	}
}

// read fetches r's group once and settles every target r serves from it:
// each judged by its own spec against its own previous snapshot, which
// carries when each consumer was first seen and the breaker's state. The
// read stays in flight until its targets are settled, so that a caller
// who found its target's snapshot older than it wanted joins this read
// rather than starting another.
func (v *View) read(ctx context.Context, r *reader, c *call, known []string) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.opts.FetchTimeout)
	defer cancel()
	c.obs, c.err = v.fetch(fctx, r.target, known)
	c.at = v.opts.Now()
	var names []string
	if c.err == nil {
		names = observedNames(c.obs)
	}
	r.mu.Lock()
	entries := slices.Clone(r.entries)
	r.mu.Unlock()
	pods := make(map[podKey]*PodsObs)
	var settled []*entry
	var snaps []*Snapshot
	settle := func(es []*entry) {
		for _, e := range es {
			if snap, stored, _ := v.settle(e, c, pods); stored {
				settled, snaps = append(settled, e), append(snaps, snap)
			}
		}
	}
	settle(entries)
	r.mu.Lock()
	r.inflight = nil
	if c.err == nil {
		r.known = names
	}
	// Targets registered while the read ran, which their callers may
	// have joined.
	var late []*entry
	for _, e := range r.entries {
		if !e.settledBy(c) {
			late = append(late, e)
		}
	}
	r.mu.Unlock()
	settle(late)
	// The callers waiting on the read go first; the subscribers and
	// OnRefresh, which may be many, after.
	close(c.done)
	for i, e := range settled {
		e.notify()
		if v.opts.OnRefresh != nil {
			v.opts.OnRefresh(e.target, snaps[i], c.err, c.at.Sub(c.started))
		}
	}
}

// settle gives e its outcome of c, judging c's observation for e unless
// c or a later good read already did; stored says e now holds it. Only a
// target that expired while its caller waited is judged here by the
// caller rather than by the read: its outcome is returned, not kept.
func (v *View) settle(e *entry, c *call, pods map[podKey]*PodsObs) (snap *Snapshot, stored bool, err error) {
	e.mu.Lock()
	if c.seq <= e.seq && (c.err != nil || e.snapSeq >= c.seq) {
		snap = e.snap
		e.mu.Unlock()
		if c.err != nil {
			return nil, false, c.err
		}
		return snap, false, nil
	}
	prev := e.snap
	e.mu.Unlock()
	if c.err == nil {
		snap = BuildWith(&e.target, v.observation(e.target, c.obs, pods), prev, c.at, v.opts.Breaker)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if c.seq <= e.seq {
		return snap, false, c.err
	}
	e.seq, e.err = c.seq, c.err
	if c.err == nil {
		e.snap, e.snapSeq, e.readAt = snap, c.seq, c.started
	}
	return snap, true, c.err
}

// settledBy reports whether e holds the outcome of c or a later read.
func (e *entry) settledBy(c *call) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seq >= c.seq
}

// notify signals e's subscribers that it was read.
func (e *entry) notify() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for ch := range e.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// podKey is what the kubernetes source's part of a read depends on.
type podKey struct {
	set   PodSet
	owner OwnerMatch
}

// observation is obs as t sees it: with the pods of t's pod set behind
// its owner candidates, once per pod set and owner match in pods (nil:
// not remembered).
func (v *View) observation(t Target, obs Observation, pods map[podKey]*PodsObs) Observation {
	if v.opts.Annotate == nil || !t.Spec.Kubernetes {
		return obs
	}
	k := podKey{set: t.Spec.PodSet(), owner: t.Spec.Owner}
	if p, ok := pods[k]; ok {
		obs.Pods = p
		return obs
	}
	v.opts.Annotate(t, &obs)
	if pods != nil {
		pods[k] = obs.Pods
	}
	return obs
}

// observedNames is the consumers of a read, whose heartbeat keys the next
// read of the same targets asks for at once.
func observedNames(obs Observation) []string {
	names := make([]string, 0, len(obs.Consumers)+len(obs.PendingByConsumer))
	for _, c := range obs.Consumers {
		names = append(names, c.Name)
	}
	for name := range obs.PendingByConsumer {
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}
