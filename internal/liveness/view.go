package liveness

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Fetcher reads one target from Redis in one round trip. known lists the
// consumers of the previous read so their heartbeat keys can be read in
// the same round trip. The view asks it for a target whose spec holds only
// what changes the read (see readKey): one read serves every target of
// the group read alike.
type Fetcher func(ctx context.Context, t Target, known []string) (Observation, error)

// ErrTooManyTargets is returned when registering one more target would pass
// Options.MaxTargets.
var ErrTooManyTargets = errors.New("too many targets registered")

// ViewOptions configures a View.
type ViewOptions struct {
	// Freshness is the oldest read a poll is answered from, counted from
	// when the read began; an older snapshot is read again first. The
	// view reads ahead of each target's expected polls (viewpoll.go), so
	// a poll rarely waits.
	Freshness time.Duration
	// FetchTimeout bounds one read of one target, or of one batch.
	FetchTimeout time.Duration
	// FetchBatch, when set, reads many targets of one connection in one
	// round trip: every read then goes through the connection's batch
	// (viewbatch.go). Without it each read is its own Fetcher call.
	FetchBatch BatchFetcher
	// Expiry drops a target nobody asked about (and nobody watches) for this long.
	Expiry time.Duration
	// MaxTargets bounds the number of registered targets.
	MaxTargets int
	// Concurrency bounds the batches reading one connection at once, and
	// the looks reading heartbeat keys at once.
	Concurrency int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Annotate, when set, adds to a target's copy of a good read what a
	// source outside Redis knows (the kubernetes source's pods). It runs
	// once per read for each pod set and owner match among the targets
	// judged from the read, when the first of them is, from any
	// goroutine; it must not block.
	Annotate func(t Target, obs *Observation)
	// OnRefresh, when set, is called for a target each time it is
	// judged from a read, with the read's outcome.
	OnRefresh func(t Target, s *Snapshot, err error, took time.Duration)
	// OnRead, when set, is called for every read of a group, with what
	// asked for it, and OnBatch for every batch of reads sent in one
	// round trip, with their number.
	OnRead  func(cause ReadCause)
	OnBatch func(reads int)
	// OnAnswer, when set, is called for every poll answered, with the age
	// of the read it was answered from.
	OnAnswer func(age time.Duration)
	// Confirm, when set, reads heartbeat keys alone: a look at the lapse
	// of fresh heartbeats is decided by it when the workers beat again
	// (confirm.go). Without it every look reads the group.
	Confirm Confirmer
	// OnLook, when set, is called for every look at a deadline with
	// whether the heartbeat keys alone decided it.
	OnLook func(byBeats bool)
	// OnExpire, when set, is called when a target is dropped.
	OnExpire func(t Target)
	// Breaker is the disruption breaker's threshold; DefaultBreaker when
	// zero.
	Breaker Breaker
}

// ReadCause is what asked for a read of a group.
type ReadCause uint8

const (
	// ReadPoll is a poll that found no read fresh enough and waited.
	ReadPoll ReadCause = iota
	// ReadAhead is a read ahead of a target's expected poll.
	ReadAhead
	// ReadDeadline is a look at a verdict's deadline.
	ReadDeadline
	// ReadAsked is any other caller: a waker, a hygiene turn, a pod's
	// going, the Admin API.
	ReadAsked
)

func (c ReadCause) String() string {
	return [...]string{"poll", "ahead", "deadline", "asked"}[c]
}

// ReadCauses are every ReadCause, for metrics to list.
var ReadCauses = []ReadCause{ReadPoll, ReadAhead, ReadDeadline, ReadAsked}

// View holds the latest snapshot of every registered target and reads
// each when it is needed: for a poll, just ahead of it (viewpoll.go), at a
// verdict's deadline (viewdeadline.go), or when a caller asks. It is safe
// for concurrent use.
//
// Targets of one group that read Redis alike (equal readKeys) share one
// reader: a read of any of them serves all, each judged from it by its own
// spec against its own previous snapshot, when its caller asks or, for
// the reads the view schedules itself, at once (viewread.go). Locks are
// taken in the order View.mu, reader.mu, entry.mu, schedule.mu.
type View struct {
	fetch Fetcher
	opts  ViewOptions

	mu sync.Mutex
	// groups holds the readers of each group, where a group has one or
	// a few: keyed by the whole readKey, the map's slots would hold
	// three times the bytes, once per reader.
	groups map[GroupRef][]*reader
	n      int
	// sched holds the looks at deadlines and the reads ahead of polls.
	sched schedule
	// batches queue the reads of each connection (viewbatch.go).
	batches batches
}

type entry struct {
	// target is never written to: the snapshots judged for it point to
	// it, and a holder that registered it may share it (Pin).
	target *Target
	reader *reader

	mu   sync.Mutex
	snap *Snapshot
	err  error
	// readAt is when the read that gave snap began; seq is the reader's
	// number of the latest read settled into the entry, good or failed,
	// and snapSeq that of the read snap was judged from.
	readAt       time.Time
	seq, snapSeq uint64
	lastAsked    time.Time
	// polls is the rhythm of the target's polls.
	polls pollClock
	// subs is nil until the first Subscribe: most targets never have one.
	subs map[chan struct{}]struct{}
	// pins counts holders that keep the target registered without a
	// channel (the hygiene loop's targets).
	pins int
	// slots are the target's look and read ahead in View.sched, guarded
	// by its mu.
	slots [kinds]slot
}

// watchedLocked says a holder acts on e's verdicts as they turn (the
// hygiene loop's pin, a StreamIsActive subscription), so its deadlines
// are looked at. A target only polled is not: its next poll reads it, and
// a look between polls would change nothing anyone sees. e.mu is held.
func (e *entry) watchedLocked() bool { return e.pins > 0 || len(e.subs) > 0 }

// pinnedLocked says the hygiene loop holds e; e.mu is held.
func (e *entry) pinnedLocked() bool { return e.pins > 0 }

func newEntry(t *Target, r *reader, now time.Time) *entry {
	e := &entry{target: t, reader: r, lastAsked: now}
	for k := range e.slots {
		e.slots[k].index = -1
	}
	return e
}

// NewView returns a View reading through fetch.
func NewView(fetch Fetcher, opts ViewOptions) *View {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.Breaker == (Breaker{}) {
		opts.Breaker = DefaultBreaker
	}
	return &View{fetch: fetch, opts: opts, groups: make(map[GroupRef][]*reader), sched: schedule{wake: make(chan struct{}, 1)},
		batches: batches{byConn: make(map[string]*connBatch)}}
}

// Freshness is the oldest read, by when it began, that Snapshot, Cached
// and Poll answer from.
func (v *View) Freshness() time.Duration { return v.opts.Freshness }

// Snapshot returns a snapshot of t from a read begun within Freshness,
// reading Redis when the last one is older or failed. It registers t on
// first use. The error is the read's: callers must not mistake it for an
// empty group.
func (v *View) Snapshot(ctx context.Context, t Target) (*Snapshot, error) {
	e, snap, err := v.cached(t)
	if err != nil || snap != nil {
		return snap, err
	}
	return v.refresh(ctx, e, time.Time{}, ReadAsked)
}

// Cached is Snapshot without the read: it registers t and returns its
// snapshot if one within Freshness is at hand (or its group's latest read
// is, judged for t), and ok false if answering needs a read. It allocates
// nothing, so a poll served from a fresh snapshot needs no deadline of
// its own.
func (v *View) Cached(t Target) (snap *Snapshot, ok bool, err error) {
	_, snap, err = v.cached(t)
	return snap, snap != nil, err
}

func (v *View) cached(t Target) (*entry, *Snapshot, error) {
	e, err := v.register(t)
	if err != nil {
		return nil, nil, err
	}
	now := v.opts.Now()
	e.mu.Lock()
	e.lastAsked = now
	snap := e.snap
	if e.err != nil || (snap != nil && now.Sub(e.readAt) > v.opts.Freshness) {
		snap = nil
	}
	e.mu.Unlock()
	if snap == nil {
		snap = v.fromLatest(e, time.Time{})
	}
	return e, snap, nil
}

// CachedSince is RefreshSince without the read: it returns t's snapshot
// if the read it comes from began no earlier than since, judging t from
// its group's latest read if that one did. A target woken with others by
// one entry mostly finds the read another of them asked for done, and
// needs no deadline of its own.
func (v *View) CachedSince(t Target, since time.Time) (snap *Snapshot, ok bool, err error) {
	e, err := v.register(t)
	if err != nil {
		return nil, false, err
	}
	e.mu.Lock()
	e.lastAsked = v.opts.Now()
	snap = e.snap
	if e.err != nil || e.readAt.Before(since) {
		snap = nil
	}
	e.mu.Unlock()
	if snap == nil {
		snap = v.fromLatest(e, since)
	}
	return snap, snap != nil, nil
}

// Refresh reads t now and returns a snapshot whose read started no earlier
// than the call: a caller woken by a new stream entry sees that entry.
func (v *View) Refresh(ctx context.Context, t Target) (*Snapshot, error) {
	e, err := v.register(t)
	if err != nil {
		return nil, err
	}
	return v.refresh(ctx, e, v.opts.Now(), ReadAsked)
}

// RefreshSince returns a snapshot of t whose read started no earlier than
// since, on the view's clock, reading only when the latest did not: the
// many callers woken by one event, each with the event's time, share one
// read, however late each gets to ask.
func (v *View) RefreshSince(ctx context.Context, t Target, since time.Time) (*Snapshot, error) {
	e, err := v.register(t)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.lastAsked = v.opts.Now()
	snap := e.snap
	if e.err != nil || e.readAt.Before(since) {
		snap = nil
	}
	e.mu.Unlock()
	if snap != nil {
		return snap, nil
	}
	return v.refresh(ctx, e, since, ReadAsked)
}

// Subscribe returns a channel that receives a signal each time t is judged
// from a read, and a function to stop. A subscribed target does not expire.
func (v *View) Subscribe(t Target) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	// Registering and subscribing under the view's lock keeps expiry from
	// dropping the target in between.
	v.mu.Lock()
	e, err := v.registerLocked(t, nil)
	if err == nil {
		e.mu.Lock()
		if e.subs == nil {
			e.subs = make(map[chan struct{}]struct{})
		}
		e.subs[ch] = struct{}{}
		e.mu.Unlock()
	}
	v.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	return ch, func() {
		e.mu.Lock()
		delete(e.subs, ch)
		e.lastAsked = v.opts.Now()
		e.mu.Unlock()
	}, nil
}

// Pin registers t and keeps it from expiring, like Subscribe but without a
// channel: a holder that learns of reads another way (OnRefresh) costs the
// view a counter, not a channel per target. unpin ends the hold once.
// The view keeps t itself if it registers it, rather than a copy, so the
// holder's target and the view's are one: *t must never be written to.
func (v *View) Pin(t *Target) (unpin func(), err error) {
	v.mu.Lock()
	e, err := v.registerLocked(*t, t)
	if err == nil {
		e.mu.Lock()
		e.pins++
		e.mu.Unlock()
	}
	v.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			e.pins--
			e.lastAsked = v.opts.Now()
			e.mu.Unlock()
		})
	}, nil
}

// Latest returns every target's latest snapshot (nil where none yet) and
// error, for diagnostics and metrics.
func (v *View) Latest() []Latest {
	entries := v.entries()
	out := make([]Latest, 0, len(entries))
	for _, e := range entries {
		e.mu.Lock()
		out = append(out, Latest{Target: *e.target, Snapshot: e.snap, Err: e.err})
		e.mu.Unlock()
	}
	return out
}

// entries lists every registered target's entry; their states are read
// after View.mu is let go, so a long list does not hold up the polls.
func (v *View) entries() []*entry {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]*entry, 0, v.n)
	for _, rs := range v.groups {
		for _, r := range rs {
			r.mu.Lock()
			out = append(out, r.entries...)
			r.mu.Unlock()
		}
	}
	return out
}

// Snapshots returns every target's latest snapshot, where it has one,
// for the metrics page: a scrape needs no copy of each target and error
// (Latest), which at 10k targets was 2 MB a scrape.
func (v *View) Snapshots() []*Snapshot {
	entries := v.entries()
	out := make([]*Snapshot, 0, len(entries))
	for _, e := range entries {
		e.mu.Lock()
		if e.snap != nil {
			out = append(out, e.snap)
		}
		e.mu.Unlock()
	}
	return out
}

// Failing lists the targets whose latest read failed: their polls get the
// read's error, never a number, until a read succeeds.
func (v *View) Failing() []Target {
	var out []Target
	for _, e := range v.entries() {
		e.mu.Lock()
		if e.err != nil {
			out = append(out, *e.target)
		}
		e.mu.Unlock()
	}
	return out
}

// Len is the number of registered targets.
func (v *View) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.n
}

// Peek returns t's latest good snapshot without reading Redis or
// registering t.
func (v *View) Peek(t Target) (*Snapshot, bool) {
	v.mu.Lock()
	e := v.lookupLocked(t)
	v.mu.Unlock()
	if e == nil {
		return nil, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.snap, e.snap != nil
}

// Latest is one target's latest state.
type Latest struct {
	Target   Target
	Snapshot *Snapshot
	Err      error
}
