package kube

import (
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// State is how far a pod set's cache can be trusted to be current.
type State int

// The states of a pod set's cache. Only StateCurrent answers; every other
// state makes the kubernetes source answer Unknown.
const (
	// StateSyncing: the first list of pods has not completed.
	StateSyncing State = iota
	// StateCurrent: a list replaced the cache and a watch has followed the
	// API since without a gap, or is reopening within ResumeGrace of a
	// clean end (a server-side watch timeout).
	StateCurrent
	// StateReconnecting: the watch ended cleanly and has not reopened
	// within ResumeGrace.
	StateReconnecting
	// StateRelisting: pods are being listed again after the watch ended.
	StateRelisting
	// StateFailing: a list or watch call failed, or the watch reported an
	// error (such as 410 Gone); the cache is stale until the next list.
	StateFailing
	// StateForbidden: the API refused the service account (RBAC).
	StateForbidden
)

// States lists every State, for metrics that report each one.
var States = []State{StateSyncing, StateCurrent, StateReconnecting, StateRelisting, StateFailing, StateForbidden}

func (s State) String() string {
	switch s {
	case StateSyncing:
		return "syncing"
	case StateCurrent:
		return "current"
	case StateReconnecting:
		return "reconnecting"
	case StateRelisting:
		return "relisting"
	case StateFailing:
		return "failing"
	case StateForbidden:
		return "forbidden"
	default:
		return fmt.Sprintf("state(%d)", int(s))
	}
}

// verb is the API call that failed, for the forbidden message.
type verb string

const (
	verbList  verb = "list"
	verbWatch verb = "watch"
)

// tracker follows one pod set's reflector through its list and watch calls
// and the store's replacements, and says whether the cache is current. It
// learns everything from client-go's own lifecycle (the ListerWatcher's
// calls, the watch's events and end, the store's Replace) and from typed
// API errors, never from error text.
type tracker struct {
	set         liveness.PodSet
	now         func() time.Time
	resumeGrace time.Duration
	// relistGap is the shortest time between two relists made at once
	// after an expired watch; closer ones wait for the backoff.
	relistGap time.Duration
	// changed, when set, is told of every change of the effective state;
	// it is called without the lock held.
	changed func(from, to State, err error)

	mu    sync.Mutex
	state State
	since time.Time
	err   error
	verb  verb
	// watch counts watches opened; events of an older one are ignored.
	watch uint64
	// expired says the last watch ended with 410 Gone: the API answers,
	// and only a list can bring the cache back.
	expired     bool
	lastAtOnce  time.Time
	lastVisible State
}

func newTracker(set liveness.PodSet, now func() time.Time, resumeGrace, relistGap time.Duration) *tracker {
	return &tracker{set: set, now: now, resumeGrace: resumeGrace, relistGap: relistGap, since: now(), lastVisible: StateSyncing}
}

// effective is the state as observers see it: a watch reopening within
// ResumeGrace of a clean end is still current.
func (t *tracker) effective(now time.Time) State {
	if t.state == StateReconnecting && now.Sub(t.since) < t.resumeGrace {
		return StateCurrent
	}
	return t.state
}

// move sets the state under the lock and reports the change, if any, once
// the lock is released.
func (t *tracker) move(change func()) {
	t.mu.Lock()
	change()
	now := t.now()
	to, from, err := t.effective(now), t.lastVisible, t.err
	t.lastVisible = to
	t.mu.Unlock()
	if from != to && t.changed != nil {
		t.changed(from, to, err)
	}
}

func (t *tracker) enter(s State) {
	if t.state != s {
		t.state, t.since = s, t.now()
	}
}

// listStarted: a list is in flight. A retry after a failure keeps the
// failure, since nothing new is known until it answers.
func (t *tracker) listStarted() {
	t.move(func() {
		switch t.state {
		case StateCurrent, StateReconnecting:
			t.enter(StateRelisting)
		}
	})
}

// failed records a failed call, or an error the watch reported.
func (t *tracker) failed(v verb, err error) {
	t.move(func() {
		t.err, t.verb = err, v
		if apierrors.IsForbidden(err) {
			t.enter(StateForbidden)
			return
		}
		t.enter(StateFailing)
	})
}

// replaced: a list replaced the whole cache; it is current.
func (t *tracker) replaced() {
	t.move(func() {
		t.enter(StateCurrent)
		t.err, t.expired = nil, false
	})
}

// watchAllowed says whether the reflector may resume its watch from where
// it was. After a failure it may not: a watch resumed across a gap might
// bring back every missed event or none (410 Gone, perhaps only after it
// opened), and either way nothing tells when the cache has caught up. A
// fresh list does.
func (t *tracker) watchAllowed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state == StateCurrent || t.state == StateReconnecting
}

// watchOpened returns the new watch's number.
func (t *tracker) watchOpened() uint64 {
	var id uint64
	t.move(func() {
		t.watch++
		id = t.watch
		t.enter(StateCurrent)
	})
	return id
}

// watchError records an error event of watch id.
func (t *tracker) watchError(id uint64, err error) {
	t.mu.Lock()
	current := id == t.watch
	if current {
		t.expired = apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
	}
	t.mu.Unlock()
	if current {
		t.failed(verbWatch, err)
	}
}

// watchClosed: watch id ended. A clean end while current is the start of a
// reconnect; after an error the state already says why.
func (t *tracker) watchClosed(id uint64) {
	t.move(func() {
		if id == t.watch && t.state == StateCurrent {
			t.enter(StateReconnecting)
		}
	})
}

// relistAtOnce says whether the next list should not wait for the backoff:
// the watch expired, so the API answers and only a list helps. Two such
// lists within relistGap wait, so a server that keeps expiring watches is
// not listed in a loop.
func (t *tracker) relistAtOnce() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if !t.expired || now.Sub(t.lastAtOnce) < t.relistGap {
		return false
	}
	t.expired, t.lastAtOnce = false, now
	return true
}

// snapshot returns the effective state and, unless it is current, why the
// cache cannot be trusted.
func (t *tracker) snapshot() (State, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	s := t.effective(now)
	switch s {
	case StateCurrent:
		return s, ""
	case StateSyncing:
		return s, fmt.Sprintf("the pod watch for %s has not listed pods yet", t.set)
	case StateReconnecting:
		return s, fmt.Sprintf("the pod watch for %s ended %s ago and has not reopened: its cache may be stale",
			t.set, now.Sub(t.since).Round(time.Millisecond))
	case StateRelisting:
		return s, fmt.Sprintf("the pod watch for %s is listing pods again after its watch ended: its cache may be stale", t.set)
	case StateForbidden:
		return s, forbiddenMessage(t.verb, t.set.Namespace)
	default:
		return s, fmt.Sprintf("the pod watch for %s is failing (%v): its cache is stale until pods are listed again", t.set, t.err)
	}
}

// forbiddenMessage is the reason given when the API refuses the service
// account: it names the namespace and the chart value that grants it.
func forbiddenMessage(v verb, namespace string) string {
	return fmt.Sprintf("forbidden: the ServiceAccount may not %s pods in %s (check rbac.namespaces)", v, namespace)
}
