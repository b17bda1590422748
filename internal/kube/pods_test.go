package kube

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

var workers = liveness.PodSet{Namespace: "jobs", Selector: "app=worker"}

func pod(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "jobs", Labels: map[string]string{"app": "worker"}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// observeWhen waits until the set answers and cond holds for what it saw.
func observeWhen(t *testing.T, w *Watcher, names []string, cond func(*liveness.PodsObs) bool) *liveness.PodsObs {
	t.Helper()
	var last *liveness.PodsObs
	require.Eventually(t, func() bool {
		last = w.Observe(workers, names)
		return cond(last)
	}, 15*time.Second, 5*time.Millisecond, "last observation: %+v", last)
	return last
}

func answered(o *liveness.PodsObs) bool { return o.Err == "" }

func startWatcher(t *testing.T, client *fake.Clientset, opts Options) *Watcher {
	t.Helper()
	w := New(client, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func TestWatcherReportsRunningTerminatingAndGonePods(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(
		pod("w-0"),
		pod("w-1", func(p *corev1.Pod) { p.Status.ContainerStatuses = []corev1.ContainerStatus{{RestartCount: 2}} }),
		pod("w-evicted", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
		pod("other", func(p *corev1.Pod) { p.Labels["app"] = "web" }),
	)
	var mu sync.Mutex
	var wentAway []string
	w := startWatcher(t, client, Options{OnGone: func(_ context.Context, set liveness.PodSet, name string) {
		require.Equal(t, workers, set)
		mu.Lock()
		wentAway = append(wentAway, name)
		mu.Unlock()
	}})

	names := []string{"w-0", "w-1", "w-evicted", "other", "w-never"}
	obs := observeWhen(t, w, names, answered)
	require.Equal(t, liveness.PodRunning, obs.ByName["w-0"].State)
	require.Equal(t, int32(2), obs.ByName["w-1"].Restarts, "a container restart keeps the pod")
	require.Equal(t, liveness.PodGone, obs.ByName["w-evicted"].State, "a failed (evicted) pod's process is gone")
	require.NotContains(t, obs.ByName, "other", "a pod outside the selector is not a worker")
	require.NotContains(t, obs.ByName, "w-never", "a name no pod has is not known")

	ctx := context.Background()
	terminating := pod("w-0", func(p *corev1.Pod) { now := metav1.Now(); p.DeletionTimestamp = &now })
	_, err := client.CoreV1().Pods("jobs").Update(ctx, terminating, metav1.UpdateOptions{})
	require.NoError(t, err)
	observeWhen(t, w, names, func(o *liveness.PodsObs) bool { return o.ByName["w-0"].State == liveness.PodTerminating })

	before := time.Now()
	require.NoError(t, client.CoreV1().Pods("jobs").Delete(ctx, "w-0", metav1.DeleteOptions{}))
	obs = observeWhen(t, w, names, func(o *liveness.PodsObs) bool { return o.ByName["w-0"].State == liveness.PodGone })
	require.False(t, obs.ByName["w-0"].GoneAt.Before(before), "GoneAt is when the deletion was seen")
	mu.Lock()
	require.ElementsMatch(t, []string{"w-evicted", "w-0"}, wentAway, "each departure is reported once")
	mu.Unlock()

	// A StatefulSet brings the pod back under the same name.
	_, err = client.CoreV1().Pods("jobs").Create(ctx, pod("w-0"), metav1.CreateOptions{})
	require.NoError(t, err)
	observeWhen(t, w, names, func(o *liveness.PodsObs) bool { return o.ByName["w-0"].State == liveness.PodRunning })
}

func TestWatcherIsUnknownUntilSyncedAndWhileTheWatchFails(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(pod("w-0"))
	var down atomic.Bool
	down.Store(true)
	apiDown := func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	}
	client.PrependReactor("list", "pods", apiDown)
	watchers := make(chan *watch.FakeWatcher, 10)
	client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		if down.Load() {
			return true, nil, errors.New("connection refused")
		}
		fw := watch.NewFake()
		watchers <- fw
		return true, fw, nil
	})
	w := startWatcher(t, client, Options{})

	obs := w.Observe(workers, []string{"w-0"})
	require.NotEmpty(t, obs.Err, "an informer that cannot list has not synced: the source cannot answer")
	time.Sleep(50 * time.Millisecond)
	require.NotEmpty(t, w.Observe(workers, []string{"w-0"}).Err)

	down.Store(false)
	obs = observeWhen(t, w, []string{"w-0"}, answered)
	require.Equal(t, liveness.PodRunning, obs.ByName["w-0"].State)

	// The API goes away under an established watch.
	down.Store(true)
	fw := <-watchers
	fw.Error(&metav1.Status{Status: metav1.StatusFailure, Message: "stream reset", Reason: metav1.StatusReasonServiceUnavailable, Code: 503})
	obs = observeWhen(t, w, []string{"w-0"}, func(o *liveness.PodsObs) bool { return o.Err != "" })
	require.Contains(t, obs.Err, "failing")
	time.Sleep(100 * time.Millisecond)
	require.NotEmpty(t, w.Observe(workers, []string{"w-0"}).Err, "still Unknown while the API stays away")

	down.Store(false)
	observeWhen(t, w, []string{"w-0"}, answered)
}

func TestAnnotateLooksUpEveryOwnerCandidate(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(pod("review-e-codex"))
	w := startWatcher(t, client, Options{})
	owner, err := liveness.ParseOwnerMatch("prefix")
	require.NoError(t, err)
	target := liveness.Target{GroupRef: liveness.GroupRef{Conn: "default", Stream: "s", Group: "g"}, Spec: liveness.Spec{
		Kubernetes: true, PodNamespace: "jobs", PodSelector: "app=worker", Owner: owner}}
	require.Eventually(t, func() bool {
		obs := liveness.Observation{Consumers: []liveness.ConsumerObs{{Name: "review-e-codex-0"}}}
		w.Annotate(target, &obs)
		return obs.Pods != nil && obs.Pods.Err == "" && obs.Pods.ByName["review-e-codex"].State == liveness.PodRunning
	}, 5*time.Second, 5*time.Millisecond)

	obs := liveness.Observation{GroupMissing: true}
	w.Annotate(target, &obs)
	require.Nil(t, obs.Pods, "a missing group has no consumers to look up")
}

func TestSweepStopsUnusedInformersAndForgetsOldDepartures(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(pod("w-0"))
	now := time.Now()
	clock := func() time.Time { return now }
	w := New(client, Options{IdleExpiry: time.Minute, Retention: time.Hour, Now: clock})
	observeWhen(t, w, []string{"w-0"}, answered)
	require.NoError(t, client.CoreV1().Pods("jobs").Delete(context.Background(), "w-0", metav1.DeleteOptions{}))
	observeWhen(t, w, []string{"w-0"}, func(o *liveness.PodsObs) bool { return o.ByName["w-0"].State == liveness.PodGone })

	w.sweep(now.Add(30 * time.Second))
	require.Len(t, w.sets, 1, "an informer used within IdleExpiry keeps running")
	w.mu.Lock()
	ps := w.sets[workers]
	w.mu.Unlock()
	ps.forget(now.Add(time.Second))
	require.NotContains(t, w.Observe(workers, []string{"w-0"}).ByName, "w-0", "a departure past retention is forgotten")

	w.sweep(now.Add(2 * time.Minute))
	require.Empty(t, w.sets, "an informer no target used for IdleExpiry is stopped")
}
