package kube

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// podSet is one reflector, its cache, and what it has seen go.
type podSet struct {
	set    liveness.PodSet
	now    func() time.Time
	onGone func(pod string)
	track  *tracker
	cache  cache.Store
	cancel context.CancelFunc
	// done closes when the reflector's loop has returned.
	done chan struct{}

	mu   sync.Mutex
	gone map[string]time.Time
	used time.Time
}

func (ps *podSet) stop() {
	ps.cancel()
	<-ps.done
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
	ps.mu.Lock()
	ps.used = ps.now()
	ps.mu.Unlock()
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
		at, wentAway := ps.gone[name]
		ps.mu.Unlock()
		if wentAway {
			out.ByName[name] = liveness.PodObs{State: liveness.PodGone, GoneAt: at}
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

// seen records a pod the API reports: one that finished has gone; one that
// comes back under the same name (a StatefulSet) is no longer gone.
func (ps *podSet) seen(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
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
		s.ps.went(pod.Name)
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
	var departed []string
	for _, obj := range s.List() {
		if pod, ok := obj.(*corev1.Pod); ok && !listed[pod.Name] {
			departed = append(departed, pod.Name)
		}
	}
	if err := s.Store.Replace(list, resourceVersion); err != nil {
		return err
	}
	for _, name := range departed {
		s.ps.went(name)
	}
	for _, obj := range list {
		s.ps.seen(obj)
	}
	s.ps.track.replaced()
	return nil
}
