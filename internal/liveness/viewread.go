package liveness

import (
	"context"
	"slices"
	"sync"
	"time"
)

// reader is the reads of one readKey: every target of the group that
// reads Redis alike. A read of one of its targets is a read of all, each
// settled from it when its caller asks, or when the read was one the view
// scheduled; so T targets that differ only in thresholds cost one read
// per round of polls and one per wake, not T.
type reader struct {
	key readKey

	mu sync.Mutex
	// entries is the targets the reader serves; it changes under
	// View.mu and this mu both, so either is enough to read it.
	entries []*entry
	// byKey indexes entries by key once they are more than indexFrom,
	// so that a poll of one of a thousand targets read alike does not
	// compare a thousand keys under View.mu; most readers serve one
	// target, and a map each would cost more than the scan.
	byKey    map[viewKey]*entry
	inflight *call
	// seq numbers the reader's reads, in the order they start.
	seq uint64
	// lastGood is when the latest good read began.
	lastGood time.Time
	// known is the consumers of the latest good read: the next read asks
	// for their heartbeat keys in its first round trip.
	known []string
	// latest is the latest good read while some target has not taken
	// it, and untaken how many have not: a target woken with others by
	// one entry, or asked after another's read, is settled from it
	// without a read of its own.
	latest  *call
	untaken int

	// judging is held while a target of the reader is judged.
	judging sync.Mutex
}

// call is one read; waiters block on done. Once done is closed, the
// fields above podsMu do not change.
type call struct {
	seq uint64
	// started is when the read was sent, or, while it waits in its
	// connection's batch, when it was asked for; waiters read it once
	// done is closed.
	started time.Time
	done    chan struct{}
	// starter is the target whose caller started the read, nil for a
	// read the view scheduled itself, which settles every target of the
	// reader; the read settles starter before done closes.
	starter *entry
	cause   ReadCause
	// all says every target of the reader is settled from the read when
	// it ends, as for a read the view scheduled; guarded by reader.mu.
	all bool
	obs Observation
	err error
	// at is when the read ended: the time its snapshots are built at.
	at time.Time
	// taken counts the targets settled while the read was ending; it is
	// guarded by the reader's mu.
	taken int

	rowsOnce sync.Once
	rows     []consumerRow

	podsMu sync.Mutex
	// pods is the kubernetes source's part, by pod set and owner match.
	pods map[podKey]*PodsObs
}

// consumerRows are c's consumers in name order, sorted once for every
// target c settles.
func (c *call) consumerRows() []consumerRow {
	c.rowsOnce.Do(func() { c.rows = consumerRows(c.obs) })
	return c.rows
}

// Recent returns t's latest snapshot if its read began within Freshness,
// else reads t; ok is false, and nothing is read, when t is not
// registered. A long hygiene step judges its owner again from it at each
// page.
func (v *View) Recent(ctx context.Context, t Target) (snap *Snapshot, ok bool, err error) {
	v.mu.Lock()
	e := v.lookupLocked(t)
	v.mu.Unlock()
	if e == nil {
		return nil, false, nil
	}
	now := v.opts.Now()
	e.mu.Lock()
	snap = e.snap
	if e.err != nil || (snap != nil && now.Sub(e.readAt) > v.opts.Freshness) {
		snap = nil
	}
	e.mu.Unlock()
	if snap != nil {
		return snap, true, nil
	}
	snap, err = v.refresh(ctx, e, time.Time{}, ReadAsked)
	return snap, err == nil, err
}

// refresh returns e's snapshot from a read of its reader that started at
// or after notBefore: the reader's latest good one when it qualifies (a
// zero notBefore also wants it begun within Freshness), else one in
// flight or a new one.
func (v *View) refresh(ctx context.Context, e *entry, notBefore time.Time, cause ReadCause) (*Snapshot, error) {
	c, err := v.readSince(ctx, e.reader, e, notBefore, cause)
	if err != nil {
		return nil, err
	}
	return v.settle(e, c)
}

// readSince returns a read of r that started at or after notBefore, for
// e.
func (v *View) readSince(ctx context.Context, r *reader, e *entry, notBefore time.Time, cause ReadCause) (*call, error) {
	for {
		r.mu.Lock()
		if l := v.latestLocked(r, notBefore); l != nil {
			r.mu.Unlock()
			return l, nil
		}
		c := r.inflight
		if c == nil {
			c = v.newCallLocked(r, e, cause)
			known := r.known
			r.mu.Unlock()
			v.startReads(ctx, []pendingRead{{r: r, c: c, known: known}})
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

// newCallLocked starts r's next read, for e (nil: for every target of
// r); r.mu is held.
func (v *View) newCallLocked(r *reader, e *entry, cause ReadCause) *call {
	r.seq++
	c := &call{seq: r.seq, started: v.opts.Now(), done: make(chan struct{}), starter: e, cause: cause, all: e == nil}
	r.inflight = c
	return c
}

// latestLocked is r's latest good read if it began no earlier than
// notBefore (a zero notBefore: within Freshness); r.mu is held.
func (v *View) latestLocked(r *reader, notBefore time.Time) *call {
	l := r.latest
	if l == nil || l.started.Before(notBefore) || (notBefore.IsZero() && v.opts.Now().Sub(l.started) > v.opts.Freshness) {
		return nil
	}
	return l
}

// fromLatest settles e from its reader's latest read if that qualifies
// (latestLocked), and returns the snapshot; nil if none does.
func (v *View) fromLatest(e *entry, notBefore time.Time) *Snapshot {
	r := e.reader
	r.mu.Lock()
	l := v.latestLocked(r, notBefore)
	r.mu.Unlock()
	if l == nil {
		return nil
	}
	snap, err := v.settle(e, l)
	if err != nil {
		return nil
	}
	return snap
}

// read fetches r's group once, alone.
func (v *View) read(ctx context.Context, r *reader, c *call, known []string) {
	fctx, cancel := context.WithTimeout(ctx, v.opts.FetchTimeout)
	defer cancel()
	c.started = v.opts.Now()
	c.obs, c.err = v.fetch(fctx, r.key.target(), known)
	v.ended(r, c)
}

// ended finishes c, a read of r that returned. It settles the target
// whose caller asked for it, or, for a read the view scheduled, every
// target of r: a target polled soon is then answered without judging,
// and the hygiene loop (OnRefresh) sees every target. Of a read one
// target asked for, every other target of r is settled when its own
// caller asks (a target woken by the same entry, or opened after a read
// began), so it costs the others nothing. It stays r's latest read until
// every target has taken it or a newer read replaces it.
func (v *View) ended(r *reader, c *call) {
	c.at = v.opts.Now()
	var rows []consumerRow
	if c.err == nil {
		rows = c.consumerRows()
	}
	if v.opts.OnRead != nil {
		v.opts.OnRead(c.cause)
	}
	if c.starter != nil {
		_, _ = v.settle(c.starter, c)
	}
	r.mu.Lock()
	all := c.all
	r.inflight = nil
	r.latest, r.untaken = nil, 0
	if c.err == nil {
		r.known = observedNames(r.known, rows)
		r.lastGood = c.started
		if n := len(r.entries) - c.taken; n > 0 {
			r.latest, r.untaken = c, n
		}
	}
	r.mu.Unlock()
	close(c.done)
	switch {
	case all:
		v.settleAll(r, c, nil)
	default:
		v.settleAll(r, c, (*entry).pinnedLocked)
	}
}

// settleAll settles the targets of r that only picks (every one when
// only is nil) from c. A read the view scheduled settles every target: a
// read ahead of polls is judged when it ends, in its batch's goroutine,
// so the poll that follows finds its answer ready and spends nothing but
// the lookup (a batch is at most aheadBatch reads, a millisecond's
// judging or so). A read a caller asked for settles the hygiene loop's
// targets beside the caller's, so the loop sees a new ghost, and looks at
// a deadline, whoever read the group.
func (v *View) settleAll(r *reader, c *call, only func(*entry) bool) {
	r.mu.Lock()
	entries := slices.Clone(r.entries)
	r.mu.Unlock()
	for _, e := range entries {
		if only != nil {
			e.mu.Lock()
			picked := only(e)
			e.mu.Unlock()
			if !picked {
				continue
			}
		}
		_, _ = v.settle(e, c)
	}
}

// settle gives e its outcome of c, judged by e's own spec against e's own
// previous snapshot (which carries when each consumer was first seen and
// the breaker's state), unless c or a later good read already did. A
// target that takes the outcome is told, as after a read of its own: its
// subscribers and OnRefresh. Only a target that expired while its caller
// waited, or a later read overtook, is judged without keeping the result.
func (v *View) settle(e *entry, c *call) (*Snapshot, error) {
	e.mu.Lock()
	if c.seq <= e.seq && (c.err != nil || e.snapSeq >= c.seq) {
		snap := e.snap
		e.mu.Unlock()
		if c.err != nil {
			return nil, c.err
		}
		return snap, nil
	}
	prev := e.snap
	e.mu.Unlock()
	var snap *Snapshot
	if c.err == nil {
		obs, rows := v.observation(*e.target, c), c.consumerRows()
		// One at a time per reader: the thousand targets an XADD wakes
		// together judge in turn on one CPU, not on all of them at once,
		// which other groups' polls would queue behind.
		e.reader.judging.Lock()
		snap = build(e.target, obs, rows, prev, c.at, v.opts.Breaker)
		e.reader.judging.Unlock()
	}
	e.mu.Lock()
	if c.seq <= e.seq {
		e.mu.Unlock()
		return snap, c.err
	}
	e.seq, e.err = c.seq, c.err
	if c.err == nil {
		e.snap, e.snapSeq, e.readAt = snap, c.seq, c.started
	}
	for ch := range e.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	watched := e.watchedLocked()
	e.mu.Unlock()
	v.taken(e.reader, c)
	if c.err == nil && watched {
		v.scheduleLook(e, snap)
	}
	if v.opts.OnRefresh != nil {
		v.opts.OnRefresh(*e.target, snap, c.err, c.at.Sub(c.started))
	}
	return snap, c.err
}

// taken counts one more target settled from c, and lets r's latest read
// go once every target has it: a reader serving one target keeps no
// observation beside its snapshot.
func (v *View) taken(r *reader, c *call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inflight == c {
		c.taken++ // the read is still ending: it counts these itself
		return
	}
	if r.latest == c {
		if r.untaken--; r.untaken <= 0 {
			r.latest = nil
		}
	}
}

// podKey is what the kubernetes source's part of a read depends on.
type podKey struct {
	set   PodSet
	owner OwnerMatch
}

// observation is c's observation as t sees it: with the pods of t's pod
// set behind its owner candidates, looked up once per pod set and owner
// match among the targets c settles.
func (v *View) observation(t Target, c *call) Observation {
	if v.opts.Annotate == nil || !t.Spec.Kubernetes {
		return c.obs
	}
	return v.annotated(t, c)
}

// annotated is observation with the kubernetes source: apart, so that the
// copy Annotate is handed escapes only where it is made.
func (v *View) annotated(t Target, c *call) Observation {
	obs := c.obs
	k := podKey{set: t.Spec.PodSet(), owner: t.Spec.Owner}
	c.podsMu.Lock()
	p, ok := c.pods[k]
	c.podsMu.Unlock()
	if ok {
		obs.Pods = p
		return obs
	}
	// Looked up outside the lock: two targets of one set settled at once
	// may both look, and agree.
	v.opts.Annotate(t, &obs)
	c.podsMu.Lock()
	if c.pods == nil {
		c.pods = make(map[podKey]*PodsObs)
	}
	c.pods[k] = obs.Pods
	c.podsMu.Unlock()
	return obs
}

// observedNames is the consumers of a read, whose heartbeat keys the next
// read of the same targets asks for at once: known, the previous read's,
// when they are the same names, as they mostly are (the slices are never
// written to once made, so reads still holding known keep it whole).
func observedNames(known []string, rows []consumerRow) []string {
	if sameNames(known, rows) {
		return known
	}
	names := make([]string, len(rows))
	for i, r := range rows {
		names[i] = r.obs.Name
	}
	return names
}

// sameNames says names are rows' names, in order.
func sameNames(names []string, rows []consumerRow) bool {
	if len(names) != len(rows) {
		return false
	}
	for i, r := range rows {
		if names[i] != r.obs.Name {
			return false
		}
	}
	return true
}
