// Package kube is the Kubernetes adapter of the kubernetes liveness source:
// it watches pods through a client-go reflector, one per namespace and
// label selector, and reports what it saw of the pods behind a target's
// consumers, but only while its cache is current (listed, then followed by
// a watch without a gap). It decides nothing; liveness.Judge does.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/pelwarden/pelwarden/internal/clip"
	"github.com/pelwarden/pelwarden/internal/liveness"
)

// Options configures a Watcher.
type Options struct {
	// Retention is how long a pod seen to go is remembered. Past it the
	// consumer falls back to the other sources, by which time its idle
	// time tells the same story.
	Retention time.Duration
	// IdleExpiry stops a pod set no target has looked at for this long.
	IdleExpiry time.Duration
	// Backoff paces the lists of a pod set whose calls fail; the zero
	// value is DefaultBackoff.
	Backoff wait.Backoff
	// ResumeGrace is how long a watch that ended cleanly is trusted while
	// it reopens; 0 is DefaultResumeGrace.
	ResumeGrace time.Duration
	// OnGone, when set, is called when a pod of a set goes (deleted, or
	// finished), so recovery need not wait for the next refresh;
	// nameUnique says no other pod will take its name (PodObs.NameUnique).
	// ctx ends when the watcher stops.
	OnGone func(ctx context.Context, set liveness.PodSet, pod string, nameUnique bool)
	// OnCurrent, when set, is called when a set's cache becomes current
	// after it was not (first list, or a relist after a failure), so
	// verdicts need not stay Unknown until the next refresh.
	OnCurrent func(ctx context.Context, set liveness.PodSet)
	// MaxSets bounds the pod sets running at once, pinned ones aside, and
	// MaxSetsPerClaimant those one claimant (a ScaledObject namespace)
	// started through Admit. Each is a list and a watch on the API server
	// and a cache; anyone who reaches the scaler port names selectors.
	// 0 is no bound.
	MaxSets, MaxSetsPerClaimant int
	Log                         *slog.Logger
	Now                         func() time.Time
}

// Watcher serves the kubernetes source for every target: one reflector per
// pod set, shared by every target that names the set.
type Watcher struct {
	client Pods
	opts   Options
	// base is the reflectors' context: they run from first use until Run
	// ends, whichever request started them.
	base context.Context
	stop context.CancelFunc

	mu   sync.Mutex
	sets map[liveness.PodSet]*podSet
	// counted is the sets the caps count (the unpinned ones), and
	// claims how many of them each claimant started.
	counted int
	claims  map[string]int
	done    bool
}

// New returns a Watcher over client: NewClient's, or client-go's fake
// clientset's (PodsFrom) in tests, through the same reflector.
func New(client Pods, opts Options) *Watcher {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Retention <= 0 {
		opts.Retention = time.Hour
	}
	if opts.Backoff.Duration <= 0 {
		opts.Backoff = DefaultBackoff
	}
	if opts.ResumeGrace <= 0 {
		opts.ResumeGrace = DefaultResumeGrace
	}
	w := &Watcher{client: client, opts: opts, sets: make(map[liveness.PodSet]*podSet), claims: make(map[string]int)}
	w.base, w.stop = context.WithCancel(context.Background())
	return w
}

// Observe reports the pods behind owner candidates of a set, starting the
// set's reflector on first use. A cache that is not current (not listed
// yet, a watch that ended or failed and has not been listed again, a list
// in flight, RBAC refusing) gives an observation with Err set: the source
// cannot answer, which Judge turns into Unknown.
//
// A set not running yet is started within MaxSets; past it the
// observation's Err says so, and the consumers are Unknown.
func (w *Watcher) Observe(set liveness.PodSet, candidates []string) *liveness.PodsObs {
	ps, err := w.set(set, noClaimant)
	if err != nil {
		return &liveness.PodsObs{Err: err.Error()}
	}
	return ps.observe(candidates)
}

// Annotate adds the kubernetes source's view of t's consumers to obs. It
// is meant to run right after the Redis read of the same refresh.
func (w *Watcher) Annotate(t liveness.Target, obs *liveness.Observation) {
	if !t.Spec.Kubernetes || obs.StreamMissing || obs.GroupMissing {
		return
	}
	seen := make(map[string]bool, len(obs.Consumers))
	var cands []string
	add := func(name string) {
		for _, c := range t.Spec.Owner.Candidates(name) {
			if !seen[c] {
				seen[c] = true
				cands = append(cands, c)
			}
		}
	}
	for _, c := range obs.Consumers {
		add(c.Name)
	}
	for name := range obs.PendingByConsumer {
		add(name)
	}
	obs.Pods = w.Observe(t.Spec.PodSet(), cands)
}

// Run stops pod sets nobody looks at and forgets old departures, until
// ctx ends; then it stops every pod set.
func (w *Watcher) Run(ctx context.Context) {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			w.stop()
			w.mu.Lock()
			w.done = true
			sets := w.sets
			w.sets = nil
			w.mu.Unlock()
			for _, ps := range sets {
				ps.stop()
			}
			return
		case <-tick.C:
			w.sweep(w.opts.Now())
		}
	}
}

// sweep stops, outside the lock, the pod sets unused for IdleExpiry: a
// reflector ending may be calling OnGone or OnCurrent, which may look at
// the watcher.
func (w *Watcher) sweep(now time.Time) {
	var unused []*podSet
	w.mu.Lock()
	for key, ps := range w.sets {
		if !ps.pinned && w.opts.IdleExpiry > 0 && now.Sub(ps.lastUsed()) > w.opts.IdleExpiry {
			unused = append(unused, ps)
			delete(w.sets, key)
			w.uncountLocked(ps)
			w.opts.Log.Info("pod watch stopped: no target uses it", "set", key.String())
			continue
		}
		ps.forget(now.Add(-w.opts.Retention))
	}
	w.mu.Unlock()
	for _, ps := range unused {
		ps.stop()
	}
}

// errStopped is the answer after Run has ended.
var errStopped = errors.New("the pod watcher has stopped")

// ErrTooManySets is the error of a pod set past MaxSets or
// MaxSetsPerClaimant.
var ErrTooManySets = errors.New("too many pod watches")

// noClaimant starts a set for a read (Observe) rather than for a trigger
// (Admit): only MaxSets bounds it.
const noClaimant = ""

// Admit starts the set's reflector for a trigger of claimant, unless it
// runs already, within MaxSets and MaxSetsPerClaimant: past either, an
// error wrapping ErrTooManySets names the setting. A set runs from then
// until nobody has looked at it for IdleExpiry.
func (w *Watcher) Admit(set liveness.PodSet, claimant string) error {
	ps, err := w.set(set, claimant)
	if err != nil {
		return err
	}
	ps.touch()
	return nil
}

// Pin starts the set's reflector, outside the caps, and keeps it running
// until Run ends: the sets of the operator's own configuration
// (hygiene.targets), which no claimant can crowd out.
func (w *Watcher) Pin(set liveness.PodSet) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return errStopped
	}
	if ps, ok := w.sets[set]; ok {
		if !ps.pinned {
			w.uncountLocked(ps)
			ps.pinned = true
		}
		return nil
	}
	ps := w.start(set)
	ps.pinned = true
	w.sets[set] = ps
	return nil
}

func (w *Watcher) set(set liveness.PodSet, claimant string) (*podSet, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil, errStopped
	}
	if ps, ok := w.sets[set]; ok {
		return ps, nil
	}
	if err := w.roomLocked(claimant); err != nil {
		return nil, err
	}
	ps := w.start(set)
	ps.claimant = claimant
	w.sets[set] = ps
	w.counted++
	w.claims[claimant]++
	return ps, nil
}

// roomLocked refuses one more set past MaxSets, or past
// MaxSetsPerClaimant for a claimant.
func (w *Watcher) roomLocked(claimant string) error {
	if w.opts.MaxSets > 0 && w.counted >= w.opts.MaxSets {
		return fmt.Errorf("%w: %d pod watches are running, the most kubernetes.maxPodWatches allows", ErrTooManySets, w.counted)
	}
	if claimant != noClaimant && w.opts.MaxSetsPerClaimant > 0 && w.claims[claimant] >= w.opts.MaxSetsPerClaimant {
		return fmt.Errorf("%w: namespace %q started %d pod watches, the most kubernetes.maxPodWatchesPerNamespace allows",
			ErrTooManySets, clip.String(claimant, maxEchoedClaimant), w.claims[claimant])
	}
	return nil
}

// maxEchoedClaimant is as much of a claimant as a refusal quotes.
const maxEchoedClaimant = 64

// uncountLocked takes a set that stops, or is pinned, out of the caps.
func (w *Watcher) uncountLocked(ps *podSet) {
	if ps.pinned {
		return
	}
	w.counted--
	if w.claims[ps.claimant]--; w.claims[ps.claimant] <= 0 {
		delete(w.claims, ps.claimant)
	}
}

// start builds and runs the reflector of one set.
func (w *Watcher) start(set liveness.PodSet) *podSet {
	ctx, cancel := context.WithCancel(w.base)
	log := w.opts.Log.With("namespace", set.Namespace, "selector", set.Selector)
	t := newTracker(set, w.opts.Now, w.opts.ResumeGrace, w.opts.Backoff.Cap)
	t.changed = func(from, to State, err error) { w.changed(ctx, log, set, from, to, err) }
	ps := &podSet{set: set, now: w.opts.Now, track: t, gone: make(map[string]departure), used: w.opts.Now(),
		cancel: cancel, done: make(chan struct{})}
	if w.opts.OnGone != nil {
		ps.onGone = func(name string, unique bool) { w.opts.OnGone(ctx, set, name, unique) }
	}
	ps.cache = &podStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc), ps: ps}

	lw := newTrackedLW(
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = set.Selector
			return w.client.List(ctx, set.Namespace, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = set.Selector
			return w.client.Watch(ctx, set.Namespace, o)
		}, t)
	b := w.opts.Backoff
	r := cache.NewReflectorWithOptions(lw, &corev1.Pod{}, ps.cache, cache.ReflectorOptions{
		Name: "pods " + set.String(), Backoff: &b})
	go func() {
		defer close(ps.done)
		run(ctx, r, t, w.opts.Backoff, func(err error) { log.Debug("pod list and watch ended", "err", err) })
	}()
	log.Info("pod watch started")
	return ps
}

// changed logs a pod set's state changes and tells OnCurrent when its
// cache is current again.
func (w *Watcher) changed(ctx context.Context, log *slog.Logger, set liveness.PodSet, from, to State, err error) {
	switch to {
	case StateCurrent:
		if from != StateSyncing {
			log.Info("pod watch current again: its consumers are judged by their pods", "was", from.String())
		}
		if w.opts.OnCurrent != nil {
			w.opts.OnCurrent(ctx, set)
		}
	case StateFailing, StateForbidden:
		log.Warn("pod watch failing: its consumers are Unknown until pods are listed again", "state", to.String(), "err", err)
	default:
		log.Debug("pod watch state", "from", from.String(), "to", to.String())
	}
}

// SetState is one pod set and the state of its cache.
type SetState struct {
	Set   liveness.PodSet
	State State
}

// States reports every running pod set's state, for metrics.
func (w *Watcher) States() []SetState {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]SetState, 0, len(w.sets))
	for set, ps := range w.sets {
		st, _ := ps.track.snapshot()
		out = append(out, SetState{Set: set, State: st})
	}
	return out
}
