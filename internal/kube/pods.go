// Package kube is the Kubernetes adapter of the kubernetes liveness source:
// it watches pods through client-go shared informers, one per namespace and
// label selector, and reports what it saw of the pods behind a target's
// consumers. It decides nothing; liveness.Judge does.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// Options configures a Watcher.
type Options struct {
	// Resync is the informers' resync period; 0 is none (events suffice).
	Resync time.Duration
	// Retention is how long a pod seen to go is remembered. Past it the
	// consumer falls back to the other sources, by which time its idle
	// time tells the same story.
	Retention time.Duration
	// IdleExpiry stops an informer no target has looked at for this long.
	IdleExpiry time.Duration
	// OnGone, when set, is called when a pod of a set goes (deleted, or
	// finished), so recovery need not wait for the next refresh. ctx ends
	// when the watcher stops.
	OnGone func(ctx context.Context, set liveness.PodSet, pod string)
	Log    *slog.Logger
	Now    func() time.Time
}

// Watcher serves the kubernetes source for every target: one informer per
// pod set, shared by every target that names the set.
type Watcher struct {
	client kubernetes.Interface
	opts   Options
	// base is the informers' context: they run from first use until Run
	// ends, whichever request started them.
	base context.Context
	stop context.CancelFunc

	mu   sync.Mutex
	sets map[liveness.PodSet]*podSet
	done bool
}

// New returns a Watcher over client: a real clientset, or client-go's fake
// one in tests, through the same informer interfaces.
func New(client kubernetes.Interface, opts Options) *Watcher {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Retention <= 0 {
		opts.Retention = time.Hour
	}
	w := &Watcher{client: client, opts: opts, sets: make(map[liveness.PodSet]*podSet)}
	w.base, w.stop = context.WithCancel(context.Background())
	return w
}

// Observe reports the pods behind owner candidates of a set, starting the
// set's informer on first use. An informer that has not synced, or whose
// watch is failing, gives an observation with Err set: the source cannot
// answer, which Judge turns into Unknown.
func (w *Watcher) Observe(set liveness.PodSet, candidates []string) *liveness.PodsObs {
	ps, err := w.set(set)
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

// Run stops informers nobody looks at and forgets old departures, until
// ctx ends; then it stops every informer.
func (w *Watcher) Run(ctx context.Context) {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			w.stop()
			w.mu.Lock()
			w.done = true
			for key, ps := range w.sets {
				ps.stop()
				delete(w.sets, key)
			}
			w.mu.Unlock()
			return
		case <-tick.C:
			w.sweep(w.opts.Now())
		}
	}
}

func (w *Watcher) sweep(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, ps := range w.sets {
		if w.opts.IdleExpiry > 0 && now.Sub(ps.lastUsed()) > w.opts.IdleExpiry {
			ps.stop()
			delete(w.sets, key)
			w.opts.Log.Info("pod informer stopped: no target uses it", "set", key.String())
			continue
		}
		ps.forget(now.Add(-w.opts.Retention))
	}
}

// errStopped is the answer after Run has ended.
var errStopped = errors.New("the pod watcher has stopped")

func (w *Watcher) set(set liveness.PodSet) (*podSet, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil, errStopped
	}
	if ps, ok := w.sets[set]; ok {
		return ps, nil
	}
	ps, err := w.start(set)
	if err != nil {
		return nil, err
	}
	w.sets[set] = ps
	return ps, nil
}

// start builds and runs the informer of one set. Its list and watch calls
// record whether the API answers, so a failing watch reads as Unknown
// rather than as a cache that silently went stale.
func (w *Watcher) start(set liveness.PodSet) (*podSet, error) {
	ctx, cancel := context.WithCancel(w.base)
	ps := &podSet{set: set, now: w.opts.Now, gone: make(map[string]time.Time), used: w.opts.Now(), cancel: cancel}
	if w.opts.OnGone != nil {
		ps.onGone = func(name string) { w.opts.OnGone(ctx, set, name) }
	}
	pods := w.client.CoreV1().Pods(set.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = set.Selector
			list, err := pods.List(ctx, o)
			ps.answered(err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = set.Selector
			wi, err := pods.Watch(ctx, o)
			ps.answered(err)
			if err != nil {
				return nil, err
			}
			return watchErrors(wi, ps.answered), nil
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, w.client), &corev1.Pod{},
		cache.SharedIndexInformerOptions{ResyncPeriod: w.opts.Resync})
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		ps.answered(err)
		w.opts.Log.Warn("pod watch failing: its consumers are Unknown until it recovers", "set", set.String(), "err", err)
	}); err != nil {
		cancel()
		return nil, err
	}
	if _, err := inf.AddEventHandler(ps.handler()); err != nil {
		cancel()
		return nil, err
	}
	ps.informer = inf
	go inf.RunWithContext(ctx)
	w.opts.Log.Info("pod informer started", "namespace", set.Namespace, "selector", set.Selector)
	return ps, nil
}

// watchErrors passes a watch's events through, recording an error event
// as a failing API at once: the reflector itself only retries, and would
// report the failure only when its next list fails too. An expired
// resource version is routine (the reflector lists again) and not recorded.
func watchErrors(in watch.Interface, failed func(error)) watch.Interface {
	return watch.Filter(in, func(e watch.Event) (watch.Event, bool) {
		if e.Type == watch.Error {
			if err := apierrors.FromObject(e.Object); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
				failed(err)
			}
		}
		return e, true
	})
}

// podSet is one informer and what it has seen go.
type podSet struct {
	set      liveness.PodSet
	now      func() time.Time
	onGone   func(pod string)
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc

	mu      sync.Mutex
	gone    map[string]time.Time
	failure error
	used    time.Time
}

func (ps *podSet) stop() { ps.cancel() }

func (ps *podSet) lastUsed() time.Time {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.used
}

// answered records the outcome of a call to the API.
func (ps *podSet) answered(err error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.failure = err
}

func (ps *podSet) observe(candidates []string) *liveness.PodsObs {
	ps.mu.Lock()
	ps.used = ps.now()
	failure := ps.failure
	ps.mu.Unlock()
	switch {
	case !ps.informer.HasSynced():
		return &liveness.PodsObs{Err: fmt.Sprintf("pod informer for %s has not synced", ps.set)}
	case failure != nil:
		return &liveness.PodsObs{Err: fmt.Sprintf("pod watch for %s is failing: %v", ps.set, failure)}
	}
	out := &liveness.PodsObs{ByName: make(map[string]liveness.PodObs)}
	store := ps.informer.GetStore()
	for _, name := range candidates {
		obj, ok, err := store.GetByKey(ps.set.Namespace + "/" + name)
		if err == nil && ok {
			if pod, isPod := obj.(*corev1.Pod); isPod {
				out.ByName[name] = ps.podObs(pod)
				continue
			}
		}
		ps.mu.Lock()
		at, wentAway := ps.gone[name]
		ps.mu.Unlock()
		if wentAway {
			out.ByName[name] = liveness.PodObs{State: liveness.PodGone, GoneAt: at}
		}
	}
	return out
}

// podObs describes a pod in the cache. A pod that has finished (evicted,
// completed) still exists but its process is gone: it reads as gone from
// the moment it was seen finished.
func (ps *podSet) podObs(pod *corev1.Pod) liveness.PodObs {
	var restarts int32
	for _, cs := range pod.Status.ContainerStatuses {
		restarts += cs.RestartCount
	}
	switch {
	case finished(pod):
		ps.mu.Lock()
		at, ok := ps.gone[pod.Name]
		if !ok {
			at = ps.now()
			ps.gone[pod.Name] = at
		}
		ps.mu.Unlock()
		return liveness.PodObs{State: liveness.PodGone, GoneAt: at, Restarts: restarts}
	case pod.DeletionTimestamp != nil:
		return liveness.PodObs{State: liveness.PodTerminating, Restarts: restarts}
	default:
		return liveness.PodObs{State: liveness.PodRunning, Restarts: restarts}
	}
}

func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// handler records departures: a deleted pod, or one that finished. A pod
// that comes back under the same name (a StatefulSet) is no longer gone.
func (ps *podSet) handler() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				ps.seen(pod)
			}
		},
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				ps.seen(pod)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				ps.went(pod.Name)
			}
		},
	}
}

func (ps *podSet) seen(pod *corev1.Pod) {
	if finished(pod) {
		ps.went(pod.Name)
		return
	}
	ps.mu.Lock()
	delete(ps.gone, pod.Name)
	ps.mu.Unlock()
}

func (ps *podSet) went(name string) {
	ps.mu.Lock()
	_, already := ps.gone[name]
	if !already {
		ps.gone[name] = ps.now()
	}
	ps.mu.Unlock()
	if !already && ps.onGone != nil {
		ps.onGone(name)
	}
}

// forget drops departures older than before.
func (ps *podSet) forget(before time.Time) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for name, at := range ps.gone {
		if at.Before(before) {
			delete(ps.gone, name)
		}
	}
}
