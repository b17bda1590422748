package kube

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

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

func startWatcher(t *testing.T, client kubernetes.Interface, opts Options) *Watcher {
	t.Helper()
	w := New(PodsFrom(client.CoreV1().Pods), opts)
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
	w := startWatcher(t, client, Options{OnGone: func(_ context.Context, set liveness.PodSet, name string, _ bool) {
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
	// OnGone is called after the state is stored: wait for it, and never
	// fail while holding mu, which the watcher's callback needs.
	departures := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(wentAway)
	}
	require.Eventually(t, func() bool { return len(departures()) >= 2 }, 5*time.Second, 10*time.Millisecond)
	require.ElementsMatch(t, []string{"w-evicted", "w-0"}, departures(), "each departure is reported once")

	// A StatefulSet brings the pod back under the same name.
	_, err = client.CoreV1().Pods("jobs").Create(ctx, pod("w-0"), metav1.CreateOptions{})
	require.NoError(t, err)
	observeWhen(t, w, names, func(o *liveness.PodsObs) bool { return o.ByName["w-0"].State == liveness.PodRunning })
}

// ownedBy makes a pod's controller a workload of kind.
func ownedBy(apiVersion, kind string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "w", UID: "u", Controller: &yes}}
	}
}

func TestAGonePodNeedsNoGraceOnlyWhenAReplicaSetOwnsIt(t *testing.T) {
	t.Parallel()
	notController := func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "w", UID: "u"}}
	}
	cases := map[string]struct {
		mutate func(*corev1.Pod)
		unique bool
	}{
		"replicaset":                    {ownedBy("apps/v1", "ReplicaSet"), true},
		"statefulset":                   {ownedBy("apps/v1", "StatefulSet"), false},
		"bare pod":                      {func(*corev1.Pod) {}, false},
		"job":                           {ownedBy("batch/v1", "Job"), false},
		"an operator's own kind":        {ownedBy("apps.kruise.io/v1alpha1", "CloneSet"), false},
		"a ReplicaSet of another group": {ownedBy("example.com/v1", "ReplicaSet"), false},
		"a ReplicaSet not controlling":  {notController, false},
	}
	names := make([]string, 0, len(cases))
	client := fake.NewClientset()
	for name, tc := range cases {
		names = append(names, name)
		_, err := client.CoreV1().Pods("jobs").Create(context.Background(), pod(name, tc.mutate), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	told := map[string]bool{}
	w := startWatcher(t, client, Options{OnGone: func(_ context.Context, _ liveness.PodSet, name string, unique bool) {
		mu.Lock()
		told[name] = unique
		mu.Unlock()
	}})
	observeWhen(t, w, names, func(o *liveness.PodsObs) bool { return o.Err == "" && len(o.ByName) == len(cases) })
	for _, name := range names {
		require.NoError(t, client.CoreV1().Pods("jobs").Delete(context.Background(), name, metav1.DeleteOptions{}))
	}
	obs := observeWhen(t, w, names, func(o *liveness.PodsObs) bool {
		for _, n := range names {
			if o.ByName[n].State != liveness.PodGone {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	for name, tc := range cases {
		require.Equal(t, tc.unique, obs.ByName[name].NameUnique, "%s: the observation", name)
		require.Contains(t, told, name, "%s: OnGone is told of the deletion by the watch", name)
		require.Equal(t, tc.unique, told[name], "%s: OnGone", name)
	}
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
	w := New(PodsFrom(client.CoreV1().Pods), Options{IdleExpiry: time.Minute, Retention: time.Hour, Now: clock})
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
