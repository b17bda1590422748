package kube

import (
	"context"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// podSet is one reflector, its cache, and what it has seen go.
type podSet struct {
	set    liveness.PodSet
	now    func() time.Time
	onGone func(pod string, nameUnique bool)
	track  *tracker
	cache  cache.Store
	cancel context.CancelFunc
	// done closes when the reflector's loop has returned.
	done chan struct{}
	// claimant started the set through Watcher.Admit; pinned sets are the
	// configuration's. Both are guarded by the Watcher's mu.
	claimant string
	pinned   bool

	mu   sync.Mutex
	gone map[string]departure
	used time.Time
}

// departure is when a pod was seen to go, and whether its name can come
// back.
type departure struct {
	at         time.Time
	nameUnique bool
}

func (ps *podSet) stop() {
	ps.cancel()
	<-ps.done
}

// touch marks the set used now.
func (ps *podSet) touch() {
	ps.mu.Lock()
	ps.used = ps.now()
	ps.mu.Unlock()
}

func (ps *podSet) lastUsed() time.Time {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.used
}

// observe answers from the cache only while the tracker says it is current;
// otherwise the observation carries why not, and Judge makes it Unknown.
// A pod the cache does not hold is absent only when the cache is current,
// so no verdict rests on the absence of a pod pelwarden cannot see.
func (ps *podSet) observe(candidates []string) *liveness.PodsObs {
	ps.touch()
	if _, why := ps.track.snapshot(); why != "" {
		return &liveness.PodsObs{Err: why}
	}
	out := &liveness.PodsObs{ByName: make(map[string]liveness.PodObs)}
	for _, name := range candidates {
		obj, ok, err := ps.cache.GetByKey(ps.set.Namespace + "/" + name)
		if err == nil && ok {
			if pod, isPod := obj.(*corev1.Pod); isPod {
				out.ByName[name] = ps.podObs(pod)
				continue
			}
		}
		ps.mu.Lock()
		d, wentAway := ps.gone[name]
		ps.mu.Unlock()
		if wentAway {
			out.ByName[name] = liveness.PodObs{State: liveness.PodGone, GoneAt: d.at, NameUnique: d.nameUnique}
		}
	}
	// The watch may have failed while the cache was read: answer only what
	// was read while it was current.
	if _, why := ps.track.snapshot(); why != "" {
		return &liveness.PodsObs{Err: why}
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
		d, ok := ps.gone[pod.Name]
		if !ok {
			d = departure{at: ps.now(), nameUnique: nameUnique(pod)}
			ps.gone[pod.Name] = d
		}
		ps.mu.Unlock()
		return liveness.PodObs{State: liveness.PodGone, GoneAt: d.at, Restarts: restarts, NameUnique: d.nameUnique}
	case pod.DeletionTimestamp != nil:
		return liveness.PodObs{State: liveness.PodTerminating, Restarts: restarts}
	default:
		return liveness.PodObs{State: liveness.PodRunning, Restarts: restarts}
	}
}

func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// nameUnique says whether no other pod will ever take this pod's name: a
// ReplicaSet (a Deployment's) names each pod with a random suffix. A
// StatefulSet brings back a pod of the same name, and so may a bare pod's
// creator; any other controller, or one pelwarden does not know (an
// operator's own workload kind), may too, so only the ReplicaSet is
// trusted: a needless grace delays recovery by its length, a missing one
// could give away the entries of a pod that is coming back.
func nameUnique(pod *corev1.Pod) bool {
	c := metav1.GetControllerOf(pod)
	return c != nil && c.Kind == "ReplicaSet" && strings.HasPrefix(c.APIVersion, "apps/")
}

// seen records a pod the API reports: one that finished has gone; one that
// comes back under the same name (a StatefulSet) is no longer gone.
func (ps *podSet) seen(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if finished(pod) {
		ps.went(pod)
		return
	}
	ps.mu.Lock()
	delete(ps.gone, pod.Name)
	ps.mu.Unlock()
}

// went records that pod has gone, as its last known state describes it.
func (ps *podSet) went(pod *corev1.Pod) {
	unique := nameUnique(pod)
	ps.mu.Lock()
	_, already := ps.gone[pod.Name]
	if !already {
		ps.gone[pod.Name] = departure{at: ps.now(), nameUnique: unique}
	}
	ps.mu.Unlock()
	if !already && ps.onGone != nil {
		ps.onGone(pod.Name, unique)
	}
}

// forget drops departures older than before.
func (ps *podSet) forget(before time.Time) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for name, d := range ps.gone {
		if d.at.Before(before) {
			delete(ps.gone, name)
		}
	}
}

// podStore is the reflector's store: client-go's thread-safe store, which
// the reflector writes synchronously, so the moment a list has replaced
// the cache is the moment Replace returns. It also tells the pod set of
// departures: a deleted pod, and on a list, every cached pod the list no
// longer has (deleted while no watch was open).
type podStore struct {
	cache.Store
	ps *podSet
}

func (s *podStore) Add(obj any) error {
	if err := s.Store.Add(obj); err != nil {
		return err
	}
	s.ps.seen(obj)
	return nil
}

func (s *podStore) Update(obj any) error {
	if err := s.Store.Update(obj); err != nil {
		return err
	}
	s.ps.seen(obj)
	return nil
}

func (s *podStore) Delete(obj any) error {
	if err := s.Store.Delete(obj); err != nil {
		return err
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		s.ps.went(pod)
	}
	return nil
}

func (s *podStore) Replace(list []any, resourceVersion string) error {
	listed := make(map[string]bool, len(list))
	for _, obj := range list {
		if pod, ok := obj.(*corev1.Pod); ok {
			listed[pod.Name] = true
		}
	}
	var departed []*corev1.Pod
	for _, obj := range s.List() {
		if pod, ok := obj.(*corev1.Pod); ok && !listed[pod.Name] {
			departed = append(departed, pod)
		}
	}
	if err := s.Store.Replace(list, resourceVersion); err != nil {
		return err
	}
	for _, pod := range departed {
		s.ps.went(pod)
	}
	for _, obj := range list {
		s.ps.seen(obj)
	}
	s.ps.track.replaced()
	return nil
}
