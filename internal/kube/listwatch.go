package kube

import (
	"context"
	"errors"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Defaults of Options.
const (
	// DefaultResumeGrace is how long a watch that ended cleanly is still
	// trusted while the reflector reopens it from where it was: the API
	// server ends every watch after 5 to 10 minutes, and the next opens
	// within milliseconds.
	DefaultResumeGrace = time.Second
	// backoffResetAfter: a cycle that lasted this long starts the backoff
	// afresh.
	backoffResetAfter = time.Minute
)

// DefaultBackoff paces the lists of a pod set whose API calls fail: 200 ms
// doubling to 2 s, each with up to 50% jitter. With the API server back, a
// list comes within 3 s, and the cache is current as soon as it answers
// (client-go's reflector default would wait up to 60 s). While the server
// stays away each pod set sends about one request every 2.5 s, a tiny
// load for a server next to kubelets and controllers that watch far more.
var DefaultBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: 2 * time.Second, Steps: 1 << 30}

// relistError ends the reflector's cycle at once. It does not unwrap: a
// wrapped "connection refused" would make the reflector retry the watch on
// its own backoff instead of handing the decision back to run.
type relistError struct{ cause error }

func (e relistError) Error() string { return e.cause.Error() }

var errResumeRefused = errors.New("the last call failed: listing pods again instead of resuming the watch")

// trackedLW is the pods' ListerWatcher, telling the tracker of every list
// and watch call and how it ended.
type trackedLW struct {
	*cache.ListWatch
	t *tracker
}

// IsWatchListSemanticsUnSupported makes the reflector list and then watch,
// rather than stream the list over a watch (WatchListClient): the list is
// then one call whose start and end the tracker sees, for client-go's fake
// clientset and a real API server alike.
func (*trackedLW) IsWatchListSemanticsUnSupported() bool { return true }

func newTrackedLW(list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), t *tracker) *trackedLW {
	lw := &trackedLW{t: t}
	lw.ListWatch = &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			t.listStarted()
			obj, err := list(ctx, o)
			if err != nil {
				t.failed(verbList, err)
			}
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if !t.watchAllowed() {
				return nil, relistError{errResumeRefused}
			}
			w, err := watchFn(ctx, o)
			if err != nil {
				t.failed(verbWatch, err)
				return nil, relistError{err}
			}
			return newTrackedWatch(w, t, t.watchOpened()), nil
		},
	}
	return lw
}

// trackedWatch passes a watch's events through, telling the tracker of an
// error event before the reflector sees it, and of the watch's end.
type trackedWatch struct {
	in   watch.Interface
	out  chan watch.Event
	done chan struct{}
	stop sync.Once
	t    *tracker
	id   uint64
}

func newTrackedWatch(in watch.Interface, t *tracker, id uint64) *trackedWatch {
	w := &trackedWatch{in: in, out: make(chan watch.Event), done: make(chan struct{}), t: t, id: id}
	go w.loop()
	return w
}

func (w *trackedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *trackedWatch) Stop() {
	w.stop.Do(func() {
		close(w.done)
		w.in.Stop()
		w.t.watchClosed(w.id)
	})
}

func (w *trackedWatch) loop() {
	defer close(w.out)
	for {
		select {
		case <-w.done:
			return
		case e, ok := <-w.in.ResultChan():
			if !ok {
				w.t.watchClosed(w.id)
				return
			}
			if e.Type == watch.Error {
				w.t.watchError(w.id, apierrors.FromObject(e.Object))
			}
			select {
			case w.out <- e:
			case <-w.done:
				return
			}
		}
	}
}

// run drives the reflector's list-and-watch cycles until ctx ends. Each
// cycle lists, replaces the cache and watches until the watch ends or a
// call fails; the next cycle waits for the backoff, except after an
// expired watch (410 Gone), which lists again at once: the API answers,
// and the cache is stale until a list replaces it. This loop stands in for
// Reflector.RunWithContext only to make that one exception.
func run(ctx context.Context, r *cache.Reflector, t *tracker, b wait.Backoff, failed func(error)) {
	delay := b.DelayFunc()
	for {
		began := time.Now()
		err := r.ListAndWatchWithContext(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failed(err)
		}
		if time.Since(began) > backoffResetAfter {
			delay = b.DelayFunc()
		}
		wait := delay()
		if t.relistAtOnce() {
			wait = 0
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}
