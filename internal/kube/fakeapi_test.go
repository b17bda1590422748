package kube

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/pelwarden/pelwarden/internal/liveness"
)

// fakeAPI is client-go's fake clientset behind reactors that can take the
// API away, refuse it, hold a list in flight, and hand the test every
// watch it opens. Pods changed through the clientset reach the watcher
// only by a list: the test decides what each watch delivers.
type fakeAPI struct {
	*fake.Clientset
	// down makes every list and watch fail as a dead server does.
	down atomic.Bool
	// refuse, when set, is the error every list and watch returns.
	refuse atomic.Pointer[error]
	// watches receives each watch the watcher opens.
	watches chan *watch.FakeWatcher
	// onWatch, when set, runs on each new watch before it is handed out.
	onWatch atomic.Pointer[func(*watch.FakeWatcher)]

	// listsStarted counts lists, including those held or failing.
	listsStarted atomic.Int64

	mu    sync.Mutex
	hold  chan struct{} // when not nil, lists wait until it closes
	calls []string
}

var errConnRefused = errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")

func newFakeAPI(objs ...runtime.Object) *fakeAPI {
	f := &fakeAPI{Clientset: fake.NewClientset(objs...), watches: make(chan *watch.FakeWatcher, 16)}
	f.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		f.listsStarted.Add(1)
		f.mu.Lock()
		hold := f.hold
		f.mu.Unlock()
		if hold != nil {
			<-hold
		}
		if err := f.failure(); err != nil {
			f.record("list failed")
			return true, nil, err
		}
		f.record("list")
		return false, nil, nil
	})
	f.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		if err := f.failure(); err != nil {
			f.record("watch failed")
			return true, nil, err
		}
		f.record("watch")
		fw := watch.NewFake()
		if hook := f.onWatch.Load(); hook != nil {
			(*hook)(fw)
		}
		f.watches <- fw
		return true, fw, nil
	})
	return f
}

func (f *fakeAPI) failure() error {
	if err := f.refuse.Load(); err != nil {
		return *err
	}
	if f.down.Load() {
		return errConnRefused
	}
	return nil
}

func (f *fakeAPI) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

// Calls returns the list and watch calls so far, in order.
func (f *fakeAPI) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// holdLists makes lists wait until the returned function is called.
func (f *fakeAPI) holdLists() (release func()) {
	hold := make(chan struct{})
	f.mu.Lock()
	f.hold = hold
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.hold = nil
		f.mu.Unlock()
		close(hold)
	}
}

// nextWatch waits for the watcher's next watch.
func (f *fakeAPI) nextWatch(t *testing.T) *watch.FakeWatcher {
	t.Helper()
	select {
	case fw := <-f.watches:
		return fw
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher opened no watch within 10s")
		return nil
	}
}

// quickBackoff keeps tests short; slow is for tests that show a list did
// not wait for the backoff.
var (
	quickBackoff = wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Cap: 100 * time.Millisecond, Steps: 1 << 30}
	slowBackoff  = wait.Backoff{Duration: time.Hour, Factor: 1, Steps: 1 << 30}
)

// answers samples the set for d and reports whether any observation
// answered, and the last one.
func answersWithin(w *Watcher, names []string, d time.Duration) (bool, *liveness.PodsObs) {
	deadline := time.Now().Add(d)
	var last *liveness.PodsObs
	for time.Now().Before(deadline) {
		last = w.Observe(workers, names)
		if last.Err == "" {
			return true, last
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false, last
}
