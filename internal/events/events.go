// Package events carries hygiene actions, the loop's and operators', to
// whoever looks: a bounded ring of recent events per consumer group for
// DescribeTarget, and live subscriptions for WatchEvents. Publishing never
// blocks, so a slow watcher cannot hold up the hygiene loop: an event a
// subscriber has no room for is dropped for that subscriber and counted.
package events

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pelwarden/pelwarden/internal/liveness"
	"github.com/pelwarden/pelwarden/internal/redisx"
)

// Source says who acted.
type Source string

// Sources.
const (
	SourceHygiene Source = "hygiene"
	SourceAdmin   Source = "admin"
)

// Event is one hygiene action on a group.
type Event struct {
	Time     time.Time
	Group    liveness.GroupRef
	Consumer string
	// Action is what was done: an outcome that acted or failed, or
	// redisx.Deregistered.
	Action redisx.Outcome
	// Entries is how many entries the action touched.
	Entries int64
	Source  Source
	Detail  string
}

// Options bounds a Bus.
type Options struct {
	// Recent is the events kept per group; default 50.
	Recent int
	// Groups is the most groups whose recent events are kept; the group
	// that was quiet longest is forgotten first. Default 1000.
	Groups int
	// Buffer is each subscriber's channel capacity; default 256. It bounds
	// what one subscriber holds: past it, events are dropped for it.
	Buffer int
	// Subscribers is the most subscriptions open at once; default 64.
	Subscribers int
}

// ErrTooManySubscribers is returned by Subscribe when Options.Subscribers
// subscriptions are open.
var ErrTooManySubscribers = errors.New("too many event subscribers")

// Bus fans events out to subscribers and keeps the recent ones. It is safe
// for concurrent use; the zero value is not usable, call NewBus.
type Bus struct {
	opts    Options
	dropped prometheus.Counter
	refused prometheus.Counter

	mu     sync.Mutex
	recent map[liveness.GroupRef]*ring
	subs   map[*subscription]struct{}
}

type subscription struct {
	ch    chan Event
	match func(liveness.GroupRef) bool
}

// ring holds a group's latest events, oldest overwritten first.
type ring struct {
	events []Event
	next   int
	last   time.Time
}

// NewBus returns a Bus whose drop counter is registered on reg.
func NewBus(opts Options, reg prometheus.Registerer) *Bus {
	if opts.Recent <= 0 {
		opts.Recent = 50
	}
	if opts.Groups <= 0 {
		opts.Groups = 1000
	}
	if opts.Buffer <= 0 {
		opts.Buffer = 256
	}
	if opts.Subscribers <= 0 {
		opts.Subscribers = 64
	}
	b := &Bus{
		opts: opts,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pelwarden_admin_events_dropped_total",
			Help: "Hygiene events not delivered to a WatchEvents subscriber that was too slow to take them.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pelwarden_admin_watch_refused_total",
			Help: "WatchEvents calls refused because the most subscribers allowed were already watching.",
		}),
		recent: make(map[liveness.GroupRef]*ring),
		subs:   make(map[*subscription]struct{}),
	}
	reg.MustRegister(b.dropped, b.refused)
	return b
}

// Publish records e and offers it to every matching subscriber without
// waiting for any. A nil Bus drops everything, so callers need no check.
func (b *Bus) Publish(e Event) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.remember(e)
	for s := range b.subs {
		if !s.match(e.Group) {
			continue
		}
		select {
		case s.ch <- e:
		default:
			b.dropped.Inc()
		}
	}
}

// remember adds e to its group's ring; b.mu is held.
func (b *Bus) remember(e Event) {
	r, ok := b.recent[e.Group]
	if !ok {
		if len(b.recent) >= b.opts.Groups {
			b.forgetQuietest()
		}
		r = &ring{events: make([]Event, 0, b.opts.Recent)}
		b.recent[e.Group] = r
	}
	if len(r.events) < b.opts.Recent {
		r.events = append(r.events, e)
	} else {
		r.events[r.next] = e
	}
	r.next = (r.next + 1) % b.opts.Recent
	r.last = e.Time
}

func (b *Bus) forgetQuietest() {
	var quietest liveness.GroupRef
	var at time.Time
	first := true
	for g, r := range b.recent {
		if first || r.last.Before(at) {
			quietest, at, first = g, r.last, false
		}
	}
	delete(b.recent, quietest)
}

// Recent returns g's kept events, newest first.
func (b *Bus) Recent(g liveness.GroupRef) []Event {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.recent[g]
	if !ok {
		return nil
	}
	out := make([]Event, 0, len(r.events))
	for i := range len(r.events) {
		// r.next-1 is the newest; walk backwards around the ring.
		out = append(out, r.events[(r.next-1-i+2*len(r.events))%len(r.events)])
	}
	return out
}

// Subscribe returns a channel of the events whose group match accepts (nil
// accepts all), and a function that ends the subscription and closes the
// channel. Events published while the channel is full are dropped. With
// Options.Subscribers subscriptions open it returns ErrTooManySubscribers
// and counts the refusal.
func (b *Bus) Subscribe(match func(liveness.GroupRef) bool) (<-chan Event, func(), error) {
	if match == nil {
		match = func(liveness.GroupRef) bool { return true }
	}
	s := &subscription{ch: make(chan Event, b.opts.Buffer), match: match}
	b.mu.Lock()
	if len(b.subs) >= b.opts.Subscribers {
		b.mu.Unlock()
		b.refused.Inc()
		return nil, nil, fmt.Errorf("%w: %d are watching, the most allowed", ErrTooManySubscribers, b.opts.Subscribers)
	}
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.subs, s)
			close(s.ch) // under the lock: Publish never sends on a closed channel
			b.mu.Unlock()
		})
	}, nil
}
