package kube

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

var outageNames = []string{"w-0", "w-gone", "w-new"}

// changePodsUnseen deletes w-gone and creates a running w-new where no
// open watch delivers it, as happens while the API server is down.
func changePodsUnseen(t *testing.T, api *fakeAPI) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, api.CoreV1().Pods("jobs").Delete(ctx, "w-gone", metav1.DeleteOptions{}))
	_, err := api.CoreV1().Pods("jobs").Create(ctx, pod("w-new"), metav1.CreateOptions{})
	require.NoError(t, err)
}

// requireRelistedView checks what a list after the outage must show.
func requireRelistedView(t *testing.T, obs *liveness.PodsObs) {
	t.Helper()
	require.Empty(t, obs.Err)
	require.Equal(t, liveness.PodRunning, obs.ByName["w-0"].State)
	require.Equal(t, liveness.PodRunning, obs.ByName["w-new"].State, "a pod created while no watch was open is seen once listed")
	require.Equal(t, liveness.PodGone, obs.ByName["w-gone"].State, "a pod deleted while no watch was open is gone once listed")
}

// TestWatcherIsUnknownFromAnExpiredWatchUntilPodsAreListedAgain is the
// restart of issue 16 against the fake clientset: the watch ends, pods
// change unseen, the reopened watch gets 410 Gone. Until a list has
// replaced the cache nothing is answered, not even the absence of the new
// pod; the list comes at once, not after the backoff (an hour here).
func TestWatcherIsUnknownFromAnExpiredWatchUntilPodsAreListedAgain(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(pod("w-0"), pod("w-gone"))
	var mu sync.Mutex
	var gone []string
	currents := 0
	w := startWatcher(t, api, Options{Backoff: slowBackoff,
		OnGone: func(_ context.Context, _ liveness.PodSet, name string, _ bool) {
			mu.Lock()
			gone = append(gone, name)
			mu.Unlock()
		},
		OnCurrent: func(context.Context, liveness.PodSet) {
			mu.Lock()
			currents++
			mu.Unlock()
		}})
	obs := observeWhen(t, w, outageNames, answered)
	require.Equal(t, liveness.PodRunning, obs.ByName["w-gone"].State)
	require.NotContains(t, obs.ByName, "w-new")
	first := api.nextWatch(t)

	changePodsUnseen(t, api)
	release := api.holdLists()
	expire := func(fw *watch.FakeWatcher) {
		go fw.Error(&apierrors.NewResourceExpired("too old resource version: 5 (20)").ErrStatus)
	}
	api.onWatch.Store(&expire)
	first.Modify(pod("w-0")) // a watch that delivered events is reopened at once when it ends
	first.Stop()

	reopened := api.nextWatch(t)
	require.Eventually(t, func() bool { return w.Observe(workers, outageNames).Err != "" }, 5*time.Second, time.Millisecond,
		"the 410 makes the cache stale")
	answeredEarly, last := answersWithin(w, outageNames, 300*time.Millisecond)
	require.False(t, answeredEarly, "nothing is answered while the list is in flight; last: %+v", last)
	require.Contains(t, last.Err, "too old resource version")
	require.Eventually(t, reopened.IsStopped, 5*time.Second, time.Millisecond, "the reflector gives up the expired watch")
	require.Eventually(t, func() bool { return api.listsStarted.Load() == 2 }, 5*time.Second, time.Millisecond,
		"a list follows the 410 without waiting an hour of backoff")

	api.onWatch.Store(nil)
	release()
	requireRelistedView(t, observeWhen(t, w, outageNames, answered))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"w-gone"}, gone, "the departure a list finds is reported")
	require.Equal(t, 2, currents, "current after the first list and after the relist")
}

// TestWatcherIsUnknownWhileTheAPIIsAwayAndListsWhenItReturns: the watch
// drops with the server, the next calls are refused. The watcher never
// resumes the watch across the gap; it lists again, and answers only then.
func TestWatcherIsUnknownWhileTheAPIIsAwayAndListsWhenItReturns(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(pod("w-0"), pod("w-gone"))
	w := startWatcher(t, api, Options{Backoff: quickBackoff})
	observeWhen(t, w, outageNames, answered)
	first := api.nextWatch(t)

	api.down.Store(true)
	first.Modify(pod("w-0"))
	first.Stop()
	obs := observeWhen(t, w, outageNames, func(o *liveness.PodsObs) bool { return o.Err != "" })
	require.Contains(t, obs.Err, "connection refused")
	changePodsUnseen(t, api)
	answeredEarly, last := answersWithin(w, outageNames, 300*time.Millisecond)
	require.False(t, answeredEarly, "still Unknown while the API stays away; last: %+v", last)

	api.down.Store(false)
	requireRelistedView(t, observeWhen(t, w, outageNames, answered))
	calls := api.Calls()
	failed := slices.Index(calls, "watch failed")
	require.GreaterOrEqual(t, failed, 0, "calls: %v", calls)
	for _, c := range calls[failed+1:] {
		if c == "list" {
			break
		}
		require.NotEqual(t, "watch", c, "no watch resumes before a list has succeeded: %v", calls)
	}
}

// TestWatcherKeepsAnsweringWhileACleanlyEndedWatchReopens: the API server
// ends every watch after a few minutes and the reflector reopens it from
// where it was; that is no reason for Unknown. One that does not reopen
// within ResumeGrace is.
func TestWatcherKeepsAnsweringWhileACleanlyEndedWatchReopens(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(pod("w-0"))
	w := startWatcher(t, api, Options{Backoff: slowBackoff, ResumeGrace: 300 * time.Millisecond})
	observeWhen(t, w, []string{"w-0"}, answered)
	first := api.nextWatch(t)

	stop := make(chan struct{})
	unanswered := make(chan *liveness.PodsObs, 1)
	go func() {
		for {
			select {
			case <-stop:
				close(unanswered)
				return
			default:
			}
			if o := w.Observe(workers, []string{"w-0"}); o.Err != "" {
				unanswered <- o
				close(unanswered)
				return
			}
		}
	}()
	first.Modify(pod("w-0"))
	first.Stop()
	second := api.nextWatch(t)
	second.Modify(pod("w-0"))
	close(stop)
	require.Nil(t, <-unanswered, "answered throughout the reopen")
	require.Equal(t, []string{"list", "watch", "watch"}, api.Calls(), "reopened from where it was, not listed again")

	// The server hangs: the next watch never opens.
	hang := make(chan struct{})
	defer close(hang)
	block := func(*watch.FakeWatcher) { <-hang }
	api.onWatch.Store(&block)
	second.Stop()
	obs := observeWhen(t, w, []string{"w-0"}, func(o *liveness.PodsObs) bool { return o.Err != "" })
	require.Contains(t, obs.Err, "has not reopened")
}

// TestWatcherNamesTheNamespaceRBACRefuses: a 403 is said as such, with the
// chart value that grants it, not as an informer that has not synced.
func TestWatcherNamesTheNamespaceRBACRefuses(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(pod("w-0"))
	forbidden := error(apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "",
		errors.New(`User "system:serviceaccount:apps:pw-pelwarden" cannot list resource "pods" in API group "" in the namespace "jobs"`)))
	api.refuse.Store(&forbidden)
	w := startWatcher(t, api, Options{Backoff: quickBackoff})

	obs := observeWhen(t, w, []string{"w-0"}, func(o *liveness.PodsObs) bool { return strings.HasPrefix(o.Err, "forbidden") })
	require.Equal(t, "forbidden: the ServiceAccount may not list pods in jobs (check rbac.namespaces)", obs.Err)
	require.Equal(t, []SetState{{Set: workers, State: StateForbidden}}, w.States())

	api.refuse.Store(nil)
	observeWhen(t, w, []string{"w-0"}, answered)
	require.Equal(t, []SetState{{Set: workers, State: StateCurrent}}, w.States())
}

// TestWatcherListsAgainRatherThanResumeAWatchThatFailed: client-go's
// reflector resumes a watch that reported 429 from where it was; nothing
// would then tell when its cache caught up, so the watcher refuses the
// resume and lists instead.
func TestWatcherListsAgainRatherThanResumeAWatchThatFailed(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(pod("w-0"))
	w := startWatcher(t, api, Options{Backoff: quickBackoff})
	observeWhen(t, w, []string{"w-0"}, answered)
	first := api.nextWatch(t)

	release := api.holdLists()
	first.Error(&apierrors.NewTooManyRequests("the server is busy", 1).ErrStatus)
	obs := observeWhen(t, w, []string{"w-0"}, func(o *liveness.PodsObs) bool { return o.Err != "" })
	require.Contains(t, obs.Err, "the server is busy")
	require.Eventually(t, func() bool { return api.listsStarted.Load() == 2 }, 5*time.Second, time.Millisecond)
	require.Equal(t, []string{"list", "watch"}, api.Calls(), "no watch was resumed after the 429")
	release()
	observeWhen(t, w, []string{"w-0"}, answered)
}
